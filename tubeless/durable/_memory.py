"""``MemoryCheckpoints``: a store in this process's memory, for tests.

Leases are fenced as in every store: each acquisition of a key takes the next fence; a lease
not renewed for ``lease_ttl_s`` seconds may be taken over by another acquirer, after which the
old lease's writes and renewals fail with ``TUBELESS_CHECKPOINT_LEASE_LOST``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass

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

__all__ = ["MemoryCheckpoints"]


@dataclass(slots=True)
class _Slot:
    """A key's lease record: the last fence handed out, and its owner while held."""

    fence: int = 0
    owner: str | None = None
    expires_at: float = 0.0


class MemoryCheckpoints:
    """Documents in a dict; leases are fenced and exclusive within this process (thread-safe)."""

    def __init__(self, *, lease_ttl_s: float = 30) -> None:
        self.lease_ttl_s = check_ttl(lease_ttl_s)
        self._documents: dict[str, StoredCheckpoint] = {}
        self._slots: dict[str, _Slot] = {}
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"MemoryCheckpoints(lease_ttl_s={self.lease_ttl_s:g})"

    def acquire(self, key: str) -> LeaseBase:
        check_key(key)
        owner = new_owner()
        with self._lock:
            now = time.time()
            slot = self._slots.setdefault(key, _Slot())
            if slot.owner is not None and slot.expires_at > now:
                raise locked(key, "memory", holder_from_owner(slot.owner), slot.expires_at - now)
            slot.fence += 1
            slot.owner, slot.expires_at = owner, now + self.lease_ttl_s
            return LeaseBase(self, key, owner=owner, fence=slot.fence, expires_at=slot.expires_at)

    def list(self) -> Sequence[StoredCheckpoint]:
        with self._lock:
            return [self._documents[key] for key in sorted(self._documents)]

    def holder(self, key: str) -> LeaseHolder | None:
        """The owner of a live lease on ``key`` (this process), else ``None``."""
        with self._lock:
            slot = self._slots.get(key)
            if slot is None or slot.owner is None or slot.expires_at <= time.time():
                return None
            return holder_from_owner(slot.owner)

    def delete(self, key: str) -> bool:
        with self.acquire(key), self._lock:
            return self._documents.pop(key, None) is not None

    def close(self) -> None:
        """Nothing to release."""

    def _current(self, lease: LeaseBase) -> _Slot:
        """The key's slot if ``lease`` still holds it (its fence is the last handed out)."""
        slot = self._slots.get(lease.key)
        if slot is None or slot.fence != lease.fence or slot.owner != lease.owner:
            raise lease_lost(lease.key, lease.fence)
        return slot

    def _read(self, lease: LeaseBase) -> str | None:
        with self._lock:
            stored = self._documents.get(lease.key)
        return None if stored is None else stored.document

    def _write(self, lease: LeaseBase, document: str) -> None:
        stored = StoredCheckpoint(
            key=lease.key, document=document, updated_at_ms=int(time.time() * 1000)
        )
        with self._lock:
            self._current(lease)
            self._documents[lease.key] = stored

    def _renew(self, lease: LeaseBase) -> float:
        with self._lock:
            slot = self._current(lease)
            slot.expires_at = time.time() + self.lease_ttl_s
            return slot.expires_at

    def _release(self, lease: LeaseBase) -> None:
        with self._lock:
            slot = self._slots.get(lease.key)
            if slot is not None and slot.fence == lease.fence and slot.owner == lease.owner:
                slot.owner, slot.expires_at = None, 0.0
