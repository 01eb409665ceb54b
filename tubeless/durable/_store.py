"""The store protocol every checkpoint backend follows, and the checks they share."""

from __future__ import annotations

import os
import socket
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, Self, runtime_checkable

from tubeless.errors import CHECKPOINT_INVALID_KEY, CheckpointError

__all__ = [
    "MAX_KEY_CHARS",
    "CheckpointStore",
    "Lease",
    "LeaseBase",
    "LeaseHolder",
    "StoredCheckpoint",
    "check_key",
    "holder_of",
    "this_holder",
]

#: The longest key a store accepts (DESIGN.md §11).
MAX_KEY_CHARS = 4096


@dataclass(frozen=True, kw_only=True, slots=True)
class StoredCheckpoint:
    """One key's last committed document, as :meth:`CheckpointStore.list` returns it."""

    key: str
    document: str
    updated_at_ms: int
    """When the document was last written (milliseconds since the epoch)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class LeaseHolder:
    """Who holds a key's lease now: a process, by id and host (``None`` when it did not say)."""

    pid: int | None
    host: str | None

    def to_dict(self) -> dict[str, object]:
        return {"pid": self.pid, "host": self.host}

    def __str__(self) -> str:
        if self.pid is None:
            return "held by a process that did not say which"
        return f"held by pid {self.pid} on {self.host or 'an unknown host'}"


def this_holder() -> LeaseHolder:
    """This process, as a lease holder."""
    return LeaseHolder(pid=os.getpid(), host=socket.gethostname())


def holder_of(store: object, key: str) -> tuple[bool, LeaseHolder | None]:
    """Whether ``store`` can tell who holds ``key`` now, and who does (``None``: nobody).

    A store may offer ``holder(key)`` (the SQLite and memory stores do); for one that does not,
    a run that stopped cannot be told from a live one.
    """
    probe = getattr(store, "holder", None)
    if not callable(probe):
        return False, None
    found = probe(key)
    return True, found if isinstance(found, LeaseHolder) else None


@runtime_checkable
class Lease(Protocol):
    """Exclusive use of one key until :meth:`close` (or the end of the owning process)."""

    key: str

    def read(self) -> str | None:
        """The last committed document of the key, or ``None`` when nothing was written."""
        ...

    def write(self, document: str) -> None:
        """Replace the document atomically; returns only after a durable commit."""
        ...

    def close(self) -> None:
        """Release the key (idempotent)."""
        ...

    def __enter__(self) -> Lease: ...

    def __exit__(self, *exc_info: object) -> None: ...


@runtime_checkable
class CheckpointStore(Protocol):
    """Where durable runs keep their documents, one per key."""

    def acquire(self, key: str) -> Lease:
        """A lease on ``key``; ``TUBELESS_CHECKPOINT_LOCKED`` when another lease holds it."""
        ...

    def list(self) -> Sequence[StoredCheckpoint]:
        """Every stored key with its document, in key order."""
        ...

    def delete(self, key: str) -> bool:
        """Remove a key's document (taking its lease first); whether there was one."""
        ...

    def close(self) -> None:
        """Release what the store holds open; leases already handed out stay valid."""
        ...


def check_key(key: object) -> str:
    """``key`` if it is a usable checkpoint key, else ``TUBELESS_AGENT_INVALID_CHECKPOINT_KEY``."""
    if not isinstance(key, str) or not key.strip():
        raise CheckpointError(CHECKPOINT_INVALID_KEY, "A checkpoint key must be a nonblank string")
    if len(key) > MAX_KEY_CHARS:
        raise CheckpointError(
            CHECKPOINT_INVALID_KEY,
            f"A checkpoint key may have at most {MAX_KEY_CHARS} characters (got {len(key)})",
        )
    try:
        key.encode("utf-8")
    except UnicodeEncodeError as exc:  # bytes of argv that were not UTF-8 read as surrogates
        raise CheckpointError(
            CHECKPOINT_INVALID_KEY,
            "A checkpoint key must be valid Unicode text (it holds a lone surrogate at "
            f"position {exc.start})",
        ) from None
    return key


class _Backend(Protocol):
    def _read(self, key: str, token: object) -> str | None: ...

    def _write(self, key: str, document: str, token: object) -> None: ...

    def _release(self, key: str, token: object) -> None: ...


class LeaseBase:
    """The lease the stores hand out: reads and writes go to the store until :meth:`close`."""

    def __init__(self, store: _Backend, key: str, token: object = None) -> None:
        self.key = key
        self._store: _Backend | None = store
        self._token = token

    def _owner(self) -> _Backend:
        assert self._store is not None, "the lease was closed"
        return self._store

    def read(self) -> str | None:
        return self._owner()._read(self.key, self._token)

    def write(self, document: str) -> None:
        if not isinstance(document, str):
            raise TypeError("a checkpoint document is a str")
        self._owner()._write(self.key, document, self._token)

    def close(self) -> None:
        store, self._store = self._store, None
        if store is not None:
            store._release(self.key, self._token)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
