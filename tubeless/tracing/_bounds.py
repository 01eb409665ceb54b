"""The write bounds every trace record is held to, so that no sink sees an oversized one.

Strings are cut at ``MAX_STRING`` characters (lone surrogates made U+FFFD, so every sink can
store them), lists at ``MAX_LIST`` entries, progress details at ``MAX_DETAILS_BYTES`` of JSON and
definition snapshots at ``MAX_SNAPSHOT_BYTES``. The record constructors in
:mod:`tubeless.tracing.records` apply them.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from json.encoder import encode_basestring as quote
from typing import Any, Final

from tubeless.tracing._json import compact_json

__all__ = [
    "MAX_DETAILS_BYTES",
    "MAX_LIST",
    "MAX_SNAPSHOT_BYTES",
    "MAX_STRING",
    "ShownRows",
    "bounded_attributes",
    "bounded_attributes_json",
    "bounded_details",
    "bounded_error",
    "bounded_list",
    "bounded_progress",
    "bounded_progress_json",
    "bounded_snapshot",
    "bounded_str",
    "safe_text",
]

MAX_STRING: Final = 4096
MAX_LIST: Final = 128
#: The largest definition snapshot a ``pipeline.started`` record carries.
MAX_SNAPSHOT_BYTES: Final = 256 * 1024
#: The most bytes the encoded JSON of a progress record's ``details`` list may take.
MAX_DETAILS_BYTES: Final = 256 * 1024


def bounded_str(text: str) -> str:
    """``text`` cut to at most ``MAX_STRING`` characters, lone surrogates made U+FFFD.

    Text from tool data may hold lone surrogates, which no UTF-8 file or SQLite text can store;
    replacing them keeps every sink able to write the record.
    """
    if len(text) > MAX_STRING:
        text = text[: MAX_STRING - 1] + "…"
    return text if text.isascii() else safe_text(text)


def safe_text(text: str) -> str:
    """``text`` with lone surrogates replaced by U+FFFD (other text unchanged)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return "".join("\ufffd" if "\ud800" <= ch <= "\udfff" else ch for ch in text)
    return text


def bounded_list(items: Iterable[Any]) -> list[Any]:
    """At most ``MAX_LIST`` entries of ``items``."""
    out = list(items)
    return out if len(out) <= MAX_LIST else out[:MAX_LIST]


def bounded_error(error: Mapping[str, Any], depth: int = 0) -> dict[str, Any]:
    """A wire error (or cause) with every message, list and nesting level within bounds."""
    out: dict[str, Any] = {}
    for key, value in error.items():
        if isinstance(value, str):  # message, name, codes: bounded, storable text
            out[key] = bounded_str(value)
        elif key == "cause" and isinstance(value, Mapping):
            if depth < 15:
                out[key] = bounded_error(value, depth + 1)
        elif key == "issues" and isinstance(value, list):
            out[key] = [bounded_error(issue, depth) for issue in value[:MAX_LIST]]
        elif key == "path" and isinstance(value, list):
            out[key] = [bounded_str(p) if isinstance(p, str) else p for p in value[:MAX_LIST]]
        else:
            out[key] = value
    return out


# The encoding the sinks write (compact, UTF-8), so sizes measured here are sizes on disk.
_encode_row = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode
_encode_row_lenient = json.JSONEncoder(
    separators=(",", ":"), ensure_ascii=False, default=str
).encode


def bounded_details(rows: Iterable[Any]) -> tuple[list[dict[str, Any]], int | None]:
    """Progress detail rows within bounds, and the original row count when rows were dropped.

    Rows are appended in order until the next one would take the encoded JSON of the list past
    ``MAX_DETAILS_BYTES`` or the list past ``MAX_LIST`` entries; every later row is dropped (and
    counted). A row that is not a mapping is dropped; values JSON cannot encode are replaced by
    their ``str()`` so that no sink ever fails on a handler's progress report.

    Returns:
        ``(kept, count)``: ``kept`` are shallow copies of the kept rows; ``count`` is the number
        of rows given when some were dropped (so ``count > len(kept)``), else ``None``.
    """
    kept, count, _ = _bounded_details(rows)
    return kept, count


class ShownRows(list[Any]):
    """Progress detail rows of which a run, ``rows[start:stop]``, are rows shown again report
    after report (constant rows nobody changes), given with their JSON already joined.

    Its maker sets ``known = (start, stop, text)``, ``text`` being the constant rows' JSON
    joined with commas, once it has put every row in; bounding the rows then encodes only the
    others. A plain list to every sink once bounded (the rows are copied into one).
    """

    __slots__ = ("known",)

    known: tuple[int, int, str] | None


def _bounded_details(
    rows: Iterable[Any], constant: type[Any] | None = None
) -> tuple[list[dict[str, Any]], int | None, str | None]:
    """:func:`bounded_details`, and the compact JSON of the kept rows when it was made.

    Rows of the ``constant`` type (a dict nobody changes, with its JSON from ``json()``) are
    kept as they are and not encoded again.
    """
    if constant is not None and type(rows) is ShownRows:
        known = getattr(rows, "known", None)
        if known is not None and len(rows) <= MAX_LIST:
            encoded = _shown_rows(rows, known, constant)
            if encoded is not None:
                return encoded[0], None, encoded[1]
    rows = list(rows)
    if constant is not None and len(rows) <= MAX_LIST and any(type(r) is constant for r in rows):
        encoded = _constant_rows(rows, constant)
        if encoded is not None:
            return encoded[0], None, encoded[1]
    if len(rows) <= MAX_LIST:
        # The common case, at C speed: every row a mapping of plain JSON, the whole list
        # within the byte bound and storable as it is, so every row is kept.
        copies = [dict(row) for row in rows if type(row) is dict or isinstance(row, Mapping)]
        if len(copies) == len(rows):
            try:
                text = compact_json(copies)
            except (TypeError, ValueError, RecursionError):  # the row-by-row walk decides
                pass
            else:
                if text.isascii() and len(text) <= MAX_DETAILS_BYTES:
                    return copies, None, text
    kept: list[dict[str, Any]] = []
    size = 2  # the brackets of the list; each row after the first adds a comma
    total = 0
    full = False
    for row in rows:
        total += 1
        if full or (type(row) is not dict and not isinstance(row, Mapping)):
            continue
        copy = dict(row)
        try:
            text = _encode_row(copy)
        except (TypeError, ValueError):
            try:
                text = _encode_row_lenient(copy)
            except (TypeError, ValueError):  # non-string keys or a circular row: drop it
                continue
            copy = json.loads(text)
        if not text.isascii():
            safe = safe_text(text)
            if safe is not text:  # a lone surrogate: store the row with U+FFFD in its place
                text = safe
                copy = json.loads(text)
        row_bytes = len(text) if text.isascii() else len(text.encode("utf-8"))
        added = row_bytes + (1 if kept else 0)
        if size + added > MAX_DETAILS_BYTES or len(kept) == MAX_LIST:
            full = True
            continue
        size += added
        kept.append(copy)
    return kept, (total if total > len(kept) else None), None


def _shown_rows(
    rows: ShownRows, known: tuple[int, int, str], constant: type[Any]
) -> tuple[list[dict[str, Any]], str] | None:
    """:func:`_constant_rows` for rows whose run of constant rows comes with its JSON: only
    the rows around it are looked at and encoded."""
    start, stop, text = known
    before = _constant_rows(rows[:start], constant) if start else ([], "[]")
    after = _constant_rows(rows[stop:], constant) if stop < len(rows) else ([], "[]")
    if before is None or after is None:
        return None
    parts = [part for part in (before[1][1:-1], text, after[1][1:-1]) if part]
    joined = f"[{','.join(parts)}]"
    if not (joined.isascii() and len(joined) <= MAX_DETAILS_BYTES):
        return None
    return [*before[0], *rows[start:stop], *after[0]], joined


def _constant_rows(rows: list[Any], constant: type[Any]) -> tuple[list[dict[str, Any]], str] | None:
    """Every row kept (constant ones as they are) and the list's JSON, or ``None`` when the
    row-by-row walk must decide."""
    kept: list[dict[str, Any]] = []
    parts: list[str] = []
    keep = kept.append
    part = parts.append
    try:
        for row in rows:
            if type(row) is constant:
                keep(row)
                try:
                    part(row._json)  # encoded already: most are rows shown again
                except AttributeError:
                    part(row.json())
            elif type(row) is dict or isinstance(row, Mapping):
                copy = dict(row)
                keep(copy)
                part(compact_json(copy))
            else:
                return None
    except (TypeError, ValueError, RecursionError):
        return None
    text = f"[{','.join(parts)}]"
    if text.isascii() and len(text) <= MAX_DETAILS_BYTES:
        return kept, text
    return None


def bounded_progress(progress: Mapping[str, Any]) -> dict[str, Any]:
    """A ``step.running`` progress object within bounds, without ``None`` values.

    ``message`` is cut to ``MAX_STRING`` characters and ``details`` goes through
    :func:`bounded_details`; ``detailCount`` is the larger of the count given and the number of
    rows given, and is present only with ``details``.
    """
    return bounded_progress_json(progress)[0]


def bounded_progress_json(
    progress: Mapping[str, Any], constant: type[Any] | None = None
) -> tuple[dict[str, Any], tuple[list[dict[str, Any]], str] | None]:
    """:func:`bounded_progress`, and its ``details`` list with that list's compact JSON when
    bounding it already encoded it (so the record's encoder need not encode it again).

    Detail rows of the ``constant`` type are kept as they are, with their own JSON."""
    out: dict[str, Any] = {}
    encoded: tuple[list[dict[str, Any]], str] | None = None
    for key, value in progress.items():
        if value is None or key == "detailCount":
            continue
        if key == "message" and isinstance(value, str):
            out[key] = bounded_str(value)
        elif key == "details":
            rows, original, text = _bounded_details(value, constant)
            out[key] = rows
            if text is not None:
                encoded = (rows, text)
            given = progress.get("detailCount")
            counts = [n for n in (original, given) if isinstance(n, int) and n > len(rows)]
            if counts:
                out["detailCount"] = max(counts)
        elif isinstance(value, float) and not math.isfinite(value):
            continue  # NaN and infinities are not JSON
        else:
            out[key] = value
    if "completed" not in out:
        out["completed"] = 0
    return out, encoded


def bounded_attributes(
    attributes: Mapping[str, str | int | float | bool | None],
) -> dict[str, str | int | float | bool]:
    """Attempt attributes within bounds: strings cut; ``None``, non-finite numbers, other
    values and extras dropped."""
    out: dict[str, str | int | float | bool] = {}
    for key, value in attributes.items():
        if len(out) >= MAX_LIST:
            break
        # The common cases, without a further look: integers, booleans, short ASCII strings.
        if type(value) is int or type(value) is bool:  # noqa: SIM114 - mypy narrows each apart
            out[key if len(key) <= MAX_STRING and key.isascii() else bounded_str(key)] = value
        elif type(value) is str and len(value) <= MAX_STRING and value.isascii():
            out[key if len(key) <= MAX_STRING and key.isascii() else bounded_str(key)] = value
        elif isinstance(value, str):
            out[bounded_str(key)] = bounded_str(value)
        elif isinstance(value, float) and not math.isfinite(value):
            continue
        elif isinstance(value, (bool, int, float)):
            out[bounded_str(key)] = value
    return out


#: The JSON of attribute keys and string values already checked (ASCII, within bounds):
#: agents and handlers send the same keys, and often the same ids, record after record.
_KEY_JSON: Final[dict[str, str]] = {}
_VALUE_JSON: Final[dict[str, str]] = {}
_REMEMBERED: Final = 1024
_REMEMBERED_LONGEST: Final = 256


def bounded_attributes_json(
    attributes: Mapping[str, str | int | float | bool | None],
) -> tuple[dict[str, str | int | float | bool], str | None]:
    """:func:`bounded_attributes`, and the compact JSON of the result when it was made.

    The common case (a dict of ASCII string keys and short ASCII string, integer or boolean
    values, which the bounds keep as they are) is encoded in the same walk that checks it,
    once, instead of walked here and encoded again by each sink; keys and string values seen
    before are not quoted again.
    """
    if type(attributes) is not dict or len(attributes) > MAX_LIST:
        return bounded_attributes(attributes), None
    parts: list[str] = []
    for key, value in attributes.items():
        key_json = _KEY_JSON.get(key)
        if key_json is None:
            if type(key) is not str or len(key) > MAX_STRING or not key.isascii():
                return bounded_attributes(attributes), None
            key_json = quote(key)
            _remember(_KEY_JSON, key, key_json)
        kind = type(value)
        if kind is str:
            text = _VALUE_JSON.get(value)
            if text is None:
                if len(value) > MAX_STRING or not value.isascii():
                    return bounded_attributes(attributes), None
                text = quote(value)
                _remember(_VALUE_JSON, value, text)
        elif kind is int:
            text = int.__repr__(value)
        elif kind is bool:
            text = "true" if value else "false"
        else:  # None, floats and the rest: the walk decides
            return bounded_attributes(attributes), None
        parts.append(f"{key_json}:{text}")
    return dict(attributes), f"{{{','.join(parts)}}}"


def _remember(known: dict[str, str], text: str, encoded: str) -> None:
    if len(text) <= _REMEMBERED_LONGEST:
        if len(known) >= _REMEMBERED:
            known.clear()
        known[text] = encoded


def bounded_snapshot(snapshot: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    """The definition snapshot, or ``None`` when its JSON would exceed 256 KiB."""
    if snapshot is None:
        return None
    text = json.dumps(snapshot, separators=(",", ":"), ensure_ascii=False)
    size = len(text.encode("utf-8", "surrogatepass"))
    return snapshot if size <= MAX_SNAPSHOT_BYTES else None
