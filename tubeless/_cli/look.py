"""Look before you run: ``tubeless plan``, ``inspect``, ``graph`` and ``list``.

None of these runs a handler, validates an input or reads a credential: they load the project
(which imports the Python modules it references) and read the compiled definitions. The project
and reporting packages are imported inside the commands so that ``tubeless --help`` stays fast.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import click

from tubeless._cli._complete import complete_entry_id, project_argument
from tubeless._cli._exit import EXIT_PLANNING, CliLoadError

if TYPE_CHECKING:
    from tubeless import Pipeline
    from tubeless.project import Project

__all__ = ["graph", "inspect", "list_", "plan"]

# Kept here rather than imported from tubeless.reporting.graph (tests check they agree), so that
# building the command line imports nothing heavy.
_DIRECTIONS = ("TB", "TD", "BT", "LR", "RL")
_FORMATS = ("mermaid", "dot", "json")

_project_argument = project_argument()
_id_argument = click.argument(
    "entry_id", metavar="[ID]", required=False, shell_complete=complete_entry_id
)


def _load(path: str) -> Project:
    from tubeless.project import load_project

    if not Path(path).exists():
        raise FileNotFoundError(2, "No such file or directory", path)
    return load_project(path)


def _entry(path: str, entry_id: str | None) -> tuple[str, Literal["agent", "pipeline"], Pipeline]:
    """The chosen entry's id, kind and pipeline; an unknown or ambiguous id exits 2."""
    project = _load(path)
    try:
        pipeline = project.entry(entry_id)
    except KeyError as exc:
        raise CliLoadError(str(exc.args[0])) from None
    chosen = entry_id or project.default or next(iter(project.entries))
    return chosen, "agent" if chosen in project.agents else "pipeline", pipeline


def _echo_json(value: object) -> None:
    click.echo(json.dumps(value, indent=2, ensure_ascii=False))


@click.command("plan", short_help="Show what a run would do, without running anything.")
@_project_argument
@_id_argument
@click.option(
    "--target",
    "targets",
    multiple=True,
    metavar="T",
    help="Plan for a declared target and what it needs (repeatable).",
)
@click.option(
    "--step",
    "steps",
    multiple=True,
    metavar="S",
    help="Plan exactly this step, without its prerequisites (repeatable).",
)
@click.option("--dry-run", is_flag=True, help="Plan a dry run (previews instead of handlers).")
@click.option("--explain", is_flag=True, help="Say why each step runs or is skipped.")
@click.option("--json", "as_json", is_flag=True, help="Print the plan and definition as JSON.")
@click.pass_context
def plan(
    ctx: click.Context,
    project: str,
    entry_id: str | None,
    targets: tuple[str, ...],
    steps: tuple[str, ...],
    dry_run: bool,
    explain: bool,
    as_json: bool,
) -> None:
    """Show what a run of an entry of PROJECT would do, without running anything.

    Exits 5 (after printing the plan and its errors) when the plan is not ok, for example for an
    unknown target or step, or --target together with --step.
    """
    from tubeless.reporting import format_plan

    _, _, pipeline = _entry(project, entry_id)
    result = pipeline.plan(
        dry_run=dry_run, targets=list(targets) or None, step_ids=list(steps) or None
    )
    if as_json:
        _echo_json(result.to_dict(definition=True))
    else:
        click.echo(format_plan(result, explain=explain), nl=False)
        for note in _finalization_notes(pipeline, result) if steps else ():
            click.echo(f"  note: {note}")
    if not result.ok:
        ctx.exit(EXIT_PLANNING)


def _finalization_notes(pipeline: Any, plan: Any) -> list[str]:
    """What a selection takes away from finalization (a run would fail or see less)."""
    filtered = [s.id for s in plan.steps if s.skip_reason == "filtered"]
    if not plan.ok or not filtered:
        return []
    finalizer = pipeline.finalizer
    missing = [step_id for step_id in finalizer.required if step_id in filtered]
    if missing:
        return [
            f"finalization needs the outputs of {', '.join(missing)}, which this selection "
            "skips: the run will fail in finalization (select a --target instead)"
        ]
    if finalizer.kind == "last" and pipeline.order[-1].id in filtered:
        return [
            f"the result is the output of {pipeline.order[-1].id}, which this selection "
            "skips: the run will have no result"
        ]
    if finalizer.kind == "function":
        return [
            f"finalization sees only the selected steps' outputs ({', '.join(filtered)} "
            "are skipped); a finalizer that reads them will fail"
        ]
    return []


@click.command("inspect", short_help="Show an entry: input, steps, identity, plan, limits, tools.")
@_project_argument
@_id_argument
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.option(
    "--connect",
    is_flag=True,
    help="Connect to the entry's MCP servers to show their tools' live descriptions and input "
    "schemas (without it nothing is started or contacted).",
)
def inspect(project: str, entry_id: str | None, as_json: bool, connect: bool) -> None:
    """Show an entry of PROJECT: its input schema, targets, steps and their dependencies,
    identity and default plan, and for an agent its limits, tools (descriptions and input
    schemas) and result descriptor."""
    from tubeless.reporting.inspect_text import format_inspect, inspect_dict

    chosen, kind, pipeline = _entry(project, entry_id)
    live = _live_tools(pipeline) if connect else None
    if as_json:
        _echo_json(inspect_dict(pipeline, entry_id=chosen, kind=kind, live=live))
    else:
        strict = _strict_notes(pipeline, live)
        text = format_inspect(pipeline, entry_id=chosen, kind=kind, strict=strict, live=live)
        click.echo(text, nl=False)


def _live_tools(pipeline: Any) -> dict[str, dict[str, Any]]:
    """The entry's MCP tools as their servers describe them (connects to each, then closes).

    A server that cannot be used exits 2, like anything else the command cannot load.
    """
    from tubeless.mcp import McpError, describe_servers

    try:
        return describe_servers(pipeline)
    except McpError as exc:
        raise CliLoadError(f"{exc.code}: {exc.message}") from None


def _strict_notes(pipeline: Any, live: Any = None) -> dict[str, list[str]]:
    """Per tool of each agent step, why OpenAI's strict mode cannot apply (empty: it can)."""
    from tubeless.providers._spi import strict_problems, wrap_parameters
    from tubeless.reporting.graph import agent_tools

    notes: dict[str, list[str]] = {}
    for s in pipeline.order:
        if s.agent is None:
            continue
        for tool in agent_tools(s):
            schema = tool.input_json_schema if isinstance(tool.input_json_schema, dict) else {}
            if live and tool.name in live:
                schema = dict(live[tool.name]["input_json_schema"])
            notes[tool.name] = strict_problems(wrap_parameters("input", schema))
    return notes


@click.command("graph", short_help="Draw an entry as Mermaid, Graphviz DOT or JSON.")
@_project_argument
@_id_argument
@click.option(
    "--format",
    "output_format",
    type=click.Choice(_FORMATS),
    default="mermaid",
    show_default=True,
    help="Mermaid flowchart, Graphviz DOT, or a JSON node/edge list.",
)
@click.option(
    "-d",
    "--direction",
    type=click.Choice(_DIRECTIONS),
    default="TD",
    show_default=True,
    help="Layout direction: top-down (TD/TB), bottom-up, left-right or right-left.",
)
@click.option("--markdown", is_flag=True, help="Wrap the output in a fenced code block.")
@click.option("--descriptions", is_flag=True, help="Add descriptions to the labels.")
def graph(
    project: str,
    entry_id: str | None,
    output_format: str,
    direction: str,
    markdown: bool,
    descriptions: bool,
) -> None:
    """Draw an entry of PROJECT: its steps and dependencies, or an agent's turn loop
    (decide, calls, reduce) and its tools."""
    from tubeless.reporting.graph import render_graph

    _, _, pipeline = _entry(project, entry_id)
    text = render_graph(
        pipeline,
        format=output_format,
        direction=direction,
        descriptions=descriptions,
        markdown=markdown,
    )
    click.echo(text, nl=False)


@click.command("list", short_help="List the entries of a project, or of each one in a folder.")
@click.argument("project", metavar="PROJECT|DIR", type=click.Path(path_type=str))
@click.option("--json", "as_json", is_flag=True, help="Print the project inventory as JSON.")
@click.pass_context
def list_(ctx: click.Context, project: str, as_json: bool) -> None:
    """List the entries of PROJECT: one line each, `ID<TAB>KIND[<TAB>NAME]`, the default
    entry followed by ` (default)`.

    For a DIR, every project file in it (searched as `tubeless validate DIR` does) is listed in
    sorted order: its path and a colon, then its entries indented by two spaces, a blank line
    between projects. A project that cannot be loaded gets its `error:` lines on stderr and the
    others are still listed; the exit code is that of the worst failure (2 before 4 before 3).
    With --json a DIR prints a list of inventories.
    """
    if os.path.isdir(project):
        _list_folder(ctx, project, as_json)
        return
    loaded = _load(project)
    if as_json:
        _echo_json(_inventory(loaded))
        return
    for line in _entry_lines(loaded):
        click.echo(line)


def _project_files(folder: str) -> list[str]:
    """The project files in ``folder``, in sorted order: the rule of ``tubeless validate DIR``
    (this is the one place ``list`` decides which files are projects)."""
    from tubeless.project._spi import projects_in

    return list(projects_in(folder))


def _list_folder(ctx: click.Context, folder: str, as_json: bool) -> None:
    from tubeless._cli._exit import EXIT_LOAD, EXIT_VALIDATION, exit_code_for, report_error

    files = _project_files(folder)
    if not files:
        raise CliLoadError(f"{folder}: no project files found")
    debug = getattr(ctx.obj, "debug", False) is True
    inventories: list[dict[str, Any]] = []
    codes: list[int] = []
    printed = False
    for path in files:
        try:
            loaded = _load(path)
        except Exception as exc:  # one broken project must not hide the others
            report_error(exc, debug=debug)
            codes.append(exit_code_for(exc, command="list"))
            continue
        if as_json:
            inventories.append(_inventory(loaded))
            continue
        if printed:
            click.echo("")
        printed = True
        click.echo(f"{path}:")
        for line in _entry_lines(loaded):
            click.echo(f"  {line}")
    if as_json:
        _echo_json(inventories)
    if codes:
        worst = [code for code in (EXIT_LOAD, EXIT_VALIDATION) if code in codes]
        ctx.exit(worst[0] if worst else max(codes))


def _inventory(loaded: Project) -> dict[str, Any]:
    return {
        "id": loaded.id,
        "name": loaded.name,
        "description": loaded.description,
        "default": loaded.default,
        "path": str(loaded.path.resolve()),
        "agents": list(loaded.agents),
        "pipelines": list(loaded.pipelines),
    }


def _entry_lines(loaded: Project) -> list[str]:
    lines: list[str] = []
    for entry_id, pipeline in loaded.entries.items():
        fields = [entry_id, "agent" if entry_id in loaded.agents else "pipeline"]
        if pipeline.name:
            fields.append(pipeline.name)
        line = "\t".join(fields)
        if entry_id == loaded.default:
            line += " (default)"
        lines.append(line)
    return lines
