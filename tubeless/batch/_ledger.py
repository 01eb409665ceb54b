"""What a batch remembers per row, on disk: so its memory does not grow with its dataset.

Two things a batch needs to know about rows it is no longer holding: how many earlier rows had
the same key (repeats are numbered ``#2``, ``#3``..., DESIGN.md §11), and where the previous
output file holds each row (a rerun reuses completed rows). Both grow with the number of rows,
so they live in a private temporary SQLite database (``sqlite3.connect("")``: a file SQLite
creates in its temporary folder and deletes on close), whose page cache is bounded
(:data:`CACHE_KIB`). A row costs about 60 bytes of temporary disk, and no memory.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator

__all__ = ["CACHE_KIB", "Ledger"]

#: The page cache of the temporary database (SQLite's own memory, outside Python's heap).
CACHE_KIB = 4096

_SCHEMA = """
CREATE TABLE seen (family INTEGER NOT NULL, key TEXT NOT NULL, n INTEGER NOT NULL,
                   PRIMARY KEY (family, key)) WITHOUT ROWID;
CREATE TABLE previous (idx INTEGER PRIMARY KEY, key TEXT, completed INTEGER NOT NULL,
                       offset INTEGER NOT NULL, length INTEGER NOT NULL);
"""


class Ledger:
    """A batch's per-row memory, in a temporary file."""

    def __init__(self) -> None:
        self._db = sqlite3.connect("", isolation_level=None, check_same_thread=False)
        self._db.execute(f"PRAGMA cache_size = -{CACHE_KIB}")
        self._db.execute("PRAGMA journal_mode = OFF")
        self._db.execute("PRAGMA synchronous = OFF")
        self._db.executescript(_SCHEMA)
        self._db.execute("BEGIN")  # one transaction, never committed: the file is thrown away

    def number(self, family: int, key: str) -> int:
        """How many times ``key`` has been counted in ``family``, this time included."""
        row = self._db.execute(
            "INSERT INTO seen (family, key, n) VALUES (?, ?, 1) "
            "ON CONFLICT (family, key) DO UPDATE SET n = n + 1 RETURNING n",
            (family, key),
        ).fetchone()
        return int(row[0])

    def remember(self, index: int, key: object, completed: bool, offset: int, length: int) -> None:
        """The previous output holds row ``index`` at ``offset`` (a later line replaces it)."""
        self._db.execute(
            "INSERT OR REPLACE INTO previous (idx, key, completed, offset, length) "
            "VALUES (?, ?, ?, ?, ?)",
            (index, key if isinstance(key, str) else None, int(completed), offset, length),
        )

    def previous(self, index: int) -> tuple[str | None, bool, int, int] | None:
        """Row ``index`` of the previous output: its key, whether it completed, where it is."""
        row = self._db.execute(
            "SELECT key, completed, offset, length FROM previous WHERE idx = ?", (index,)
        ).fetchone()
        return None if row is None else (row[0], bool(row[1]), int(row[2]), int(row[3]))

    def previous_from(self, index: int) -> Iterator[int]:
        """The indexes of the previous output from ``index`` on, in order."""
        cursor = self._db.execute("SELECT idx FROM previous WHERE idx >= ? ORDER BY idx", (index,))
        for (found,) in cursor:
            yield int(found)

    def last_previous(self) -> int:
        """The highest index of the previous output (-1 when it holds none)."""
        row = self._db.execute("SELECT max(idx) FROM previous").fetchone()
        return -1 if row[0] is None else int(row[0])

    def close(self) -> None:
        self._db.close()
