"""Postgres trace stores: one append-only table that many processes write, and reading it back.

The rows are the SQLite store's (:mod:`tubeless.tracing._rows`) in ``tubeless_trace_events``,
with an identity column ``id`` as the sequence. The tables are created on first use under a
transaction-level advisory lock, so concurrent first writers do not race; the layout's version
is the one row of ``tubeless_trace_schema``. Triggers refuse UPDATE, DELETE and TRUNCATE.

A writer buffers rows like the SQLite sink and commits them at the same moments (64 rows, the
end of a turn or of the root run, a quarter second after a row was buffered, ``flush`` and
``close``), so a killed process leaves every finished turn readable. Each commit first takes a
second advisory lock: the commits of all writers are serialised (they are short), so the ids of
committed rows only grow, and a follower that has read up to id N never later finds a row below
N (see :func:`tubeless.tracing.read_since`).

``psycopg`` (3) is imported only when a store is opened (``pip install 'tubeless[postgres]'``).
A DSN's password is never part of a message: :func:`redact_dsn` masks it everywhere.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Final

from tubeless.tracing._buffered import BufferedSink
from tubeless.tracing._dsn import URL_SCHEMES, is_postgres_url, redact_dsn, scrub
from tubeless.tracing._read_checks import MAX_RECORDS, TraceReadError, record_problem
from tubeless.tracing._rows import COLUMNS, Row, record_of, row_of
from tubeless.tracing.sinks import RUN_END, flush_later, locks_its_exports, writes_through

if TYPE_CHECKING:
    import psycopg

__all__ = [
    "INSTALL_HINT",
    "SCHEMA_TABLE",
    "STORE_VERSION",
    "TABLE",
    "URL_SCHEMES",
    "PostgresSink",
    "is_postgres_url",
    "read_postgres",
    "redact_dsn",
]

INSTALL_HINT: Final = "pip install 'tubeless[postgres]'"
TABLE: Final = "tubeless_trace_events"
SCHEMA_TABLE: Final = "tubeless_trace_schema"
#: The layout's version, kept in ``tubeless_trace_schema``.
STORE_VERSION: Final = 1
#: Rows committed per transaction at most.
BATCH_SIZE: Final = 64
#: Advisory lock keys (``pg_advisory_xact_lock(bigint)``): creating the tables, and commits.
_SCHEMA_LOCK: Final = 0x7475_6265_7472_0001
_COMMIT_LOCK: Final = 0x7475_6265_7472_0002


_CREATE: Final = (
    f"""CREATE TABLE {TABLE} (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    version integer NOT NULL,
    run_id text NOT NULL,
    correlation_id text,
    parent_run_id text,
    pipeline_id text NOT NULL,
    step_id text,
    attempt_id text,
    item_key text,
    event_name text NOT NULL,
    timestamp_ms bigint NOT NULL,
    duration_ms double precision,
    payload_json text NOT NULL,
    error_json text,
    iteration_json text
)""",
    f"CREATE INDEX {TABLE}_run_idx ON {TABLE} (run_id, id)",
    # A run's children are found by their first record; the other rows need no parent entry.
    f"CREATE INDEX {TABLE}_parent_idx ON {TABLE} (parent_run_id, id)"
    " WHERE event_name = 'pipeline.started'",
    f"CREATE INDEX {TABLE}_pipeline_idx ON {TABLE} (pipeline_id, id DESC)",
    f"""CREATE FUNCTION {TABLE}_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION '{TABLE} is append-only: rows cannot be changed or removed (%)', TG_OP;
END $$""",
    f"CREATE TRIGGER {TABLE}_append_only BEFORE UPDATE OR DELETE OR TRUNCATE ON {TABLE}"
    f" FOR EACH STATEMENT EXECUTE FUNCTION {TABLE}_append_only()",
)
#: The server types of :data:`COLUMNS`.
_TYPES: Final = (
    "integer",
    "text",
    "text",
    "text",
    "text",
    "text",
    "text",
    "text",
    "text",
    "bigint",
    "double precision",
    "text",
    "text",
    "text",
)
#: One statement that takes the commit lock and inserts the buffered rows, passed as one array
#: per column (a short statement the driver caches and the server prepares, whatever the number
#: of rows). Run in autocommit it is its own transaction: one round trip per commit. The lock
#: is taken before the first row gets its id (every row comes out of the join with the lock's
#: one row) and held until the statement commits; the rows are inserted in buffer order.
_INSERT: Final = (
    "WITH commit_lock AS (SELECT pg_advisory_xact_lock(%s))"
    f" INSERT INTO {TABLE} ({', '.join(COLUMNS)})"
    f" SELECT {', '.join(f'u.{column}' for column in COLUMNS)}"
    " FROM commit_lock, unnest("
    + ", ".join(f"%b::{kind}[]" for kind in _TYPES)
    + f") WITH ORDINALITY AS u({', '.join(COLUMNS)}, n) ORDER BY u.n"
)
_SELECT: Final = f"SELECT id, {', '.join(COLUMNS)} FROM {TABLE}"


def _psycopg() -> Any:
    try:
        import psycopg
    except ImportError as exc:
        raise ImportError(
            f"Postgres trace stores need psycopg, which is not installed: {INSTALL_HINT}"
        ) from exc
    return psycopg


def _connect(dsn: str, *, timeout: float) -> psycopg.Connection[Any]:
    """A connection in autocommit mode; a refused connection is an ``OSError`` naming the URL."""
    driver = _psycopg()
    try:
        conn: psycopg.Connection[Any] = driver.connect(
            dsn, autocommit=True, connect_timeout=max(1, round(timeout))
        )
    except driver.Error as exc:
        raise ConnectionError(
            f"cannot connect to the trace database {redact_dsn(dsn)}: {scrub(str(exc), dsn)}"
        ) from None
    return conn


def _stored_version(conn: psycopg.Connection[Any]) -> int | None:
    """The layout version of the database's trace tables, ``None`` when it has none."""
    found = conn.execute("SELECT to_regclass(%s) IS NOT NULL", (SCHEMA_TABLE,)).fetchone()
    if not found or not found[0]:
        return None
    row = conn.execute(f"SELECT max(version) FROM {SCHEMA_TABLE}").fetchone()
    return None if row is None or row[0] is None else int(row[0])


def _check_version(version: int | None, where: str) -> None:
    if version is not None and version != STORE_VERSION:
        raise TraceReadError(
            f"unsupported trace store version {version} (this tubeless reads {STORE_VERSION})",
            path=where,
        )


def _prepare(conn: psycopg.Connection[Any], where: str) -> None:
    """Create the tables on first use (once, whoever comes first), or check their version."""
    found = _stored_version(conn)
    _check_version(found, where)
    if found == STORE_VERSION:
        return
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (_SCHEMA_LOCK,))
        conn.execute(f"CREATE TABLE IF NOT EXISTS {SCHEMA_TABLE} (version integer NOT NULL)")
        version = _stored_version(conn)
        _check_version(version, where)
        if version is None:
            for statement in _CREATE:
                conn.execute(statement)
            conn.execute(f"INSERT INTO {SCHEMA_TABLE} (version) VALUES (%s)", (STORE_VERSION,))


@locks_its_exports
class PostgresSink(BufferedSink):
    """A trace sink appending rows to a Postgres trace store (tables created on first use).

    Args:
        dsn: A ``postgresql://`` (or ``postgres://``) URL, or any libpq connection string.
        timeout: Seconds to wait for the server when connecting.

    Rows are committed at the moments the SQLite sink commits them, so a killed writer leaves
    every finished turn readable; many processes may write one database at once. After a failed
    write the sink refuses further exports (the run's fan-out then retires it). The password
    of ``dsn`` appears in no message and no ``repr``.

    Raises:
        ImportError: psycopg is not installed (``pip install 'tubeless[postgres]'``).
        ConnectionError: The server cannot be reached or refused the connection.
        TraceReadError: The database holds trace tables of another layout version.
    """

    __slots__ = ("location",)

    def __init__(self, dsn: str, *, timeout: float = 10.0) -> None:
        #: The DSN with its password masked.
        self.location = redact_dsn(dsn)
        super().__init__()
        conn = _connect(dsn, timeout=timeout)
        try:
            _prepare(conn, self.location)
        except Exception as exc:
            conn.close()
            if isinstance(exc, TraceReadError):
                raise
            raise OSError(
                f"cannot prepare the trace store {self.location}: {scrub(str(exc), dsn)}"
            ) from None
        self._conn = conn

    def __repr__(self) -> str:
        return f"PostgresSink({self.location!r})"

    def export(self, record: Mapping[str, Any]) -> None:
        """Buffer one record; every 64th, and a turn's or root run's last, commit the batch."""
        if self._conn is None or self._failure is not None:
            self._refuse()
        row = row_of(record)
        with self._lock:
            rows = self._rows
            rows.append(row)
            if len(rows) >= BATCH_SIZE or (
                record.get("name") == RUN_END and writes_through(record)
            ):
                self._commit()
            elif self._timer is None:
                self._timer = flush_later(self._on_timer)

    def _commit(self) -> None:
        """Commit the buffered rows in one transaction, after every earlier writer's commit."""
        rows = self._rows
        if not rows:
            return
        conn = self._conn
        assert conn is not None
        self._rows = []
        try:
            conn.execute(_INSERT, [_COMMIT_LOCK, *map(list, zip(*rows, strict=True))])
        except Exception as exc:
            failure = OSError(f"cannot write the trace store {self.location}: {exc}")
            self._failure = failure
            raise failure from exc


@contextlib.contextmanager
def reading(
    dsn: str, *, timeout: float = 10.0, conn: psycopg.Connection[Any] | None = None
) -> Iterator[psycopg.Connection[Any]]:
    """A connection to a trace store that exists and has this layout (``TraceReadError``
    otherwise); driver errors while reading become ``TraceReadError`` naming the URL.

    A new connection is closed at the end; a given ``conn`` is used, and left open.
    """
    where = redact_dsn(dsn)
    own = conn is None
    if conn is None:
        conn = _connect(dsn, timeout=timeout)
    driver = _psycopg()
    try:
        version = _stored_version(conn)
        if version is None:
            raise TraceReadError(f"not a tubeless trace store: no {TABLE} table", path=where)
        _check_version(version, where)
        yield conn
    except driver.Error as exc:
        raise TraceReadError(
            f"cannot read the trace store: {scrub(str(exc), dsn)}", path=where
        ) from exc if not own else None
    finally:
        if own:
            conn.close()


def decoded(
    rows: Iterator[Row], where: str, check: Callable[[int], None]
) -> Iterator[tuple[int, dict[str, Any]]]:
    """``(id, record)`` for rows read back as ``(id, *COLUMNS)``; ``check(count)`` bounds them."""
    for count, row in enumerate(rows):
        check(count)
        record = record_of(row, where)
        problem = record_problem(record)
        if problem is not None:
            raise TraceReadError(f"row {row[0]}: not a trace record: {problem}", path=where)
        yield int(row[0]), record


def read_postgres(dsn: str, *, max_records: int | None = MAX_RECORDS) -> list[dict[str, Any]]:
    """Every record of a Postgres trace store, in the order committed (by ``id``).

    Raises:
        ImportError: psycopg is not installed.
        ConnectionError: The server cannot be reached.
        TraceReadError: The database holds no trace store, one of another version, more than
            ``max_records`` records (``None``: no bound), or a row that is no trace record.
    """
    where = redact_dsn(dsn)

    def check(count: int) -> None:
        if max_records is not None and count == max_records:
            raise TraceReadError(
                f"more than the {max_records} records allowed", path=where, bound="max_records"
            )

    with reading(dsn) as conn:
        limit = "" if max_records is None else f" LIMIT {max_records + 1}"
        rows = conn.execute(f"{_SELECT} ORDER BY id{limit}")
        return [record for _, record in decoded(iter(rows), where, check)]
