"""Opt-in, read-only workspace tools: ``read``, ``list`` and ``search``.

No tool is added to an agent implicitly; register these like any other tool::

    from tubeless.agent.builtin import workspace_tools

    agent = define_agent(..., tools={**workspace_tools("path/to/project"), "mine": mine})

:func:`workspace_tools` resolves relative paths against the ``root`` it is given; the
module-level :data:`read`, :data:`list_dir` (register it as ``list``) and :data:`search` resolve
them against the process's current directory at the time of each call. Absolute paths are
allowed, and ``..`` is followed: **the root is a starting point, not a sandbox**. Give these
tools only to agents that may read whatever the process can read.

All three are read-only, so they also run in dry runs (each has a ``preview`` equal to its
handler). Results are bounded (16 KiB of text per call), files must be regular UTF-8 files of
at most 1 MiB, and filesystem problems become recoverable :class:`~tubeless.agent.ToolError`
outcomes with errno-style codes (``ENOENT``, ``EISDIR``, ``ENOTDIR``, ``EACCES``, and
``EINVAL`` for wrong file types, binary files and files that are too large). Each call reports
its action (e.g. ``read "src/app.py"``) as progress and as a log line; file contents are never
logged or put into errors.

The model-facing input descriptors are strict-mode friendly: every object is closed, every
property is required, and optional ones are ``anyOf [type, null]`` where ``null`` selects the
default. Application calls may simply omit optional fields; the pydantic input models stay
authoritative. Outputs are plain data (validated ``TypedDict``\\ s), so reducers can keep them
in agent state.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator
from typing_extensions import TypedDict

from tubeless.agent._builtin_fs import (
    MAX_LINES,
    EntryKind,
    Rejected,
    list_entries,
    load_text,
    preview,
    read_window,
    search_tree,
    tool_error,
)
from tubeless.agent._tools import Tool, ToolContext, ToolError, define_tool

__all__ = [
    "ListEntry",
    "ListInput",
    "ListOutput",
    "ReadInput",
    "ReadOutput",
    "SearchInput",
    "SearchMatch",
    "SearchOutput",
    "list_dir",
    "read",
    "search",
    "workspace_tools",
]

_MAX_PATH = 4096
_MAX_QUERY = 4096


class _Input(BaseModel):
    """Closed, strict input models in which ``None`` for an optional field means its default."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    @model_validator(mode="before")
    @classmethod
    def _null_selects_default(cls, data: Any) -> Any:
        if not isinstance(data, Mapping):
            return data
        fields = cls.model_fields
        return {
            key: value
            for key, value in data.items()
            if not (value is None and key in fields and not fields[key].is_required())
        }


class ReadInput(_Input):
    """Arguments of ``read``."""

    path: str = Field(min_length=1, max_length=_MAX_PATH)
    start_line: int = Field(default=1, ge=1)
    max_lines: int = Field(default=200, ge=1, le=MAX_LINES)


class ListInput(_Input):
    """Arguments of ``list``; no ``path`` lists the root."""

    path: str | None = Field(default=None, min_length=1, max_length=_MAX_PATH)


class SearchInput(_Input):
    """Arguments of ``search``; no ``path`` searches the root."""

    query: str = Field(min_length=1, max_length=_MAX_QUERY)
    path: str | None = Field(default=None, min_length=1, max_length=_MAX_PATH)


class ReadOutput(TypedDict):
    """What ``read`` returns; ``end_line`` is ``start_line - 1`` when no line was returned."""

    path: str
    content: str
    start_line: int
    end_line: int
    total_lines: int
    truncated: bool


class ListEntry(TypedDict):
    """One directory entry; symlinks are reported as such, not followed."""

    name: str
    kind: EntryKind


class ListOutput(TypedDict):
    """What ``list`` returns."""

    path: str
    entries: list[ListEntry]
    truncated: bool


class SearchMatch(TypedDict):
    """One matching line; ``path`` is relative to the searched directory."""

    path: str
    line: int
    text: str


class SearchOutput(TypedDict):
    """What ``search`` returns."""

    matches: list[SearchMatch]
    truncated: bool
    skipped_files: int


def _closed(properties: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": properties,
        "required": list(properties),
        "additionalProperties": False,
    }


def _nullable(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"anyOf": [schema, {"type": "null"}], "description": description}


# String lengths are stated in descriptions rather than as minLength/maxLength, which some
# strict structured-output modes refuse; the input models enforce them either way.
_READ_SCHEMA = _closed(
    {
        "path": {
            "type": "string",
            "description": "The file to read, relative to the workspace root or absolute "
            "(at most 4096 characters).",
        },
        "start_line": _nullable(
            {"type": "integer", "minimum": 1},
            "The first line to return, counting from 1; null for 1.",
        ),
        "max_lines": _nullable(
            {"type": "integer", "minimum": 1, "maximum": MAX_LINES},
            "How many lines to return at most (1 to 2000); null for 200.",
        ),
    }
)
_LIST_SCHEMA = _closed(
    {
        "path": _nullable(
            {"type": "string"},
            "The directory to list, relative to the workspace root or absolute (at most 4096 "
            "characters); null for the workspace root.",
        ),
    }
)
_SEARCH_SCHEMA = _closed(
    {
        "query": {
            "type": "string",
            "description": "The exact text to find within a line, case-sensitive "
            "(1 to 4096 characters, no line breaks).",
        },
        "path": _nullable(
            {"type": "string"},
            "The directory (or single file) to search, relative to the workspace root or "
            "absolute (at most 4096 characters); null for the workspace root.",
        ),
    }
)

_READ_DESCRIPTION = (
    "Read part of a UTF-8 text file in the workspace. Returns up to max_lines lines (default "
    "200, at most 2000) starting at start_line (1-based, default 1), with end_line (the last "
    "line returned) and total_lines. The content is capped at 16 KiB, cut at a line boundary: "
    "truncated is true when that cap stopped the read early, so continue from end_line + 1 "
    "(a single line over 16 KiB is cut). Only regular UTF-8 text files of at most 1 MiB can "
    "be read; a missing file, a directory, a binary or oversized file fails with a code such "
    "as ENOENT, EISDIR or EINVAL."
)
_LIST_DESCRIPTION = (
    "List the entries of a directory in the workspace (the workspace root by default), sorted "
    "by name (case-sensitive). Each entry has a name and a kind: file, directory, symlink "
    "(not followed) or other. At most 200 entries (16 KiB of names) are returned; truncated "
    "is true when there were more. A missing path or a file fails with ENOENT or ENOTDIR."
)
_SEARCH_DESCRIPTION = (
    "Search UTF-8 text files in the workspace for lines containing an exact, case-sensitive "
    "piece of text (not a pattern). Searches the given directory (or single file; the "
    "workspace root by default) recursively in name order, skipping .git, node_modules, "
    "symbolic links, and binary files or files over 1 MiB (counted in skipped_files). Returns "
    "up to 50 matches as {path (relative to the searched directory), line (1-based), text}; "
    "long lines are cut to 1024 bytes around the match. truncated is true when more matches, "
    "entries (over 2000) or levels (over 32) were left out; narrow the path or the query."
)


def _activity(ctx: ToolContext, action: str) -> None:
    ctx.report_progress(0, 1, action)
    ctx.log.info(action)


def _shown(base: str, full: str) -> str:
    """``full`` relative to ``base`` when it lies inside it, else as an absolute path."""
    relative = os.path.relpath(full, base)
    if relative == os.pardir or relative.startswith(os.pardir + os.sep):
        return os.path.normpath(full)
    return relative


def _tools(root: str | None) -> tuple[Tool, Tool, Tool]:
    """``read``, ``list`` and ``search`` resolving paths against ``root`` (or the cwd)."""

    def base() -> str:
        return os.getcwd() if root is None else root

    def run_read(args: ReadInput, ctx: ToolContext) -> ReadOutput:
        _activity(ctx, f"read {preview(args.path)}")
        start = base()
        full = os.path.join(start, args.path)
        try:
            text = load_text(full)
        except (OSError, Rejected, ValueError) as exc:
            raise tool_error(exc, args.path) from exc
        window = read_window(text, args.start_line, args.max_lines)
        return {
            "path": _shown(start, full),
            "content": window.content,
            "start_line": window.start_line,
            "end_line": window.end_line,
            "total_lines": window.total_lines,
            "truncated": window.truncated,
        }

    def run_list(args: ListInput, ctx: ToolContext) -> ListOutput:
        _activity(ctx, f"list {preview(args.path or '.')}")
        start = base()
        full = os.path.join(start, args.path) if args.path else start
        try:
            listing = list_entries(full)
        except (OSError, ValueError) as exc:
            raise tool_error(exc, args.path or ".") from exc
        return {
            "path": _shown(start, full),
            "entries": [{"name": name, "kind": kind} for name, kind in listing.entries],
            "truncated": listing.truncated,
        }

    def run_search(args: SearchInput, ctx: ToolContext) -> SearchOutput:
        _activity(ctx, f"search {preview(args.query)} in {preview(args.path or '.')}")
        if "\n" in args.query:
            raise ToolError("EINVAL", "The query must be a single line.")
        start = base()
        full = os.path.join(start, args.path) if args.path else start
        try:
            found = search_tree(full, args.query, ctx.signal)
        except (OSError, Rejected, ValueError) as exc:
            raise tool_error(exc, args.path or ".") from exc
        return {
            "matches": [
                {"path": path, "line": line, "text": text} for path, line, text in found.matches
            ],
            "truncated": found.truncated,
            "skipped_files": found.skipped_files,
        }

    return (
        define_tool(
            description=_READ_DESCRIPTION,
            input_schema=ReadInput,
            output_schema=ReadOutput,
            input_json_schema=_READ_SCHEMA,
            run=run_read,
            preview=run_read,
            replay="safe",  # reads only: running it again on resume does no harm
        ),
        define_tool(
            description=_LIST_DESCRIPTION,
            input_schema=ListInput,
            output_schema=ListOutput,
            input_json_schema=_LIST_SCHEMA,
            run=run_list,
            preview=run_list,
            replay="safe",  # reads only: running it again on resume does no harm
        ),
        define_tool(
            description=_SEARCH_DESCRIPTION,
            input_schema=SearchInput,
            output_schema=SearchOutput,
            input_json_schema=_SEARCH_SCHEMA,
            run=run_search,
            preview=run_search,
            replay="safe",  # reads only: running it again on resume does no harm
        ),
    )


read: Tool
"""Read a window of lines of a UTF-8 text file (paths resolve against the current directory)."""
list_dir: Tool
"""List a directory, sorted by name; register it as ``list`` (paths resolve against the cwd)."""
search: Tool
"""Literal, case-sensitive search of text files (paths resolve against the current directory)."""
read, list_dir, search = _tools(None)


def workspace_tools(root: str | os.PathLike[str] | None = None) -> dict[str, Tool]:
    """The read-only workspace tools, keyed by the names models see.

    Relative paths in calls resolve against ``root``. The root is not a sandbox: absolute
    paths and ``..`` reach anything the process can read.

    Args:
        root: The directory relative paths start from, made absolute now (so a later
            ``os.chdir`` does not move it). ``None`` uses the process's current directory at
            the time of each call (and returns the module-level tools).

    Returns:
        ``{"read": ..., "list": ..., "search": ...}``, ready to merge into ``tools=``.

    Example:
        >>> tools = {**workspace_tools("."), "mine": mine}  # doctest: +SKIP
    """
    if root is None:
        return {"read": read, "list": list_dir, "search": search}
    tool_read, tool_list, tool_search = _tools(os.path.abspath(os.fspath(root)))
    return {"read": tool_read, "list": tool_list, "search": tool_search}
