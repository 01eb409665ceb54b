"""Which worker runs a run: an exclusive ``flock`` on one file per run.

Every worker of a server (and a server started after a crash) may pick up a queued or orphaned
run; the one that takes its claim runs it, and keeps the claim while the run lives. The kernel
drops a claim when its process dies, so a run whose worker was killed is taken over by the next
sweep of any other worker, or by the next server, at once. The checkpoint lease below it stays
the guarantee that one task never runs twice at a time; the claim only keeps workers from
racing each other for it.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
from pathlib import Path

__all__ = ["Claims"]


class Claims:
    """Claim files in one folder (made 0700)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        self._held: dict[str, int] = {}

    def _path(self, run_id: str) -> Path:
        return self.folder / (hashlib.sha256(run_id.encode("utf-8")).hexdigest()[:40] + ".lock")

    def take(self, run_id: str) -> bool:
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

    def release(self, run_id: str) -> None:
        fd = self._held.pop(run_id, None)
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)  # the lock goes with the descriptor; the file stays for reuse

    def release_all(self) -> None:
        for run_id in list(self._held):
            self.release(run_id)
