"""Which entry ``tubeless run PROJECT [ID] [FLAGS]...`` means, and its click command.

The project's path is the first argument naming a YAML file, the entry id the first positional
that is not an option's value (every entry's derived flags count as options here). The entry's
command has one flag per input property; running it calls the ``execute`` it was built with, so
this module knows nothing of how a run is carried out (``run.py`` passes its executor, shell
completion builds commands only to read their options).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from tubeless._cli._exit import CliLoadError
from tubeless._cli._flags import derive_flags, unflagged
from tubeless._cli._run_input import build_input
from tubeless._cli._run_options import OPTION_NAMES, VALUE_OPTIONS, builtin_params

if TYPE_CHECKING:
    from tubeless import Pipeline
    from tubeless.project import Project

__all__ = [
    "OUTER_HELP",
    "Execute",
    "choose",
    "entry_command_for",
    "find_project",
    "help_command",
    "load",
]

#: Runs an entry: ``(entry, raw input, options, is_agent=, flags=)`` to an exit code.
Execute = Callable[..., int]

OUTER_HELP = """Run an agent or pipeline of PROJECT (a YAML file) and print its result as JSON.

ID may be omitted when the project has one entry or names a default. Flags may come in any
order; each input property has its own flag: see `tubeless run PROJECT [ID] --help`."""


def find_project(args: list[str]) -> int | None:
    """The index of the project argument: the first YAML path (or, failing that, file)."""
    previous = ""
    candidates: list[int] = []
    for index, arg in enumerate(args):
        if not arg.startswith("-") and previous not in VALUE_OPTIONS:
            candidates.append(index)
        previous = arg if arg.startswith("--") and "=" not in arg else ""
    for index in candidates:
        if args[index].endswith((".yaml", ".yml")):
            return index
    for index in candidates:
        if os.path.isfile(args[index]):
            return index
    return candidates[0] if candidates else None


def load(path: str) -> Project:
    from tubeless.project import load_project

    if not Path(path).exists():
        raise FileNotFoundError(2, "No such file or directory", path)
    return load_project(path)


def _entry_id(args: list[str], value_options: frozenset[str] | set[str]) -> str | None:
    """The ID argument: the first positional that is not an option's value."""
    previous = ""
    for arg in args:
        if not arg.startswith("-") and previous not in value_options:
            return arg
        previous = arg if arg.startswith("--") and "=" not in arg else ""
    return None


def _input_schema(entry: Pipeline) -> dict[str, Any] | None:
    schema = entry.options_schema
    if schema is None:
        return None
    from tubeless.frozen import thaw

    try:
        generated = thaw(schema.json_schema())
    except Exception:  # a type without a JSON Schema simply gets no flags
        return None
    return generated if isinstance(generated, dict) else None


def choose(
    project: Project, path: str, args: list[str], execute: Execute
) -> tuple[str, click.Command]:
    """The entry named in ``args`` (removed from them) or the default, and its command."""
    # Values of derived options can look like ids; tell them apart using every entry's flags.
    derived_values = {
        f"--{flag.option}"
        for entry in project.entries.values()
        for flag in derive_flags(_input_schema(entry))
        if flag.kind != "boolean"
    }
    entry_id = _entry_id(args, VALUE_OPTIONS | derived_values)
    before = ""
    if entry_id is not None:
        position = args.index(entry_id)
        before = args[position - 1] if position else ""
        del args[position]
    try:
        entry = project.entry(entry_id)
    except KeyError as exc:
        _refuse_unknown_option(before, project)
        raise CliLoadError(str(exc.args[0])) from None
    chosen = entry_id or next(k for k, v in project.entries.items() if v is entry)
    return chosen, _entry_command(project, chosen, entry, path, execute)


def _refuse_unknown_option(option: str, project: Project) -> None:
    """``run p.yaml --txt hi``: report ``--txt`` (a usage error), not an entry named ``hi``."""
    if not option.startswith("--") or "=" in option:
        return
    known = set(OPTION_NAMES)
    for entry in project.entries.values():
        for flag in derive_flags(_input_schema(entry)):
            known.add(f"--{flag.option}")
            if flag.kind == "boolean":
                known.add(f"--no-{flag.option}")
    if option not in known:
        raise click.NoSuchOption(option, possibilities=sorted(known))


def entry_command_for(path: str, args: list[str]) -> click.Command | None:
    """The entry command ``tubeless run PATH ARGS...`` would build, or None (for completion)."""
    rest = list(args)
    if path in rest:
        rest.remove(path)
    try:
        return choose(load(path), path, rest, _completion_only)[1]
    except Exception:  # completion never reports errors: it offers nothing instead
        return None


def help_command(note: str) -> click.Command:
    """``run --help`` when no entry is known: the built-in options, and what is missing."""
    return click.Command(
        name="PROJECT [ID]",
        params=builtin_params(None, is_agent=None),
        help=f"{OUTER_HELP}\n\n{note}",
        options_metavar="PROJECT [ID] [OPTIONS]",
        context_settings={"max_content_width": 100, "help_option_names": ["--help", "-h"]},
    )


def _entry_command(
    project: Project, entry_id: str, entry: Pipeline, path: str, execute: Execute
) -> click.Command:
    is_agent = entry_id in project.agents
    flags = derive_flags(_input_schema(entry))
    params: list[click.Parameter] = [flag.click_option() for flag in flags]
    params += builtin_params(entry, is_agent=is_agent)
    kind = "agent" if is_agent else "pipeline"
    description = entry.description or entry.name or ""

    def callback(**options: Any) -> None:
        raw = build_input(flags, options, _input_schema(entry))
        code = execute(entry, raw, options, is_agent=is_agent, flags=flags)
        if code:
            raise SystemExit(code)

    return click.Command(
        name=entry_id,
        params=params,
        callback=callback,
        help=f"Run the {kind} {entry_id!r} of {path}. {description}".strip(),
        epilog=_unflagged_epilog(_input_schema(entry)),
        context_settings={"max_content_width": 100},
    )


def _unflagged_epilog(schema: dict[str, Any] | None) -> str | None:
    """Which input properties have no flag, and how to pass them."""
    missing = unflagged(schema)
    if not missing:
        return None
    listed = "; ".join(f"{name} ({reason})" for name, reason in missing)
    return f"Input properties without a flag, set them with --input or --input-file: {listed}."


def _completion_only(*args: Any, **kwargs: Any) -> int:
    """The executor of commands built for completion, which reads their options only."""
    raise RuntimeError("a command built for shell completion is never run")
