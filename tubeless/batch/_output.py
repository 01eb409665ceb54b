"""The output file of a batch: rows appended as they finish, rewritten in input order at the end.

Appending each row as soon as it finishes (one flushed line) means a driver that is killed loses
no finished row: the kernel keeps what was written. Reading the file back on a rerun tolerates
a torn last line and rows in any order; a row is reused only when its ``key`` still matches the
input at its index (so an edited inputs file reruns the rows that changed), or matches the key
round 2 wrote for that input (keyed by the raw input, repeats not numbered). The rewrite in
input order is written as rows are given in order (:meth:`BatchOutput.emit`) into a temporary
file, renamed over the output at the end, so the file is never half-written.

The previous output is never held: it is read once, a line at a time, and the batch's
:class:`~tubeless.batch._ledger.Ledger` (a temporary file) remembers where each row is; a
reused row is read back when its turn comes. A line longer than :data:`MAX_ROW_BYTES` is not
reused (its row runs again).
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any

from tubeless.batch._ledger import Ledger

__all__ = ["MAX_ROW_BYTES", "BatchOutput", "row_line"]

#: The longest row of a previous output that is read back (a longer one is run again).
MAX_ROW_BYTES = 64 * 1024 * 1024
_CHUNK = 1024 * 1024


def row_line(row: Mapping[str, Any]) -> str:
    """One output row as a JSON line."""
    return json.dumps(row, ensure_ascii=False, allow_nan=False) + "\n"


class BatchOutput:
    """The ``--output`` file of one batch."""

    def __init__(self, path: str | os.PathLike[str], ledger: Ledger) -> None:
        self.path = Path(path)
        self.ledger = ledger
        self._previous: IO[bytes] | None = None
        if self.path.exists():
            _index_rows(self.path, ledger)
            self._previous = self.path.open("rb")
        self._file: IO[str] | None = self.path.open("a", encoding="utf-8")
        if self._ends_torn():
            self._file.write("\n")  # a killed driver's half line must not swallow the next row
        self._temporary = self.path.with_name(f".{self.path.name}.tmp")
        self._ordered: IO[str] | None = self._temporary.open("w", encoding="utf-8")

    def _ends_torn(self) -> bool:
        size = self.path.stat().st_size
        if not size:
            return False
        with self.path.open("rb") as file:
            file.seek(size - 1)
            return file.read(1) != b"\n"

    def completed(self, index: int, key: str, earlier: str | None = None) -> dict[str, Any] | None:
        """The row recorded as completed for this index and key (or the key round 2 wrote for
        its input, ``earlier``), if any, with today's key."""
        return self.kept(index, key, earlier, completed=True)

    def kept(
        self, index: int, key: str, earlier: str | None = None, *, completed: bool = False
    ) -> dict[str, Any] | None:
        """The previous row for this index and key (``completed`` ones only, if asked), with
        today's key; ``None`` when there is none or it belongs to another input."""
        found = self.ledger.previous(index) if self._previous is not None else None
        if found is None:
            return None
        old_key, was_completed, offset, length = found
        if (completed and not was_completed) or old_key is None or old_key not in (key, earlier):
            return None
        assert self._previous is not None
        self._previous.seek(offset)
        try:
            row = json.loads(self._previous.read(length))
        except ValueError:
            return None
        return {**row, "key": key}

    def append(self, row: Mapping[str, Any]) -> None:
        assert self._file is not None, "the output is finished"
        self._file.write(row_line(row))
        self._file.flush()

    def emit(self, row: Mapping[str, Any]) -> None:
        """The next row in input order (this batch's, or an earlier one still valid)."""
        assert self._ordered is not None, "the output is finished"
        self._ordered.write(row_line(row))

    def finish(self) -> None:
        """Replace the file with the rows given in input order (:meth:`emit`)."""
        if self._file is not None:
            self._file.close()
            self._file = None
        if self._ordered is not None:
            self._ordered.close()
            self._ordered = None
            os.replace(self._temporary, self.path)

    def close(self) -> None:
        for handle in (self._file, self._ordered, self._previous):
            if handle is not None:
                with contextlib.suppress(OSError):
                    handle.close()
        self._file = self._ordered = self._previous = None


def _index_rows(path: Path, ledger: Ledger) -> None:
    """Remember where ``path`` holds each row (the last line for an index wins), a line at a
    time; torn lines and lines past :data:`MAX_ROW_BYTES` are passed over."""
    with path.open("rb") as file:
        offset = 0
        while line := file.readline(MAX_ROW_BYTES + 1):
            start, offset = offset, offset + len(line)
            if len(line) > MAX_ROW_BYTES and not line.endswith(b"\n"):
                while line and not line.endswith(b"\n"):
                    line = file.readline(_CHUNK)
                    offset += len(line)
                continue
            try:
                row = json.loads(line)
            except ValueError:
                continue  # a torn line from a killed driver
            index = row.get("index") if isinstance(row, dict) else None
            if isinstance(index, int) and not isinstance(index, bool) and 0 <= index < 2**62:
                completed = row.get("status") == "completed"
                ledger.remember(index, row.get("key"), completed, start, len(line))
