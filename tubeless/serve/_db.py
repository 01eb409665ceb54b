"""Where the server's own tables live: a SQLite file beside the checkpoints, or the checkpoint
PostgreSQL database.

The run registry (``_registry``) and the A2A tasks (``_a2a_tasks``) write the same SQL to
either; this module hides what differs: placeholders (written ``?`` and turned into ``%s`` for
psycopg), table names (``serve_*`` in the SQLite file, ``tubeless_serve_*`` in a shared
database, where the other stores' ``tubeless_*`` tables sit too), transactions, syncing, and
the schema's creation. A Postgres schema is versioned in ``tubeless_serve_migrations`` and
created on first use under an advisory lock, so several servers starting together do not race.

Every statement runs under one lock per connection: a worker's event loop and its reader
threads share it.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from tubeless.durable import is_database_url, redact_dsn

__all__ = ["PostgresDb", "ServeDb", "SqliteDb", "open_db"]

#: Version of the ``tubeless_serve_*`` tables this build writes.
SCHEMA_VERSION = 1
_MIGRATION_LOCK = 7_263_001  # pg_advisory_xact_lock key of the serve tables' creation


class ServeDb:
    """One connection to the server's tables; see the module docstring."""

    prefix = ""
    where = ""
    serial = "INTEGER PRIMARY KEY AUTOINCREMENT"
    """The declaration of an auto-numbered primary key."""
    now_ms = "CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER)"
    """SQL for the database's clock in epoch milliseconds: claims expire by one clock, whatever
    the hosts' clocks say."""

    def table(self, name: str) -> str:
        """The stored name of table ``name`` (``serve_runs`` → ``tubeless_serve_runs`` in a
        shared database)."""
        return self.prefix + name

    def rows(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        raise NotImplementedError

    def one(self, sql: str, params: Sequence[Any] = ()) -> tuple[Any, ...] | None:
        found = self.rows(sql, params)
        return found[0] if found else None

    def run(self, sql: str, params: Sequence[Any] = (), *, durable: bool = False) -> int:
        """Execute one statement; the rows it changed. ``durable``: synced before returning."""
        raise NotImplementedError

    def transaction(self, *, durable: bool = False) -> contextlib.AbstractContextManager[None]:
        """Statements run inside are one transaction (and serialized with other writers)."""
        raise NotImplementedError

    def ensure(self, statements: Sequence[str], added: Sequence[tuple[str, str, str]]) -> None:
        """Create tables and indexes (``statements``) and add ``(table, column, declaration)``
        columns a store made before them lacks."""
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError


class SqliteDb(ServeDb):
    """The server's tables in one SQLite file (made 0600: it holds run inputs)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.where = str(self.path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileExistsError):
            os.close(
                os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
            )
        self._lock = threading.RLock()
        self._db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA busy_timeout = 10000")
        self._db.execute("PRAGMA journal_mode = WAL")
        # Updates are synced with the write-ahead log's checkpoints only (NORMAL: they survive
        # a killed process, and a power cut can only lose a status the checkpoint still holds,
        # so the next sweep records it again); ``durable`` writes are synced before they return.
        self._db.execute("PRAGMA synchronous = NORMAL")
        self._in_transaction = False

    def rows(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        with self._lock:
            return list(self._db.execute(sql, tuple(params)).fetchall())

    def run(self, sql: str, params: Sequence[Any] = (), *, durable: bool = False) -> int:
        with self._lock:
            sync = durable and not self._in_transaction
            if sync:
                self._db.execute("PRAGMA synchronous = FULL")
            try:
                return int(self._db.execute(sql, tuple(params)).rowcount)
            finally:
                if sync:
                    self._db.execute("PRAGMA synchronous = NORMAL")

    @contextlib.contextmanager
    def transaction(self, *, durable: bool = False) -> Iterator[None]:
        with self._lock:
            if durable:
                self._db.execute("PRAGMA synchronous = FULL")
            self._db.execute("BEGIN IMMEDIATE")
            self._in_transaction = True
            try:
                yield
                self._db.execute("COMMIT")
            except BaseException:
                if self._db.in_transaction:
                    self._db.execute("ROLLBACK")
                raise
            finally:
                self._in_transaction = False
                if durable:
                    self._db.execute("PRAGMA synchronous = NORMAL")

    def ensure(self, statements: Sequence[str], added: Sequence[tuple[str, str, str]]) -> None:
        with self.transaction():
            for statement in statements:
                self._db.execute(statement)
            for table, name, declaration in added:
                present = {row[1] for row in self._db.execute(f"PRAGMA table_info({table})")}
                if name not in present:  # a registry made before the column existed
                    self._db.execute(f"ALTER TABLE {table} ADD COLUMN {name} {declaration}")

    def close(self) -> None:
        with self._lock:
            self._db.close()


class PostgresDb(ServeDb):
    """The server's tables in the checkpoint PostgreSQL database (autocommit connection)."""

    prefix = "tubeless_"
    serial = "BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY"
    now_ms = "CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000 AS BIGINT)"

    def __init__(self, dsn: str) -> None:
        try:
            import psycopg
        except ImportError:
            raise RuntimeError(
                "serving on PostgreSQL needs psycopg: pip install 'tubeless[postgres]'"
            ) from None

        self._psycopg = psycopg
        self._dsn = dsn
        self.where = redact_dsn(dsn)
        self._lock = threading.RLock()
        try:
            self._conn = psycopg.connect(dsn, autocommit=True)
        except psycopg.Error as exc:
            raise self._failed(exc, "connect to the serve database") from None

    def _failed(self, exc: BaseException, doing: str) -> RuntimeError:
        text = str(exc).strip()
        with contextlib.suppress(Exception):
            secret = self._psycopg.conninfo.conninfo_to_dict(self._dsn).get("password")
            if secret:
                text = text.replace(str(secret), "***")
        return RuntimeError(f"{self.where}: cannot {doing} ({text})")

    @staticmethod
    def _sql(sql: str) -> str:
        return sql.replace("%", "%%").replace("?", "%s")

    def _execute(self, sql: str, params: Sequence[Any]) -> Any:
        with self._lock:
            if self._conn.closed:
                self._conn = self._psycopg.connect(self._dsn, autocommit=True)
            try:
                return self._conn.execute(self._sql(sql), tuple(params))
            except self._psycopg.OperationalError as exc:
                with contextlib.suppress(Exception):
                    self._conn.close()
                raise self._failed(exc, "use the serve database") from None

    def rows(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        with self._lock:
            cursor = self._execute(sql, params)
            return list(cursor.fetchall()) if cursor.description is not None else []

    def run(self, sql: str, params: Sequence[Any] = (), *, durable: bool = False) -> int:
        with self._lock:
            return int(self._execute(sql, params).rowcount)

    @contextlib.contextmanager
    def transaction(self, *, durable: bool = False) -> Iterator[None]:
        with self._lock, self._conn.transaction():
            # One writer at a time, as SQLite's BEGIN IMMEDIATE gives.
            self._conn.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK + 1,))
            yield

    def ensure(self, statements: Sequence[str], added: Sequence[tuple[str, str, str]]) -> None:
        with self._lock, self._conn.transaction():
            self._conn.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))
            self._conn.execute(
                "CREATE TABLE IF NOT EXISTS tubeless_serve_migrations (version INTEGER NOT NULL)"
            )
            found = self._conn.execute(
                "SELECT MAX(version) FROM tubeless_serve_migrations"
            ).fetchone()
            version = found[0] if found is not None else None
            if version is not None and version > SCHEMA_VERSION:
                raise RuntimeError(
                    f"{self.where}: the serve tables are version {version}, newer than this "
                    f"build ({SCHEMA_VERSION}); upgrade tubeless"
                )
            for statement in statements:
                self._conn.execute(statement)
            for table, name, declaration in added:
                self._conn.execute(
                    f"ALTER TABLE {table} ADD COLUMN IF NOT EXISTS {name} {declaration}"
                )
            if version is None:
                self._conn.execute(
                    "INSERT INTO tubeless_serve_migrations (version) VALUES (%s)",
                    (SCHEMA_VERSION,),
                )

    def close(self) -> None:
        with self._lock:
            self._conn.close()


def open_db(where: str) -> ServeDb:
    """The server's tables at ``where``: a ``postgresql://`` URL or a SQLite file path."""
    if is_database_url(where):
        return PostgresDb(where)
    return SqliteDb(where)
