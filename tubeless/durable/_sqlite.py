"""``SqliteCheckpoints``: the embedded store, one SQLite file beside a folder of lock files.

The file is created 0600 and must stay private (one hard link, no group or other access); it
runs in WAL mode with ``synchronous=FULL``, so a write has reached the disk when it returns.
Leases are ``flock`` locks on one file per key in ``<path>.leases/``: the kernel drops them
when the process dies, so a killed run's key can be resumed at once; a run that ends removes
its key's file (while still holding it; see :func:`_lock_current`). The holder writes its pid
and host into the lock file (``{"pid": N, "host": "H"}``), so :meth:`SqliteCheckpoints.holder`
can say who holds a key: it probes the lock without waiting, and trusts the file's words only
while the lock is held (a killed holder leaves them behind, unlocked).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import sqlite3
import stat
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from tubeless.durable._store import (
    LeaseBase,
    LeaseHolder,
    StoredCheckpoint,
    check_key,
    this_holder,
)
from tubeless.errors import CHECKPOINT_INVALID, CHECKPOINT_LOCKED, CheckpointError

__all__ = ["SqliteCheckpoints"]

#: ``PRAGMA application_id`` of a checkpoint file ("TBCK"), so no other file is mistaken for one.
APPLICATION_ID = 0x5442434B
SCHEMA_VERSION = 1

_SCHEMA = """
CREATE TABLE IF NOT EXISTS checkpoints (
    key TEXT PRIMARY KEY NOT NULL,
    document TEXT NOT NULL,
    updated_at_ms INTEGER NOT NULL
) WITHOUT ROWID
"""
#: How often ``acquire`` tries again when the lock is taken but names no holder: a
#: ``checkpoints list`` probing it holds it for an instant (a real holder names itself at once).
_PROBED_RETRIES = 20
_PROBED_WAIT_S = 0.005
_HOLDER_BYTES = 4096

_UPSERT = (
    "INSERT INTO checkpoints (key, document, updated_at_ms) VALUES (?, ?, ?) "
    "ON CONFLICT(key) DO UPDATE SET document = excluded.document, "
    "updated_at_ms = excluded.updated_at_ms"
)


def _invalid(path: Path, why: str) -> CheckpointError:
    return CheckpointError(CHECKPOINT_INVALID, f"{path}: {why}")


def _create_private(path: Path) -> None:
    """Create ``path`` empty with mode 0600 (unless it exists); never follows a symlink."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    except FileExistsError:
        return
    os.close(fd)


def _check_private(path: Path) -> None:
    info = os.lstat(path)
    if not stat.S_ISREG(info.st_mode):
        raise _invalid(path, "a checkpoint file must be a regular file (not a link or a folder)")
    if info.st_nlink != 1:
        raise _invalid(path, f"a checkpoint file must have one hard link (it has {info.st_nlink})")
    if info.st_mode & 0o077:
        mode = stat.S_IMODE(info.st_mode)
        raise _invalid(
            path,
            f"a checkpoint file holds state and inputs and must be private (mode {mode:04o}); "
            f"run: chmod 600 {path}",
        )


class SqliteCheckpoints:
    """Checkpoint documents in one SQLite file (created on first use)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        _create_private(self.path)
        _check_private(self.path)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        try:
            self._prepare()
        except sqlite3.DatabaseError as exc:
            self._db.close()
            raise _invalid(self.path, f"not a checkpoint file ({exc})") from None
        except CheckpointError:
            self._db.close()
            raise
        self._leases = Path(f"{self.path}.leases")
        self._leases.mkdir(mode=0o700, exist_ok=True)

    def _prepare(self) -> None:
        db = self._db
        tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        application_id = db.execute("PRAGMA application_id").fetchone()[0]
        if tables and application_id != APPLICATION_ID:
            what = "a trace store" if "pipeline_run_events" in tables else "another SQLite file"
            raise _invalid(self.path, f"not a checkpoint file (it is {what})")
        db.execute("PRAGMA journal_mode = WAL")
        db.execute("PRAGMA synchronous = FULL")
        db.execute("PRAGMA busy_timeout = 10000")
        if not tables:
            db.execute("BEGIN IMMEDIATE")
            db.execute(_SCHEMA)
            db.execute(f"PRAGMA application_id = {APPLICATION_ID}")
            db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            db.execute("COMMIT")
        version = db.execute("PRAGMA user_version").fetchone()[0]
        if version != SCHEMA_VERSION:
            raise _invalid(self.path, f"unsupported checkpoint file version {version}")

    # -- the protocol ----------------------------------------------------------------------------
    def _lock_file(self, key: str) -> Path:
        name = hashlib.sha256(key.encode("utf-8")).hexdigest()[:40]
        return self._leases / f"{name}.lock"

    def acquire(self, key: str) -> LeaseBase:
        check_key(key)
        path = self._lock_file(key)
        for attempt in range(_PROBED_RETRIES):
            fd, locked = _lock_current(path)
            if locked:
                break
            holder = _read_holder(fd)
            os.close(fd)
            if holder is not None or attempt + 1 == _PROBED_RETRIES:
                held = f", {holder}" if holder is not None else ""
                raise CheckpointError(
                    CHECKPOINT_LOCKED,
                    f"Checkpoint key {key!r} is in use by another run (in {self.path}{held}); "
                    "wait for it to finish, or stop it",
                ) from None
            time.sleep(_PROBED_WAIT_S)  # probed, or its holder has not named itself yet
        with contextlib.suppress(OSError):  # the lock is what counts; its holder is only shown
            me = this_holder()
            os.ftruncate(fd, 0)
            os.pwrite(fd, json.dumps({"pid": me.pid, "host": me.host}).encode("utf-8"), 0)
        return LeaseBase(self, key, fd)

    def holder(self, key: str) -> LeaseHolder | None:
        """Who holds ``key``'s lease now (``None``: nobody), probed without waiting."""
        try:
            fd = os.open(self._lock_file(key), os.O_RDONLY | os.O_NOFOLLOW)
        except FileNotFoundError:
            return None  # never leased by this file's runs
        try:
            try:
                # A shared lock conflicts with a holder's exclusive one, and is let go at once.
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                return _read_holder(fd) or LeaseHolder(pid=None, host=None)
            return None
        finally:
            os.close(fd)  # releases the probe's shared lock

    def list(self) -> Sequence[StoredCheckpoint]:
        rows = self._query("SELECT key, document, updated_at_ms FROM checkpoints ORDER BY key", ())
        return [StoredCheckpoint(key=k, document=d, updated_at_ms=t) for k, d, t in rows]

    def delete(self, key: str) -> bool:
        with self.acquire(key), self._lock:
            cursor = self._db.execute("DELETE FROM checkpoints WHERE key = ?", (key,))
            return cursor.rowcount > 0

    def close(self) -> None:
        with self._lock:
            self._db.close()

    # -- used by leases --------------------------------------------------------------------------
    def _query(self, sql: str, params: tuple[object, ...]) -> Sequence[tuple[str, str, int]]:
        with self._lock:
            try:
                return list(self._db.execute(sql, params))
            except sqlite3.DatabaseError as exc:
                raise _invalid(self.path, f"cannot read checkpoints ({exc})") from None

    def _read(self, key: str) -> str | None:
        rows = self._query(
            "SELECT key, document, updated_at_ms FROM checkpoints WHERE key = ?", (key,)
        )
        return rows[0][1] if rows else None

    def _release(self, key: str, token: object) -> None:
        assert isinstance(token, int)
        with contextlib.suppress(OSError):
            os.ftruncate(token, 0)  # no holder named once it is let go
        _remove_lock_file(self._lock_file(key), token)
        os.close(token)  # closing the descriptor releases the flock

    def _write(self, key: str, document: str) -> None:
        now = int(time.time() * 1000)
        with self._lock:
            try:
                self._db.execute("BEGIN IMMEDIATE")
                self._db.execute(_UPSERT, (key, document, now))
                self._db.execute("COMMIT")
            except sqlite3.DatabaseError as exc:
                if self._db.in_transaction:
                    self._db.execute("ROLLBACK")
                raise _invalid(self.path, f"cannot write the checkpoint ({exc})") from None


# -- the lock file of a key: made by its first acquirer, removed by its last holder -------------
def _lock_current(path: Path) -> tuple[int, bool]:
    """The lock file now at ``path``, open: ``(fd, True)`` locked by us, ``(fd, False)`` held by
    another. A holder removes the file when its run ends, while it still holds the lock: a file
    locked here after it was removed is no longer the key's lock, so the one now at ``path``
    (a new one, if none) is tried instead."""
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return fd, False
        if _is_at(fd, path):
            return fd, True
        os.close(fd)


def _remove_lock_file(path: Path, fd: int) -> None:
    """Remove ``path`` while ``fd`` (its open file) is still locked: one file per key that ran
    would otherwise pile up in the leases folder."""
    if _is_at(fd, path):
        with contextlib.suppress(OSError):
            os.unlink(path)


def _is_at(fd: int, path: Path) -> bool:
    """Whether ``path`` still names the file open as ``fd``."""
    try:
        opened, named = os.fstat(fd), os.stat(path, follow_symlinks=False)
    except OSError:
        return False
    return (opened.st_dev, opened.st_ino) == (named.st_dev, named.st_ino)


def _read_holder(fd: int) -> LeaseHolder | None:
    """The holder a lock file names, if it names one."""
    try:
        found = json.loads(os.pread(fd, _HOLDER_BYTES, 0) or b"null")
    except (OSError, ValueError):
        return None
    if not isinstance(found, dict):
        return None
    pid, host = found.get("pid"), found.get("host")
    return LeaseHolder(
        pid=pid if type(pid) is int else None, host=host if isinstance(host, str) else None
    )
