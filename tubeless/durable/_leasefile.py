"""The lock file of one key in ``<path>.leases/``: its ``flock`` is the lease, its words say more.

While a lease is held the file says who holds it and how many commits the key has made through
this checkpoint file: ``{"pid": N, "host": "H", "seq": S}``; once it is let go, only
``{"seq": S}``. ``seq`` is written after each commit returns from SQLite (never before), so the
file a commit went to always holds at least ``seq`` commits of the key; a file that holds fewer
lost them (its ``-wal`` lost or damaged, the file replaced or emptied), and the store refuses it.

Words are replaced with one ``pwrite`` at offset 0, padded with spaces to the old length, so a
process killed at any point leaves either the old words or the new ones, never a mix.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

from tubeless.durable._store import LeaseHolder, this_holder

__all__ = ["HELD_BYTES", "Held", "read_holder", "read_seq", "write_words"]

#: The most a lock file's words are read.
HELD_BYTES = 4096


@dataclass(slots=True)
class Held:
    """What a lease of the SQLite store knows about its key (the lease's token)."""

    fd: int
    existed: bool
    """Whether the lock file was there before this lease (the lease folder came with the file)."""
    seq: int | None
    """Commits of the key the lock file records (``None``: none, or not recorded)."""
    verified: bool = False
    """The file was found to hold every recorded commit (by ``read``) or written by this lease."""
    marked: bool = False
    """This lease's first write is in the main file (marked live there and checkpointed)."""
    flocked: bool = True
    """The lease holds the lock file's ``flock`` (a takeover from a stopped process does not,
    until that process lets go)."""


def _words(fd: int) -> object:
    try:
        return json.loads(os.pread(fd, HELD_BYTES, 0) or b"null")
    except (OSError, ValueError):
        return None


def read_holder(fd: int) -> LeaseHolder | None:
    """The holder a lock file names, if it names one (a released key's words name nobody)."""
    found = _words(fd)
    if not isinstance(found, dict) or type(found.get("pid")) is not int:
        return None
    host = found.get("host")
    return LeaseHolder(pid=found["pid"], host=host if isinstance(host, str) else None)


def read_seq(fd: int) -> int | None:
    """The commits a lock file records (``None`` when it records none)."""
    found = _words(fd)
    seq = found.get("seq") if isinstance(found, dict) else None
    return seq if type(seq) is int and seq >= 0 else None


def write_words(fd: int, seq: int | None, *, holding: bool) -> None:
    """Replace the lock file's words: this process (while ``holding``) and ``seq``."""
    words: dict[str, object] = {}
    if holding:
        me = this_holder()
        words = {"pid": me.pid, "host": me.host}
    if seq is not None:
        words["seq"] = seq
    data = json.dumps(words).encode("utf-8") if words else b""
    size = os.fstat(fd).st_size
    if len(data) < size:
        data = data.ljust(size) if data else b"{}".ljust(size)
    os.pwrite(fd, data, 0)
