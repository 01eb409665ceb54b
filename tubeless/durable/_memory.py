"""``MemoryCheckpoints``: a store in this process's memory, for tests."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

from tubeless.durable._store import (
    LeaseBase,
    LeaseHolder,
    StoredCheckpoint,
    check_key,
    this_holder,
)
from tubeless.errors import CHECKPOINT_LOCKED, CheckpointError

__all__ = ["MemoryCheckpoints"]


class MemoryCheckpoints:
    """Documents in a dict; leases are exclusive within this process (thread-safe)."""

    def __init__(self) -> None:
        self._documents: dict[str, StoredCheckpoint] = {}
        self._held: set[str] = set()
        self._lock = threading.Lock()

    def acquire(self, key: str) -> LeaseBase:
        check_key(key)
        with self._lock:
            if key in self._held:
                raise CheckpointError(CHECKPOINT_LOCKED, f"Checkpoint key {key!r} is in use")
            self._held.add(key)
        return LeaseBase(self, key)

    def list(self) -> Sequence[StoredCheckpoint]:
        with self._lock:
            return [self._documents[key] for key in sorted(self._documents)]

    def holder(self, key: str) -> LeaseHolder | None:
        """This process while a lease on ``key`` is open, else ``None``."""
        with self._lock:
            return this_holder() if key in self._held else None

    def delete(self, key: str) -> bool:
        with self.acquire(key), self._lock:
            return self._documents.pop(key, None) is not None

    def close(self) -> None:
        """Nothing to release."""

    def _read(self, key: str, token: object) -> str | None:
        with self._lock:
            stored = self._documents.get(key)
        return None if stored is None else stored.document

    def _write(self, key: str, document: str, token: object) -> None:
        stored = StoredCheckpoint(key=key, document=document, updated_at_ms=int(time.time() * 1000))
        with self._lock:
            self._documents[key] = stored

    def _release(self, key: str, token: object) -> None:
        with self._lock:
            self._held.discard(key)
