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

from tubeless._data_files import open_data_file, open_regular
from tubeless.errors import CASSETTE_INVALID, CassetteError
from tubeless.frozen import digest as frozen_digest

__all__ = [
    "FORMAT",
    "MAX_CASSETTE_BYTES",
    "CassetteFile",
    "CassetteWriter",
    "digest",
    "first_difference",
    "jsonable",
    "read_cassette",
]

#: The cassette format version written in every header.
FORMAT = 1
#: The largest cassette read back (64 MiB); a larger file is refused, naming it.
MAX_CASSETTE_BYTES = 64 * 2**20
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
    """Appends lines to a new cassette file (mode 0600), one whole line per write.

    Each line goes to the OS in one unbuffered write, so a run that dies leaves every earlier
    line readable; the reader reports the cut. The path must name the file itself: a symbolic
    link, a named pipe or a device is refused before anything is truncated.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.fspath(path)
        try:
            self._fd: int | None = open_data_file(self.path, private=True)
        except OSError as exc:
            raise CassetteError(
                CASSETTE_INVALID,
                f"cannot write the cassette {self.path}: {exc.strerror or exc}",
                path=self.path,
            ) from exc
        self._lines = 0
        self._lock = threading.Lock()

    def write(self, line: Mapping[str, Any]) -> None:
        """Write one line; ``line`` is JSON data already."""
        text = json.dumps(line, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
        data = memoryview((text + "\n").encode("utf-8"))
        with self._lock:
            if self._fd is None:
                raise ValueError(f"the cassette {self.path} is closed")
            try:
                while data:
                    data = data[os.write(self._fd, data) :]
            except OSError as exc:  # a full disk, say: the run fails, naming the cassette
                kept = (
                    f"it keeps the {self._lines} whole line{'' if self._lines == 1 else 's'}"
                    " written before (a replay reports it cut short)"
                )
                raise CassetteError(
                    CASSETTE_INVALID,
                    f"cannot write the cassette {self.path}: {exc.strerror or exc}; {kept}",
                    path=self.path,
                ) from None  # the reason is in the message; "caused by: OSError" adds nothing
            self._lines += 1

    def close(self) -> None:
        """Close the file (idempotent; nothing is buffered, so nothing can fail to be written)."""
        with self._lock:
            fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)


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
    """Read and check a whole cassette; ``CassetteError`` names the file and the line.

    The file must be a regular one (a named pipe or device is refused by name) of at most
    :data:`MAX_CASSETTE_BYTES`; it is read line by line, never past that bound.
    """
    name = os.fspath(path)
    try:
        lines = _read_lines(name)
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise CassetteError(
            CASSETTE_INVALID, f"cannot read the cassette {name}: {reason}", path=name
        ) from exc
    if lines and not lines[-1].endswith("\n"):
        raise _invalid(name, len(lines), "the last line is cut short (the cassette is truncated)")
    if not lines:
        raise _invalid(name, None, "the cassette is empty")
    cassette = CassetteFile(path=name)
    open_routes: dict[str, int] = {}  # top-level route -> its header's line
    for number, line in enumerate(lines, start=1):
        entry = _checked(name, number, line[:-1])
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


def _read_lines(name: str) -> list[str]:
    """The lines of the cassette, each with its newline (the last maybe without)."""
    too_large = _invalid(
        name,
        None,
        f"the cassette is larger than the {MAX_CASSETTE_BYTES // 2**20} MiB a cassette may hold",
    )
    lines: list[str] = []
    with open_regular(name) as stream:
        if os.fstat(stream.fileno()).st_size > MAX_CASSETTE_BYTES:
            raise too_large
        left = MAX_CASSETTE_BYTES + 1  # the file may grow while it is read
        while left > 0:
            raw = stream.readline(left)
            if not raw:
                break
            left -= len(raw)
            lines.append(raw.decode("utf-8"))
        if left <= 0:
            raise too_large
    return lines
