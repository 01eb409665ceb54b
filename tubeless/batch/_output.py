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
from typing import Any

from tubeless._data_files import open_data_file, write_failure

__all__ = ["BatchOutput", "row_line"]


def row_line(row: Mapping[str, Any]) -> str:
    """One output row as a JSON line."""
    return json.dumps(row, ensure_ascii=False, allow_nan=False) + "\n"


class BatchOutput:
    """The ``--output`` file of one batch.

    The path must name the file itself: a symbolic link, a named pipe or a device is refused
    before anything is read or written. A write that fails (a full disk) raises an
    :class:`OSError` naming the file and what it still holds.
    """

    def __init__(self, path: str | os.PathLike[str], *, earlier: Sequence[str | None] = ()) -> None:
        self.path = Path(path)
        self.earlier = earlier
        """The key round 2 wrote for each index (``None`` where it is the key of today)."""
        self.previous: dict[int, dict[str, Any]] = {}
        self._fd: int | None = open_data_file(self.path, append=True)
        self._appended = 0
        self._failed = False
        try:
            if os.fstat(self._fd).st_size:
                self.previous = _read_rows(self.path)
            if self._ends_torn():
                # A killed driver's half line must not swallow the next row.
                self._write(b"\n")
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

    def _write(self, data: bytes) -> None:
        assert self._fd is not None, "the output is finished"
        view = memoryview(data)
        try:
            while view:
                view = view[os.write(self._fd, view) :]
        except OSError as exc:
            self._failed = True
            rows = f"{self._appended} row{'' if self._appended == 1 else 's'}"
            raise write_failure(
                self.path,
                exc,
                f"it holds the {rows} this batch finished before (in the order they finished)"
                " and the rows of earlier runs; run the batch again with the same --output to"
                " run only the rest",
            ) from exc

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
        """Append one row as a whole line (one unbuffered write)."""
        self._write(row_line(row).encode("utf-8"))
        self._appended += 1

    def finish(self, keys: list[str], rows: Mapping[int, Mapping[str, Any]]) -> None:
        """Rewrite the file in input order: this batch's rows, else earlier ones still valid.

        Skipped after a failed append (the file keeps what was written, which a rerun reads);
        a rewrite that fails leaves the file as it was and says so.
        """
        self.close()
        if self._failed:
            return
        temporary = self.path.with_name(f".{self.path.name}.tmp")
        try:
            with os.fdopen(open_data_file(temporary), "w", encoding="utf-8") as file:
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
        except OSError as exc:
            with contextlib.suppress(OSError):
                temporary.unlink()
            if exc.filename is not None and os.fspath(exc.filename) == os.fspath(temporary):
                raise  # refused by name (a link planted where the temporary file goes)
            raise write_failure(
                self.path,
                exc,
                "putting its rows in input order failed, so it holds every row in the order it"
                " finished; a rerun with the same --output reuses them",
            ) from exc
        os.replace(temporary, self.path)

    def close(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)


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
