"""The checks every stored trace passes on the way in: bounds, JSON and record envelopes.

A leaf of the tracing package: the reader (``reader.py``) and both storages (``ndjson.py``,
``sqlite.py``) import it, and it imports neither, so choosing a storage by extension (the
reader) and parsing one (a storage) do not import each other back.
"""

from __future__ import annotations

import json
import math
import os
import sys
from collections.abc import Mapping
from typing import Any, Final

from tubeless.errors import TRACE_INVALID, TubelessError
from tubeless.tracing.records import RECORD_NAMES

__all__ = [
    "MAX_LINE_BYTES",
    "MAX_RECORDS",
    "MAX_TRACE_BYTES",
    "TraceReadError",
    "json_problem",
    "record_problem",
]

#: What readers accept by default: bytes per NDJSON file, bytes per line, records per trace.
MAX_TRACE_BYTES: Final = 64 * 1024 * 1024
MAX_LINE_BYTES: Final = 1024 * 1024
MAX_RECORDS: Final = 100_000

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

    code = TRACE_INVALID

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
        super().__init__(self.code, f"{where}: {problem}" if where else problem)


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
    return (
        _iteration_problem(name, record)
        or _payload_problem(name, record["payload"])
        or _error_problem(name, record.get("error"))
    )


# -- what the original release's decoder rejects beyond the envelope (UPSTREAM §1.9, §2.2, §2.3)
_ITERATION_KEYS: Final = frozenset(("runId", "stepId", "attemptId", "index"))
_TERMINAL_STATUSES: Final = ("completed", "failed", "cancelled")
_DEPENDENCY_LISTS: Final = ("dependencies", "optionalDependencies", "skipAfterFailureOf")
#: Decoder limits: a cause chain is shorter than 16 links; a fan-out failure's at most 8.
_MAX_CAUSE_DEPTH: Final = 15
_MAX_FAN_OUT_CAUSE_DEPTH: Final = 8
_MAX_FAN_OUT_FAILURES: Final = 32
_MAX_FAN_OUT_TEXT: Final = 1024
_MAX_ISSUES: Final = 128
_FAN_OUT_KEYS: Final = frozenset(
    ("failures", "failureCount", "omittedFailureCount", "schedulerError")
)
_FAN_OUT_FAILURE_KEYS: Final = ("index", "key", "keyTruncated", "cancelled", "error")


def _iteration_problem(name: str, record: Mapping[str, Any]) -> str | None:
    """An ``iteration`` relation must name its wrapper run (= ``parentRunId``) and a turn >= 1."""
    iteration = record.get("iteration")
    if iteration is None:
        return None
    if set(iteration) != _ITERATION_KEYS or not all(
        isinstance(iteration[key], str) for key in ("runId", "stepId", "attemptId")
    ):
        return f"{name}: 'iteration' must have exactly runId, stepId, attemptId and index"
    index = iteration["index"]
    if type(index) is not int or index < 1:
        return f"{name}: 'iteration.index' must be an integer >= 1, got {_shown(index)}"
    if iteration["runId"] != record.get("parentRunId"):
        return (
            f"{name}: 'iteration.runId' must equal 'parentRunId' "
            f"({_shown(iteration['runId'])} != {_shown(record.get('parentRunId'))})"
        )
    return None


def _payload_problem(name: str, payload: Mapping[str, Any]) -> str | None:
    if name == "pipeline.completed":
        status = payload.get("status")
        if status not in _TERMINAL_STATUSES:
            return (
                f"{name}: payload 'status' must be 'completed', 'failed' or 'cancelled', "
                f"got {_shown(status)}"
            )
    elif name == "step.planned":
        for key in _DEPENDENCY_LISTS:
            value = payload.get(key)
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                return f"{name}: payload {key!r} must be a list of step ids, got {_shown(value)}"
    elif name == "pipeline.started":
        snapshot = payload.get("definitionSnapshot")
        if snapshot is not None and (
            not isinstance(snapshot, dict)
            or snapshot.get("identity") != payload.get("definitionIdentity")
        ):
            return (
                f"{name}: payload 'definitionSnapshot' must be an object carrying the same "
                "identity as 'definitionIdentity'"
            )
    return None


def _cause_problem(node: Any, *, depth: int, text: int | None = None) -> str | None:
    """What is wrong with a cause chain (``{message, name, sourceCode?, cause?}`` links)."""
    links = 0
    while node is not None:
        links += 1
        if links > depth:
            return f"must be a cause chain of at most {depth} levels"
        if not (
            isinstance(node, dict)
            and isinstance(node.get("message"), str)
            and isinstance(node.get("name"), str)
        ):
            return "must be a cause chain of {message, name, sourceCode?, cause?} objects"
        if text is not None and len(node["message"]) > text:
            return f"must hold messages of at most {text} characters"
        node = node.get("cause")
    return None


def _error_problem(name: str, error: Any) -> str | None:
    if error is None:
        return None
    problem = _cause_problem(error.get("cause"), depth=_MAX_CAUSE_DEPTH)
    if problem is not None:
        return f"{name}: error: 'cause' {problem}"
    issues = error.get("issues")
    if issues is not None:
        if not isinstance(issues, list) or len(issues) > _MAX_ISSUES:
            return f"{name}: error: 'issues' must be a list of at most {_MAX_ISSUES} items"
        for issue in issues:
            path = issue.get("path", []) if isinstance(issue, dict) else None
            if not (
                isinstance(issue, dict)
                and isinstance(issue.get("message"), str)
                and isinstance(path, list)
                and all(_is_path_part(part) for part in path)
            ):
                return (
                    f"{name}: error: 'issues' must be {{message, path?}} objects whose paths "
                    "hold strings and finite numbers"
                )
    fan_out = error.get("fanOut")
    if fan_out is not None:
        problem = _fan_out_problem(fan_out)
        if problem is not None:
            return f"{name}: error.fanOut{problem}"
    return None


def _is_path_part(part: Any) -> bool:
    if isinstance(part, str):
        return True
    return type(part) in (int, float) and math.isfinite(part)


def _fan_out_problem(fan_out: Any) -> str | None:
    """The fan-out diagnostics (UPSTREAM §1.9): bounded failures and consistent counts."""
    if not isinstance(fan_out, dict):
        return f": must be an object, got {_shown(fan_out)}"
    unexpected = sorted(set(fan_out) - _FAN_OUT_KEYS)
    if unexpected:
        return f": unexpected key {unexpected[0]!r}"
    failures = fan_out.get("failures")
    if not isinstance(failures, list) or len(failures) > _MAX_FAN_OUT_FAILURES:
        return f": 'failures' must be a list of at most {_MAX_FAN_OUT_FAILURES} items"
    for position, failure in enumerate(failures):
        problem = _fan_out_failure_problem(failure)
        if problem is not None:
            return f".failures[{position}]: {problem}"
    count = fan_out.get("failureCount")
    if type(count) is not int or count < 0:
        return ": 'failureCount' must be an integer >= 0"
    omitted = fan_out.get("omittedFailureCount")
    if omitted != count - len(failures) or type(omitted) is not int:
        return (
            ": 'omittedFailureCount' must be failureCount - len(failures) = "
            f"{count - len(failures)}, got {_shown(omitted)}"
        )
    if "schedulerError" in fan_out:
        problem = _cause_problem(
            fan_out["schedulerError"], depth=_MAX_FAN_OUT_CAUSE_DEPTH, text=_MAX_FAN_OUT_TEXT
        )
        if problem is not None:
            return f": 'schedulerError' {problem}"
    return None


def _fan_out_failure_problem(failure: Any) -> str | None:
    if not isinstance(failure, dict):
        return f"must be an object, got {_shown(failure)}"
    for key in failure:
        if key not in _FAN_OUT_FAILURE_KEYS:
            return f"unexpected key {key!r}"
    index = failure.get("index")
    if type(index) is not int or index < 0:
        return "'index' must be an integer >= 0"
    key = failure.get("key")
    if not isinstance(key, str) or len(key) > _MAX_FAN_OUT_TEXT:
        return f"'key' must be a string of at most {_MAX_FAN_OUT_TEXT} characters"
    for flag in ("keyTruncated", "cancelled"):
        if not isinstance(failure.get(flag), bool):
            return f"{flag!r} must be a boolean"
    if "error" in failure:
        problem = _cause_problem(
            failure["error"], depth=_MAX_FAN_OUT_CAUSE_DEPTH, text=_MAX_FAN_OUT_TEXT
        )
        if problem is not None:
            return f"'error' {problem}"
    return None
