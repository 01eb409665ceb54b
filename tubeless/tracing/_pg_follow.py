"""``read_since`` on a Postgres store, over connections kept between calls.

A follower polls a few times a second, and a new connection costs the server a process start
and the client a handshake (some milliseconds each), so each call borrows an idle connection
of this process to the same DSN when one is left, and gives it back afterwards: at most
:data:`MAX_IDLE` idle connections in all (the least recently used closed first), none shared by
two calls at once, all closed when the interpreter exits. A borrowed
connection the server has closed meanwhile is dropped, and the call retried once on a new one.
Connections are keyed by process too: a forked child never uses its parent's.
"""

from __future__ import annotations

import atexit
import os
import threading
from typing import TYPE_CHECKING, Any, Final

from tubeless.tracing._dsn import redact_dsn
from tubeless.tracing.postgres import _SELECT, TABLE, _connect, _psycopg, decoded, reading
from tubeless.tracing.reader import TraceReadError

if TYPE_CHECKING:
    import psycopg

__all__ = ["MAX_IDLE", "since"]

#: Idle connections kept in all, whatever their DSN.
MAX_IDLE: Final = 8

#: Idle connections by (process, DSN), least recently given back first.
_idle: list[tuple[tuple[int, str], psycopg.Connection[Any]]] = []
_lock = threading.Lock()

_QUERY: Final = f"""WITH RECURSIVE tree(run_id) AS (
    SELECT %(run)s::text
    UNION
    SELECT e.run_id FROM {TABLE} e JOIN tree t ON e.parent_run_id = t.run_id
    WHERE e.event_name = 'pipeline.started'
)
{_SELECT} WHERE run_id IN (SELECT run_id FROM tree) AND id > %(after)s
ORDER BY id LIMIT %(limit)s"""

_BY_CORRELATION: Final = f"""{_SELECT} WHERE correlation_id = %(run)s AND id > %(after)s
ORDER BY id LIMIT %(limit)s"""


def _borrow(dsn: str) -> psycopg.Connection[Any] | None:
    key = (os.getpid(), dsn)
    with _lock:
        for position in range(len(_idle) - 1, -1, -1):
            if _idle[position][0] == key:
                return _idle.pop(position)[1]
    return None


def _give_back(dsn: str, conn: psycopg.Connection[Any]) -> None:
    if conn.closed:
        return
    evicted: list[psycopg.Connection[Any]] = []
    with _lock:
        _idle.append(((os.getpid(), dsn), conn))
        while len(_idle) > MAX_IDLE:
            evicted.append(_idle.pop(0)[1])
    for old in evicted:
        old.close()


@atexit.register
def _close_idle() -> None:
    with _lock:
        mine = [conn for (pid, _), conn in _idle if pid == os.getpid()]
        _idle.clear()
    for conn in mine:
        conn.close()


def since(
    dsn: str, *, run_id: str, after: int, limit: int, correlated: bool = False
) -> list[tuple[int, dict[str, Any]]]:
    """The rows of ``run_id``'s tree after ``after`` (see :func:`tubeless.tracing.read_since`),
    or with ``correlated`` the rows whose correlation id is ``run_id``.

    The tree is the run and every run whose ``pipeline.started`` names a run of the tree as its
    parent, found in the same statement by a recursive query over the partial parent index.
    """
    where = redact_dsn(dsn)
    params = {"run": run_id, "after": after, "limit": limit}
    statement = _BY_CORRELATION if correlated else _QUERY
    borrowed = _borrow(dsn)
    if borrowed is not None:
        try:
            with reading(dsn, conn=borrowed) as conn:
                found = list(decoded(iter(conn.execute(statement, params)), where, _unbounded))
        except TraceReadError as exc:
            borrowed.close()
            if not isinstance(exc.__cause__, _psycopg().OperationalError):
                raise
            # Closed by the server while idle (a restart, an idle timeout): once more, anew.
        except BaseException:
            borrowed.close()
            raise
        else:
            _give_back(dsn, borrowed)
            return found
    conn = _connect(dsn, timeout=10.0)
    try:
        with reading(dsn, conn=conn):
            found = list(decoded(iter(conn.execute(statement, params)), where, _unbounded))
    except BaseException:
        conn.close()
        raise
    _give_back(dsn, conn)
    return found


def _unbounded(count: int) -> None:
    """A follower's calls are bounded by ``limit``, not by a record count."""
