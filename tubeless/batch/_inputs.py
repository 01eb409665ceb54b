"""Reading a batch's inputs: JSONL (one raw input per line), a JSON array or a YAML list.

Every input becomes an :class:`InputRow` that knows its 1-based line. A JSONL line that is not
JSON becomes a row holding its problem instead of an input, so that it fails alone; a JSON
array or YAML document that cannot be read as a whole is a :class:`~tubeless.errors.BatchError`.
Blank JSONL lines are not rows.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tubeless.durable._keys import default_key
from tubeless.errors import BATCH_INPUT_INVALID, BatchError
from tubeless.frozen import canonical_json

__all__ = ["InputRow", "read_inputs", "row_key", "text_key"]

#: The longest JSONL line read as an input.
MAX_LINE_BYTES = 16 * 1024 * 1024
#: The largest JSON array or YAML list of inputs.
MAX_DOCUMENT_BYTES = 64 * 1024 * 1024
_JSONL = (".jsonl", ".ndjson")
_YAML = (".yaml", ".yml")


@dataclass(frozen=True, kw_only=True, slots=True)
class InputRow:
    """One input of a batch, in input order."""

    index: int
    """The row's position among the inputs, from 0."""
    line: int
    """The 1-based line the input starts on."""
    raw: Any = None
    """The raw input (plain JSON data), when it could be read."""
    problem: str | None = None
    """Why the input could not be read (the row fails with ``TUBELESS_BATCH_INPUT_INVALID``)."""
    text: str = ""
    """The line as written, kept only for an unreadable line (its key is made from it)."""


def row_key(entry_id: str, row: InputRow) -> str:
    """``<entry id>:<first 16 hex of sha256 of the canonical raw input>``, non-ASCII escaped.

    The form of the default checkpoint key of a durable run (DESIGN.md §11, §24; one helper,
    ``tubeless.durable._keys.default_key``). A batch keys each row by its *validated* input
    (:func:`tubeless.batch._runner.row_keys`); this is the key of the input as given. An
    unreadable line is keyed by its text.
    """
    if row.problem is not None:
        return text_key(entry_id, row.text)
    return default_key(entry_id, row.raw)


def text_key(entry_id: str, text: str) -> str:
    """The key of an unreadable input: the sha256 of its text as written."""
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    return f"{entry_id}:{digest}"


def read_inputs(source: str | os.PathLike[str] | Iterable[Any]) -> list[InputRow]:
    """The rows of ``source``: a file path (``-`` for stdin) or an iterable of raw inputs.

    Files ending in ``.json`` are one JSON array, ``.yaml``/``.yml`` one YAML list, anything
    else JSONL; stdin is a JSON array when its first character is ``[``, JSONL otherwise.

    Raises:
        BatchError: ``TUBELESS_BATCH_INPUT_INVALID`` when a JSON array or YAML list cannot be
            read as a whole, or is not a list.
        OSError: When the file cannot be read.
    """
    if not isinstance(source, str | os.PathLike):
        items = list(source)
        if all(isinstance(item, InputRow) for item in items):
            return items  # rows read earlier (the CLI reads them first, to report a bad file)
        return [InputRow(index=i, line=i + 1, raw=raw) for i, raw in enumerate(items)]
    name = os.fspath(source)
    if name == "-":
        text = sys.stdin.read()
        kind = "json" if text.lstrip().startswith("[") else "jsonl"
    else:
        text = Path(name).read_text(encoding="utf-8")
        lowered = name.lower()
        kind = (
            "json"
            if lowered.endswith(".json")
            else "yaml"
            if lowered.endswith(_YAML)
            else ("jsonl")
        )
    if kind == "json":
        return list(_json_array(text, name))
    if kind == "yaml":
        return _yaml_list(text, name)
    return list(_jsonl(text))


def _jsonl(text: str) -> Iterator[InputRow]:
    index = 0
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            raw = json.loads(line)
        except (ValueError, RecursionError) as exc:
            # json's message names the position, never the value.
            reason = exc.args[0].split(":")[0] if isinstance(exc, ValueError) else "too deep"
            yield InputRow(index=index, line=number, problem=f"not valid JSON: {reason}", text=line)
        else:
            yield InputRow(index=index, line=number, raw=raw)
        index += 1


def _json_array(text: str, name: str) -> Iterator[InputRow]:
    """The items of a JSON array, each with the line it starts on."""
    decoder = json.JSONDecoder()
    position = _skip(text, 0)
    if position >= len(text) or text[position] != "[":
        raise BatchError(BATCH_INPUT_INVALID, f"{name}: expected a JSON array of inputs")
    position = _skip(text, position + 1)
    index = 0
    if position < len(text) and text[position] == "]":
        return
    while True:
        try:
            raw, end = decoder.raw_decode(text, position)
        except (ValueError, RecursionError) as exc:
            line = text.count("\n", 0, position) + 1
            reason = exc.args[0].split(":")[0] if isinstance(exc, ValueError) else "too deep"
            raise BatchError(
                BATCH_INPUT_INVALID, f"{name}:{line}: not a valid JSON array: {reason}"
            ) from None
        yield InputRow(index=index, line=text.count("\n", 0, position) + 1, raw=raw)
        index += 1
        position = _skip(text, end)
        if position < len(text) and text[position] == ",":
            position = _skip(text, position + 1)
            continue
        if position < len(text) and text[position] == "]" and not text[position + 1 :].strip():
            return
        line = text.count("\n", 0, position) + 1
        raise BatchError(BATCH_INPUT_INVALID, f"{name}:{line}: not a valid JSON array")


def _skip(text: str, position: int) -> int:
    while position < len(text) and text[position] in " \t\r\n":
        position += 1
    return position


def _yaml_list(text: str, name: str) -> list[InputRow]:
    import yaml

    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f":{mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or "not valid YAML"
        raise BatchError(BATCH_INPUT_INVALID, f"{name}{where}: {problem}") from None
    if not isinstance(node, yaml.SequenceNode):
        raise BatchError(BATCH_INPUT_INVALID, f"{name}: expected a YAML list of inputs")
    constructor = yaml.SafeLoader("")
    rows = []
    for index, item in enumerate(node.value):
        line = item.start_mark.line + 1
        try:
            raw = constructor.construct_object(item, deep=True)
            canonical_json(raw)  # dates and other non-JSON values are refused here
        except (yaml.YAMLError, TypeError, ValueError) as exc:
            reason = type(exc).__name__ if not isinstance(exc, TypeError) else "not JSON data"
            rows.append(
                InputRow(
                    index=index,
                    line=line,
                    problem=f"not a JSON value: {reason}",
                    text=f"{name}:{line}",
                )
            )
        else:
            rows.append(InputRow(index=index, line=line, raw=raw))
    return rows
