"""The output file of a batch: rows appended as they finish, rewritten in input order at the end.

Appending each row as soon as it finishes (one flushed line) means a driver that is killed loses
no finished row: the kernel keeps what was written. Reading the file back on a rerun tolerates
a torn last line and rows in any order; a row is reused only when its ``key`` still matches the
input at its index (so an edited inputs file reruns the rows that changed), or matches the key
round 2 wrote for that input (keyed by the raw input, repeats not numbered). The final rewrite
goes through a temporary file and a rename, so the file is never half-written.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any

__all__ = ["BatchOutput", "row_line"]


def row_line(row: Mapping[str, Any]) -> str:
    """One output row as a JSON line."""
    return json.dumps(row, ensure_ascii=False, allow_nan=False) + "\n"


class BatchOutput:
    """The ``--output`` file of one batch."""

    def __init__(self, path: str | os.PathLike[str], *, earlier: Sequence[str | None] = ()) -> None:
        self.path = Path(path)
        self.earlier = earlier
        """The key round 2 wrote for each index (``None`` where it is the key of today)."""
        self.previous: dict[int, dict[str, Any]] = {}
        if self.path.exists():
            self.previous = _read_rows(self.path)
        self._file: IO[str] | None = self.path.open("a", encoding="utf-8")
        if self._ends_torn():
            self._file.write("\n")  # a killed driver's half line must not swallow the next row

    def _ends_torn(self) -> bool:
        size = self.path.stat().st_size
        if not size:
            return False
        with self.path.open("rb") as file:
            file.seek(size - 1)
            return file.read(1) != b"\n"

    def completed(self, index: int, key: str) -> dict[str, Any] | None:
        """The row recorded as completed for this index and key, if any."""
        row = self.previous.get(index)
        if row is not None and self._matches(index, row, key) and row.get("status") == "completed":
            return {**row, "key": key}
        return None

    def _matches(self, index: int, row: Mapping[str, Any], key: str) -> bool:
        if row.get("key") == key:
            return True
        earlier = self.earlier[index] if index < len(self.earlier) else None
        return earlier is not None and row.get("key") == earlier

    def append(self, row: Mapping[str, Any]) -> None:
        assert self._file is not None, "the output is finished"
        self._file.write(row_line(row))
        self._file.flush()

    def finish(self, keys: list[str], rows: Mapping[int, Mapping[str, Any]]) -> None:
        """Rewrite the file in input order: this batch's rows, else earlier ones still valid."""
        if self._file is not None:
            self._file.close()
            self._file = None
        temporary = self.path.with_name(f".{self.path.name}.tmp")
        with temporary.open("w", encoding="utf-8") as file:
            for index, key in enumerate(keys):
                row = rows.get(index)
                if row is None:
                    earlier = self.previous.get(index)
                    row = (
                        {**earlier, "key": key}
                        if earlier is not None and self._matches(index, earlier, key)
                        else None
                    )
                if row is not None:
                    file.write(row_line(row))
        os.replace(temporary, self.path)

    def close(self) -> None:
        if self._file is not None:
            with contextlib.suppress(OSError):
                self._file.close()
            self._file = None


def _read_rows(path: Path) -> dict[int, dict[str, Any]]:
    rows: dict[int, dict[str, Any]] = {}
    with path.open(encoding="utf-8", errors="replace") as file:
        for line in file:
            try:
                row = json.loads(line)
            except ValueError:
                continue  # a torn line from a killed driver
            index = row.get("index") if isinstance(row, dict) else None
            if isinstance(index, int) and not isinstance(index, bool):
                rows[index] = row
    return rows
