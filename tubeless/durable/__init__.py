"""Checkpoint stores for durable runs (DESIGN.md §11): plain storage, nothing about agents.

A store hands out one fenced :class:`Lease` per key (exclusive until it expires unrenewed; the
SQLite store also holds an OS file lock that dies with its process); through it a run reads
its last committed document and replaces it atomically, each write returning only after a
durable commit::

    store = SqliteCheckpoints("runs.sqlite")
    with store.acquire("scripted-agent:0123abcd") as lease:
        saved = lease.read()          # None the first time
        lease.write(next_document)    # committed (fsync'ed) when this returns

A key that another lease holds fails fast with ``TUBELESS_CHECKPOINT_LOCKED``. Checkpoint
documents hold state and inputs: stores are data files (mode 0600), never traces. A SQLite
store is its file, the ``-wal`` beside it and the ``.leases/`` folder: after a crash they
belong together, and a file that lost commits is refused with ``TUBELESS_CHECKPOINT_CORRUPT``
(``_sqlite``); after a clean end the file alone holds everything.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tubeless.durable._memory import MemoryCheckpoints
from tubeless.durable._store import CheckpointStore, Lease, StoredCheckpoint

if TYPE_CHECKING:
    from tubeless.durable._dsn import is_database_url, redact_dsn
    from tubeless.durable._open import open_checkpoints
    from tubeless.durable._postgres import PostgresCheckpoints
    from tubeless.durable._sqlite import SqliteCheckpoints

__all__ = [
    "CheckpointStore",
    "Lease",
    "MemoryCheckpoints",
    "PostgresCheckpoints",
    "SqliteCheckpoints",
    "StoredCheckpoint",
    "is_database_url",
    "open_checkpoints",
    "redact_dsn",
]


def __getattr__(name: str) -> Any:
    # Every run imports this package (its session slot), few use a SQLite or PostgreSQL
    # store: sqlite3, psycopg and the stores' modules load on first use, not with ``import
    # tubeless`` (psycopg, an optional extra, is imported when a PostgresCheckpoints is made).
    if name == "SqliteCheckpoints":
        from tubeless.durable._sqlite import SqliteCheckpoints

        globals()[name] = SqliteCheckpoints
        return SqliteCheckpoints
    if name in ("is_database_url", "redact_dsn", "open_checkpoints"):
        from tubeless.durable import _dsn, _open

        found = getattr(_open if name == "open_checkpoints" else _dsn, name)
        globals()[name] = found
        return found
    if name == "PostgresCheckpoints":
        from tubeless.durable._postgres import PostgresCheckpoints

        globals()[name] = PostgresCheckpoints
        return PostgresCheckpoints
    raise AttributeError(f"module 'tubeless.durable' has no attribute {name!r}")
