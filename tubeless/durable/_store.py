"""The store protocol every checkpoint backend follows, and the checks they share."""

from __future__ import annotations

import os
import socket
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, Self, runtime_checkable

from tubeless.errors import (
    CHECKPOINT_INVALID_KEY,
    CHECKPOINT_LEASE_LOST,
    CHECKPOINT_LOCKED,
    CheckpointError,
)

__all__ = [
    "MAX_KEY_CHARS",
    "CheckpointStore",
    "Lease",
    "LeaseBase",
    "LeaseHolder",
    "StoredCheckpoint",
    "check_key",
    "check_ttl",
    "holder_from_owner",
    "holder_of",
    "lease_lost",
    "locked",
    "new_owner",
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
    """Use of one key by one owner, fenced: valid until another owner takes the key over.

    ``fence`` grows on every acquisition of the key; every :meth:`write` and :meth:`renew` is
    conditional on it, so once another owner took an expired lease over, this one can neither
    write nor renew (``TUBELESS_CHECKPOINT_LEASE_LOST``). ``expires_at`` (epoch seconds) is
    ``lease_ttl_s`` after the last acquisition or renewal; until then nobody else can acquire
    the key (``TUBELESS_CHECKPOINT_LOCKED``).
    """

    key: str
    owner: str
    """Who holds the lease: ``host:pid:uuid``."""
    fence: int
    expires_at: float

    def read(self) -> str | None:
        """The last committed document of the key, or ``None`` when nothing was written."""
        ...

    def write(self, document: str) -> None:
        """Replace the document atomically if the fence is current; returns after a durable
        commit."""
        ...

    def renew(self) -> None:
        """Push the expiry ``lease_ttl_s`` ahead; ``TUBELESS_CHECKPOINT_LEASE_LOST`` when the
        fence is stale."""
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


def new_owner() -> str:
    """A fresh lease owner of this process: ``host:pid:uuid`` (unique per acquisition)."""
    import uuid  # with platform, on first use: most runs take no lease

    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex}"


def holder_from_owner(owner: str | None) -> LeaseHolder | None:
    """The process an owner string names (``None`` for no owner)."""
    if not owner:
        return None
    host, _, _uuid = owner.rpartition(":")
    host, _, pid = host.rpartition(":")
    return LeaseHolder(pid=int(pid) if pid.isdigit() else None, host=host or None)


def check_ttl(lease_ttl_s: object) -> float:
    """``lease_ttl_s`` if it is a number of seconds >= 1, else a ``ValueError``."""
    if (
        isinstance(lease_ttl_s, bool)
        or not isinstance(lease_ttl_s, (int, float))
        or not lease_ttl_s >= 1
    ):
        raise ValueError(f"lease_ttl_s must be a number of seconds >= 1 (got {lease_ttl_s!r})")
    return float(lease_ttl_s)


def lease_lost(key: str, fence: int, where: str = "") -> CheckpointError:
    """The refusal of a stale lease's write or renewal."""
    return CheckpointError(
        CHECKPOINT_LEASE_LOST,
        f"Checkpoint key {key!r}{where}: this run's lease (fence {fence}) expired and another "
        "owner took the key over, so this run may write nothing more",
    )


def locked(
    key: str, where: str, holder: LeaseHolder | None, expires_in: float | None
) -> CheckpointError:
    """The refusal of an acquisition while another owner's lease is live."""
    held = f", {holder}" if holder is not None else ""
    until = f"; its lease expires in {expires_in:.0f} s unless renewed" if expires_in else ""
    return CheckpointError(
        CHECKPOINT_LOCKED,
        f"Checkpoint key {key!r} is in use by another run (in {where}{held}){until}; "
        "wait for it to finish, or stop it",
    )


class _Backend(Protocol):
    def _read(self, lease: LeaseBase) -> str | None: ...

    def _write(self, lease: LeaseBase, document: str) -> None: ...

    def _renew(self, lease: LeaseBase) -> float: ...

    def _release(self, lease: LeaseBase) -> None: ...


class LeaseBase:
    """The lease the stores hand out: reads, writes and renewals go to the store until
    :meth:`close`; ``token`` is the store's own record of the lease."""

    def __init__(
        self,
        store: _Backend,
        key: str,
        token: object = None,
        *,
        owner: str,
        fence: int,
        expires_at: float,
    ) -> None:
        self.key = key
        self.owner = owner
        self.fence = fence
        self.expires_at = expires_at
        self._store: _Backend | None = store
        self._token = token

    def _owner(self) -> _Backend:
        assert self._store is not None, "the lease was closed"
        return self._store

    def read(self) -> str | None:
        return self._owner()._read(self)

    def write(self, document: str) -> None:
        if not isinstance(document, str):
            raise TypeError("a checkpoint document is a str")
        self._owner()._write(self, document)

    def renew(self) -> None:
        self.expires_at = self._owner()._renew(self)

    def close(self) -> None:
        store, self._store = self._store, None
        if store is not None:
            store._release(self)

    def __repr__(self) -> str:
        return f"<lease {self.key!r} fence={self.fence} owner={self.owner!r}>"

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
