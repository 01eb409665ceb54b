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
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final, Literal, TextIO

from tubeless.tracing._json import compact_ascii, compact_json
from tubeless.tracing._read_checks import (
    MAX_LINE_BYTES,
    MAX_RECORDS,
    MAX_TRACE_BYTES,
    TraceReadError,
    json_problem,
    record_problem,
)
from tubeless.tracing.records import record_line
from tubeless.tracing.sinks import RUN_END, flush_later, locks_its_exports, writes_through

__all__ = [
    "MAX_LINE_BYTES",
    "MAX_RECORDS",
    "MAX_TRACE_BYTES",
    "NdjsonSink",
    "compact_json",
    "iter_ndjson",
    "read_ndjson",
]

_BUFFER_BYTES: Final = 64 * 1024


def _writes_utf8(stream: TextIO) -> bool:
    encoding = getattr(stream, "encoding", None) or "utf-8"
    try:
        return codecs.lookup(encoding).name == "utf-8"
    except LookupError:
        return False


@locks_its_exports
class NdjsonSink:
    """A trace sink writing one compact JSON object per line.

    Args:
        target: A file path (appended to; parent folders are created), ``"-"`` for standard
            output, or an open text stream. Only a file the sink opened itself is closed by
            :meth:`close`.

    Writes are buffered, and written through to the OS at the end of every turn and of the
    root run, at most a quarter second after a record was exported (see
    :mod:`tubeless.tracing.sinks`), on :meth:`flush` and on :meth:`close`. A file that was
    removed or replaced since the sink opened it makes the next check (on the timer or
    :meth:`flush`) raise ``OSError``, so the run's fan-out retires the sink with a warning
    instead of letting it write into a file nobody can open. Exporting after ``close`` raises
    ``ValueError``. A stream that cannot encode UTF-8 receives ASCII-escaped JSON instead (the
    same records once read back).

    Example:
        >>> with NdjsonSink("runs/trace.ndjson") as sink:  # doctest: +SKIP
        ...     await pipeline.run(trace=sink)
    """

    __slots__ = (
        "__weakref__",
        "_closed",
        "_failure",
        "_identity",
        "_line",
        "_lock",
        "_owned",
        "_path",
        "_stream",
        "_timer",
        "_write",
        "target",
    )

    def __init__(self, target: str | os.PathLike[str] | Literal["-"] | TextIO) -> None:
        stream: TextIO
        self._path: str | None = None
        self._identity: tuple[int, int] | None = None
        if isinstance(target, str) and target == "-":
            stream, owned, self.target = sys.stdout, False, "-"
        elif isinstance(target, (str, os.PathLike)):
            path = Path(target)
            path.parent.mkdir(parents=True, exist_ok=True)
            stream = open(  # noqa: SIM115 - the sink owns the file until close()
                path, "a", encoding="utf-8", newline="\n", buffering=_BUFFER_BYTES
            )
            owned, self.target = True, str(path)
            # Absolute, so that a handler changing the working directory changes nothing.
            self._path = os.path.abspath(path)
            opened = os.fstat(stream.fileno())
            self._identity = (opened.st_dev, opened.st_ino)
        else:
            stream, owned = target, False
            self.target = str(getattr(target, "name", "<stream>"))
        self._stream = stream
        self._owned = owned
        self._write = stream.write
        self._line = record_line if _writes_utf8(stream) else _ascii_line
        self._closed = False
        self._failure: Exception | None = None
        # Exports and the timer's write-through come from different threads.
        self._lock = threading.Lock()
        self._timer: threading.Timer | None = None

    def __repr__(self) -> str:
        return f"NdjsonSink({self.target!r})"

    def export(self, record: Any) -> None:
        """Append ``record`` as one line; a turn's or root run's last one writes through."""
        if self._closed:
            raise ValueError(f"{self!r} is closed")
        line = self._line(record)
        # acquire/release, not ``with``: ``with`` makes two bound methods per record.
        lock = self._lock
        lock.acquire()
        try:
            if self._failure is not None:
                raise self._failure
            self._write(line)
            if record.get("name") == RUN_END and writes_through(record):
                # The file check waits for the timer or flush(): it costs a stat per turn.
                self._stream.flush()
            elif self._timer is None:
                self._timer = flush_later(self._on_timer)
        finally:
            lock.release()

    def flush(self) -> None:
        """Push buffered lines to the file."""
        if self._closed:
            return
        with self._lock:
            if self._failure is not None:
                raise self._failure
            self._write_through()

    def close(self) -> None:
        """Flush, and close the file if the sink opened it (never standard output)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            timer, self._timer = self._timer, None
        if timer is not None:  # outside the lock, which a firing timer may be waiting for
            timer.cancel()
            timer.join()
        if self._owned:
            self._stream.close()
        else:
            self._stream.flush()

    def __enter__(self) -> NdjsonSink:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _write_through(self) -> None:
        """Flush the buffer to the OS, unless the file is gone (under the lock).

        A removed or replaced file is noticed here, on the timer and on :meth:`flush`: within
        a quarter second of the next record, and always by the end of the run.
        """
        if self._identity is not None and _identity(self._path) != self._identity:
            self._failure = OSError(
                f"{self.target} was removed or replaced while the run wrote to it"
            )
            raise self._failure
        self._stream.flush()

    def _on_timer(self) -> None:
        with self._lock:
            self._timer = None
            if self._closed or self._failure is not None:
                return
            try:
                self._write_through()
            except Exception as exc:  # reported by the next export or flush, on the run's side
                self._failure = exc


def _ascii_line(record: Any) -> str:
    return compact_ascii(record) + "\n"


def _identity(path: str | None) -> tuple[int, int] | None:
    try:
        found = os.stat(path)  # type: ignore[arg-type]
    except (OSError, TypeError):
        return None
    return found.st_dev, found.st_ino


def read_ndjson(
    path: str | os.PathLike[str],
    *,
    max_bytes: int | None = MAX_TRACE_BYTES,
    max_line_bytes: int = MAX_LINE_BYTES,
    max_records: int | None = MAX_RECORDS,
    allow_partial_tail: bool = False,
) -> list[dict[str, Any]]:
    """Every record of an NDJSON trace file, in file order (see :func:`iter_ndjson`).

    Args:
        path: The file.
        max_bytes: Refuse files larger than this (64 MiB by default; ``None``: no bound).
        max_line_bytes: Refuse longer lines (1 MiB by default).
        max_records: Refuse files with more records (100,000 by default; ``None``: no bound).
        allow_partial_tail: Skip an unterminated last line that does not parse (what a crash
            mid-write leaves) instead of refusing the file.

    Raises:
        FileNotFoundError: The file does not exist.
        TraceReadError: A bound is exceeded, or a line is not UTF-8, not JSON, not an object or
            not a trace record (naming the 1-based line).
    """
    records: list[dict[str, Any]] = []
    for number, record in iter_ndjson(
        path,
        max_bytes=max_bytes,
        max_line_bytes=max_line_bytes,
        allow_partial_tail=allow_partial_tail,
    ):
        if max_records is not None and len(records) == max_records:
            raise TraceReadError(
                f"more than the {max_records} records allowed",
                path=path,
                line=number,
                bound="max_records",
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
                    f"the file has {size} bytes, more than the {max_bytes} allowed",
                    path=path,
                    bound="max_bytes",
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
                raise TraceReadError(  # it grew while being read
                    f"the file has more than the {max_bytes} bytes allowed",
                    path=path,
                    line=number,
                    bound="max_bytes",
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
                    bound="max_line_bytes",
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
    except (RecursionError, ValueError) as exc:  # hostile JSON the decoder itself refuses
        raise TraceReadError(json_problem(exc), path=path, line=number) from exc
    problem = record_problem(record)
    if problem is not None:
        raise TraceReadError(f"not a trace record: {problem}", path=path, line=number)
    assert isinstance(record, dict)
    return record
