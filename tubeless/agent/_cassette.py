"""The cassette file: JSONL lines written as a run goes, read back whole and checked.

One JSON object per line, each with a ``kind``::

    header    {kind, format, route, definition, parts?, implementation_version,
               input_digest, tubeless_version}      one per top-level agent invocation
    decision  {kind, route, turn, decision}         every accepted decision
    outcome   {kind, route, turn, call_id, outcome} every validated outcome
    state     {kind, route, turn, state}            the state reduced at the end of the turn
    result    {kind, route, ok, result | error}     how the invocation ended

``parts`` (``_changes``; absent from cassettes recorded before it existed) lets a refused
replay name what changed. A cassette holds the run's decisions, outcomes and states: it is a
data file (mode 0600, like a checkpoint), never a trace, and never holds a credential (nothing
below the decision level, so no request, header or key, is ever seen here).
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tubeless.errors import CASSETTE_INVALID, CassetteError
from tubeless.frozen import digest as frozen_digest

__all__ = [
    "FORMAT",
    "CassetteFile",
    "CassetteWriter",
    "digest",
    "first_difference",
    "jsonable",
    "read_cassette",
]

#: The cassette format version written in every header.
FORMAT = 1
_KINDS = {
    "header": ("route", "definition", "input_digest"),
    "decision": ("route", "turn", "decision"),
    "outcome": ("route", "turn", "call_id", "outcome"),
    "state": ("route", "turn", "state"),
    "result": ("route", "ok"),
}
_SHOWN_VALUE = 200


def jsonable(value: Any) -> Any:
    """``value`` as JSON data (model instances dumped, tuples as lists); ``ValueError`` else."""
    from pydantic_core import to_jsonable_python

    if isinstance(value, Mapping) and type(value) is not dict:
        value = dict(value)  # a read-only outcome mapping (MappingProxyType)
    try:
        data = to_jsonable_python(value)
        # Round-trip through text: the check for NaN, infinities and non-string keys.
        return json.loads(json.dumps(data, ensure_ascii=False, allow_nan=False))
    except (TypeError, ValueError) as exc:
        raise ValueError(f"it is not JSON data ({exc})") from None


def digest(value: Any) -> str:
    """``sha256:<hex>`` of the canonical JSON of ``value`` as UTF-8 (the form cassettes have
    always held; ``tubeless.frozen.digest``)."""
    return frozen_digest(jsonable(value), ensure_ascii=False)


def _escape(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


def first_difference(recorded: Any, live: Any, pointer: str = "") -> tuple[str, Any, Any] | None:
    """The JSON pointer of the first place ``live`` differs from ``recorded`` (both JSON data)."""
    if type(recorded) is not type(live) and not (
        isinstance(recorded, int | float)
        and isinstance(live, int | float)
        and not isinstance(recorded, bool)
        and not isinstance(live, bool)
    ):
        return pointer, recorded, live
    if isinstance(recorded, dict):
        for key in recorded:
            if key not in live:
                return f"{pointer}/{_escape(key)}", recorded[key], _MISSING
            found = first_difference(recorded[key], live[key], f"{pointer}/{_escape(key)}")
            if found is not None:
                return found
        for key in live:
            if key not in recorded:
                return f"{pointer}/{_escape(key)}", _MISSING, live[key]
        return None
    if isinstance(recorded, list):
        for index, (old, new) in enumerate(zip(recorded, live, strict=False)):
            found = first_difference(old, new, f"{pointer}/{index}")
            if found is not None:
                return found
        if len(recorded) != len(live):
            index = min(len(recorded), len(live))
            old = recorded[index] if index < len(recorded) else _MISSING
            new = live[index] if index < len(live) else _MISSING
            return f"{pointer}/{index}", old, new
        return None
    return None if recorded == live else (pointer, recorded, live)


class _Missing:
    def __repr__(self) -> str:
        return "(absent)"


_MISSING = _Missing()


def shown_value(value: Any) -> str:
    """A value as a divergence message may quote it (``--show-values``): bounded JSON."""
    if value is _MISSING:
        return "(absent)"
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= _SHOWN_VALUE else text[:_SHOWN_VALUE] + "…"


class CassetteWriter:
    """Appends lines to a new cassette file (mode 0600), one flushed line per event.

    Each line is written whole and flushed, so a run that dies leaves every earlier line
    readable; the reader reports the cut.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.fspath(path)
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0)
        try:
            fd = os.open(self.path, flags, 0o600)
        except OSError as exc:
            raise CassetteError(
                CASSETTE_INVALID,
                f"cannot write the cassette {self.path}: {exc.strerror or exc}",
                path=self.path,
            ) from exc
        try:
            os.fchmod(fd, 0o600)  # an existing file keeps its own mode through O_CREAT
        except OSError:
            os.close(fd)
            raise
        self._file = os.fdopen(fd, "w", encoding="utf-8", newline="\n")
        self._lock = threading.Lock()

    def write(self, line: Mapping[str, Any]) -> None:
        """Write one line; ``line`` is JSON data already."""
        text = json.dumps(line, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
        try:
            with self._lock:
                self._file.write(text + "\n")
                self._file.flush()
        except OSError as exc:  # a full disk, say: the run fails, naming the cassette
            raise CassetteError(
                CASSETTE_INVALID,
                f"cannot write the cassette {self.path}: {exc.strerror or exc}",
                path=self.path,
            ) from exc

    def close(self) -> None:
        """Close the file (idempotent)."""
        with self._lock:
            if not self._file.closed:
                self._file.close()


@dataclass(kw_only=True, slots=True)
class CassetteFile:
    """A cassette read back: every line, indexed the way a replay looks them up."""

    path: str
    headers: dict[str, dict[str, Any]] = field(default_factory=dict)
    decisions: dict[tuple[str, int], Any] = field(default_factory=dict)
    outcomes: dict[tuple[str, int, str], Any] = field(default_factory=dict)
    states: dict[tuple[str, int], Any] = field(default_factory=dict)
    results: dict[str, dict[str, Any]] = field(default_factory=dict)


def _invalid(path: str, line: int | None, message: str) -> CassetteError:
    where = f"{path}:{line}" if line is not None else path
    return CassetteError(CASSETTE_INVALID, f"{where}: {message}", path=path, line=line)


def _checked(path: str, number: int, text: str) -> dict[str, Any]:
    try:
        entry = json.loads(text)
    except (ValueError, RecursionError):
        raise _invalid(path, number, "not a JSON line (the cassette is corrupt)") from None
    if not isinstance(entry, dict) or entry.get("kind") not in _KINDS:
        raise _invalid(path, number, "not a cassette line (no known 'kind')")
    kind = entry["kind"]
    for name in _KINDS[kind]:
        if name not in entry:
            raise _invalid(path, number, f"a {kind} line without {name!r}")
    if not isinstance(entry["route"], str) or (
        "turn" in _KINDS[kind] and (type(entry["turn"]) is not int or entry["turn"] < 1)
    ):
        raise _invalid(path, number, f"a {kind} line with a malformed route or turn")
    if kind == "header" and entry.get("format") != FORMAT:
        raise _invalid(
            path, number, f"cassette format {entry.get('format')!r} (this tubeless reads {FORMAT})"
        )
    if kind == "outcome" and not isinstance(entry["call_id"], str):
        raise _invalid(path, number, "an outcome line with a malformed call_id")
    return entry


def read_cassette(path: str | os.PathLike[str]) -> CassetteFile:
    """Read and check a whole cassette; ``CassetteError`` names the file and the line."""
    name = os.fspath(path)
    try:
        with open(name, encoding="utf-8", newline="\n") as handle:
            text = handle.read()
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise CassetteError(
            CASSETTE_INVALID, f"cannot read the cassette {name}: {reason}", path=name
        ) from exc
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    elif lines:
        raise _invalid(name, len(lines), "the last line is cut short (the cassette is truncated)")
    if not lines:
        raise _invalid(name, None, "the cassette is empty")
    cassette = CassetteFile(path=name)
    open_routes: dict[str, int] = {}  # top-level route -> its header's line
    for number, line in enumerate(lines, start=1):
        entry = _checked(name, number, line)
        kind, route = entry["kind"], entry["route"]
        if number == 1 and kind != "header":
            raise _invalid(name, 1, "the first line is not a cassette header")
        if kind == "header":
            cassette.headers[route] = entry
            open_routes[route] = number
        elif kind == "decision":
            cassette.decisions[route, entry["turn"]] = entry["decision"]
        elif kind == "outcome":
            cassette.outcomes[route, entry["turn"], entry["call_id"]] = entry["outcome"]
        elif kind == "state":
            cassette.states[route, entry["turn"]] = entry["state"]
        else:
            cassette.results[route] = entry
            open_routes.pop(route, None)
    for route in open_routes:
        raise _invalid(
            name,
            len(lines),
            f"the recording of {route!r} ends without its result (the cassette is truncated)",
        )
    return cassette
