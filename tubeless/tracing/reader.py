"""Reading stored traces back, and choosing a storage by file extension.

``read_trace(path)`` returns the wire dicts of an NDJSON file (``.ndjson``, ``.jsonl``) or a
SQLite store (``.sqlite``, ``.sqlite3``, ``.db``) in the order they were written;
``open_sink(path)`` opens a sink of the matching kind (``-`` is NDJSON on stdout) and
``write_trace(records, path)`` copies records into one. Every problem with a stored trace is a
:class:`TraceReadError` naming the file and, for NDJSON, the 1-based line.
"""

from __future__ import annotations

import errno
import json
import os
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Literal

from tubeless.errors import TRACE_INVALID, TubelessError
from tubeless.tracing.records import RECORD_NAMES

if TYPE_CHECKING:
    from tubeless.tracing.sinks import TraceSink

__all__ = [
    "MAX_LINE_BYTES",
    "MAX_RECORDS",
    "MAX_TRACE_BYTES",
    "NDJSON_SUFFIXES",
    "SQLITE_SUFFIXES",
    "TRACE_INVALID",
    "TraceReadError",
    "json_problem",
    "open_sink",
    "read_trace",
    "record_problem",
    "storage_kind",
    "write_trace",
]

#: The code of every :class:`TraceReadError`.
NDJSON_SUFFIXES: Final = (".ndjson", ".jsonl")
#: What readers accept by default: bytes per NDJSON file, bytes per line, records per trace.
MAX_TRACE_BYTES: Final = 64 * 1024 * 1024
MAX_LINE_BYTES: Final = 1024 * 1024
MAX_RECORDS: Final = 100_000
SQLITE_SUFFIXES: Final = (".sqlite", ".sqlite3", ".db")

_NAMES: Final = frozenset(RECORD_NAMES)
_READ_VERSIONS: Final = (2, 3)
_OPTIONAL_STRINGS: Final = ("parentRunId", "correlationId", "itemKey", "stepId", "attemptId")
_OPTIONAL_OBJECTS: Final = ("iteration", "error")
_FLOAT_MAX: Final = int(sys.float_info.max)


class TraceReadError(TubelessError):
    """A stored trace cannot be used: unreadable, malformed, too large or of another version.

    Attributes:
        path: The file, when known.
        line: The 1-based NDJSON line, when known.
        problem: What is wrong, without the file and line.
        bound: The reader argument whose bound the trace exceeds (``"max_bytes"``,
            ``"max_line_bytes"`` or ``"max_records"``), when that is the problem.
    """

    path: str | None
    line: int | None
    problem: str
    bound: str | None

    def __init__(
        self,
        problem: str,
        *,
        path: str | os.PathLike[str] | None = None,
        line: int | None = None,
        bound: str | None = None,
    ) -> None:
        self.path = None if path is None else os.fspath(path)
        self.line = line
        self.problem = problem
        self.bound = bound
        where = "" if self.path is None else self.path if line is None else f"{self.path}:{line}"
        super().__init__(TRACE_INVALID, f"{where}: {problem}" if where else problem)


def json_problem(exc: BaseException) -> str:
    """What is wrong with JSON that the decoder refused, without quoting any of it."""
    if isinstance(exc, RecursionError):
        return "JSON nested too deeply to read"
    if isinstance(exc, json.JSONDecodeError):
        return f"invalid JSON: {exc.msg} (column {exc.colno})"
    if "integer string conversion" in str(exc):
        return f"invalid JSON: a number with more than {sys.get_int_max_str_digits()} digits"
    return f"invalid JSON: {exc}"


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def record_problem(record: Any) -> str | None:
    """What is wrong with the envelope of a stored record, or ``None`` when it looks right.

    A basic check, not the full record schema: ``name`` is a known record name, ``version`` is
    2 or 3, ``runId``/``pipelineId`` are strings, ``timestampMs`` an integer, ``payload`` an
    object, and the optional envelope fields have their wire types.
    """
    if not isinstance(record, dict):
        return f"expected a JSON object (one trace record), got {type(record).__name__}"
    name = record.get("name")
    if not isinstance(name, str) or name not in _NAMES:
        return f"'name' must be a trace record name such as 'step.running', got {_shown(name)}"
    version = record.get("version")
    if type(version) is not int or version not in _READ_VERSIONS:
        return f"{name}: 'version' must be 2 or 3, got {_shown(version)}"
    for key in ("runId", "pipelineId"):
        if not isinstance(record.get(key), str):
            return f"{name}: {key!r} must be a string, got {_shown(record.get(key))}"
    if type(record.get("timestampMs")) is not int:
        return f"{name}: 'timestampMs' must be an integer, got {_shown(record.get('timestampMs'))}"
    if not isinstance(record.get("payload"), dict):
        return f"{name}: 'payload' must be an object, got {_shown(record.get('payload'))}"
    for key in _OPTIONAL_STRINGS:
        if key in record and not isinstance(record[key], str):
            return f"{name}: {key!r} must be a string when present, got {_shown(record[key])}"
    for key in _OPTIONAL_OBJECTS:
        if key in record and not isinstance(record[key], dict):
            return f"{name}: {key!r} must be an object when present, got {_shown(record[key])}"
    if "durationMs" in record:
        duration = record["durationMs"]
        if isinstance(duration, bool) or not isinstance(duration, (int, float)):
            return f"{name}: 'durationMs' must be a number when present, got {_shown(duration)}"
        if type(duration) is int and not -_FLOAT_MAX <= duration <= _FLOAT_MAX:
            return f"{name}: 'durationMs' is too large for a float ({len(str(duration))} digits)"
    if version == 2 and "iteration" in record:
        return f"{name}: version-2 records cannot carry 'iteration'"
    return None


def storage_kind(path: str | os.PathLike[str]) -> Literal["ndjson", "sqlite"]:
    """``"ndjson"`` or ``"sqlite"`` by the file extension (``TraceReadError`` for others)."""
    suffix = Path(path).suffix.lower()
    if suffix in NDJSON_SUFFIXES:
        return "ndjson"
    if suffix in SQLITE_SUFFIXES:
        return "sqlite"
    accepted = ", ".join(NDJSON_SUFFIXES + SQLITE_SUFFIXES)
    raise TraceReadError(
        f"unknown trace file extension {suffix or '(none)'!r}: use {accepted}", path=path
    )


# The storage modules import TraceReadError from here, so they are imported when first used.
def read_trace(
    path: str | os.PathLike[str],
    *,
    max_bytes: int | None = MAX_TRACE_BYTES,
    max_line_bytes: int = MAX_LINE_BYTES,
    max_records: int | None = MAX_RECORDS,
    allow_partial_tail: bool = False,
) -> list[dict[str, Any]]:
    """Every record of a stored trace, in the order written (NDJSON file or SQLite store).

    Args:
        path: The trace file.
        max_bytes: Refuse a larger NDJSON file (``None``: no bound; lines are streamed).
        max_line_bytes: Refuse a longer NDJSON line.
        max_records: Refuse a trace with more records (``None``: no bound).
        allow_partial_tail: Skip an unterminated, unparsable last NDJSON line (a crash's).

    Raises:
        FileNotFoundError: The file does not exist.
        TraceReadError: Unknown extension, a bound exceeded, or the file is not a readable
            trace (naming the file, and the 1-based line of an NDJSON trace).
    """
    if not os.path.exists(path):
        raise FileNotFoundError(errno.ENOENT, "No such file or directory", os.fspath(path))
    if storage_kind(path) == "ndjson":
        from tubeless.tracing.ndjson import read_ndjson

        return read_ndjson(
            path,
            max_bytes=max_bytes,
            max_line_bytes=max_line_bytes,
            max_records=max_records,
            allow_partial_tail=allow_partial_tail,
        )
    from tubeless.tracing.sqlite import read_sqlite

    return read_sqlite(path, max_records=max_records)


def open_sink(target: str | os.PathLike[str]) -> TraceSink:
    """A new sink for ``target``: NDJSON (``.ndjson``/``.jsonl``, or ``-`` for stdout) or SQLite.

    The caller owns the sink and closes it.
    """
    from tubeless.tracing.ndjson import NdjsonSink

    if isinstance(target, str) and target == "-":
        return NdjsonSink("-")
    if storage_kind(target) == "ndjson":
        return NdjsonSink(target)
    from tubeless.tracing.sqlite import SqliteSink

    return SqliteSink(target)


def write_trace(records: Iterable[Mapping[str, Any]], target: str | os.PathLike[str]) -> int:
    """Export ``records`` to a new sink for ``target`` and close it; the number written.

    NDJSON files are appended to and SQLite stores added to, like any sink would.
    """
    sink = open_sink(target)
    count = 0
    try:
        for record in records:
            sink.export(record)
            count += 1
    finally:
        sink.close()
    return count
