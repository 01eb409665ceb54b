"""Reading a batch's inputs: JSONL (one raw input per line), a JSON array or a YAML list.

Every input becomes an :class:`InputRow` that knows its 1-based line. An input that is not a
JSON value (a line that is not JSON, ``NaN``, ``Infinity``, a number out of range, a line past
:data:`MAX_LINE_BYTES`, a YAML ``.nan`` or tag) becomes a row holding its problem instead of an
input, so that it fails alone; a JSON array or YAML document that cannot be read as a whole is a
:class:`~tubeless.errors.BatchError`. Blank JSONL lines are not rows.

Rows are read as they are needed (:meth:`InputSource.rows`): JSONL a line at a time, whatever
the file's size; a JSON array or YAML list is one document, held as text (at most
:data:`MAX_DOCUMENT_BYTES`) and parsed an item at a time.
"""

from __future__ import annotations

import errno
import hashlib
import json
import math
import os
import stat
import sys
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import IO, Any

from tubeless.durable._spi import default_key
from tubeless.errors import BATCH_INPUT_INVALID, BatchError

__all__ = [
    "MAX_DOCUMENT_BYTES",
    "MAX_LINE_BYTES",
    "InputRow",
    "InputSource",
    "iter_inputs",
    "new_row",
    "open_inputs",
    "read_inputs",
    "row_key",
    "text_key",
]

#: The longest JSONL line read as an input (a longer one fails its row, and is never held).
MAX_LINE_BYTES = 16 * 1024 * 1024
#: The largest JSON array or YAML list of inputs (one document; JSONL has no such bound).
MAX_DOCUMENT_BYTES = 64 * 1024 * 1024
_CHUNK = 64 * 1024
_NOT_FINITE = " (JSON has no NaN or infinity)"
_TOO_LONG = f"the line is longer than {MAX_LINE_BYTES:,} bytes (the bound of an inputs line)"
_TOO_LARGE = (
    "{0}: the file is larger than {1:,} bytes, the bound of a JSON array or YAML list of "
    "inputs; write the inputs as JSONL (one input a line), which is read a line at a time"
)
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
    validated: tuple[Any] | None = field(default=None, compare=False, repr=False)
    """``(value,)``: the input as the entry's options schema validated it, when the driver did
    so for the row's key; the row's run takes it as its options instead of validating the
    input again. ``None``: the run validates the input (it never crosses to a worker)."""


_new = object.__new__
_set_index = InputRow.__dict__["index"].__set__
_set_line = InputRow.__dict__["line"].__set__
_set_raw = InputRow.__dict__["raw"].__set__
_set_problem = InputRow.__dict__["problem"].__set__
_set_text = InputRow.__dict__["text"].__set__
_set_validated = InputRow.__dict__["validated"].__set__


def new_row(index: int, line: int, raw: Any, validated: tuple[Any] | None = None) -> InputRow:
    """``InputRow(index=index, line=line, raw=raw, validated=validated)``, a readable row, made
    at a fraction of the constructor's cost.

    A frozen dataclass's ``__init__`` sets each field through ``object.__setattr__`` by name;
    this sets the slots directly (the driver makes one row per input, so the difference is a
    tenth of its own share of a row). Equal to the constructor's object
    (``tests/batch/test_input_rows.py``).
    """
    row: InputRow = _new(InputRow)
    _set_index(row, index)
    _set_line(row, line)
    _set_raw(row, raw)
    _set_problem(row, None)
    _set_text(row, "")
    _set_validated(row, validated)
    return row


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


@dataclass(kw_only=True, slots=True)
class InputSource:
    """An inputs file checked and ready to be read: its rows are read as they are needed.

    A JSON array or YAML list was read and checked as a whole when the source was opened (a
    broken one is refused before any row runs); a JSONL file is read a line at a time. A
    JSONL stream that is not a regular file (stdin, a pipe) can be read once.
    """

    name: str
    kind: str
    """``jsonl``, ``json`` or ``yaml``."""
    total: int | None
    """How many rows there are, when known before reading them (not for a JSONL stream)."""
    text: str | None = field(default=None, repr=False)
    """The document (a JSON array or YAML list)."""
    opener: Callable[[], IO[bytes]] | None = field(default=None, repr=False)
    """Opens the JSONL file (or gives the stream) to read."""
    first_line: int = 1
    loader: Any = field(default=None, repr=False)

    def rows(self) -> Iterator[InputRow]:
        """The rows, in input order, read as they are asked for."""
        if self.kind == "json":
            assert self.text is not None
            return _json_array(self.text, self.name)
        if self.kind == "yaml":
            assert self.text is not None
            return _yaml_rows(self.text, self.name, self.loader)
        assert self.opener is not None
        return _jsonl(self.opener, self.first_line)


def open_inputs(source: str | os.PathLike[str]) -> InputSource:
    """The inputs file ``source`` (``-`` for stdin), checked: a JSON array or YAML list is read
    and parsed once (refused as a whole when it cannot be), a regular JSONL file's rows are
    counted; nothing else is held.

    Files ending in ``.json`` are one JSON array, ``.yaml``/``.yml`` one YAML list, anything
    else JSONL; stdin is a JSON array when its first character is ``[``, JSONL otherwise.

    Raises:
        BatchError: ``TUBELESS_BATCH_INPUT_INVALID`` when a JSON array or YAML list is past
            :data:`MAX_DOCUMENT_BYTES`, cannot be read as a whole, or is not a list.
        UnicodeDecodeError: A JSON array or YAML list that is not UTF-8.
        OSError: When the file cannot be read.
    """
    name = os.fspath(source)
    if name == "-":
        return _stdin()
    lowered = name.lower()
    kind = "json" if lowered.endswith(".json") else "yaml" if lowered.endswith(_YAML) else "jsonl"
    if kind == "jsonl":
        with open(name, "rb") as stream:
            regular = stat.S_ISREG(os.fstat(stream.fileno()).st_mode)
            total = _count_lines(stream) if regular else None
        if regular:
            return InputSource(name=name, kind=kind, total=total, opener=lambda: open(name, "rb"))
        stream = open(name, "rb")  # noqa: SIM115 - a pipe: read once, by rows()
        return InputSource(name=name, kind=kind, total=None, opener=lambda: stream)
    with open(name, "rb") as stream:
        status = os.fstat(stream.fileno())
        if stat.S_ISDIR(status.st_mode):
            raise IsADirectoryError(errno.EISDIR, "Is a directory", name)
        if status.st_size > MAX_DOCUMENT_BYTES:
            raise BatchError(BATCH_INPUT_INVALID, _TOO_LARGE.format(name, MAX_DOCUMENT_BYTES))
        data = stream.read(MAX_DOCUMENT_BYTES + 1)
    return _document(data, name, kind)


def _document(data: bytes, name: str, kind: str, first_line: int = 1) -> InputSource:
    if len(data) > MAX_DOCUMENT_BYTES:
        raise BatchError(BATCH_INPUT_INVALID, _TOO_LARGE.format(name, MAX_DOCUMENT_BYTES))
    text = data.removeprefix(b"\xef\xbb\xbf").decode("utf-8")
    if kind == "json":
        total = sum(1 for _ in _json_array(text, name))  # parsed once, to refuse a broken one
        return InputSource(name=name, kind=kind, total=total, text=text)
    from tubeless.batch._yaml_inputs import yaml_items, yaml_loader

    loader = yaml_loader(text, name)
    total = sum(1 for _ in yaml_items(text, name, loader))
    return InputSource(name=name, kind=kind, total=total, text=text, loader=loader)


def _stdin() -> InputSource:
    """stdin: a JSON array when its first character is ``[`` (read whole, bounded), else JSONL
    (read a line at a time)."""
    stream = sys.stdin.buffer
    consumed = b""
    while True:
        chunk = stream.read1(_CHUNK) if hasattr(stream, "read1") else stream.read(_CHUNK)
        if not chunk:
            break
        consumed += chunk
        if consumed.strip():
            break
    if consumed.lstrip()[:1] == b"[":
        data = consumed + stream.read(MAX_DOCUMENT_BYTES + 1 - len(consumed))
        return _document(data, "-", "json")
    prefixed = _Prefixed(consumed, stream)
    return InputSource(name="-", kind="jsonl", total=None, opener=lambda: prefixed)  # type: ignore[arg-type,return-value]


class _Prefixed:
    """A stream whose first bytes were already read (to see what stdin holds)."""

    def __init__(self, prefix: bytes, stream: IO[bytes]) -> None:
        self.prefix, self.stream = prefix, stream

    def readline(self, limit: int = -1) -> bytes:
        if not self.prefix:
            return self.stream.readline(limit)
        end = self.prefix.find(b"\n") + 1 or len(self.prefix)
        end = min(end, limit) if limit >= 0 else end
        line, self.prefix = self.prefix[:end], self.prefix[end:]
        if self.prefix or line.endswith(b"\n") or len(line) == limit:
            return line
        return line + self.stream.readline(limit - len(line) if limit >= 0 else -1)

    def close(self) -> None:
        pass


def iter_inputs(source: str | os.PathLike[str] | InputSource | Iterable[Any]) -> Iterator[InputRow]:
    """The rows of ``source``, read as they are asked for: an :class:`InputSource`, a file path
    (``-`` for stdin; opened by :func:`open_inputs`) or an iterable of raw inputs (or rows)."""
    if isinstance(source, InputSource):
        return source.rows()
    if isinstance(source, str | os.PathLike):
        return open_inputs(source).rows()
    return _given(source)


def _given(items: Iterable[Any]) -> Iterator[InputRow]:
    for index, item in enumerate(items):
        yield (
            item if isinstance(item, InputRow) else InputRow(index=index, line=index + 1, raw=item)
        )


def read_inputs(source: str | os.PathLike[str] | Iterable[Any]) -> list[InputRow]:
    """Every row of ``source`` as a list (:func:`iter_inputs` reads them one at a time).

    Raises:
        BatchError: ``TUBELESS_BATCH_INPUT_INVALID`` when a JSON array or YAML list cannot be
            read as a whole, or is not a list.
        OSError: When the file cannot be read.
    """
    return list(iter_inputs(source))


def _count_lines(stream: IO[bytes]) -> int:
    """The non-blank lines of ``stream``, read in chunks (a line is never held whole)."""
    count, content = 0, False
    while chunk := stream.read(_CHUNK):
        pieces = chunk.split(b"\n")
        for piece in pieces[:-1]:
            count += content or bool(piece.strip())
            content = False
        content = content or bool(pieces[-1].strip())
    return count + content


class _Decoder:
    """JSON that refuses what has no JSON form: ``NaN``, ``Infinity`` and out-of-range numbers
    (Python's decoder accepts them) make the value a problem instead of failing the batch."""

    def __init__(self) -> None:
        self.problem: str | None = None
        self.decoder = json.JSONDecoder(parse_constant=self._constant, parse_float=self._float)

    def _constant(self, text: str) -> None:
        self.problem = self.problem or f"{text} is not a JSON value{_NOT_FINITE}"

    def _float(self, text: str) -> float:
        value = float(text)
        if not math.isfinite(value):
            shown = text if len(text) <= 40 else text[:37] + "..."
            self.problem = self.problem or f"the number {shown} is out of range{_NOT_FINITE}"
        return value

    def decode(self, text: str, position: int) -> tuple[Any, int, str | None]:
        """The value at ``position``, where it ends, and why it is not JSON data (or ``None``).

        Raises:
            ValueError, RecursionError: Not JSON at all.
        """
        self.problem = None
        value, end = self.decoder.raw_decode(text, position)
        return value, end, self.problem


def _reason(exc: ValueError | RecursionError) -> str:
    # json's message names the position, never the value.
    return exc.args[0].split(":")[0] if isinstance(exc, ValueError) else "too deep"


def _jsonl(opener: Callable[[], IO[bytes]], first_line: int) -> Iterator[InputRow]:
    decoder = _Decoder()
    index = 0
    stream = opener()
    try:
        number = first_line - 1
        while line := stream.readline(MAX_LINE_BYTES + 1):
            number += 1
            if len(line) > MAX_LINE_BYTES and not (
                len(line) == MAX_LINE_BYTES + 1 and line.endswith(b"\n")
            ):
                digest = _skip_line(stream, line)
                yield InputRow(index=index, line=number, problem=_TOO_LONG, text=digest)
                index += 1
                continue
            if not line.strip():
                continue
            yield _jsonl_row(decoder, line.rstrip(b"\r\n"), index, number)
            index += 1
    finally:
        stream.close()


def _skip_line(stream: IO[bytes], start: bytes) -> str:
    """Read past the rest of a line too long to hold; its digest stands in for its text."""
    digest = hashlib.sha256(start)
    chunk = start
    while chunk and not chunk.endswith(b"\n"):
        chunk = stream.readline(_CHUNK)
        digest.update(chunk)
    return f"sha256:{digest.hexdigest()}"


def _jsonl_row(decoder: _Decoder, data: bytes, index: int, number: int) -> InputRow:
    try:
        line = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        not_text = f"not UTF-8 text (byte 0x{data[exc.start]:02x} at byte {exc.start + 1})"
        return InputRow(index=index, line=number, problem=not_text, text=data.hex())
    try:
        raw, end, problem = decoder.decode(line, _skip(line, 0))
    except (ValueError, RecursionError) as exc:
        reason = f"not valid JSON: {_reason(exc)}"
        return InputRow(index=index, line=number, problem=reason, text=line)
    if _skip(line, end) != len(line):
        return InputRow(index=index, line=number, problem="not valid JSON: Extra data", text=line)
    if problem is not None:
        return InputRow(index=index, line=number, problem=f"not valid JSON: {problem}", text=line)
    return new_row(index, number, raw)


def _json_array(text: str, name: str) -> Iterator[InputRow]:
    """The items of a JSON array, each with the line it starts on."""
    decoder = _Decoder()
    lines = _Lines(text)
    position = _skip(text, 0)
    if position >= len(text) or text[position] != "[":
        raise BatchError(BATCH_INPUT_INVALID, f"{name}: expected a JSON array of inputs")
    position = _skip(text, position + 1)
    index = 0
    if position < len(text) and text[position] == "]":
        return
    while True:
        line = lines.at(position)
        try:
            raw, end, problem = decoder.decode(text, position)
        except (ValueError, RecursionError) as exc:
            raise BatchError(
                BATCH_INPUT_INVALID, f"{name}:{line}: not a valid JSON array: {_reason(exc)}"
            ) from None
        if problem is not None:
            item = text[position:end] if end - position <= 4096 else f"{position}:{end}"
            yield InputRow(index=index, line=line, problem=f"not valid JSON: {problem}", text=item)
        else:
            yield new_row(index, line, raw)
        index += 1
        position = _skip(text, end)
        if position < len(text) and text[position] == ",":
            position = _skip(text, position + 1)
            continue
        if position < len(text) and text[position] == "]" and not text[position + 1 :].strip():
            return
        line = lines.at(position)
        raise BatchError(BATCH_INPUT_INVALID, f"{name}:{line}: not a valid JSON array")


class _Lines:
    """Line numbers of positions met in increasing order (counted once, not from the start)."""

    def __init__(self, text: str) -> None:
        self.text, self.position, self.line = text, 0, 1

    def at(self, position: int) -> int:
        self.line += self.text.count("\n", self.position, position)
        self.position = position
        return self.line


def _skip(text: str, position: int) -> int:
    while position < len(text) and text[position] in " \t\r\n":
        position += 1
    return position


def _yaml_rows(text: str, name: str, loader: Any) -> Iterator[InputRow]:
    from tubeless.batch._yaml_inputs import yaml_items

    for index, (line, raw, problem) in enumerate(yaml_items(text, name, loader)):
        if problem is None:
            yield new_row(index, line, raw)
        else:
            yield InputRow(index=index, line=line, problem=problem, text=f"{name}:{line}")
