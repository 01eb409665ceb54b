"""What a batch remembers per row, on disk: so its memory does not grow with its dataset.

Two things a batch needs to know about rows it is no longer holding: how many earlier rows had
the same key (repeats are numbered ``#2``, ``#3``..., DESIGN.md §11), and where the previous
output file holds each row (a rerun reuses completed rows). Both grow with the number of rows,
so they live in a private temporary SQLite database (``sqlite3.connect("")``: a file SQLite
creates in its temporary folder and deletes on close), whose page cache is bounded
(:data:`CACHE_KIB`). A row costs about 60 bytes of temporary disk, and no memory.

Key counts are kept in memory first, for the last :data:`RECENT_KEYS` keys at most, and written
to the file in one statement when that many are held; a fixed filter (1 MiB of bits) remembers
which keys were written, so a key never seen before, as most are, costs no query at all.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator

__all__ = ["CACHE_KIB", "RECENT_KEYS", "Ledger"]

#: The page cache of the temporary database (SQLite's own memory, outside Python's heap).
CACHE_KIB = 4096
#: How many keys' counts are held in memory before they are written to the file.
RECENT_KEYS = 4096
_FILTER_BITS = 1 << 23

_SCHEMA = """
CREATE TABLE seen (key TEXT PRIMARY KEY, keys INTEGER NOT NULL, earlier INTEGER NOT NULL)
                   WITHOUT ROWID;
CREATE TABLE previous (idx INTEGER PRIMARY KEY, key TEXT, completed INTEGER NOT NULL,
                       offset INTEGER NOT NULL, length INTEGER NOT NULL);
"""


_SPILL = (
    "INSERT INTO seen (key, keys, earlier) VALUES (?, ?, ?) ON CONFLICT (key) DO UPDATE SET "
    "keys = keys + excluded.keys, earlier = earlier + excluded.earlier"
)


class Ledger:
    """A batch's per-row memory, in a temporary file."""

    def __init__(self) -> None:
        self._opened: sqlite3.Connection | None = None
        """The file, made by the first write (a batch of fewer than :data:`RECENT_KEYS` rows
        and no previous output never needs one)."""
        self._counts: dict[str, list[int]] = {}
        self._written: bytearray | None = None
        """The filter of keys written to the file (``None`` until the first are)."""

    @property
    def _db(self) -> sqlite3.Connection:
        if self._opened is None:
            db = sqlite3.connect("", isolation_level=None, check_same_thread=False)
            db.execute(f"PRAGMA cache_size = -{CACHE_KIB}")
            db.execute("PRAGMA journal_mode = OFF")
            db.execute("PRAGMA synchronous = OFF")
            db.executescript(_SCHEMA)
            db.execute("BEGIN")  # one transaction, never committed: the file is thrown away
            self._opened = db
        return self._opened

    def number(self, key: str, earlier: str) -> tuple[int, int]:
        """How many times ``key`` has been counted as a row's key and ``earlier`` as the key
        round 2 gave a row, this time included (two separate counts)."""
        first = self._counts.get(key)
        if first is None:
            # A new key, before anything was written to the file (most batches' every key):
            # held at once, without :meth:`_entry`'s call.
            if self._written is None and len(self._counts) < RECENT_KEYS:
                first = self._counts[key] = [0, 0, 0, 0]
            else:
                first = self._entry(key)
        first[0] += 1
        first[2] += 1
        second = first if earlier == key else self._entry(earlier)
        second[1] += 1
        second[3] += 1
        return first[0], second[1]

    def _entry(self, key: str) -> list[int]:
        """``key``'s counts: ``[as a key, as an earlier key, and of those, not yet written]``."""
        entry = self._counts.get(key)
        if entry is not None:
            return entry
        if len(self._counts) >= RECENT_KEYS:
            self._spill()
        entry = [0, 0, 0, 0]
        if self._written is not None and self._maybe_written(key, set_bits=False):
            row = self._db.execute("SELECT keys, earlier FROM seen WHERE key = ?", (key,))
            found = row.fetchone()
            if found is not None:
                entry[0], entry[1] = int(found[0]), int(found[1])
        self._counts[key] = entry
        return entry

    def _spill(self) -> None:
        """Write the counts held in memory to the file (adding to what it holds)."""
        if self._written is None:
            self._written = bytearray(_FILTER_BITS // 8)
        self._db.executemany(
            _SPILL, ((key, entry[2], entry[3]) for key, entry in self._counts.items())
        )
        for key in self._counts:
            self._maybe_written(key, set_bits=True)
        self._counts.clear()

    def _maybe_written(self, key: str, *, set_bits: bool) -> bool:
        """Whether ``key`` may have been written (a filter: never wrong when it says no)."""
        assert self._written is not None
        code = hash(key) & 0xFFFF_FFFF_FFFF_FFFF
        found = True
        for bit in (code % _FILTER_BITS, (code >> 32) % _FILTER_BITS):
            byte, mask = bit >> 3, 1 << (bit & 7)
            if set_bits:
                self._written[byte] |= mask
            elif not self._written[byte] & mask:
                found = False
        return found

    def remember(self, index: int, key: object, completed: bool, offset: int, length: int) -> None:
        """The previous output holds row ``index`` at ``offset`` (a later line replaces it)."""
        self._db.execute(
            "INSERT OR REPLACE INTO previous (idx, key, completed, offset, length) "
            "VALUES (?, ?, ?, ?, ?)",
            (index, key if isinstance(key, str) else None, int(completed), offset, length),
        )

    def previous(self, index: int) -> tuple[str | None, bool, int, int] | None:
        """Row ``index`` of the previous output: its key, whether it completed, where it is."""
        if self._opened is None:
            return None
        row = self._db.execute(
            "SELECT key, completed, offset, length FROM previous WHERE idx = ?", (index,)
        ).fetchone()
        return None if row is None else (row[0], bool(row[1]), int(row[2]), int(row[3]))

    def previous_from(self, index: int) -> Iterator[int]:
        """The indexes of the previous output from ``index`` on, in order."""
        if self._opened is None:
            return
        cursor = self._db.execute("SELECT idx FROM previous WHERE idx >= ? ORDER BY idx", (index,))
        for (found,) in cursor:
            yield int(found)

    def last_previous(self) -> int:
        """The highest index of the previous output (-1 when it holds none)."""
        if self._opened is None:
            return -1
        row = self._db.execute("SELECT max(idx) FROM previous").fetchone()
        return -1 if row[0] is None else int(row[0])

    def close(self) -> None:
        if self._opened is not None:
            self._opened.close()
