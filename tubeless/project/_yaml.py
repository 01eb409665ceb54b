"""Safe, bounded YAML loading with a source map (DESIGN.md section 5, "Loading").

A project file becomes plain JSON-like data (dict, list, str, int, float, bool, None) plus a
:class:`SourceMap` from JSON pointers to 1-based lines and columns. Nothing here constructs
arbitrary Python objects: the text goes through PyYAML's safe parser and composer only
(:mod:`tubeless.project._yaml_events`, which enforces the bounds on the event stream before
anything is built), and the node graph is converted by hand (:mod:`tubeless.project._yaml_nodes`).
Numbers are bounded before they are converted.

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
import os
import re
import stat
from dataclasses import dataclass
from typing import Any

import yaml
from yaml.nodes import MappingNode, ScalarNode

from tubeless._data_files import file_kind
from tubeless.errors import DOCUMENT_INVALID
from tubeless.project._issues import (
    DocumentIssue,
    SourceMap,
    position,
    raise_issues,
    sort_issues,
)
from tubeless.project._yaml_events import (
    EMPTY,
    MAX_ALIASES,
    MAX_DEPTH,
    MAX_NODES,
    Replay,
    events,
    fail,
    syntax_issue,
)
from tubeless.project._yaml_nodes import MAX_NUMBER_CHARS, NULL_TAG, Converter, kind, mark

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
# Messages name the rule and the fix; "{0}"/"{1}" are filled in where they are used.
_TOO_LARGE = (
    "the file is too large: project files are limited to 1 MiB (1,048,576 bytes), found {0}; "
    "split the project into several files"
)
_NOT_UTF8 = "the file is not valid UTF-8 (byte 0x{0:02x} at line {1}, column {2}); save it as UTF-8"
_NOT_TEXT = "found {0}; a project file must be plain UTF-8 text: remove it"
_NOT_MAPPING = "the top level must be a mapping (version, project, agents, ...), found {0}"
# Characters YAML does not allow in a stream (pyyaml's Reader rule): C0/C1 controls, surrogates.
_NON_PRINTABLE = re.compile(
    "[^\x09\x0a\x0d\x20-\x7e\x85\xa0-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]"
)


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
            raise OSError(errno.EINVAL, f"not a regular file ({file_kind(status.st_mode)})", file)
        if status.st_size > MAX_BYTES:
            fail(file, 1, 1, "", _TOO_LARGE.format(f"{status.st_size:,} bytes"))
        data = stream.read(MAX_BYTES + 1)
    return parse_document(data, file=file, keep_going=keep_going)


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
    if root is None or (root.tag == NULL_TAG and isinstance(root, ScalarNode)):
        fail(file, 1, 1, "", EMPTY)
    if not isinstance(root, MappingNode):
        fail(file, *mark(root), "", _NOT_MAPPING.format(kind(root)))
    converter = Converter(file)
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
