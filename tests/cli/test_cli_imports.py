"""Commands that run nothing start without importing what running needs.

Each check loads the CLI in a fresh interpreter, runs one command through ``main`` (click's
``main`` without standalone mode) and lists which of the watched modules ended up in
``sys.modules``: ``tubeless --help`` and ``--version`` import no command module and no
validator, ``tubeless validate`` imports the loader and its validators but not ``asyncio``, the
pipeline core, the agent harness, jinja2 (for a project without templates), the network and
storage libraries or any extra. No timing here: start-up times are measured in ``benchmarks/``
(W6).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import click
import pytest

from tubeless._cli import cli
from tubeless._cli._commands import COMMANDS, load_command

ROOT = Path(__file__).resolve().parents[2]
PROJECT = ROOT / "projects" / "scripted-agent.yaml"

#: What a command that runs nothing must not import.
RUNNING = [
    "asyncio",
    "httpx",
    "sqlite3",
    "rich",
    "tubeless.pipeline",
    "tubeless.agent",
    "tubeless.durable",
    "tubeless.providers",
    "tubeless.serve",
    "tubeless.batch",
    "tubeless.tracing",
    "tubeless.project._compile",
    # extras
    "starlette",
    "uvicorn",
    "mcp",
    "psycopg",
    "opentelemetry",
    "playwright",
    "ray",
]
#: What reading and checking a project needs, and nothing that runs nothing needs besides.
VALIDATORS = ["pydantic", "pydantic_core", "jsonschema", "yaml", "jinja2"]

_PROBE = """
import json, sys
from tubeless._cli import main
code = main(sys.argv[2:])
watched = json.loads(sys.argv[1])
print(json.dumps({"exit": code, "loaded": [m for m in watched if m in sys.modules]}))
"""


def _loaded_after(*args: str, cwd: Path = ROOT) -> tuple[int, list[str]]:
    """The exit code of ``tubeless ARGS...`` and which watched modules it imported."""
    watched = json.dumps(RUNNING + VALIDATORS)
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, watched, *args],
        capture_output=True,
        text=True,
        check=True,
        cwd=cwd,
        timeout=60,
    )
    report = json.loads(done.stdout.strip().splitlines()[-1])
    return report["exit"], report["loaded"]


@pytest.mark.parametrize("args", [["--help"], ["--version"], []])
def test_help_and_version_import_no_command_and_no_validator(args: list[str]) -> None:
    assert _loaded_after(*args) == (0, [])


def test_validate_imports_the_checks_only() -> None:
    """The scripted project (the one W6 times) has no templates: jinja2 is not needed."""
    code, loaded = _loaded_after("validate", str(PROJECT))
    assert code == 0
    assert loaded == ["pydantic", "pydantic_core", "jsonschema", "yaml"]


def test_validate_imports_jinja2_for_templates_and_still_nothing_that_runs(
    tmp_path: Path,
) -> None:
    project = tmp_path / "p.yaml"
    project.write_text(
        "version: 1\nproject: {id: p}\nagents:\n  a:\n"
        "    input: {schema: {type: object, properties: {q: {type: string}}}}\n"
        "    result: {schema: {}}\n"
        "    initial_state: {question: '{{ input.q }}', bad: '{{ input.q | nope }}'}\n"
        "    decide: examples.scripted_agent:decide\n"
    )
    code, loaded = _loaded_after("validate", str(project))
    assert code == 4  # the unknown filter, found by parsing the template
    assert loaded == VALIDATORS


def test_validate_of_an_invalid_project_reports_it_without_running_anything(
    tmp_path: Path,
) -> None:
    project = tmp_path / "p.yaml"
    project.write_text("version: 1\nproject: {id: p}\nagents:\n  a: {decide: m:f, tools: 3}\n")
    code, loaded = _loaded_after("validate", str(project))
    assert code == 4
    assert not set(loaded) & set(RUNNING)


@pytest.mark.parametrize("args", [["schema"], ["init", "{tmp}"]])
def test_schema_and_init_import_no_validator(args: list[str], tmp_path: Path) -> None:
    given = [arg.replace("{tmp}", str(tmp_path / "new")) for arg in args]
    assert _loaded_after(*given) == (0, [])


def test_listing_a_trace_imports_the_trace_reader_only(tmp_path: Path) -> None:
    trace = tmp_path / "t.ndjson"
    subprocess.run(
        [sys.executable, "-m", "tubeless", "run", str(PROJECT), "--quiet", "--trace", str(trace)],
        capture_output=True,
        check=True,
        cwd=ROOT,
        timeout=60,
    )
    code, loaded = _loaded_after("trace", "show", str(trace))
    assert code == 0
    # The NDJSON reader is part of tubeless.tracing; whether it needs sqlite3 is the tracing
    # package's business.
    assert sorted(set(loaded) - {"tubeless.tracing", "sqlite3"}) == []


def test_every_command_is_in_the_table_and_loads() -> None:
    """The table names every command once, under the name the command gives itself."""
    for name in COMMANDS:
        command = load_command(name)
        assert command.name == name
        assert not command.hidden
    assert cli.list_commands(click.Context(cli)) == sorted(COMMANDS)


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_the_tables_short_help_is_the_commands_own_at_every_width(name: str) -> None:
    """``--help`` writes each row from the table: it must say what the command would."""
    real = load_command(name)
    stand_in = COMMANDS[name].stand_in(name)
    for limit in range(1, 160):
        assert stand_in.get_short_help_str(limit) == real.get_short_help_str(limit), limit


@pytest.mark.parametrize("width", [40, 80, 120])
def test_help_lists_every_command_as_click_would(width: int) -> None:
    """The group's help with nothing loaded equals click's own table of the loaded commands."""
    group = click.Group("tubeless")
    for name in COMMANDS:
        group.add_command(load_command(name), name)
    expected = click.Context(group, terminal_width=width)
    formatter = expected.make_formatter()
    group.format_commands(expected, formatter)
    code = (
        "import sys, click\n"
        "from tubeless._cli import cli\n"
        f"ctx = click.Context(cli, terminal_width={width})\n"
        "formatter = ctx.make_formatter()\n"
        "cli.format_commands(ctx, formatter)\n"
        "sys.stdout.write(formatter.getvalue())\n"
        "assert not any(m.startswith('tubeless._cli.run') for m in sys.modules)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert done.stdout == formatter.getvalue()
    assert "validate" in done.stdout


def test_a_misspelt_command_is_still_told_the_closest_name() -> None:
    """click suggests among the commands it has: all of them, though none is loaded yet."""
    done = subprocess.run(
        [sys.executable, "-m", "tubeless", "valdate", "x.yaml"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    assert done.returncode == 1
    assert done.stderr.splitlines()[0] == (
        "error: No such command 'valdate'. Did you mean 'validate'?"
    )
