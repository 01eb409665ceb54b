"""SQLite trace stores: the append-only ``pipeline_run_events`` table, and reading it back.

The layout is the upstream one (UPSTREAM §2.7, store version 4): one row per record, the
envelope in columns and ``payload``/``error``/``iteration`` as JSON text. Triggers forbid UPDATE
and DELETE. A new store has the upstream ``(run_id, id)`` index only (see ``_INDEXES``). Writers
buffer rows and commit them in transactions of 64, at the end of every turn and of the root run,
a quarter second after a row was buffered, and on ``flush``/``close``; a crash can lose rows of
an unfinished turn from the last quarter second, never a committed row. A commit is one
multi-row INSERT, its own transaction (:mod:`tubeless.tracing._sqlite_insert`); nothing is
synced at a commit, only when the write-ahead log (up to 10,000 pages) is copied into the store.
Readers open the file read-only, so a ``-wal`` sidecar left by a crashed writer is read, not
refused.
"""

from __future__ import annotations

import errno
import os
import sqlite3
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Final, TypeVar

from tubeless.tracing._buffered import BufferedSink
from tubeless.tracing._json import compact_json
from tubeless.tracing._read_checks import MAX_RECORDS, TraceReadError, record_problem
from tubeless.tracing._rows import COLUMNS, payload_json, record_of, row_of
from tubeless.tracing._sqlite_insert import (
    ATTEMPT,
    DURATION,
    EMPTY_PAYLOAD,
    ERROR,
    STEP,
    TABLE,
    RowShape,
    Slot,
    run_slot,
    statement,
)
from tubeless.tracing.records import Envelope, TraceRecord
from tubeless.tracing.sinks import RUN_END, flush_later, locks_its_exports, writes_through

__all__ = [
    "BATCH_SIZE",
    "STORE_VERSION",
    "TABLE",
    "SqliteSink",
    "columns",
    "query",
    "read_sqlite",
]

_T = TypeVar("_T")

#: ``PRAGMA user_version`` of the layout written here.
STORE_VERSION: Final = 4
#: Rows committed per transaction.
BATCH_SIZE: Final = 64

_CREATE: Final = (
    f"""CREATE TABLE {TABLE} (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    version INTEGER NOT NULL,
    run_id TEXT NOT NULL,
    correlation_id TEXT,
    parent_run_id TEXT,
    pipeline_id TEXT NOT NULL,
    step_id TEXT,
    attempt_id TEXT,
    item_key TEXT,
    event_name TEXT NOT NULL,
    timestamp_ms INTEGER NOT NULL,
    duration_ms REAL,
    payload_json TEXT NOT NULL,
    error_json TEXT,
    iteration_json TEXT
)""",
    f"""CREATE TRIGGER {TABLE}_no_update BEFORE UPDATE ON {TABLE}
BEGIN SELECT RAISE(ABORT, '{TABLE} is append-only: rows cannot be updated'); END""",
    f"""CREATE TRIGGER {TABLE}_no_delete BEFORE DELETE ON {TABLE}
BEGIN SELECT RAISE(ABORT, '{TABLE} is append-only: rows cannot be deleted'); END""",
)
#: The one index tubeless's readers use: a run's records (``read_since``, following a run).
#: ``IF NOT EXISTS``: a writable open adds it when missing. The upstream layout also defines
#: ``(pipeline_id, id DESC)`` and ``(timestamp_ms DESC)``; no reader here queries them, and
#: they cost a new store's every record two inserts at the left edge of their b-trees and every
#: commit a third of its pages, so new stores do without them. A store that has them keeps them.
_INDEXES: Final = (f"CREATE INDEX IF NOT EXISTS {TABLE}_run_id_idx ON {TABLE} (run_id, id)",)
#: Indexes earlier tubeless added, dropped on a writable open: the timestamp index under its
#: old name, and one on ``(parent_run_id, id)`` that the original does not define and no
#: reader queries (it cost every row a fourth index insert and every commit three pages).
_OLD_INDEXES: Final = (
    f"DROP INDEX IF EXISTS {TABLE}_timestamp_ms_idx",
    f"DROP INDEX IF EXISTS {TABLE}_parent_run_id_idx",
)
_MIGRATE_3_TO_4: Final = f"ALTER TABLE {TABLE} ADD COLUMN iteration_json TEXT"
#: Pages the write-ahead log grows to before a commit copies it into the store (SQLite's
#: default is 1,000). Each copy syncs the log and the store (``synchronous = NORMAL``), which
#: keeps the store whole after a power loss; an agent turn commits 20 to 25 pages, so the
#: default paid three syncs every 40 turns, on the run's thread. The log keeps its size once
#: copied (up to some 20 MB while a sink is open; closing the last connection removes it):
#: cutting it back made every cycle allocate the file's blocks again.
_WAL_PAGES: Final = 10_000
#: The page size of a new store (SQLite's default is 4,096). A turn's commit dirties 20 to 25
#: pages whatever their size (a leaf or two of the table, and of each index, where the turn's
#: rows land, and the pages above them), and the log takes each whole: half-size pages write,
#: checksum and copy half the bytes (1,024 wrote a quarter, but b-tree rebalancing cost more
#: than that saved). An existing store keeps its page size.
_PAGE_BYTES: Final = 2048


def _bind_none_directly() -> None:
    """Bind ``None`` through the adapter table's fast path.

    Python's ``sqlite3`` looks every parameter that is not an int, float, str or bytes up as an
    adapter; for ``None`` that lookup fails through two attribute lookups that format and
    discard an ``AttributeError`` (some 1,700 instructions, and a trace row binds about eight
    ``None``). An adapter returning its argument unchanged binds the same ``NULL``; one already
    registered by someone else is kept.
    """
    sqlite3.adapters.setdefault((type(None), sqlite3.PrepareProtocol), {}.get)


def _not_a_database(exc: BaseException) -> bool:
    """Whether SQLite says the file is no database at all (as opposed to busy, full, ...)."""
    name = getattr(exc, "sqlite_errorname", None)
    return isinstance(exc, sqlite3.DatabaseError) and name in ("SQLITE_NOTADB", "SQLITE_CORRUPT")


def _write_failed(exc: BaseException) -> bool:
    """Whether SQLite could not write the file (a full disk, a file size limit, an I/O error)."""
    name = getattr(exc, "sqlite_errorname", None) or ""
    return isinstance(exc, sqlite3.OperationalError) and (
        name == "SQLITE_FULL" or name.startswith("SQLITE_IOERR")
    )


def _has_table(conn: sqlite3.Connection) -> bool:
    found = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (TABLE,)
    ).fetchone()
    return found is not None


def _ensure_indexes(conn: sqlite3.Connection) -> None:
    """Give a store the upstream indexes (only on a writable open; readers never need them)."""
    for sql in (*_OLD_INDEXES, *_INDEXES):
        conn.execute(sql)


def _prepare(conn: sqlite3.Connection, path: Path) -> None:
    """Initialise a new store, migrate a version-3 one, or check a version-4 one."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        if version == 0:
            if conn.execute("SELECT 1 FROM sqlite_master LIMIT 1").fetchone() is not None:
                raise TraceReadError(
                    "not a tubeless trace store: the database already holds other tables; "
                    "choose a new file",
                    path=path,
                )
            for statement in _CREATE:
                conn.execute(statement)
            conn.execute(f"PRAGMA user_version = {STORE_VERSION}")
        elif version == 3 and _has_table(conn):
            conn.execute(_MIGRATE_3_TO_4)
            conn.execute(f"PRAGMA user_version = {STORE_VERSION}")
        elif version == STORE_VERSION and _has_table(conn):
            pass
        elif version in (3, STORE_VERSION):
            raise TraceReadError(f"not a tubeless trace store: no {TABLE} table", path=path)
        else:
            raise TraceReadError(
                f"unsupported trace store version {version} (this tubeless reads 3 and 4)",
                path=path,
            )
        _ensure_indexes(conn)
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


@locks_its_exports
class SqliteSink(BufferedSink):
    """A trace sink appending rows to a SQLite trace store (created when missing).

    Args:
        path: The database file; parent folders are created. A new file is initialised, a
            version-3 store is migrated to version 4, other versions are refused.
        timeout: Seconds to wait for another writer's lock before a commit fails.

    Rows are committed every 64 records, at the end of every turn and of the root run, at most
    a quarter second after a record was exported (see :mod:`tubeless.tracing.sinks`), and on
    :meth:`flush` and :meth:`close`.
    After a failed write the sink refuses further exports (the run's fan-out then retires it).
    Exports may come from worker threads; the fan-out serialises them.

    Raises:
        TraceReadError: The file is not a trace store, or its version is unsupported.
    """

    __slots__ = ("_identity", "_location", "_shape", "_slots", "path")

    def __init__(self, path: str | os.PathLike[str], *, timeout: float = 5.0) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        _bind_none_directly()
        # Absolute, so that a handler changing the working directory changes nothing.
        self._location = os.path.abspath(self.path)
        # The buffered rows are the commit's parameters, flat, and each row's shape (which
        # parameters it names): one INSERT binds them all.
        super().__init__()
        self._shape: list[RowShape] = []
        self._slots: dict[Envelope, Slot] = {}
        self._identity: tuple[int, int] | None = None
        # isolation_level=None: Python opens no transaction; each commit is one INSERT.
        conn = sqlite3.connect(
            self.path, timeout=timeout, isolation_level=None, check_same_thread=False
        )
        try:
            conn.execute(f"PRAGMA page_size = {_PAGE_BYTES}")  # a new file only; before WAL
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("PRAGMA synchronous = NORMAL")
            conn.execute(f"PRAGMA wal_autocheckpoint = {_WAL_PAGES}")
            conn.execute("PRAGMA foreign_keys = ON")
            _prepare(conn, self.path)
        except BaseException as exc:
            conn.close()
            if _not_a_database(exc):
                raise TraceReadError(f"not a tubeless trace store: {exc}", path=self.path) from exc
            if not _write_failed(exc):
                raise
            # A full disk is a failing sink like any other (DESIGN §6): the first export
            # raises this, the run's fan-out retires the sink with one warning naming the
            # file, and the run goes on.
            self._failure = OSError(
                f"cannot write the trace store {self.path}: {exc} (is the disk full?);"
                " nothing of this run is in it"
            )
            self._failure.__cause__ = exc
            return
        self._conn = conn
        self._identity = _file_identity(self._location)

    def __repr__(self) -> str:
        return f"SqliteSink({str(self.path)!r})"

    def export(self, record: Mapping[str, Any]) -> None:
        """Buffer one record; every 64th, and a turn's or root run's last, commit the batch.

        The buffer is the commit's parameters (see :mod:`tubeless.tracing._sqlite_insert`): a
        record of the record constructors adds its run's columns once per commit and its own
        non-``NULL`` columns but its name and an empty payload; any other record adds all its
        columns.
        """
        if self._conn is None or self._failure is not None:
            self._refuse()
        if type(record) is not TraceRecord:
            row = row_of(record)
            with self._lock:
                self._rows += row
                self._buffered(None, record.get("name"), record)
            return
        get = record.get
        step_id = get("stepId")
        attempt_id = get("attemptId")
        duration_ms = get("durationMs")
        error = get("error")
        payload = payload_json(record)
        envelope = record.envelope
        # ``get`` rather than ``[]``: on a dict subclass ``[]`` goes through a slot wrapper.
        name: Any = get("name")
        timestamp_ms = get("timestampMs")
        error_json = None if error is None else compact_json(error)
        # acquire/release, not ``with``: ``with`` makes two bound methods per record.
        lock = self._lock
        lock.acquire()
        try:
            params = self._rows
            slot = self._slots.get(envelope)
            if slot is None:
                slot = self._slots[envelope] = run_slot(params, envelope, len(self._slots))
            own = 0
            if step_id is not None:
                params.append(step_id)
                own = STEP
            if attempt_id is not None:
                params.append(attempt_id)
                own |= ATTEMPT
            params.append(timestamp_ms)
            if duration_ms is not None:
                params.append(duration_ms)
                own |= DURATION
            if payload == "{}":
                own |= EMPTY_PAYLOAD
            else:
                params.append(payload)
            if error_json is not None:
                params.append(error_json)
                own |= ERROR
            shape = self._shape
            shape.append((slot, name, own))
            if len(shape) >= BATCH_SIZE or (name == RUN_END and writes_through(record)):
                self._commit()
            elif self._timer is None:
                self._timer = flush_later(self._on_timer)
        finally:
            lock.release()

    def _buffered(self, row: RowShape, name: object, record: Mapping[str, Any]) -> None:
        """Add a buffered row's shape (under the lock); commit when the batch is full or a
        turn or root run ended, else make sure the timer will (``export`` inlines this)."""
        shape = self._shape
        shape.append(row)
        if len(shape) >= BATCH_SIZE or (name == RUN_END and writes_through(record)):
            self._commit()
        elif self._timer is None:
            self._timer = flush_later(self._on_timer)

    def _refuse(self) -> None:
        if self._conn is None and self._identity is None and self._failure is not None:
            raise self._failure  # the store could not even be initialised
        super()._refuse()

    def _commit(self) -> None:
        """Commit the buffered rows in one transaction, one INSERT (under the lock)."""
        shape = self._shape
        if not shape:
            return
        conn = self._conn
        assert conn is not None
        rows = self._rows
        self._rows = []
        self._shape = []
        self._slots = {}
        try:
            if _file_identity(self._location) != self._identity:
                # Deleted or replaced under the sink: commits would land in an unlinked file.
                raise OSError(f"{self.path} was removed or replaced while the run wrote to it")
            # One statement, so its own transaction: SQLite takes the write lock when the
            # INSERT starts (waiting up to ``timeout`` for another writer, as BEGIN IMMEDIATE
            # did) and commits or rolls back all of its rows when it ends.
            conn.execute(statement(tuple(shape)), rows)
        except Exception as exc:
            self._failure = exc
            raise


def _file_identity(path: str) -> tuple[int, int] | None:
    try:
        stat = os.stat(path)
    except OSError:
        return None
    return stat.st_dev, stat.st_ino


def read_sqlite(
    path: str | os.PathLike[str], *, max_records: int | None = MAX_RECORDS
) -> list[dict[str, Any]]:
    """Every record of a SQLite trace store, in the order written (by row id).

    The store is opened read-only and never changed. With no write-ahead log pending (no
    ``-wal`` file, or an empty one) it is opened ``immutable``, so reading creates no ``-wal``
    or ``-shm`` file and works in a read-only folder. A non-empty ``-wal``, left by a writer
    that is still open or that crashed, is read too; SQLite then needs a ``-shm`` beside it,
    and when it cannot make one (a read-only folder) the error says what to do. Records are the
    wire dicts again: absent optional fields omitted, ``payload``/``error``/``iteration``
    decoded, ``durationMs`` a float.

    Raises:
        FileNotFoundError: The file does not exist.
        TraceReadError: The file is not a trace store (or of an unsupported version), cannot be
            read, or holds more than ``max_records`` records (100,000 by default; ``None``: no
            bound).
    """
    return query(path, lambda conn, file, version: _read_rows(conn, file, version, max_records))


def query(
    path: str | os.PathLike[str],
    work: Callable[[sqlite3.Connection, Path, int], _T],
) -> _T:
    """``work(connection, file, version)`` on a read-only connection to a trace store.

    Opens the store as :func:`read_sqlite` describes, checks that it is a trace store of a
    version this tubeless reads, and turns SQLite's errors into ``TraceReadError``.
    """
    file = Path(path)
    if not file.is_file():
        raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), str(file))
    wal = f"{file}-wal"
    # A hot rollback journal (a version-3 store, say) must not be read past either.
    pending = _non_empty(wal) or _non_empty(f"{file}-journal")
    uri = file.resolve().as_uri() + ("?mode=ro" if pending else "?mode=ro&immutable=1")
    try:
        conn = sqlite3.connect(uri, uri=True, isolation_level=None)
    except sqlite3.Error as exc:
        raise TraceReadError(f"cannot open the trace store: {exc}", path=file) from exc
    try:
        return work(conn, file, _version(conn, file))
    except sqlite3.Error as exc:
        if _not_a_database(exc):
            raise TraceReadError(f"not a tubeless trace store: {exc}", path=file) from exc
        if pending and getattr(exc, "sqlite_errorname", "").startswith(_NO_SHM):
            raise TraceReadError(
                f"a write-ahead log ({wal}) is pending and SQLite cannot open {file}-shm beside"
                " it to read it: copy the store and its -wal file to a folder you can write"
                " to, and read the copy",
                path=file,
            ) from exc
        raise TraceReadError(f"cannot read the trace store: {exc}", path=file) from exc
    finally:
        conn.close()


#: What SQLite says when a reader cannot create or open the ``-shm`` of a pending WAL.
_NO_SHM: Final = ("SQLITE_CANTOPEN", "SQLITE_READONLY")


def _non_empty(path: str) -> bool:
    try:
        return os.stat(path).st_size > 0
    except OSError:
        return False


def _version(conn: sqlite3.Connection, file: Path) -> int:
    """The store's version (3 or 4); ``TraceReadError`` when it is no trace store we read."""
    version: int = conn.execute("PRAGMA user_version").fetchone()[0]
    if version not in (3, STORE_VERSION):
        if version == 0:
            raise TraceReadError(
                f"not a tubeless trace store (no {TABLE} table, user_version 0)", path=file
            )
        raise TraceReadError(
            f"unsupported trace store version {version} (this tubeless reads 3 and 4)", path=file
        )
    if not _has_table(conn):
        raise TraceReadError(f"not a tubeless trace store: no {TABLE} table", path=file)
    return version


def columns(version: int) -> str:
    """The SELECT list of a row, ``id`` first (a version-3 store has no ``iteration_json``)."""
    return ", ".join(("id", *COLUMNS[:-1], "NULL" if version == 3 else COLUMNS[-1]))


def _read_rows(
    conn: sqlite3.Connection, file: Path, version: int, max_records: int | None
) -> list[dict[str, Any]]:
    cursor = conn.execute(f"SELECT {columns(version)} FROM {TABLE} ORDER BY id")
    records: list[dict[str, Any]] = []
    for row in cursor:
        if max_records is not None and len(records) == max_records:
            raise TraceReadError(
                f"more than the {max_records} records allowed", path=file, bound="max_records"
            )
        record = record_of(row, file)
        problem = record_problem(record)
        if problem is not None:
            raise TraceReadError(f"row {row[0]}: not a trace record: {problem}", path=file)
        records.append(record)
    return records
