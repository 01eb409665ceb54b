"""Checkpoint stores for durable runs (DESIGN.md §11): plain storage, nothing about agents.

A store hands out one exclusive :class:`Lease` per key (across processes: an OS file lock that
dies with its process); through it a run reads its last committed document and replaces it
atomically, each write returning only after a durable commit::

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
    from tubeless.durable._sqlite import SqliteCheckpoints

__all__ = ["CheckpointStore", "Lease", "MemoryCheckpoints", "SqliteCheckpoints", "StoredCheckpoint"]


def __getattr__(name: str) -> Any:
    # Every run imports this package (its session slot), few use a SQLite store: sqlite3 and
    # the store's module load on first use, not with ``import tubeless``.
    if name == "SqliteCheckpoints":
        from tubeless.durable._sqlite import SqliteCheckpoints

        globals()[name] = SqliteCheckpoints
        return SqliteCheckpoints
    raise AttributeError(f"module 'tubeless.durable' has no attribute {name!r}")
