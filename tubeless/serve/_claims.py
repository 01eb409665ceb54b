"""Which worker runs a run: an exclusive ``flock`` on one file per run (SQLite stores, one
host), or a claim with a time to live in the run registry (PostgreSQL stores, several hosts).

Every worker of a server (and a server started after a crash) may pick up a queued or orphaned
run; the one that takes its claim runs it, and keeps the claim while the run lives. The kernel
drops a claim when its process dies, so a run whose worker was killed is taken over by the next
sweep of any other worker, or by the next server, at once. The checkpoint lease below it stays
the guarantee that one task never runs twice at a time; the claim only keeps workers from
racing each other for it.

On PostgreSQL no file is shared between hosts and a killed host's locks do not die with it, so
a claim is a row's ``claim_owner`` and ``claim_until_ms``, set by compare-and-set, renewed with
the run like its checkpoint lease and expiring after the same ``lease_ttl_s``. A run is taken
over only when its claim expired *and* nobody holds its checkpoint lease: the worker whose run
holds the lease executes it. The claim also covers the moments around the lease (before the run
acquired it, and after it released it while its end is being recorded), so a run that just
ended is never picked up again.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tubeless.serve._registry import RunRegistry

__all__ = ["Claims", "RegistryClaims"]


class Claims:
    """Claim files in one folder (made 0700)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        self._held: dict[str, int] = {}

    def _path(self, run_id: str) -> Path:
        return self.folder / (hashlib.sha256(run_id.encode("utf-8")).hexdigest()[:40] + ".lock")

    def take(self, run_id: str, key: str | None = None) -> bool:
        """Whether this process now holds ``run_id`` (also when it held it already)."""
        if run_id in self._held:
            return True
        fd = os.open(self._path(run_id), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        self._held[run_id] = fd
        return True

    def held(self, run_id: str) -> bool:
        return run_id in self._held

    def renew(self) -> list[str]:
        """Nothing to renew: a ``flock`` lives as long as its process."""
        return []

    def release(self, run_id: str) -> None:
        fd = self._held.pop(run_id, None)
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)  # the lock goes with the descriptor; the file stays for reuse

    def release_all(self) -> None:
        for run_id in list(self._held):
            self.release(run_id)


class RegistryClaims:
    """Claims as registry columns with a time to live (see the module docstring)."""

    def __init__(
        self,
        registry: RunRegistry,
        *,
        owner: str,
        ttl_s: float,
        lease_held: Callable[[str], bool],
    ) -> None:
        self.registry = registry
        self.owner = owner
        self.ttl_ms = int(ttl_s * 1000)
        self._lease_held = lease_held
        self._held: set[str] = set()

    def take(self, run_id: str, key: str | None = None) -> bool:
        if run_id in self._held:
            return True
        if key is not None and self._lease_held(key):
            return False  # its worker still renews the checkpoint lease: it runs it
        if not self.registry.claim(run_id, self.owner, self.ttl_ms):
            return False
        self._held.add(run_id)
        return True

    def held(self, run_id: str) -> bool:
        return run_id in self._held

    def renew(self) -> list[str]:
        """Push this worker's claims ahead; the run ids it lost (taken over meanwhile)."""
        lost = self.registry.renew_claims(sorted(self._held), self.owner, self.ttl_ms)
        self._held.difference_update(lost)
        return lost

    def release(self, run_id: str) -> None:
        if run_id in self._held:
            self._held.discard(run_id)
            with contextlib.suppress(Exception):  # unreachable: the claim expires by itself
                self.registry.unclaim(run_id, self.owner)

    def release_all(self) -> None:
        for run_id in list(self._held):
            self.release(run_id)
