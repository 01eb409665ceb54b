"""The ``tubeless`` click group and the ``main()`` entry point.

Commands are added with ``cli.add_command(...)``; each is a few lines calling one library
function. Commands signal outcomes by raising (see :mod:`tubeless._cli._exit` for the mapping) or,
for a non-error exit status such as "plan not ok", by ``ctx.exit(code)``.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TextIO

import click

from tubeless._cli._exit import EXIT_OK, exit_code_for, report_error
from tubeless._cli.look import graph, inspect, list_, plan
from tubeless._cli.run import run
from tubeless._cli.schema import schema
from tubeless._cli.trace import trace
from tubeless._cli.validate import validate
from tubeless._version import __version__

__all__ = ["CliState", "cli", "main"]

#: The logger that ``ctx.log`` in handlers feeds (DESIGN.md §3); ``-v`` shows it on stderr.
RUN_LOGGER = "tubeless.run"


@dataclass(kw_only=True, slots=True)
class CliState:
    """What the top-level options decided, shared with subcommands as ``ctx.obj``."""

    verbose: int = 0
    """How many times ``-v`` was given."""
    debug: bool = False
    """Whether errors show a traceback."""
    command: str | None = None
    """The top-level subcommand being run, once click has resolved it."""


class _StderrHandler(logging.StreamHandler[TextIO]):
    """Writes to whatever ``sys.stderr`` is at emit time (so it follows redirection)."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)

    @property
    def stream(self) -> TextIO:
        return sys.stderr

    @stream.setter
    def stream(self, value: TextIO) -> None:
        """Ignored: the handler always writes to the current ``sys.stderr``."""


def _configure_logging(verbose: int) -> None:
    logger = logging.getLogger(RUN_LOGGER)
    logger.setLevel(logging.DEBUG if verbose > 1 else logging.INFO)
    if not any(isinstance(handler, _StderrHandler) for handler in logger.handlers):
        handler = _StderrHandler()
        handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
        logger.addHandler(handler)


# Without a command click reports "Missing command." as a usage error (exit 1), whatever its
# version; no_args_is_help would print the help instead, with an exit code that varies by version.
@click.group(name="tubeless", no_args_is_help=False)
@click.version_option(
    __version__, "--version", prog_name="tubeless", message="%(prog)s %(version)s"
)
@click.option(
    "-v",
    "--verbose",
    count=True,
    help="Show handler logs (the tubeless.run logger) on stderr; -vv adds debug messages.",
)
@click.option("--debug", is_flag=True, help="Show a traceback when a command fails.")
@click.pass_context
def cli(ctx: click.Context, verbose: int, debug: bool) -> None:
    """Run, plan and inspect declarative agent projects."""
    state = ctx.ensure_object(CliState)
    state.verbose = verbose
    state.debug = debug
    state.command = ctx.invoked_subcommand
    if verbose:
        _configure_logging(verbose)


def main(args: Sequence[str] | None = None) -> int:
    """Run the CLI and return its exit code; every failure is reported and mapped here.

    Args:
        args: The arguments after the program name; ``sys.argv[1:]`` when ``None``.

    Returns:
        The process exit code (DESIGN.md §6).
    """
    state = CliState()
    try:
        outcome = cli.main(
            args=list(sys.argv[1:] if args is None else args),
            prog_name="tubeless",
            standalone_mode=False,
            obj=state,
        )
    except BaseException as exc:  # The CLI's outermost boundary: everything becomes a code.
        report_error(exc, debug=state.debug)
        return exit_code_for(exc, command=state.command)
    # Without standalone mode click returns the code of a ctx.exit() (--help, --version) instead
    # of raising, and a command's own return value otherwise; commands return None.
    if isinstance(outcome, int) and not isinstance(outcome, bool):
        return outcome
    return EXIT_OK


cli.add_command(graph)
cli.add_command(inspect)
cli.add_command(list_)
cli.add_command(plan)
cli.add_command(run)
cli.add_command(schema)
cli.add_command(trace)
cli.add_command(validate)
