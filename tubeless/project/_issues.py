"""Located problems in a project document, and the one way they are raised.

Every problem the loader and the meta-schema check find is a :class:`DocumentIssue`: the file,
a 1-based line and column, the JSON pointer of the value and a message that says what was
expected, what was found and what to change. :func:`raise_issues` turns a batch of them into
one :class:`~tubeless.errors.DocumentError` whose ``issues`` are in file order.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NoReturn

from tubeless.errors import DOCUMENT_INVALID, DocumentError

__all__ = [
    "DocumentIssue",
    "SourceMap",
    "did_you_mean",
    "escape_pointer",
    "join_pointer",
    "position",
    "raise_issues",
    "sort_issues",
]

_BREAK = re.compile("\r\n|[\n\r\x85\u2028\u2029]")


@dataclass(frozen=True, kw_only=True, slots=True)
class DocumentIssue:
    """One problem in a project document, located in the file and in the data."""

    file: str
    """The document's path as it was given (used verbatim in messages)."""
    line: int
    """1-based line of the offending value (or key, for unknown and duplicate keys)."""
    column: int
    """1-based column, counted in characters."""
    pointer: str
    """The JSON pointer (RFC 6901) of the offending value; ``""`` for the document root."""
    message: str
    """What was expected, what was found and what to change."""
    code: str = DOCUMENT_INVALID
    """The stable error code (``TUBELESS_DOCUMENT_INVALID`` unless a later stage says otherwise)."""

    def format(self) -> str:
        """``<file>:<line>:<col> <pointer or '/'>: <message>`` (the CLI prefixes ``error: ``)."""
        return f"{self.file}:{self.line}:{self.column} {self.pointer or '/'}: {self.message}"

    def to_dict(self) -> dict[str, Any]:
        """The JSON form used by ``tubeless validate --format json``."""
        return {
            "code": self.code,
            "message": self.message,
            "pointer": self.pointer,
            "line": self.line,
            "column": self.column,
        }


def did_you_mean(name: str, choices: Iterable[str], *, most: int = 3) -> str | None:
    """``"did you mean 'a'?"`` (or ``'a' or 'b'``) for the choices closest to ``name``, or None
    when none is close (difflib's ratio of at least 0.6)."""
    close = difflib.get_close_matches(name, list(dict.fromkeys(choices)), n=most)
    if not close:
        return None
    quoted = [repr(choice) for choice in close]
    text = quoted[0] if len(quoted) == 1 else ", ".join(quoted[:-1]) + " or " + quoted[-1]
    return f"did you mean {text}?"


def escape_pointer(token: str | int) -> str:
    """One JSON pointer reference token, with ``~`` and ``/`` escaped as RFC 6901 says."""
    return str(token).replace("~", "~0").replace("/", "~1")


def join_pointer(pointer: str, *tokens: str | int) -> str:
    """``pointer`` extended by ``tokens`` (each escaped)."""
    return pointer + "".join("/" + escape_pointer(token) for token in tokens)


def sort_issues(issues: Iterable[DocumentIssue]) -> list[DocumentIssue]:
    """Issues in file order (line, column, then pointer), exact duplicates dropped."""
    unique: dict[tuple[int, int, str, str, str], DocumentIssue] = {}
    for issue in issues:
        key = (issue.line, issue.column, issue.pointer, issue.message, issue.code)
        unique.setdefault(key, issue)
    return [unique[key] for key in sorted(unique)]


def raise_issues(issues: Sequence[DocumentIssue]) -> NoReturn:
    """Raise one :class:`DocumentError` carrying every issue, in file order.

    The message is the first issue formatted, plus ``" (and N more problems)"`` when there are
    others; ``DocumentError.issues`` holds all of them.
    """
    assert issues, "raise_issues needs at least one issue"
    ordered = sort_issues(issues)
    message = ordered[0].format()
    if len(ordered) > 1:
        more = len(ordered) - 1
        message += f" (and {more} more problem{'' if more == 1 else 's'})"
    raise DocumentError(message, ordered)


@dataclass(frozen=True, slots=True)
class SourceMap:
    """Where each value (and each mapping key) of a document is in its file."""

    values: Mapping[str, tuple[int, int]] = field(default_factory=dict)
    """JSON pointer → 1-based (line, column) of the value."""
    keys: Mapping[str, tuple[int, int]] = field(default_factory=dict)
    """JSON pointer of a mapping entry → 1-based (line, column) of its key."""

    def locate(self, pointer: str, *, key: bool = False) -> tuple[int, int]:
        """The (line, column) of the value at ``pointer``, or of its key when ``key`` is true.

        A pointer that does not exist (a missing property, say) falls back to its nearest
        existing ancestor, so "missing required property" lands on the parent mapping.
        """
        if key and pointer in self.keys:
            return self.keys[pointer]
        while pointer not in self.values:
            if not pointer:
                return (1, 1)
            pointer = pointer.rpartition("/")[0]
        return self.values[pointer]


def position(text: str, index: int) -> tuple[int, int]:
    """1-based (line, column) of ``text[index]``, counting line breaks as YAML does."""
    head = text[:index]
    last = None
    line = 1
    for last in _BREAK.finditer(head):  # noqa: B007 (the last match is used below)
        line += 1
    return line, index - (last.end() if last else 0) + 1
