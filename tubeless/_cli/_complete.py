"""Shell completion: project files, entry ids, and ``tubeless run``'s options.

Entry ids are read from the project's YAML with a plain safe load (nothing is imported, no
reference is resolved), so completing ``tubeless plan p.yaml <TAB>`` has no side effect. Only
completing a ``tubeless run`` option loads the project (its flags come from the input schema,
which may be a Python import path), exactly as running it would.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, TypeVar

import click
from click.shell_completion import CompletionItem

from tubeless._cli._entry import entry_command_for, find_project
from tubeless._cli._run_options import VALUE_OPTIONS

__all__ = ["RunCommand", "complete_entry_id", "entry_ids", "project_argument"]

#: Larger files are not read for completion (the loader refuses them anyway).
_MAX_BYTES = 1 << 20

_F = TypeVar("_F", bound=Callable[..., Any])


def entry_ids(path: str) -> list[str]:
    """The agent and pipeline ids a project file declares; none when it cannot be read."""
    import yaml

    try:
        if os.path.getsize(path) > _MAX_BYTES:
            return []
        with open(path, encoding="utf-8") as handle:
            document = yaml.safe_load(handle)
    except (OSError, UnicodeDecodeError, yaml.YAMLError, RecursionError):
        return []
    if not isinstance(document, dict):
        return []
    ids: list[str] = []
    for section in ("agents", "pipelines"):
        entries = document.get(section)
        if isinstance(entries, dict):
            ids.extend(str(key) for key in entries)
    return ids


def _items(names: list[str], incomplete: str) -> list[CompletionItem]:
    return [CompletionItem(name) for name in names if name.startswith(incomplete)]


def complete_entry_id(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[Any]:
    """Complete ``[ID]`` from the project named before it."""
    project = ctx.params.get("project")
    return _items(entry_ids(project), incomplete) if isinstance(project, str) else []


def project_argument() -> Callable[[_F], _F]:
    """The ``PROJECT`` argument of ``plan``/``inspect``/``graph``/``list``: completes files."""
    return click.argument("project", metavar="PROJECT", type=click.Path(dir_okay=False))


_FILE = CompletionItem("", type="file")


class RunCommand(click.Command):
    """``tubeless run``: its arguments are parsed by hand, so it completes them by hand too."""

    def shell_complete(self, ctx: click.Context, incomplete: str) -> list[CompletionItem]:

        args = [arg for arg in ctx.args if arg != "--"]
        previous = args[-1] if args else ""
        if previous in ("--input-file", "--trace"):
            return [CompletionItem(incomplete, type="file")]
        position = find_project(args)
        if position is None or not args[position].endswith((".yaml", ".yml")):
            if incomplete.startswith("-"):
                return []
            return [CompletionItem(incomplete, type="file")]
        path = args[position]
        if previous in VALUE_OPTIONS or incomplete.startswith("-"):
            return self._complete_option(path, args, previous, incomplete)
        rest = args[:position] + args[position + 1 :]
        ids = entry_ids(path)
        if any(arg in ids for arg in rest):
            return []
        return _items(ids, incomplete)

    def _complete_option(
        self, path: str, args: list[str], previous: str, incomplete: str
    ) -> list[CompletionItem]:
        command = entry_command_for(path, args)
        if command is None:
            return []
        context = click.Context(command, info_name=path)
        for param in command.get_params(context):
            if not isinstance(param, click.Option):
                continue
            if previous in param.opts:
                return param.shell_complete(context, incomplete)
        names = [
            name
            for param in command.get_params(context)
            if isinstance(param, click.Option)
            for name in (*param.opts, *param.secondary_opts)
            if name.startswith("--")
        ]
        return _items(names, incomplete)
