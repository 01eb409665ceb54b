"""Safe, bounded YAML loading with a source map (DESIGN.md section 5, "Loading").

A project file becomes plain JSON-like data (dict, list, str, int, float, bool, None) plus a
:class:`SourceMap` from JSON pointers to 1-based lines and columns. Nothing here constructs
arbitrary Python objects: the text goes through PyYAML's safe parser and composer only
(:mod:`tubeless.project._yaml_events`, which enforces the bounds on the event stream before
anything is built), and the node graph is converted by hand. Numbers are bounded before they
are converted.

Two kinds of problems: those that leave no document to check (a syntax error, a bound, not
UTF-8, a top level that is not a mapping) are raised at once; those of single values and keys
(a YAML 1.1 form, a tag, a duplicate or non-string key, a number too long) are collected while
the rest of the document is read. ``load_document(..., keep_going=True)`` returns them with the
document, and remembers which values and mappings they made unreadable, so that the meta-schema
check reports every other problem of the file with them, in file order, without judging a value
the loader already refused (DESIGN.md §5: all problems in file order).
"""

from __future__ import annotations

import errno
import math
import os
import re
import stat
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import yaml
from yaml.constructor import SafeConstructor
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from tubeless.errors import DOCUMENT_INVALID
from tubeless.project._issues import (
    DocumentIssue,
    SourceMap,
    join_pointer,
    position,
    raise_issues,
    sort_issues,
)
from tubeless.project._yaml12 import Ambiguous, core_scalar
from tubeless.project._yaml_events import (
    EMPTY,
    MAX_ALIASES,
    MAX_DEPTH,
    MAX_NODES,
    Replay,
    at,
    events,
    fail,
    syntax_issue,
)

__all__ = [
    "MAX_ALIASES",
    "MAX_BYTES",
    "MAX_DEPTH",
    "MAX_NODES",
    "MAX_NUMBER_CHARS",
    "LoadedDocument",
    "SourceMap",
    "load_document",
    "parse_document",
]

#: Files larger than this are rejected before they are parsed.
MAX_BYTES = 1024 * 1024
#: Characters of a number (YAML converts sexagesimal ``1:0:0:...`` in quadratic time, and an
#: integer of more than 4,300 digits cannot even be printed in a message).
MAX_NUMBER_CHARS = 100

_CORE = "tag:yaml.org,2002:"
_STR, _INT, _FLOAT = _CORE + "str", _CORE + "int", _CORE + "float"
_BOOL, _NULL, _MAP, _SEQ = _CORE + "bool", _CORE + "null", _CORE + "map", _CORE + "seq"
_MERGE = _CORE + "merge"
_SCALAR_KINDS = {
    _STR: "a string",
    _INT: "an integer",
    _FLOAT: "a number",
    _BOOL: "a boolean",
    _NULL: "null",
}
# Messages name the rule and the fix; "{0}"/"{1}" are filled in where they are used.
_TOO_LARGE = (
    "the file is too large: project files are limited to 1 MiB (1,048,576 bytes), found {0}; "
    "split the project into several files"
)
_NOT_UTF8 = "the file is not valid UTF-8 (byte 0x{0:02x} at line {1}, column {2}); save it as UTF-8"
_NOT_TEXT = "found {0}; a project file must be plain UTF-8 text: remove it"
_NOT_MAPPING = "the top level must be a mapping (version, project, agents, ...), found {0}"
_MERGE_KEY = "YAML merge keys are not supported; repeat the keys (or use a factory {use, with})"
_DUPLICATE = "duplicate key {0!r} (first defined at line {1}); remove one of them"
_KEY_NOT_TEXT = "mapping keys must be strings, found {0} used as a key; "
_NOT_FINITE = "{0} is not a finite number (JSON has no NaN or infinity); quote it for text"
_LONG_NUMBER = (
    f"{{0}} is a number of {{1:,}} characters; numbers may have at most {MAX_NUMBER_CHARS} "
    "(digits, signs, separators): shorten it, or quote it for text"
)
_BAD_VALUE = "{0} is not {1}; fix the value or remove the {2} tag"
_BAD_TAG = (
    "the tag {0} is not allowed{1}; project files use plain YAML (strings, numbers, booleans, "
    "null, mappings, lists): remove the tag"
)
# Characters YAML does not allow in a stream (pyyaml's Reader rule): C0/C1 controls, surrogates.
_NON_PRINTABLE = re.compile(
    "[^\x09\x0a\x0d\x20-\x7e\x85\xa0-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]"
)


#: PyYAML's YAML 1.1 resolver: a plain scalar whose tag is the one it would pick got that tag
#: implicitly, and is read again by the YAML 1.2 core schema (:mod:`._yaml12`).
_RESOLVER = yaml.resolver.Resolver()
_UNSET = object()


def _plain_core(node: ScalarNode) -> object:
    """The YAML 1.2 value of an implicitly tagged plain scalar, else ``_UNSET``.

    Raises:
        Ambiguous: When YAML 1.1 and YAML 1.2 read the scalar differently.
    """
    if node.style or len(node.value) > 2 * MAX_NUMBER_CHARS:  # None or "" (libyaml) is plain
        return _UNSET
    implicit = _RESOLVER.resolve(ScalarNode, node.value, (True, False))  # type: ignore[no-untyped-call]
    if node.tag != implicit or node.tag not in _SCALAR_KINDS:
        return _UNSET  # an explicit tag (the author said what it is), or a timestamp
    return core_scalar(node.value)


_SCALARS: dict[str, Callable[[SafeConstructor, ScalarNode], Any]] = {
    _INT: SafeConstructor.construct_yaml_int,
    _FLOAT: SafeConstructor.construct_yaml_float,
    _BOOL: SafeConstructor.construct_yaml_bool,
}


@dataclass(frozen=True, slots=True)
class LoadedDocument:
    """A parsed project document: its data and where every value came from."""

    file: str
    """The path as given by the caller (used verbatim in messages)."""
    data: dict[str, Any]
    """Plain JSON-like data: dict, list, str, int, float, bool and None only."""
    source: SourceMap
    """Pointer → location, for reporting later problems at the right line."""
    issues: tuple[DocumentIssue, ...] = ()
    """The problems of values and keys the loader refused (``keep_going=True`` only)."""
    unread_values: frozenset[str] = frozenset()
    """Pointers of values the loader refused (``None`` stands in for a refused scalar)."""
    unread_keys: frozenset[str] = frozenset()
    """Pointers of mappings one of whose keys the loader refused (the entry is left out)."""

    def was_refused(self, pointer: str) -> bool:
        """Whether the value at ``pointer`` was refused by the loader, or is inside one that
        was (a later check has nothing to say about it that the loader has not said)."""
        return any(
            pointer == refused or pointer.startswith(refused + "/")
            for refused in self.unread_values
        )

    def issue(
        self, pointer: str, message: str, code: str = DOCUMENT_INVALID, *, key: bool = False
    ) -> DocumentIssue:
        """A problem with the value at ``pointer`` (its key, with ``key``), located in the file."""
        line, column = self.source.locate(pointer, key=key)
        return DocumentIssue(
            file=self.file, line=line, column=column, pointer=pointer, message=message, code=code
        )


def load_document(path: str | os.PathLike[str], *, keep_going: bool = False) -> LoadedDocument:
    """Read and parse the project file at ``path`` (at most 1 MiB + 1 byte is ever read).

    Args:
        path: The file.
        keep_going: Return the problems of single values and keys in
            :attr:`LoadedDocument.issues` instead of raising them, so that a later check can
            report its own problems with them.

    Raises:
        DocumentError: With every problem found, located (``TUBELESS_DOCUMENT_INVALID``); with
            ``keep_going``, only for problems that leave no document to check.
        OSError: When the file is missing, unreadable, or not a regular file (a named pipe or
            a device would block or never end).
    """
    file = os.fspath(path)
    # O_NONBLOCK: opening a named pipe returns at once (instead of waiting for a writer), so
    # that fstat can say what the path is, whatever it was swapped for since it was named.
    descriptor = os.open(file, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    with open(descriptor, "rb", closefd=True) as stream:
        status = os.fstat(stream.fileno())
        if not stat.S_ISREG(status.st_mode):
            raise OSError(errno.EINVAL, f"not a regular file ({_file_kind(status.st_mode)})", file)
        if status.st_size > MAX_BYTES:
            fail(file, 1, 1, "", _TOO_LARGE.format(f"{status.st_size:,} bytes"))
        data = stream.read(MAX_BYTES + 1)
    return parse_document(data, file=file, keep_going=keep_going)


def _file_kind(mode: int) -> str:
    kinds = (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a named pipe"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    )
    return next((name for test, name in kinds if test(mode)), "not a plain file")


def parse_document(data: bytes | str, *, file: str, keep_going: bool = False) -> LoadedDocument:
    """Parse one project document from ``data``; ``file`` names it in messages.

    Raises:
        DocumentError: With every problem found, located (``TUBELESS_DOCUMENT_INVALID``); with
            ``keep_going``, only for problems that leave no document to check (the others are
            returned in :attr:`LoadedDocument.issues`).
    """
    text = _decode(data, file)
    bad = _NON_PRINTABLE.search(text)
    if bad is not None:
        char = bad.group()
        what = f"the control character U+{ord(char):04X}"
        if char == "\0":
            what = "a NUL byte (is this a binary file?)"
        fail(file, *position(text, bad.start()), "", _NOT_TEXT.format(what))
    recorded = events(text, file)
    try:
        root = Replay(recorded).get_single_node()
    except yaml.MarkedYAMLError as exc:  # the pre-pass already parsed it; a safety net
        raise_issues([syntax_issue(file, exc, "")])
    if root is None or (root.tag == _NULL and isinstance(root, ScalarNode)):
        fail(file, 1, 1, "", EMPTY)
    if not isinstance(root, MappingNode):
        fail(file, *_mark(root), "", _NOT_MAPPING.format(_kind(root)))
    converter = _Converter(file)
    value = converter.convert(root, "", report=True)
    if converter.issues and not keep_going:
        raise_issues(converter.issues)
    return LoadedDocument(
        file=file,
        data=value,
        source=SourceMap(values=converter.values, keys=converter.keys),
        issues=tuple(sort_issues(converter.issues)),
        unread_values=frozenset(converter.unread_values),
        unread_keys=frozenset(converter.unread_keys),
    )


def _decode(data: bytes | str, file: str) -> str:
    """UTF-8 text without a BOM, or an issue at the first byte that is not UTF-8."""
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data
    if len(raw) > MAX_BYTES:
        fail(file, 1, 1, "", _TOO_LARGE.format("more than that"))
    if raw.startswith(b"\xef\xbb\xbf"):
        raw = raw[3:]
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        prefix = raw[: exc.start].decode("utf-8")
        line, column = position(prefix, len(prefix))
        fail(file, line, column, "", _NOT_UTF8.format(raw[exc.start], line, column))


def _mark(node: Node) -> tuple[int, int]:
    return node.start_mark.line + 1, node.start_mark.column + 1


def _kind(node: Node) -> str:
    if isinstance(node, MappingNode):
        return "a mapping"
    if isinstance(node, SequenceNode):
        return "a list"
    return _SCALAR_KINDS.get(node.tag, "a tagged value") + f" {_short(node.value)}"


def _short(text: str, limit: int = 60) -> str:
    return repr(text if len(text) <= limit else text[: limit - 3] + "...")


def _tag_name(tag: str) -> str:
    return "!!" + tag.removeprefix(_CORE) if tag.startswith(_CORE) else tag


class _Converter:
    """Node graph → plain data + source map, collecting every problem on the way.

    Aliased nodes are converted once per use (the pre-pass bounded the expanded size) but
    their problems are reported once, at their first use.
    """

    def __init__(self, file: str) -> None:
        self.file = file
        self.issues: list[DocumentIssue] = []
        self.values: dict[str, tuple[int, int]] = {}
        self.keys: dict[str, tuple[int, int]] = {}
        # Recorded for every use of an aliased node, reported or not: each use is unreadable.
        self.unread_values: set[str] = set()
        self.unread_keys: set[str] = set()
        self._seen: set[int] = set()
        self._constructor = SafeConstructor()

    def convert(self, node: Node, pointer: str, *, report: bool) -> Any:
        report = report and id(node) not in self._seen
        self._seen.add(id(node))
        self.values.setdefault(pointer, _mark(node))
        if isinstance(node, MappingNode):
            if node.tag != _MAP:
                self._bad_tag(node, pointer, report, self.unread_values)
            return self._mapping(node, pointer, report)
        if isinstance(node, SequenceNode):
            if node.tag != _SEQ:
                self._bad_tag(node, pointer, report, self.unread_values)
            items = enumerate(node.value)
            return [
                self.convert(item, join_pointer(pointer, i), report=report) for i, item in items
            ]
        assert isinstance(node, ScalarNode)
        return self._scalar(node, pointer, report)

    def _problem(
        self, report: bool, node: Node, pointer: str, message: str, unread: set[str] | None
    ) -> None:
        """A problem with ``node``; ``unread`` records ``pointer`` as a refused value (or a
        mapping with a refused key), ``None`` when the data is whole (a duplicate key)."""
        if unread is not None:
            unread.add(pointer)
        if report:
            self.issues.append(at(self.file, *_mark(node), pointer, message))

    def _mapping(self, node: MappingNode, pointer: str, report: bool) -> dict[str, Any]:
        result: dict[str, Any] = {}
        first_seen: dict[str, int] = {}
        for key_node, value_node in node.value:
            if key_node.tag == _MERGE:
                self._problem(report, key_node, pointer, _MERGE_KEY, self.unread_keys)
                continue
            key = self._key(key_node, pointer, report)
            if key is None:
                continue
            child = join_pointer(pointer, key)
            if key in first_seen:
                message = _DUPLICATE.format(key, first_seen[key])
                self._problem(report, key_node, child, message, None)
                continue
            first_seen[key] = key_node.start_mark.line + 1
            self.keys.setdefault(child, _mark(key_node))
            result[key] = self.convert(value_node, child, report=report)
        return result

    def _key(self, node: Node, pointer: str, report: bool) -> str | None:
        if isinstance(node, ScalarNode):
            try:
                core = _plain_core(node)
            except Ambiguous as exc:
                self._problem(report, node, pointer, str(exc), self.unread_keys)
                return None
            if isinstance(core, str):
                return core
        if isinstance(node, ScalarNode) and node.tag == _STR:
            value: str = node.value
            return value
        if not isinstance(node, ScalarNode):
            fix = "use a plain string key"
        elif node.tag in _SCALAR_KINDS:
            fix = f"quote it: '{node.value}': ..."
        else:
            self._bad_tag(node, pointer, report, self.unread_keys)
            return None
        message = _KEY_NOT_TEXT.format(_kind(node)) + fix
        self._problem(report, node, pointer, message, self.unread_keys)
        return None

    def _scalar(self, node: ScalarNode, pointer: str, report: bool) -> Any:
        try:
            core = _plain_core(node)
        except Ambiguous as exc:
            self._problem(report, node, pointer, str(exc), self.unread_values)
            return None
        if core is not _UNSET and (isinstance(core, (str, bool)) or core is None):
            return core
        if isinstance(core, (int, float)):
            node = ScalarNode(
                _FLOAT if isinstance(core, float) else _INT,
                node.value,
                node.start_mark,
                node.end_mark,
            )
            if len(node.value) > MAX_NUMBER_CHARS:
                message = _LONG_NUMBER.format(_short(node.value), len(node.value))
                self._problem(report, node, pointer, message, self.unread_values)
                return None
            if isinstance(core, float) and not math.isfinite(core):
                message = _NOT_FINITE.format(_short(node.value))
                self._problem(report, node, pointer, message, self.unread_values)
                return None
            return core
        if node.tag == _STR:
            return node.value
        if node.tag == _NULL:
            return None
        construct = _SCALARS.get(node.tag)
        if construct is None:
            self._bad_tag(node, pointer, report, self.unread_values)
            return None
        if node.tag != _BOOL and len(node.value) > MAX_NUMBER_CHARS:
            message = _LONG_NUMBER.format(_short(node.value), len(node.value))
            self._problem(report, node, pointer, message, self.unread_values)
            return None
        try:
            value = construct(self._constructor, node)
        except (ValueError, KeyError, OverflowError, yaml.YAMLError):
            kind, tag = _SCALAR_KINDS[node.tag], _tag_name(node.tag)
            message = _BAD_VALUE.format(_short(node.value), kind, tag)
            self._problem(report, node, pointer, message, self.unread_values)
            return None
        if isinstance(value, float) and not math.isfinite(value):
            message = _NOT_FINITE.format(_short(node.value))
            self._problem(report, node, pointer, message, self.unread_values)
            return None
        return value

    def _bad_tag(self, node: Node, pointer: str, report: bool, unread: set[str]) -> None:
        name = _tag_name(node.tag)
        if node.tag in _SCALAR_KINDS or node.tag in {_MAP, _SEQ}:
            message = f"the tag {name} does not fit {_kind(node)}; remove the tag"
        else:
            danger = " (such tags can run code when loaded)" if "python/" in node.tag else ""
            message = _BAD_TAG.format(name, danger)
        self._problem(report, node, pointer, message, unread)
