"""Every ``tubeless`` command: where it lives and its one-line help, in one table.

The group (:mod:`tubeless._cli._app`) imports a command's module only when the command is
asked for, so that ``tubeless --help`` or ``tubeless validate`` does not import what ``run``,
``serve`` or ``batch`` need (``asyncio``, the pipeline core, the durable stores, extras). The
help's command table is written from the short helps here: each is what click derives from the
command itself (its ``short_help``, or the first sentence of its help), and
``tests/cli/test_cli_imports.py`` checks the two agree for every command at every width.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import import_module
from typing import Final

import click

__all__ = ["COMMANDS", "LazyCommand", "load_command"]


@dataclass(frozen=True, kw_only=True, slots=True)
class LazyCommand:
    """Where a command is defined, and the short help ``tubeless --help`` shows for it."""

    module: str
    """The module defining the command, e.g. ``tubeless._cli.validate``."""
    attribute: str
    """The command object's name in that module."""
    short_help: str
    """The command's one-line help, as click shows it without a width limit."""
    explicit: bool
    """Whether the command sets ``short_help`` itself (click never shortens that one), rather
    than click deriving it from the help (shortened to the width, with ``...``)."""

    def stand_in(self, name: str) -> click.Command:
        """A command that only writes the same help-table row as the real one."""
        if self.explicit:
            return click.Command(name, short_help=self.short_help)
        return click.Command(name, help=self.short_help)


def _command(module: str, attribute: str, short_help: str, *, explicit: bool) -> LazyCommand:
    return LazyCommand(
        module=f"tubeless._cli.{module}",
        attribute=attribute,
        short_help=short_help,
        explicit=explicit,
    )


#: The commands by name, in no particular order (click sorts them for the help).
COMMANDS: Final[dict[str, LazyCommand]] = {
    "approve": _command(
        "decide", "approve", "Approve a call a checkpointed run waits for.", explicit=True
    ),
    "batch": _command(
        "batch",
        "batch",
        "Run an entry of PROJECT once per input of INPUTS (JSONL, a JSON array or a YAML "
        "list; - for stdin) and write one JSON row per input, in input order.",
        explicit=False,
    ),
    "checkpoints": _command(
        "checkpoints",
        "checkpoints",
        "List, show, delete or raise the checkpoints of a file.",
        explicit=True,
    ),
    "deny": _command("decide", "deny", "Deny a call a checkpointed run waits for.", explicit=True),
    "eval": _command(
        "eval",
        "eval_",
        "Run the cases of CASES (YAML) on PROJECT and check each case's expectations.",
        explicit=False,
    ),
    "graph": _command(
        "look", "graph", "Draw an entry as Mermaid, Graphviz DOT or JSON.", explicit=True
    ),
    "init": _command(
        "init",
        "init",
        "Write a first project into DIRECTORY (default: the current folder).",
        explicit=False,
    ),
    "inspect": _command(
        "look",
        "inspect",
        "Show an entry: input, steps, identity, plan, limits, tools.",
        explicit=True,
    ),
    "list": _command(
        "look",
        "list_",
        "List the entries of a project, or of each one in a folder.",
        explicit=True,
    ),
    "mcp-serve": _command(
        "mcp_serve",
        "mcp_serve",
        "Serve a project's entries as MCP tools over stdio.",
        explicit=True,
    ),
    "plan": _command(
        "look", "plan", "Show what a run would do, without running anything.", explicit=True
    ),
    "run": _command(
        "run",
        "run",
        "Run an agent or pipeline of PROJECT (a YAML file) and print its result as JSON.",
        explicit=False,
    ),
    "schema": _command(
        "schema",
        "schema",
        "Print the project meta-schema (JSON Schema, draft 2020-12) on stdout.",
        explicit=False,
    ),
    "serve": _command(
        "serve",
        "serve",
        "Serve a project over HTTP (runs, approvals, event streams).",
        explicit=True,
    ),
    "trace": _command(
        "trace",
        "trace",
        "Show stored traces, convert them between NDJSON, SQLite and Postgres, or export them "
        "as spans.",
        explicit=False,
    ),
    "ui": _command("ui", "ui", "Web pages over trace and checkpoint stores.", explicit=True),
    "validate": _command(
        "validate",
        "validate",
        "Check project files: structure, meta-schema, cross-references and template syntax.",
        explicit=False,
    ),
}


def load_command(name: str) -> click.Command:
    """Import the command ``name`` of :data:`COMMANDS`."""
    entry = COMMANDS[name]
    command = getattr(import_module(entry.module), entry.attribute)
    assert isinstance(command, click.Command), entry
    return command
