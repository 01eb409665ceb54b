"""``SqliteCheckpoints``: the embedded store, one SQLite file beside a folder of lock files.

The file is created 0600 and must stay private (one hard link, no group or other access); it
runs in WAL mode with ``synchronous=FULL``, so a write has reached the disk when it returns.
Leases are ``flock`` locks on one file per key in ``<path>.leases/``: the kernel drops them
when the process dies, so a killed run's key can be resumed at once; a run that ends cleanly,
with every commit folded into the main file, removes its key's file (while still holding it;
see :func:`_lock_current`), and a killed run's file stays with its count. The holder writes its pid
and host into the lock file (``{"pid": N, "host": "H"}``), so :meth:`SqliteCheckpoints.holder`
can say who holds a key: it probes the lock without waiting, and trusts the file's words only
while the lock is held (a killed holder leaves them behind, unlocked).

Until a checkpoint folds it in, a commit lives in ``<path>-wal``; a file copied, moved or
restored without it, or a damaged ``-wal``, silently reads as an older file. So that this is
refused (``TUBELESS_CHECKPOINT_CORRUPT``) rather than resumed from an older commit or started
over (running again calls the lost commits recorded as running):

- the table ``checkpoint_commits`` counts each key's commits (``seq``), and the lock file
  records the count after each commit returns (``_leasefile``): a key with fewer commits than
  its lock file records lost some;
- a lease's first write marks its key ``live`` and checkpoints (``wal_checkpoint(FULL)``), so
  the main file alone says that a run was writing the key; a clean release clears the mark and
  checkpoints again (``TRUNCATE``). A live key whose lock file did not exist before it was
  acquired was separated from its ``-wal`` and lease folder after a run was killed;
- a file opened with a ``-wal`` to recover from passes ``PRAGMA quick_check`` first.

So after a clean end the main file alone holds everything; after a kill, the file, its
``-wal`` and its lease folder belong together.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import sqlite3
import stat
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

from tubeless.durable._leasefile import Held, read_holder, read_seq, write_words
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
from tubeless.errors import CHECKPOINT_CORRUPT, CHECKPOINT_INVALID, CheckpointError

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
#: How long a lease's first write waits to put its mark in the main file (other processes
#: checkpointing or reading); then the write fails, before anything acts on it.
_MARK_WAIT_S = 30.0
#: How long a release tries to fold the -wal in while other processes use the file (then the
#: mark stays, and a copy of the file alone is refused for the key until a later clean end).
_RELEASE_WAIT_S = 2.0
_FOLD_RETRY_S = 0.002
_COMMITS = """
CREATE TABLE IF NOT EXISTS checkpoint_commits (
    key TEXT PRIMARY KEY NOT NULL,
    seq INTEGER NOT NULL,
    live INTEGER NOT NULL
) WITHOUT ROWID
"""
_COUNT = (
    "INSERT INTO checkpoint_commits (key, seq, live) VALUES (?, ?, 1) "
    "ON CONFLICT(key) DO UPDATE SET seq = excluded.seq, live = 1"
)
_COPY = "copy or move a checkpoint file with its -wal and .leases/ beside it"
_RESTART = "start the key over with --restart (restart=True in Python), or use another key"

#: Each key's lease: the last fence handed out, and its owner while held (``flocked``: whether
#: that owner holds the key's lock file too; one that took an expired lease over from a stopped
#: process does not, until that process lets go). Rows stay when a key is deleted, so that the
#: fence keeps growing.
_LEASES = """
CREATE TABLE IF NOT EXISTS checkpoint_leases (
    key TEXT PRIMARY KEY NOT NULL,
    fence INTEGER NOT NULL,
    owner TEXT,
    expires_at REAL NOT NULL,
    flocked INTEGER NOT NULL
) WITHOUT ROWID
"""
_TAKE = (
    "INSERT INTO checkpoint_leases (key, fence, owner, expires_at, flocked) "
    "VALUES (?, ?, ?, ?, ?) ON CONFLICT(key) DO UPDATE SET fence = excluded.fence, "
    "owner = excluded.owner, expires_at = excluded.expires_at, flocked = excluded.flocked"
)
_LEASE_ROW = "SELECT fence, owner, expires_at, flocked FROM checkpoint_leases WHERE key = ?"

_UPSERT = (
    "INSERT INTO checkpoints (key, document, updated_at_ms) VALUES (?, ?, ?) "
    "ON CONFLICT(key) DO UPDATE SET document = excluded.document, "
    "updated_at_ms = excluded.updated_at_ms"
)


def _invalid(path: Path, why: str) -> CheckpointError:
    return CheckpointError(CHECKPOINT_INVALID, f"{path}: {why}")


def _corrupt(path: Path, why: str) -> CheckpointError:
    return CheckpointError(CHECKPOINT_CORRUPT, f"{path}: {why}")


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

    def __init__(self, path: str | os.PathLike[str], *, lease_ttl_s: float = 30) -> None:
        self.lease_ttl_s = check_ttl(lease_ttl_s)
        self.path = Path(path)
        _create_private(self.path)
        _check_private(self.path)
        wal = Path(f"{self.path}-wal")
        recovering = wal.exists() and wal.stat().st_size > 0  # before SQLite reads it
        if recovering and self.path.stat().st_size == 0:
            # SQLite writes the main file's header before any -wal exists: this one was emptied.
            raise _corrupt(self.path, f"the file is empty but its {wal.name} is not; {self._over}")
        self._lock = threading.Lock()
        self._db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        try:
            self._prepare(recovering)
        except sqlite3.DatabaseError as exc:
            self._db.close()
            if _write_failed(exc):  # a full disk is no reason to call the file foreign
                raise _invalid(
                    self.path, f"cannot write the checkpoint file ({exc}; is the disk full?)"
                ) from None
            if recovering:
                why = f"the file and its {wal.name} do not fit together ({exc})"
                raise _corrupt(self.path, f"{why}; {self._over}") from None
            raise _invalid(self.path, f"not a checkpoint file ({exc})") from None
        except CheckpointError:
            self._db.close()
            raise
        self._leases = Path(f"{self.path}.leases")
        self._leases.mkdir(mode=0o700, exist_ok=True)

    def __repr__(self) -> str:
        return f"SqliteCheckpoints({str(self.path)!r}, lease_ttl_s={self.lease_ttl_s:g})"

    @property
    def _over(self) -> str:
        """What to do about a file that lost commits, whatever key."""
        name = self.path.name
        return (
            f"{_COPY}, or remove {name}, {name}-wal and {name}.leases/ to start every key of it "
            "over"
        )

    def _prepare(self, recovering: bool) -> None:
        db = self._db
        db.execute("PRAGMA busy_timeout = 10000")
        tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        application_id = db.execute("PRAGMA application_id").fetchone()[0]
        if tables and application_id != APPLICATION_ID:
            what = "a trace store" if "pipeline_run_events" in tables else "another SQLite file"
            raise _invalid(self.path, f"not a checkpoint file (it is {what})")
        if recovering:
            # A -wal left by a killed process is read back now: damage shows here, or as
            # missing commits (``_read``).
            found = [row[0] for row in db.execute("PRAGMA quick_check")]
            if found != ["ok"]:
                raise _corrupt(
                    self.path, f"the integrity check failed ({'; '.join(found[:3])}); {self._over}"
                )
        db.execute("PRAGMA journal_mode = WAL")
        db.execute("PRAGMA synchronous = FULL")
        if not tables:
            db.execute("BEGIN IMMEDIATE")
            db.execute(_SCHEMA)
            db.execute(_COMMITS)
            db.execute(_LEASES)
            db.execute(f"PRAGMA application_id = {APPLICATION_ID}")
            db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            db.execute("COMMIT")
        else:  # a file of an earlier release: its keys have no count or fence yet
            if "checkpoint_commits" not in tables:
                db.execute(_COMMITS)
            if "checkpoint_leases" not in tables:
                db.execute(_LEASES)
        version = db.execute("PRAGMA user_version").fetchone()[0]
        if version != SCHEMA_VERSION:
            raise _invalid(self.path, f"unsupported checkpoint file version {version}")

    # -- the protocol ----------------------------------------------------------------------------
    def _lock_file(self, key: str) -> Path:
        name = hashlib.sha256(key.encode("utf-8")).hexdigest()[:40]
        return self._leases / f"{name}.lock"

    def acquire(self, key: str) -> LeaseBase:
        """The key's lease: its lock file locked (a holder that died let go of it) and the next
        fence; or, when a live process still holds the lock file but let its lease expire
        (stopped, hung), the next fence alone (a takeover: the stale holder can write no more)."""
        check_key(key)
        path = self._lock_file(key)
        existed = path.exists()
        for attempt in range(_PROBED_RETRIES):
            fd, flocked = _lock_current(path)
            if flocked:
                break
            live = self._live_owner(key, time.time())
            if live is not None:
                named = read_holder(fd)
                os.close(fd)
                raise locked(key, str(self.path), named or live, None)
            if attempt + 1 == _PROBED_RETRIES:
                break  # an expired lease whose process still holds the lock file: taken over
            os.close(fd)
            time.sleep(_PROBED_WAIT_S)  # probed, or its holder has not named itself yet
        try:
            owner, fence, expires_at = self._take(key, flocked)
        except BaseException:
            os.close(fd)
            raise
        seq = read_seq(fd)
        with contextlib.suppress(OSError):  # the lock is what counts; its holder is only shown
            write_words(fd, seq, holding=True)
        held = Held(fd=fd, existed=existed, seq=seq, flocked=flocked)
        return LeaseBase(self, key, held, owner=owner, fence=fence, expires_at=expires_at)

    def _live_owner(self, key: str, now: float) -> LeaseHolder | None:
        """The holder of a live (unexpired) lease on ``key``, else ``None``."""
        with self._lock:
            try:
                row = self._db.execute(_LEASE_ROW, (key,)).fetchone()
            except sqlite3.DatabaseError as exc:
                raise _invalid(self.path, f"cannot read checkpoints ({exc})") from None
        if row is None or row[1] is None or row[2] <= now:
            return None
        return holder_from_owner(row[1]) or LeaseHolder(pid=None, host=None)

    def _take(self, key: str, flocked: bool) -> tuple[str, int, float]:
        """Hand out the key's next fence, unless another owner's lease is live: one whose
        expiry is ahead and that either holds no lock file or holds the one we failed to get
        (an owner whose lock file we hold has died)."""
        owner = new_owner()
        with self._lock, self._unsynced():
            try:
                self._db.execute("BEGIN IMMEDIATE")
                row = self._db.execute(_LEASE_ROW, (key,)).fetchone()
                now = time.time()
                live = row is not None and row[1] is not None and row[2] > now
                if live and not (flocked and row[3]):
                    self._db.execute("ROLLBACK")
                    raise locked(key, str(self.path), holder_from_owner(row[1]), None)
                fence = (row[0] if row is not None else 0) + 1
                expires_at = now + self.lease_ttl_s
                self._db.execute(_TAKE, (key, fence, owner, expires_at, int(flocked)))
                self._db.execute("COMMIT")
            except sqlite3.DatabaseError as exc:
                if self._db.in_transaction:
                    self._db.execute("ROLLBACK")
                raise _invalid(self.path, f"cannot take the key's lease ({exc})") from None
        return owner, fence, expires_at

    def holder(self, key: str) -> LeaseHolder | None:
        """Who holds ``key``'s lease now (``None``: nobody), probed without waiting: the
        process holding its lock file, else the owner of a live lease taken over without it."""
        try:
            fd = os.open(self._lock_file(key), os.O_RDONLY | os.O_NOFOLLOW)
        except FileNotFoundError:
            return None  # never leased by this file's runs, or released
        try:
            try:
                # A shared lock conflicts with a holder's exclusive one, and is let go at once.
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                return read_holder(fd) or LeaseHolder(pid=None, host=None)
        finally:
            os.close(fd)  # releases the probe's shared lock
        with self._lock:
            row = self._db.execute(_LEASE_ROW, (key,)).fetchone()
        if row is None or row[1] is None or row[2] <= time.time() or row[3]:
            return None  # released, expired, or its lock file's holder died
        return holder_from_owner(row[1])

    def list(self) -> Sequence[StoredCheckpoint]:
        rows = self._query("SELECT key, document, updated_at_ms FROM checkpoints ORDER BY key", ())
        return [StoredCheckpoint(key=k, document=d, updated_at_ms=t) for k, d, t in rows]

    def delete(self, key: str) -> bool:
        with self.acquire(key) as lease, self._lock:
            held = lease._token
            assert isinstance(held, Held)
            try:
                self._db.execute("BEGIN IMMEDIATE")
                self._check_fence(lease)
                cursor = self._db.execute("DELETE FROM checkpoints WHERE key = ?", (key,))
                self._db.execute("DELETE FROM checkpoint_commits WHERE key = ?", (key,))
                self._db.execute("COMMIT")
            except (sqlite3.DatabaseError, CheckpointError) as exc:
                if self._db.in_transaction:
                    self._db.execute("ROLLBACK")
                if isinstance(exc, CheckpointError):
                    raise
                raise _invalid(self.path, f"cannot delete the checkpoint ({exc})") from None
            held.seq, held.verified = None, True  # the key starts over, with no count
            return cursor.rowcount > 0

    def close(self) -> None:
        with self._lock:
            self._fold()
            self._db.close()

    # -- used by leases --------------------------------------------------------------------------
    def _query(self, sql: str, params: tuple[object, ...]) -> Sequence[tuple[str, str, int]]:
        with self._lock:
            try:
                return list(self._db.execute(sql, params))
            except sqlite3.DatabaseError as exc:
                raise _invalid(self.path, f"cannot read checkpoints ({exc})") from None

    def _fold(self, mode: str = "TRUNCATE", wait_s: float = 0.0) -> bool:
        """Checkpoint the -wal into the main file; whether all of it went in. Another process
        checkpointing at the same time makes SQLite answer busy at once, so this tries again
        for up to ``wait_s`` seconds. Holds ``_lock``."""
        deadline = time.monotonic() + wait_s
        while True:
            with contextlib.suppress(sqlite3.Error):
                busy, _, _ = self._db.execute(f"PRAGMA wal_checkpoint({mode})").fetchone()
                if busy == 0:
                    return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(_FOLD_RETRY_S)

    @contextlib.contextmanager
    def _unsynced(self) -> Iterator[None]:
        """Commits that need not reach the disk before they return (``synchronous=NORMAL``):
        lease rows. After a power loss no process that held a lease is left to use its fence,
        and a later synced commit (a write) takes them to the disk anyway. Holds ``_lock``."""
        self._db.execute("PRAGMA synchronous = NORMAL")
        try:
            yield
        finally:
            if self._db.in_transaction:
                self._db.execute("ROLLBACK")
            self._db.execute("PRAGMA synchronous = FULL")

    def _check_fence(self, lease: LeaseBase) -> tuple[float, int]:
        """``lease``'s row (expiry, flocked) if its fence is current, else LEASE_LOST (the
        transaction is rolled back). Inside a write transaction, holding ``_lock``."""
        row = self._db.execute(_LEASE_ROW, (lease.key,)).fetchone()
        if row is None or row[0] != lease.fence or row[1] != lease.owner:
            self._db.execute("ROLLBACK")
            raise lease_lost(lease.key, lease.fence, f" (in {self.path})")
        return row[2], row[3]

    def _renew(self, lease: LeaseBase) -> float:
        token = lease._token
        assert isinstance(token, Held)
        with self._lock, self._unsynced():
            try:
                self._db.execute("BEGIN IMMEDIATE")
                self._check_fence(lease)
                if not token.flocked:  # a takeover: the stopped process may have let go by now
                    token.flocked = _try_lock(token.fd, self._lock_file(lease.key))
                expires_at = time.time() + self.lease_ttl_s
                self._db.execute(
                    "UPDATE checkpoint_leases SET expires_at = ?, flocked = ? WHERE key = ?",
                    (expires_at, int(token.flocked), lease.key),
                )
                self._db.execute("COMMIT")
            except sqlite3.DatabaseError as exc:
                if self._db.in_transaction:
                    self._db.execute("ROLLBACK")
                raise _invalid(self.path, f"cannot renew the key's lease ({exc})") from None
        return expires_at

    def _read(self, lease: LeaseBase) -> str | None:
        key, token = lease.key, lease._token
        assert isinstance(token, Held)
        with self._lock:
            try:
                found = self._db.execute(
                    "SELECT document FROM checkpoints WHERE key = ?", (key,)
                ).fetchone()
                count = self._db.execute(
                    "SELECT seq, live FROM checkpoint_commits WHERE key = ?", (key,)
                ).fetchone()
            except sqlite3.DatabaseError as exc:
                raise _invalid(self.path, f"cannot read checkpoints ({exc})") from None
        if not token.verified:  # once read or written by this lease, the lease knows better
            self._check(key, token, *(count if count is not None else (0, 0)))
        token.verified = True
        return found[0] if found is not None else None

    def _check(self, key: str, token: Held, seq: int, live: int) -> None:
        """Refuse a key whose commits the file lacks (see the module docstring)."""
        name = self.path.name
        if token.seq is not None and seq < token.seq:
            raise _corrupt(
                self.path,
                f"checkpoint {key!r} lacks commits its lease file recorded (it holds {seq} of "
                f"{token.seq}): {name}-wal was lost or damaged, or {name} was replaced or "
                f"emptied, so calls it recorded could run twice; {_COPY}, or {_RESTART}",
            )
        if live and not token.existed:
            raise _corrupt(
                self.path,
                f"checkpoint {key!r} was being written by a run that stopped, and the {name}-wal "
                f"and {name}.leases/ it wrote beside the file are not here (the file was copied "
                f"or moved alone?), so its last commits may be missing; {_COPY}, or {_RESTART}",
            )

    def _release(self, lease: LeaseBase) -> None:
        key, token = lease.key, lease._token
        assert isinstance(token, Held)
        # The lock file's commit count guards the -wal; once every commit is in the main file
        # the count is not needed, and the file goes (one per key would pile up otherwise).
        folded = False
        with self._lock, contextlib.suppress(sqlite3.Error):
            with self._unsynced():  # the fold below syncs what it folds in
                self._db.execute("BEGIN IMMEDIATE")
                cursor = self._db.execute(
                    "UPDATE checkpoint_leases SET owner = NULL, expires_at = 0, flocked = 0 "
                    "WHERE key = ? AND fence = ? AND owner = ?",
                    (key, lease.fence, lease.owner),
                )
                ours = cursor.rowcount == 1
                if ours and token.verified:
                    # Every commit of the key is in the file: say so.
                    self._db.execute("UPDATE checkpoint_commits SET live = 0 WHERE key = ?", (key,))
                self._db.execute("COMMIT")
            if not ours:  # taken over: the key, its words and its file are not ours
                os.close(token.fd)
                return
            if token.verified:
                # Put every commit of the key in the main file (TRUNCATE waits for no reader;
                # FULL for fewer).
                folded = self._fold() or self._fold("FULL", _RELEASE_WAIT_S)
        with contextlib.suppress(OSError):
            write_words(token.fd, token.seq, holding=False)  # no holder named once let go
        if folded:
            _remove_lock_file(self._lock_file(key), token.fd)
        os.close(token.fd)  # closing the descriptor releases the flock

    def _write(self, lease: LeaseBase, document: str) -> None:
        key, token = lease.key, lease._token
        assert isinstance(token, Held)
        now = int(time.time() * 1000)
        with self._lock:
            try:
                self._db.execute("BEGIN IMMEDIATE")
                self._check_fence(lease)  # a write is conditional on the fence
                row = self._db.execute(
                    "SELECT seq FROM checkpoint_commits WHERE key = ?", (key,)
                ).fetchone()
                seq = max(row[0] if row is not None else 0, token.seq or 0) + 1
                self._db.execute(_UPSERT, (key, document, now))
                self._db.execute(_COUNT, (key, seq))
                self._db.execute("COMMIT")
            except sqlite3.DatabaseError as exc:
                if self._db.in_transaction:
                    self._db.execute("ROLLBACK")
                raise _invalid(
                    self.path,
                    f"cannot write the checkpoint ({exc}); it keeps the last step committed"
                    " before, and once there is room the same command resumes from there",
                ) from None
            with contextlib.suppress(OSError):  # after the commit: the file holds at least seq
                write_words(token.fd, seq, holding=True)
            token.seq, token.verified = seq, True
            if not token.marked:
                # The main file must say the key is live before anything acts on this write.
                if not self._fold("FULL", _MARK_WAIT_S):
                    raise _invalid(
                        self.path,
                        f"cannot write the checkpoint (other processes kept the file busy for "
                        f"{_MARK_WAIT_S:g} s)",
                    )
                token.marked = True


def _write_failed(exc: BaseException) -> bool:
    """Whether SQLite could not write the file (a full disk, a file size limit, an I/O error)."""
    name = getattr(exc, "sqlite_errorname", None) or ""
    return name == "SQLITE_FULL" or name.startswith("SQLITE_IOERR")


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


def _try_lock(fd: int, path: Path) -> bool:
    """Whether ``fd``'s lock file is locked by us now (tried without waiting): a takeover's
    holder gets it once the stopped process lets go (unless the file was removed meanwhile)."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return _is_at(fd, path)


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
