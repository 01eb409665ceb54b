"""The filesystem work behind the workspace tools of :mod:`tubeless.agent.builtin`.

Everything here is synchronous (the tools' handlers run in worker threads) and bounded: files
are read only when they are regular files of at most 1 MiB, every result is capped, and the
search walk visits a fixed number of entries and levels. Problems the model can act on are
raised as :class:`Rejected` (a code and a short reason) or left as ``OSError``; the tool
handlers turn both into :class:`~tubeless.agent.ToolError`. Nothing here ever puts file
contents into an error or a log line.
"""

from __future__ import annotations

import errno
import json
import os
import stat
from dataclasses import dataclass, field
from typing import Literal, NamedTuple

from tubeless.agent._tools import ToolError
from tubeless.pipeline import CancelToken

__all__ = [
    "MAX_ENTRIES",
    "MAX_FILE_BYTES",
    "MAX_LINES",
    "MAX_MATCHES",
    "MAX_OUTPUT_BYTES",
    "MAX_SNIPPET_BYTES",
    "MAX_VISITED",
    "MAX_WALK_DEPTH",
    "EntryKind",
    "Listing",
    "Rejected",
    "SearchResult",
    "Window",
    "clean",
    "list_entries",
    "load_text",
    "preview",
    "read_window",
    "search_tree",
    "tool_error",
]

MAX_FILE_BYTES = 1024 * 1024
MAX_OUTPUT_BYTES = 16 * 1024
MAX_SNIPPET_BYTES = 1024
MAX_LINES = 2000
MAX_ENTRIES = 200
MAX_MATCHES = 50
MAX_VISITED = 2000
MAX_WALK_DEPTH = 32
_SKIPPED_NAMES = frozenset({".git", "node_modules"})
_PREVIEW_CHARS = 160
# How much of a long line a search snippet keeps before the first match.
_SNIPPET_LEAD_BYTES = 256
# json.dumps leaves these line breaks unescaped; a preview must stay on one line.
_LINE_BREAKS = str.maketrans({"\x85": "\\u0085", "\u2028": "\\u2028", "\u2029": "\\u2029"})
_OPEN_FLAGS = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOCTTY", 0)

EntryKind = Literal["file", "directory", "symlink", "other"]


class Rejected(Exception):
    """A path the tools refuse to use: a wrong file type, a binary or oversized file."""

    def __init__(self, code: str, reason: str) -> None:
        super().__init__(reason)
        self.code = code
        self.reason = reason


def clean(text: str) -> str:
    """``text`` with undecodable file-name bytes and lone surrogates replaced by U+FFFD."""
    try:
        data = text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        data = text.encode("utf-8", "surrogatepass")
    return data.decode("utf-8", "replace")


def preview(value: str) -> str:
    """A single-line JSON string of ``value``, cut to 159 characters + "…" past 160."""
    text = json.dumps(clean(value), ensure_ascii=False).translate(_LINE_BREAKS)
    return text if len(text) <= _PREVIEW_CHARS else text[: _PREVIEW_CHARS - 1] + "…"


def tool_error(exc: OSError | Rejected | ValueError, path: str) -> ToolError:
    """A recoverable error naming the problem and the path (never the file's contents)."""
    if isinstance(exc, Rejected):
        code, reason = exc.code, exc.reason
    elif isinstance(exc, OSError) and exc.errno is not None:
        code = errno.errorcode.get(exc.errno, "EIO")
        reason = os.strerror(exc.errno)
    elif isinstance(exc, OSError):
        code, reason = "EIO", "Input/output error"
    else:  # os functions raise ValueError for NUL bytes or unencodable characters
        code, reason = "EINVAL", "Invalid path"
    return ToolError(code, f"{reason}: {preview(path)}")


def _check_file(mode: int, size: int) -> None:
    if stat.S_ISDIR(mode):
        raise Rejected("EISDIR", "Is a directory")
    if not stat.S_ISREG(mode):
        raise Rejected("EINVAL", "Not a regular file")
    if size > MAX_FILE_BYTES:
        raise Rejected("EINVAL", "File is larger than 1 MiB")


def load_text(full: str) -> str:
    """The text of a regular UTF-8 file of at most 1 MiB.

    The type is checked before opening (so pipes and devices are never opened) and again on
    the open descriptor (in case the path changed in between).

    Raises:
        OSError: When the file cannot be found, opened or read.
        Rejected: For a directory, a special file, a file over 1 MiB, or binary content
            (a NUL byte or invalid UTF-8).
    """
    info = os.stat(full)
    _check_file(info.st_mode, info.st_size)
    fd = os.open(full, _OPEN_FLAGS)
    with open(fd, "rb") as handle:
        info = os.fstat(fd)
        _check_file(info.st_mode, info.st_size)
        data = handle.read(MAX_FILE_BYTES + 1)
    if len(data) > MAX_FILE_BYTES:
        raise Rejected("EINVAL", "File is larger than 1 MiB")
    if b"\0" in data:
        raise Rejected("EINVAL", "Binary file (contains NUL bytes)")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise Rejected("EINVAL", "Binary file (not valid UTF-8)") from None


def _split_lines(text: str) -> list[str]:
    """Lines ending at ``\\n`` (kept); a last line without one counts too."""
    parts = text.split("\n")
    lines = [part + "\n" for part in parts[:-1]]
    if parts[-1]:
        lines.append(parts[-1])
    return lines


def _cut_utf8(text: str, limit: int, start: int = 0) -> str:
    """At most ``limit`` UTF-8 bytes of ``text`` from byte ``start``, whole characters only."""
    return text.encode("utf-8")[start : start + limit].decode("utf-8", "ignore")


class Window(NamedTuple):
    """A window of lines read from a file."""

    content: str
    start_line: int
    end_line: int
    total_lines: int
    truncated: bool


def read_window(text: str, start_line: int, max_lines: int) -> Window:
    """Up to ``max_lines`` lines from ``start_line``, within 16 KiB cut at a line boundary.

    ``truncated`` says the byte cap stopped the window early. A first line longer than the cap
    is returned cut (at a character boundary), so a reader always makes progress.
    """
    lines = _split_lines(text)
    chosen = lines[start_line - 1 : start_line - 1 + max_lines]
    kept: list[str] = []
    size = 0
    truncated = False
    for line in chosen:
        cost = len(line.encode("utf-8"))
        if size + cost > MAX_OUTPUT_BYTES:
            truncated = True
            if not kept:
                kept.append(_cut_utf8(line, MAX_OUTPUT_BYTES))
            break
        kept.append(line)
        size += cost
    return Window("".join(kept), start_line, start_line - 1 + len(kept), len(lines), truncated)


class Listing(NamedTuple):
    """A directory's entries, sorted by name and capped."""

    entries: list[tuple[str, EntryKind]]
    truncated: bool


def _kind(entry: os.DirEntry[str]) -> EntryKind:
    try:
        if entry.is_symlink():
            return "symlink"
        if entry.is_dir(follow_symlinks=False):
            return "directory"
        if entry.is_file(follow_symlinks=False):
            return "file"
    except OSError:
        pass
    return "other"


def list_entries(full: str) -> Listing:
    """At most 200 entries (16 KiB of names) of the directory ``full``, sorted by name.

    Raises:
        OSError: When ``full`` is missing, not a directory, or cannot be read.
    """
    with os.scandir(full) as scan:
        found = sorted(scan, key=lambda entry: entry.name)
    entries: list[tuple[str, EntryKind]] = []
    size = 0
    for entry in found:
        name = clean(entry.name)
        cost = len(name.encode("utf-8"))
        if len(entries) >= MAX_ENTRIES or size + cost > MAX_OUTPUT_BYTES:
            return Listing(entries, True)
        entries.append((name, _kind(entry)))
        size += cost
    return Listing(entries, False)


@dataclass(slots=True)
class SearchResult:
    """Matches ``(path, line, text)`` of a search, in walk order."""

    matches: list[tuple[str, int, str]] = field(default_factory=list)
    truncated: bool = False
    skipped_files: int = 0


@dataclass(slots=True)
class _Walk:
    query: str
    signal: CancelToken
    result: SearchResult = field(default_factory=SearchResult)
    size: int = 0
    visited: int = 0
    done: bool = False

    def stop(self) -> None:
        self.result.truncated = True
        self.done = True

    def directory(self, full: str, rel: str, depth: int) -> None:
        self.signal.raise_if_cancelled()
        try:
            with os.scandir(full) as scan:
                entries = sorted(scan, key=lambda entry: entry.name)
        except OSError:
            if depth == 0:
                raise
            return  # An unreadable subdirectory is left out, like a skipped name.
        for entry in entries:
            if self.done:
                return
            if self.visited >= MAX_VISITED:
                self.stop()
                return
            self.visited += 1
            if entry.name in _SKIPPED_NAMES:
                continue
            child = f"{rel}/{entry.name}" if rel else entry.name
            try:
                if entry.is_symlink():
                    continue
                is_dir = entry.is_dir(follow_symlinks=False)
                is_file = entry.is_file(follow_symlinks=False)
            except OSError:
                continue
            if is_dir and depth + 1 >= MAX_WALK_DEPTH:
                self.result.truncated = True  # Deeper levels are not searched.
            elif is_dir:
                self.directory(entry.path, child, depth + 1)
            elif is_file:
                self.file(entry.path, child)

    def file(self, full: str, rel: str) -> None:
        self.signal.raise_if_cancelled()
        try:
            text = load_text(full)
        except (OSError, Rejected):
            self.result.skipped_files += 1
            return
        if self.query not in text:
            return
        shown = clean(rel)
        for number, line in enumerate(_split_lines(text), start=1):
            index = line.find(self.query)
            if index < 0:
                continue
            snippet = _snippet(line.rstrip("\r\n"), index)
            cost = len(shown.encode("utf-8")) + len(snippet.encode("utf-8"))
            if len(self.result.matches) >= MAX_MATCHES or self.size + cost > MAX_OUTPUT_BYTES:
                self.stop()
                return
            self.result.matches.append((shown, number, snippet))
            self.size += cost


def _snippet(line: str, index: int) -> str:
    """The line, or for one over 1024 bytes a 1024-byte piece starting shortly before the match."""
    if len(line.encode("utf-8")) <= MAX_SNIPPET_BYTES:
        return line
    offset = len(line[:index].encode("utf-8"))
    return _cut_utf8(line, MAX_SNIPPET_BYTES, max(0, offset - _SNIPPET_LEAD_BYTES))


def search_tree(full: str, query: str, signal: CancelToken) -> SearchResult:
    """Search the directory (or single file) ``full`` for lines containing ``query``.

    Raises:
        OSError: When ``full`` is missing or the starting directory cannot be read.
        Rejected: When ``full`` is neither a directory nor a regular file.
        RunCancelledError: When the run is cancelled during the walk.
    """
    walk = _Walk(query, signal)
    mode = os.stat(full).st_mode
    if stat.S_ISDIR(mode):
        walk.directory(full, "", 0)
    elif stat.S_ISREG(mode):
        walk.file(full, os.path.basename(os.path.normpath(full)))
    else:
        raise Rejected("EINVAL", "Not a directory or regular file")
    return walk.result
