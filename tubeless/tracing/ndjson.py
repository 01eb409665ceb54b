"""NDJSON traces: one compact JSON record per line, appended; and reading them back.

The format is the upstream one (UPSTREAM §2.6): ``JSON.stringify(record) + "\\n"`` for every
record of the run tree, in export order. Reading is bounded (file size, line length, record
count) and every problem names the file and the 1-based line.
"""

from __future__ import annotations

import codecs
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final, Literal, TextIO

from tubeless.tracing._json import compact_ascii, compact_json
from tubeless.tracing.reader import TraceReadError, record_problem
from tubeless.tracing.records import record_json

__all__ = [
    "MAX_LINE_BYTES",
    "MAX_RECORDS",
    "MAX_TRACE_BYTES",
    "NdjsonSink",
    "compact_json",
    "iter_ndjson",
    "read_ndjson",
]

MAX_TRACE_BYTES: Final = 64 * 1024 * 1024
MAX_LINE_BYTES: Final = 1024 * 1024
MAX_RECORDS: Final = 100_000

_BUFFER_BYTES: Final = 64 * 1024


def _writes_utf8(stream: TextIO) -> bool:
    encoding = getattr(stream, "encoding", None) or "utf-8"
    try:
        return codecs.lookup(encoding).name == "utf-8"
    except LookupError:
        return False


class NdjsonSink:
    """A trace sink writing one compact JSON object per line.

    Args:
        target: A file path (appended to; parent folders are created), ``"-"`` for standard
            output, or an open text stream. Only a file the sink opened itself is closed by
            :meth:`close`.

    Writes are buffered: :meth:`flush` pushes them to the file (runs flush their sinks when
    they end) and :meth:`close` flushes and closes. Exporting after ``close`` raises
    ``ValueError``. A stream that cannot encode UTF-8 receives ASCII-escaped JSON instead (the
    same records once read back).

    Example:
        >>> with NdjsonSink("runs/trace.ndjson") as sink:  # doctest: +SKIP
        ...     await pipeline.run(trace=sink)
    """

    __slots__ = ("_closed", "_encode", "_owned", "_stream", "_write", "target")

    def __init__(self, target: str | os.PathLike[str] | Literal["-"] | TextIO) -> None:
        stream: TextIO
        if isinstance(target, str) and target == "-":
            stream, owned, self.target = sys.stdout, False, "-"
        elif isinstance(target, (str, os.PathLike)):
            path = Path(target)
            path.parent.mkdir(parents=True, exist_ok=True)
            stream = open(  # noqa: SIM115 - the sink owns the file until close()
                path, "a", encoding="utf-8", newline="\n", buffering=_BUFFER_BYTES
            )
            owned, self.target = True, str(path)
        else:
            stream, owned = target, False
            self.target = str(getattr(target, "name", "<stream>"))
        self._stream = stream
        self._owned = owned
        self._write = stream.write
        self._encode = record_json if _writes_utf8(stream) else compact_ascii
        self._closed = False

    def __repr__(self) -> str:
        return f"NdjsonSink({self.target!r})"

    def export(self, record: Any) -> None:
        """Append ``record`` as one line."""
        if self._closed:
            raise ValueError(f"{self!r} is closed")
        self._write(self._encode(record) + "\n")

    def flush(self) -> None:
        """Push buffered lines to the file."""
        if not self._closed:
            self._stream.flush()

    def close(self) -> None:
        """Flush, and close the file if the sink opened it (never standard output)."""
        if self._closed:
            return
        self._closed = True
        if self._owned:
            self._stream.close()
        else:
            self._stream.flush()

    def __enter__(self) -> NdjsonSink:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def read_ndjson(
    path: str | os.PathLike[str],
    *,
    max_bytes: int | None = None,
    max_line_bytes: int = MAX_LINE_BYTES,
    max_records: int | None = None,
    allow_partial_tail: bool = False,
) -> list[dict[str, Any]]:
    """Every record of an NDJSON trace file, in file order (see :func:`iter_ndjson`).

    Args:
        path: The file.
        max_bytes: Refuse files larger than this (no limit by default: lines are streamed).
        max_line_bytes: Refuse longer lines.
        max_records: Refuse files with more records (no limit by default).
        allow_partial_tail: Skip an unterminated last line that does not parse (what a crash
            mid-write leaves) instead of refusing the file.

    Raises:
        FileNotFoundError: The file does not exist.
        TraceReadError: A bound is exceeded, or a line is not UTF-8, not JSON, not an object or
            not a trace record (naming the 1-based line).
    """
    records: list[dict[str, Any]] = []
    for number, record in iter_ndjson(
        path, max_bytes=max_bytes, max_line_bytes=max_line_bytes,
        allow_partial_tail=allow_partial_tail,
    ):
        if max_records is not None and len(records) == max_records:
            raise TraceReadError(
                f"more than the {max_records} records allowed", path=path, line=number
            )
        records.append(record)
    return records


def iter_ndjson(
    path: str | os.PathLike[str],
    *,
    max_bytes: int | None = None,
    max_line_bytes: int = MAX_LINE_BYTES,
    allow_partial_tail: bool = False,
) -> Iterator[tuple[int, dict[str, Any]]]:
    """``(line number, record)`` for each record, reading one line at a time.

    CRLF line ends and blank or whitespace-only lines are accepted; memory stays bounded by
    ``max_line_bytes`` whatever the file's size.
    """
    with open(path, "rb") as file:
        if max_bytes is not None:
            size = os.fstat(file.fileno()).st_size
            if size > max_bytes:
                raise TraceReadError(
                    f"the file has {size} bytes, more than the {max_bytes} allowed", path=path
                )
        seen = 0
        number = 0
        while True:
            raw = file.readline(max_line_bytes + 3)
            if not raw:
                return
            number += 1
            seen += len(raw)
            if max_bytes is not None and seen > max_bytes:
                raise TraceReadError(
                    f"the file has more than the {max_bytes} bytes allowed", path=path
                )
            terminated = raw.endswith(b"\n")
            line = raw[:-1] if terminated else raw
            if line.endswith(b"\r"):
                line = line[:-1]
            if len(line) > max_line_bytes:
                raise TraceReadError(
                    f"the line has more than the {max_line_bytes} bytes allowed",
                    path=path,
                    line=number,
                )
            try:
                record = _decode_line(line, number, path)
            except TraceReadError:
                if allow_partial_tail and not terminated and not file.read(1):
                    return  # the partial last line a crash left: skipped on request
                raise
            if record is not None:
                yield number, record


def _decode_line(line: bytes, number: int, path: str | os.PathLike[str]) -> dict[str, Any] | None:
    if number == 1 and line.startswith(codecs.BOM_UTF8):
        line = line[len(codecs.BOM_UTF8) :]
    if not line.strip():
        return None
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise TraceReadError(
            f"invalid UTF-8 at byte {exc.start + 1} of the line", path=path, line=number
        ) from exc
    if not text.strip():
        return None  # Unicode whitespace only
    try:
        record = json.loads(text)
    except json.JSONDecodeError as exc:
        raise TraceReadError(
            f"invalid JSON: {exc.msg} (column {exc.colno})", path=path, line=number
        ) from exc
    problem = record_problem(record)
    if problem is not None:
        raise TraceReadError(f"not a trace record: {problem}", path=path, line=number)
    assert isinstance(record, dict)
    return record
