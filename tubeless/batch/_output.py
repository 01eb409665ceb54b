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

from tubeless._data_files import open_data_file, open_regular, write_failure
from tubeless.batch._ledger import Ledger

__all__ = ["MAX_ROW_BYTES", "BatchOutput", "row_line"]

#: The longest row of a previous output that is read back (a longer one is run again).
MAX_ROW_BYTES = 64 * 1024 * 1024
_CHUNK = 1024 * 1024


def row_line(row: Mapping[str, Any]) -> str:
    """One output row as a JSON line."""
    return json.dumps(row, ensure_ascii=False, allow_nan=False) + "\n"


class BatchOutput:
    """The ``--output`` file of one batch.

    The path must name the file itself: a symbolic link, a named pipe or a device is refused
    before anything is read or written. A write that fails (a full disk) raises an
    :class:`OSError` naming the file and what it still holds; the file then keeps every row
    written so far, in the order they finished, which a rerun reuses.
    """

    def __init__(self, path: str | os.PathLike[str], ledger: Ledger) -> None:
        self.path = Path(path)
        self.ledger = ledger
        self._previous: IO[bytes] | None = None
        self._ordered: IO[str] | None = None
        self._appended = 0
        self._failed = False
        self._fd: int | None = open_data_file(self.path, append=True)
        self._temporary = self.path.with_name(f".{self.path.name}.tmp")
        try:
            if os.fstat(self._fd).st_size:
                _index_rows(self.path, ledger)
                self._previous = open_regular(self.path)
            if self._ends_torn():
                # A killed driver's half line must not swallow the next row.
                self._write(b"\n")
            self._ordered = os.fdopen(open_data_file(self._temporary), "w", encoding="utf-8")
        except BaseException:
            self.close()
            raise

    def _ends_torn(self) -> bool:
        size = self.path.stat().st_size
        if not size:
            return False
        with self.path.open("rb") as file:
            file.seek(size - 1)
            return file.read(1) != b"\n"

    def _failure(self, exc: OSError) -> OSError:
        """What a failed write says: the file, the reason, and what the file still holds."""
        self._failed = True
        rows = f"{self._appended} row{'' if self._appended == 1 else 's'}"
        return write_failure(
            self.path,
            exc,
            f"it holds the {rows} this batch finished before (in the order they finished)"
            " and the rows of earlier runs; run the batch again with the same --output to"
            " run only the rest",
        )

    def _write(self, data: bytes) -> None:
        assert self._fd is not None, "the output is finished"
        view = memoryview(data)
        try:
            while view:
                view = view[os.write(self._fd, view) :]
        except OSError as exc:
            raise self._failure(exc) from exc

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
        """Append one row as a whole line (one unbuffered write)."""
        self._write(row_line(row).encode("utf-8"))
        self._appended += 1

    def emit(self, row: Mapping[str, Any]) -> None:
        """The next row in input order (this batch's, or an earlier one still valid)."""
        assert self._ordered is not None, "the output is finished"
        try:
            self._ordered.write(row_line(row))
        except OSError as exc:
            raise self._failure(exc) from exc

    def finish(self) -> None:
        """Replace the file with the rows given in input order (:meth:`emit`); after a failed
        write the file stays as it is (every row in the order it finished)."""
        if self._failed:
            return
        ordered, self._ordered = self._ordered, None
        if ordered is None:
            return
        try:
            ordered.close()
        except OSError as exc:
            raise self._failure(exc) from exc
        os.replace(self._temporary, self.path)

    def close(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)
        for handle in (self._ordered, self._previous):
            if handle is not None:
                with contextlib.suppress(OSError):
                    handle.close()
        if self._ordered is not None:  # not finished: the rewrite in input order is dropped
            with contextlib.suppress(OSError):
                self._temporary.unlink()
        self._ordered = self._previous = None


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
