"""The ``tubeless`` click group and the ``main()`` entry point.

The commands are listed in :mod:`tubeless._cli._commands` (module, attribute, short help) and a
command's module is imported only when that command is asked for: ``tubeless --help`` and
``tubeless validate`` start without importing what ``run`` or ``serve`` need. Each command is a
few lines calling one library function. Commands signal outcomes by raising (see
:mod:`tubeless._cli._exit` for the mapping) or, for a non-error exit status such as "plan not
ok", by ``ctx.exit(code)``.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TextIO

import click

from tubeless._cli._commands import COMMANDS, load_command
from tubeless._cli._exit import EXIT_OK, exit_code_for, report_error
from tubeless._version import __version__

__all__ = ["CliState", "cli", "main"]

#: The exit status when the reader of the output went away (``tubeless ... | head -1``): 128 +
#: SIGPIPE, what a shell reports for git, grep or cat in the same pipeline.
EXIT_CLOSED_OUTPUT = 141

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
    """The ``tubeless.run`` logger as this command's ``-v`` asks: a command without ``-v`` in a
    process where an earlier one had it (a test, a program calling ``main`` twice) shows no
    handler logs either."""
    logger = logging.getLogger(RUN_LOGGER)
    if not verbose:
        for handler in [h for h in logger.handlers if isinstance(h, _StderrHandler)]:
            logger.removeHandler(handler)
            logger.setLevel(logging.NOTSET)
        return
    logger.setLevel(logging.DEBUG if verbose > 1 else logging.INFO)
    if not any(isinstance(handler, _StderrHandler) for handler in logger.handlers):
        handler = _StderrHandler()
        handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
        logger.addHandler(handler)


class _OutputClosed(Exception):
    """A write found its pipe's reader gone (raised in place of the ``BrokenPipeError``)."""


@contextlib.contextmanager
def _output_closed_is_not_an_os_error() -> Iterator[None]:
    """Re-raise ``EPIPE`` as :class:`_OutputClosed`: click's ``main`` turns an ``EPIPE`` into a
    plain ``SystemExit(1)`` even without standalone mode, which ``main()`` could not tell apart
    from a command's own exit 1."""
    try:
        yield
    except OSError as exc:
        if exc.errno != errno.EPIPE:
            raise
        raise _OutputClosed() from exc


class _Group(click.Group):
    """The ``tubeless`` group: its commands are loaded when first asked for (click's lazy-group
    pattern), and a closed output while parsing (``--help``) or running a command reaches
    ``main()`` as :class:`_OutputClosed`."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*COMMANDS, *self.commands})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        command = self.commands.get(cmd_name)
        if command is None and cmd_name in COMMANDS:
            command = load_command(cmd_name)
            self.add_command(command, cmd_name)
        return command

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        try:
            return super().resolve_command(ctx, args)
        except click.UsageError as exc:
            # click (8.4 and later) suggests a close name among the commands loaded so far:
            # suggest among them all, as before they were loaded lazily.
            no_such = getattr(click, "NoSuchCommand", None)
            if no_such is None or not isinstance(exc, no_such):
                raise
            raise no_such(
                exc.command_name, possibilities=self.list_commands(ctx), ctx=exc.ctx
            ) from None

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The commands' table, as click writes it, from the short helps of
        :data:`~tubeless._cli._commands.COMMANDS` for the commands not loaded yet (so ``--help``
        imports none of them)."""
        rows = []
        for name in self.list_commands(ctx):
            command = self.commands.get(name)
            if command is None:
                command = COMMANDS[name].stand_in(name)
            if not command.hidden:
                rows.append((name, command))
        if not rows:
            return
        limit = formatter.width - 6 - max(len(name) for name, _ in rows)
        with formatter.section("Commands"):
            formatter.write_dl([(name, cmd.get_short_help_str(limit)) for name, cmd in rows])

    def make_context(
        self,
        info_name: str | None,
        args: list[str],
        parent: click.Context | None = None,
        **extra: Any,
    ) -> click.Context:
        with _output_closed_is_not_an_os_error():
            return super().make_context(info_name, args, parent, **extra)

    def invoke(self, ctx: click.Context) -> Any:
        with _output_closed_is_not_an_os_error():
            return super().invoke(ctx)


# A bare `tubeless` prints the help and exits 0: the group is invoked without a command and says
# so itself (click's no_args_is_help exits with a code that varies by version).
@click.group(
    name="tubeless",
    cls=_Group,
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
        The process exit code (DESIGN.md §6), or 141 when stdout or stderr was closed by its
        reader: then nothing more is written, and the exit is quiet.
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
        if _is_broken_pipe(exc):
            return _closed_output()
        exc = _hint_group_option(exc)
        try:
            report_error(exc, debug=state.debug)
        except BrokenPipeError:  # stderr's reader is gone too
            return _closed_output()
        return exit_code_for(exc, command=state.command)
    # Without standalone mode click returns the code of a ctx.exit() (--help, --version) instead
    # of raising, and a command's own return value otherwise; commands return None.
    if isinstance(outcome, int) and not isinstance(outcome, bool):
        return outcome
    return EXIT_OK


def _is_broken_pipe(exc: BaseException) -> bool:
    """Whether ``exc`` says the output's reader went away."""
    return isinstance(exc, _OutputClosed) or (isinstance(exc, OSError) and exc.errno == errno.EPIPE)


def _closed_output() -> int:
    """Stop writing, quietly: a stream that still holds what it could not write has its file
    descriptor pointed at the null device, so that the interpreter's final flush succeeds
    instead of reporting a second ``BrokenPipeError`` (and exiting 120)."""
    streams: list[TextIO] = []
    for candidate in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        if candidate is not None and all(candidate is not seen for seen in streams):
            streams.append(candidate)
    for stream in streams:
        try:
            stream.flush()
        except BrokenPipeError:
            _discard(stream)
        except (OSError, ValueError):
            pass  # closed or detached: nothing to flush at exit either
    return EXIT_CLOSED_OUTPUT


def _discard(stream: TextIO) -> None:
    """Point ``stream``'s file descriptor at the null device."""
    with contextlib.suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, stream.fileno())
        finally:
            os.close(devnull)
