"""``MemoryCheckpoints``: a store in this process's memory, for tests."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

from tubeless.durable._store import StoredCheckpoint, check_key
from tubeless.errors import CHECKPOINT_LOCKED, CheckpointError

__all__ = ["MemoryCheckpoints"]


class MemoryCheckpoints:
    """Documents in a dict; leases are exclusive within this process (thread-safe)."""

    def __init__(self) -> None:
        self._documents: dict[str, StoredCheckpoint] = {}
        self._held: set[str] = set()
        self._lock = threading.Lock()

    def acquire(self, key: str) -> _MemoryLease:
        check_key(key)
        with self._lock:
            if key in self._held:
                raise CheckpointError(CHECKPOINT_LOCKED, f"Checkpoint key {key!r} is in use")
            self._held.add(key)
        return _MemoryLease(self, key)

    def list(self) -> Sequence[StoredCheckpoint]:
        with self._lock:
            return [self._documents[key] for key in sorted(self._documents)]

    def delete(self, key: str) -> bool:
        with self.acquire(key), self._lock:
            return self._documents.pop(key, None) is not None

    def close(self) -> None:
        """Nothing to release."""

    def _read(self, key: str) -> str | None:
        with self._lock:
            stored = self._documents.get(key)
        return None if stored is None else stored.document

    def _write(self, key: str, document: str) -> None:
        stored = StoredCheckpoint(key=key, document=document, updated_at_ms=int(time.time() * 1000))
        with self._lock:
            self._documents[key] = stored

    def _release(self, key: str) -> None:
        with self._lock:
            self._held.discard(key)


class _MemoryLease:
    def __init__(self, store: MemoryCheckpoints, key: str) -> None:
        self.key = key
        self._store: MemoryCheckpoints | None = store

    def _owner(self) -> MemoryCheckpoints:
        assert self._store is not None, "the lease was closed"
        return self._store

    def read(self) -> str | None:
        return self._owner()._read(self.key)

    def write(self, document: str) -> None:
        if not isinstance(document, str):
            raise TypeError("a checkpoint document is a str")
        self._owner()._write(self.key, document)

    def close(self) -> None:
        if self._store is not None:
            self._store._release(self.key)
            self._store = None

    def __enter__(self) -> _MemoryLease:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
