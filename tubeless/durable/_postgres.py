"""``PostgresCheckpoints``: checkpoints in a PostgreSQL database shared by many processes and
machines (psycopg 3, the ``tubeless[postgres]`` extra, imported on first use).

Two tables, created on first use under an advisory lock (so that many workers starting at once
create them once), with their schema version recorded in ``tubeless_checkpoint_migrations``:

- ``tubeless_checkpoints (key, document, updated_at_ms)``: each key's last committed document;
- ``tubeless_checkpoint_leases (key, fence, owner, expires_at)``: each key's lease. An acquirer
  takes the next fence in one statement that succeeds only when the lease is released or
  expired; rows stay when a key is deleted, so fences only grow.

Expiry uses the server's clock (``clock_timestamp()``), so workers on machines whose clocks
disagree still agree on it. A write is one statement that locks the key's lease row, checks
the fence and replaces the document: a takeover committed before it makes it write nothing
(``TUBELESS_CHECKPOINT_LEASE_LOST``); one that comes after waits for it. Every write returns
after the server's commit (``synchronous_commit`` as the server sets it).

The DSN's password is never printed: errors and ``repr`` show the DSN without it.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Sequence
from typing import Any

from tubeless.durable._dsn import redact_dsn, scrub
from tubeless.durable._store import (
    LeaseBase,
    LeaseHolder,
    StoredCheckpoint,
    check_key,
    check_ttl,
    holder_from_owner,
    lease_lost,
    locked,
    new_owner,
)
from tubeless.errors import (
    CHECKPOINT_INVALID,
    CHECKPOINT_INVALID_KEY,
    CheckpointError,
)

__all__ = ["SCHEMA_VERSION", "PostgresCheckpoints"]

INSTALL_HINT = "pip install 'tubeless[postgres]'"
#: The schema version this release creates and reads.
SCHEMA_VERSION = 1
#: The advisory lock taken while the tables are created ("TBCK" as an integer).
_MIGRATION_LOCK = 0x5442434B

_NOW = "extract(epoch from clock_timestamp())::float8"
_MIGRATIONS: dict[int, tuple[str, ...]] = {
    1: (
        """CREATE TABLE IF NOT EXISTS tubeless_checkpoints (
            key TEXT PRIMARY KEY,
            document TEXT NOT NULL,
            updated_at_ms BIGINT NOT NULL
        )""",
        """CREATE TABLE IF NOT EXISTS tubeless_checkpoint_leases (
            key TEXT PRIMARY KEY,
            fence BIGINT NOT NULL,
            owner TEXT,
            expires_at DOUBLE PRECISION NOT NULL
        )""",
    ),
}
_TAKE = f"""
INSERT INTO tubeless_checkpoint_leases AS lease (key, fence, owner, expires_at)
VALUES (%(key)s, 1, %(owner)s, {_NOW} + %(ttl)s)
ON CONFLICT (key) DO UPDATE
SET fence = lease.fence + 1, owner = excluded.owner, expires_at = excluded.expires_at
WHERE lease.owner IS NULL OR lease.expires_at <= {_NOW}
RETURNING fence, expires_at
"""
_WRITE = """
WITH lease AS (
    SELECT 1 FROM tubeless_checkpoint_leases
    WHERE key = %(key)s AND fence = %(fence)s AND owner = %(owner)s
    FOR UPDATE
)
INSERT INTO tubeless_checkpoints (key, document, updated_at_ms)
SELECT %(key)s, %(document)s, %(ms)s FROM lease
ON CONFLICT (key) DO UPDATE
SET document = excluded.document, updated_at_ms = excluded.updated_at_ms
"""
_RENEW = f"""
UPDATE tubeless_checkpoint_leases SET expires_at = {_NOW} + %(ttl)s
WHERE key = %(key)s AND fence = %(fence)s AND owner = %(owner)s
RETURNING expires_at
"""
_RELEASE = """
UPDATE tubeless_checkpoint_leases SET owner = NULL, expires_at = 0
WHERE key = %(key)s AND fence = %(fence)s AND owner = %(owner)s
"""
_HOLDER = f"""
SELECT owner, expires_at - {_NOW} FROM tubeless_checkpoint_leases
WHERE key = %(key)s AND owner IS NOT NULL AND expires_at > {_NOW}
"""
_DELETE = """
DELETE FROM tubeless_checkpoints AS c WHERE c.key = %(key)s AND EXISTS (
    SELECT 1 FROM tubeless_checkpoint_leases
    WHERE key = %(key)s AND fence = %(fence)s AND owner = %(owner)s FOR UPDATE
)
"""


def _psycopg() -> Any:
    """The driver; without it an ``ImportError`` naming the extra, as ``PostgresSink`` raises
    (the CLI says it as a usage error, exit 1: nothing is wrong with the store itself)."""
    try:
        import psycopg
    except ImportError as exc:
        raise ImportError(
            f"PostgreSQL checkpoints need psycopg 3, which is not installed: {INSTALL_HINT}",
            name="psycopg",
        ) from exc
    return psycopg


class PostgresCheckpoints:
    """Checkpoint documents in a PostgreSQL database (tables created on first use).

    One connection per store object, used by one thread at a time; open one store per process
    (or per thread that must not wait for another).
    """

    def __init__(self, dsn: str, *, lease_ttl_s: float = 30) -> None:
        if not isinstance(dsn, str) or not dsn.strip():
            raise ValueError("a PostgreSQL DSN is a nonempty string")
        self.lease_ttl_s = check_ttl(lease_ttl_s)
        self._dsn = dsn
        self.where = redact_dsn(dsn)
        """The DSN as it may be shown: without its password."""
        self._psycopg = _psycopg()
        self._lock = threading.RLock()
        self._conn: Any = None

    def __repr__(self) -> str:
        return f"PostgresCheckpoints({self.where!r}, lease_ttl_s={self.lease_ttl_s:g})"

    # -- the connection ----------------------------------------------------------------------
    def _failed(self, exc: BaseException, doing: str) -> CheckpointError:
        """A psycopg error as a checkpoint error that names the database, never the password."""
        if isinstance(exc, self._psycopg.OperationalError) and self._conn is not None:
            conn, self._conn = self._conn, None  # reconnect on next use
            conn.close()
        return CheckpointError(
            CHECKPOINT_INVALID,
            f"{self.where}: cannot {doing} ({scrub(str(exc).strip(), self._dsn)})",
        )

    def _connection(self) -> Any:
        """The open connection (autocommit: each statement is its own transaction)."""
        if self._conn is None or self._conn.closed:
            try:
                conn = self._psycopg.connect(self._dsn, autocommit=True)
            except self._psycopg.Error as exc:
                raise self._failed(exc, "connect to the checkpoint database") from None
            try:
                _migrate(conn, self.where)
            except CheckpointError:
                conn.close()
                raise
            except self._psycopg.Error as exc:
                conn.close()
                raise self._failed(exc, "create the checkpoint tables") from None
            self._conn = conn
        return self._conn

    def _run(self, doing: str, sql: str, params: dict[str, Any]) -> Any:
        """Execute one statement; its cursor."""
        with self._lock:
            conn = self._connection()
            try:
                return conn.execute(sql, params)
            except self._psycopg.Error as exc:
                raise self._failed(exc, doing) from None

    # -- the protocol ------------------------------------------------------------------------
    def acquire(self, key: str) -> LeaseBase:
        check_key(key)
        if "\x00" in key:
            raise CheckpointError(
                CHECKPOINT_INVALID_KEY, "A PostgreSQL checkpoint key cannot hold a NUL character"
            )
        owner = new_owner()
        params = {"key": key, "owner": owner, "ttl": self.lease_ttl_s}
        with self._lock:
            row = self._run("take a lease", _TAKE, params).fetchone()
            if row is None:
                found = self._run("read a lease", _HOLDER, {"key": key}).fetchone()
                holder = holder_from_owner(found[0]) if found is not None else None
                raise locked(key, self.where, holder, found[1] if found is not None else None)
        fence, expires_at = row
        return LeaseBase(self, key, owner=owner, fence=int(fence), expires_at=float(expires_at))

    def list(self) -> Sequence[StoredCheckpoint]:
        rows = self._run(
            "read checkpoints",
            "SELECT key, document, updated_at_ms FROM tubeless_checkpoints "
            'ORDER BY key COLLATE "C"',
            {},
        ).fetchall()
        return [StoredCheckpoint(key=k, document=d, updated_at_ms=int(t)) for k, d, t in rows]

    def holder(self, key: str) -> LeaseHolder | None:
        """The owner of a live lease on ``key`` (``None``: nobody)."""
        found = self._run("read a lease", _HOLDER, {"key": key}).fetchone()
        return holder_from_owner(found[0]) if found is not None else None

    def delete(self, key: str) -> bool:
        with self.acquire(key) as lease:
            cursor = self._run("delete the checkpoint", _DELETE, _fenced(lease))
            return bool(cursor.rowcount)

    def close(self) -> None:
        with self._lock:
            conn, self._conn = self._conn, None
            if conn is not None:
                conn.close()

    # -- used by leases ----------------------------------------------------------------------
    def _read(self, lease: LeaseBase) -> str | None:
        row = self._run(
            "read the checkpoint",
            "SELECT document FROM tubeless_checkpoints WHERE key = %(key)s",
            {"key": lease.key},
        ).fetchone()
        return None if row is None else str(row[0])

    def _write(self, lease: LeaseBase, document: str) -> None:
        if "\x00" in document:
            raise ValueError("a PostgreSQL checkpoint document cannot hold a NUL character")
        params = {**_fenced(lease), "document": document, "ms": int(time.time() * 1000)}
        cursor = self._run("write the checkpoint", _WRITE, params)
        if cursor.rowcount != 1:
            raise lease_lost(lease.key, lease.fence, f" (in {self.where})")

    def _renew(self, lease: LeaseBase) -> float:
        params = {**_fenced(lease), "ttl": self.lease_ttl_s}
        row = self._run("renew a lease", _RENEW, params).fetchone()
        if row is None:
            raise lease_lost(lease.key, lease.fence, f" (in {self.where})")
        return float(row[0])

    def _release(self, lease: LeaseBase) -> None:
        with contextlib.suppress(CheckpointError):  # unreachable: the lease expires by itself
            self._run("release a lease", _RELEASE, _fenced(lease))


def _fenced(lease: LeaseBase) -> dict[str, Any]:
    return {"key": lease.key, "fence": lease.fence, "owner": lease.owner}


def _migrate(conn: Any, where: str) -> None:
    """Create or upgrade the tables to :data:`SCHEMA_VERSION` (once, under an advisory lock)."""
    found = conn.execute(
        "SELECT to_regclass('tubeless_checkpoint_migrations') IS NOT NULL"
    ).fetchone()[0]
    if found:
        version = conn.execute(
            "SELECT coalesce(max(version), 0) FROM tubeless_checkpoint_migrations"
        ).fetchone()[0]
        if version == SCHEMA_VERSION:
            return
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))
        conn.execute(
            """CREATE TABLE IF NOT EXISTS tubeless_checkpoint_migrations (
                version INTEGER PRIMARY KEY,
                applied_at TIMESTAMPTZ NOT NULL DEFAULT now()
            )"""
        )
        version = conn.execute(
            "SELECT coalesce(max(version), 0) FROM tubeless_checkpoint_migrations"
        ).fetchone()[0]
        if version > SCHEMA_VERSION:
            raise CheckpointError(
                CHECKPOINT_INVALID,
                f"{where}: the checkpoint tables are at schema version {version}, newer than this "
                f"release reads ({SCHEMA_VERSION}): upgrade tubeless",
            )
        for number in range(version + 1, SCHEMA_VERSION + 1):
            for statement in _MIGRATIONS[number]:
                conn.execute(statement)
            conn.execute(
                "INSERT INTO tubeless_checkpoint_migrations (version) VALUES (%s)", (number,)
            )
