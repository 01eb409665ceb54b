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
from tubeless._cli.init import init
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


# A bare `tubeless` prints the help and exits 0: the group is invoked without a command and says
# so itself (click's no_args_is_help exits with a code that varies by version).
@click.group(
    name="tubeless",
    invoke_without_command=True,
    subcommand_metavar="COMMAND [ARGS]...",
    context_settings={"help_option_names": ["--help", "-h"]},
)
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
    if ctx.invoked_subcommand is None:
        click.echo(ctx.get_help())
        ctx.exit(EXIT_OK)


#: Options of the `tubeless` group that users often put after the subcommand.
_GROUP_OPTIONS = frozenset({"-v", "-vv", "--verbose", "--debug"})


def _hint_group_option(exc: BaseException) -> BaseException:
    """Say where ``-v`` / ``--debug`` go when they were given after a subcommand."""
    if isinstance(exc, click.NoSuchOption) and exc.option_name in _GROUP_OPTIONS:
        return click.UsageError(
            f"{exc.message} ({exc.option_name} is an option of tubeless itself: put it before "
            f"the command, e.g. `tubeless {exc.option_name} run ...`)",
            ctx=exc.ctx,
        )
    return exc


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
        exc = _hint_group_option(exc)
        report_error(exc, debug=state.debug)
        return exit_code_for(exc, command=state.command)
    # Without standalone mode click returns the code of a ctx.exit() (--help, --version) instead
    # of raising, and a command's own return value otherwise; commands return None.
    if isinstance(outcome, int) and not isinstance(outcome, bool):
        return outcome
    return EXIT_OK


cli.add_command(graph)
cli.add_command(init)
cli.add_command(inspect)
cli.add_command(list_)
cli.add_command(plan)
cli.add_command(run)
cli.add_command(schema)
cli.add_command(trace)
cli.add_command(validate)
