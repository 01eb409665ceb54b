"""The one place that turns an outcome into an exit code and an error report (DESIGN.md §6).

==========================================================  ===  ====  ========  =====
condition                                                   run  plan  validate  trace
==========================================================  ===  ====  ========  =====
usage error (click's own exit 2 is remapped)                1    1     1         1
a missing extra (``ImportError`` naming ``pip install``)    1    1     1         1
file missing or unreadable (``OSError``)                    2    2     2         2
``DocumentError``, ``TemplateError``                        4    4     4         -
``ReferenceResolutionError``                                2    2     4         -
``TUBELESS_TRACE_INVALID`` (an unreadable trace)            2    2     2         2
``TUBELESS_CASSETTE_INVALID`` (an unreadable cassette)      2    -     -         -
``TUBELESS_CHECKPOINT_INVALID`` / ``_CORRUPT``              2    -     -         -
unknown id / cannot load (``CliLoadError``)                 2    2     -         1
``TUBELESS_DEFINITION_*``, ``AGENT_INVALID_DEFINITION``     3    3     4         -
root ``OPTIONS_VALIDATION_FAILED`` in a failed run          4    -     -         -
``TUBELESS_PLANNING_*`` / a planning-phase run error        5    5     -         -
any other failure                                           6    -     -         -
all run errors are cancellations; Ctrl-C                    7    -     -         -
a checkpointed run waiting for approval (``run`` only)      8    -     -         -
==========================================================  ===  ====  ========  =====

This module must stay cheap to import (``tubeless --help`` loads it): it imports only click, the
standard library and :mod:`tubeless.errors` (the wording of failed runs,
:mod:`tubeless._cli._run_errors`, is loaded once a run has failed). Failed runs are recognised by
duck typing on ``.run.errors`` so that :mod:`tubeless.pipeline` is never imported here.
"""

from __future__ import annotations

import sys
import traceback
from collections.abc import Iterable, Mapping
from typing import Any

import click

from tubeless.errors import (
    AGENT_INVALID_DEFINITION,
    CASSETTE_INVALID,
    CHECKPOINT_CORRUPT,
    CHECKPOINT_INVALID,
    OPTIONS_VALIDATION_FAILED,
    TRACE_INVALID,
    AgentDefinitionError,
    BatchError,
    DocumentError,
    PipelineDefinitionError,
    PipelineExecutionError,
    PlanningError,
    ProjectError,
    ReferenceResolutionError,
    TemplateError,
    TubelessError,
    is_definition_code,
    one_line,
)

__all__ = [
    "EXIT_CANCELLED",
    "EXIT_DEFINITION",
    "EXIT_EXECUTION",
    "EXIT_LOAD",
    "EXIT_OK",
    "EXIT_PLANNING",
    "EXIT_USAGE",
    "EXIT_VALIDATION",
    "EXIT_WAITING",
    "CliInputError",
    "CliLoadError",
    "exit_code_for",
    "report_error",
]

EXIT_OK = 0
EXIT_USAGE = 1
EXIT_LOAD = 2
EXIT_DEFINITION = 3
EXIT_VALIDATION = 4
EXIT_PLANNING = 5
EXIT_EXECUTION = 6
EXIT_CANCELLED = 7
EXIT_WAITING = 8  # DESIGN.md §17: recognised by ``run`` itself (``_cli.checkpoints``)

_DEFINITION_PREFIX = "TUBELESS_DEFINITION_"
_PLANNING_PREFIX = "TUBELESS_PLANNING_"


class CliLoadError(Exception):
    """The command cannot find or load what it was asked for (an unknown id, say).

    Exits 2, or 1 under ``trace`` where an unknown run id is a usage mistake.
    """

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class CliInputError(Exception):
    """The run's input cannot be built from the flags, ``--input`` or ``--input-file`` (exit 4)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def exit_code_for(exc: BaseException, *, command: str | None = None) -> int:
    """The process exit code for ``exc`` raised while running ``command``.

    Args:
        exc: What ended the command.
        command: The top-level subcommand name (``run``, ``validate``, ``trace``, ...), or
            ``None`` when none was resolved.

    Returns:
        A code from the table in this module's docstring.
    """
    if isinstance(exc, click.exceptions.Exit):
        return exc.exit_code
    if isinstance(exc, SystemExit):
        return _system_exit_code(exc)
    if _is_interrupt(exc):
        return EXIT_CANCELLED
    if isinstance(exc, click.FileError):
        return EXIT_LOAD
    if isinstance(exc, click.ClickException):
        # UsageError and its subclasses carry click's 2; every click usage problem exits 1 here.
        return EXIT_USAGE
    if isinstance(exc, CliLoadError):
        return EXIT_USAGE if command == "trace" else EXIT_LOAD
    if isinstance(exc, CliInputError):
        return EXIT_VALIDATION
    if _missing_extra(exc):
        return EXIT_USAGE
    if isinstance(exc, OSError):
        return EXIT_LOAD
    if isinstance(exc, TubelessError):
        return _tubeless_exit_code(exc, command)
    return EXIT_EXECUTION


def _missing_extra(exc: BaseException) -> bool:
    """An optional dependency is missing and the message names the extra that installs it
    (``PostgresCheckpoints`` without psycopg): a usage error, as ``--trace`` says it."""
    return isinstance(exc, ImportError) and "pip install 'tubeless[" in str(exc)


def _is_interrupt(exc: BaseException) -> bool:
    """Ctrl-C (click turns it into ``Abort``) or a cancelled asyncio task."""
    if isinstance(exc, click.Abort | KeyboardInterrupt):
        return True
    # asyncio costs a third of the CLI's start-up, so it is not imported just for this check: a
    # CancelledError can only exist once something else has imported asyncio.
    asyncio = sys.modules.get("asyncio")
    return asyncio is not None and isinstance(exc, asyncio.CancelledError)


def _system_exit_code(exc: SystemExit) -> int:
    if exc.code is None:
        return EXIT_OK
    if isinstance(exc.code, int):
        return exc.code
    return EXIT_USAGE  # sys.exit("message") exits 1, as the interpreter does.


def _tubeless_exit_code(exc: TubelessError, command: str | None) -> int:
    if isinstance(exc, PipelineExecutionError):
        return _run_exit_code(exc)
    if isinstance(exc, DocumentError | TemplateError):
        return EXIT_VALIDATION
    if exc.code in (
        TRACE_INVALID,
        CASSETTE_INVALID,
        CHECKPOINT_INVALID,
        CHECKPOINT_CORRUPT,
    ) or isinstance(exc, BatchError):
        return EXIT_LOAD  # an unreadable trace, cassette, checkpoint or batch inputs file
    if isinstance(exc, ReferenceResolutionError):
        return EXIT_VALIDATION if command == "validate" else EXIT_LOAD
    if isinstance(exc, PipelineDefinitionError | AgentDefinitionError) or (
        exc.code.startswith(_DEFINITION_PREFIX) or exc.code == AGENT_INVALID_DEFINITION
    ):
        return EXIT_VALIDATION if command == "validate" else EXIT_DEFINITION
    if isinstance(exc, PlanningError) or exc.code.startswith(_PLANNING_PREFIX):
        return EXIT_PLANNING
    return EXIT_EXECUTION


def _run_exit_code(exc: PipelineExecutionError) -> int:
    errors = _run_errors(exc)
    if errors and all(getattr(error, "kind", None) == "cancellation" for error in errors):
        return EXIT_CANCELLED
    if any(
        getattr(error, "code", None) == OPTIONS_VALIDATION_FAILED
        and getattr(error, "step_id", None) is None
        for error in errors
    ):
        return EXIT_VALIDATION
    if any(getattr(error, "phase", None) == "planning" for error in errors):
        return EXIT_PLANNING
    return EXIT_EXECUTION


def _run_errors(exc: BaseException) -> tuple[Any, ...]:
    """The recorded errors of a failed run, read without importing the pipeline package."""
    run = getattr(exc, "run", None)
    errors = getattr(run, "errors", None)
    return tuple(errors) if isinstance(errors, Iterable) else ()


def report_error(
    exc: BaseException, *, debug: bool, flags: Mapping[str, str] | None = None
) -> None:
    """Print ``exc`` to stderr, one ``error:`` line per problem; a traceback only if ``debug``.

    Every line is one line: line breaks in a message become spaces, and control and bidi
    characters are replaced (as everywhere tubeless prints recorded text).

    Args:
        exc: What ended the command.
        debug: Whether ``--debug`` was given: print the traceback first (for a failed run, that
            of each handler exception that started an error, with its own cause chain).
        flags: For ``run``: the entry's derived flags, input property → option name (without
            ``--``), so that a missing input names the flag that supplies it.
    """
    if isinstance(exc, click.exceptions.Exit | SystemExit):
        return
    if debug and not isinstance(exc, click.ClickException | click.Abort | KeyboardInterrupt):
        for shown in _traceback_sources(exc):
            click.echo("".join(traceback.format_exception(shown)).rstrip("\n"), err=True)
    for line in _error_lines(exc, flags):
        click.echo(f"error: {_one_line(line)}", err=True)
    if isinstance(exc, click.UsageError):
        _echo_usage_hint(exc)


def _traceback_sources(exc: BaseException) -> list[BaseException]:
    """Whose traceback ``--debug`` shows: a failed run's original exceptions, else ``exc``."""
    if isinstance(exc, PipelineExecutionError) and exc.__cause__ is None:
        from tubeless._cli._run_errors import original_exceptions

        return original_exceptions(_run_errors(exc)) or [exc]
    return [exc]


def _one_line(text: str) -> str:
    from tubeless.tracing.projection import terminal_safe

    return terminal_safe(one_line(text))


def _error_lines(exc: BaseException, flags: Mapping[str, str] | None = None) -> list[str]:
    if _is_interrupt(exc):
        return ["interrupted"]
    if isinstance(exc, click.ClickException):
        return [exc.format_message()]
    if isinstance(exc, CliLoadError):
        return [exc.message]
    if isinstance(exc, PipelineExecutionError):
        from tubeless._cli._run_errors import run_error_line

        run = getattr(exc, "run", None)
        lines = [run_error_line(run, error, flags) for error in _run_errors(exc)]
        return lines or [f"{exc.code}: {exc.message}"]
    issues = getattr(exc, "issues", None)
    if isinstance(exc, ProjectError | PipelineDefinitionError | AgentDefinitionError) and issues:
        # load_project located them; a definition problem also names its code.
        return [_format_issue(issue) for issue in issues]
    if isinstance(exc, CliInputError):
        return [exc.message]
    if isinstance(exc, TubelessError) and exc.code == TRACE_INVALID:
        return [exc.message]  # already "<file>[:<line>]: <problem>", like a document issue
    if isinstance(exc, TubelessError):
        nested = getattr(exc, "errors", None)
        if isinstance(nested, tuple) and nested:
            return [f"{error.code}: {error.message}" for error in nested]
        return [f"{exc.code}: {exc.message}"]
    if _missing_extra(exc):
        return [str(exc)]
    if isinstance(exc, OSError) and exc.strerror and exc.filename is not None:
        return [f"{exc.filename}: {exc.strerror}"]
    # Anything else is said with its type: a KeyError('b') alone would read "'b'".
    text = str(exc)
    return [f"{type(exc).__name__}: {text}" if text else type(exc).__name__]


def _format_issue(issue: Any) -> str:
    """A document issue as ``<file>:<line>:<col> <pointer>: <message>`` (its ``format()``);
    a definition problem's message starts with its code in brackets, as ``validate`` says it."""
    formatted = getattr(issue, "format", None)
    if not callable(formatted):
        return str(issue)
    text = str(formatted())
    code, message = getattr(issue, "code", ""), getattr(issue, "message", "")
    if isinstance(code, str) and is_definition_code(code) and text.endswith(message):
        return f"{text.removesuffix(message)}[{code}] {message}"
    return text


def _echo_usage_hint(exc: click.UsageError) -> None:
    """The ``Usage:`` line and the ``Try '... --help'`` hint, as click's own ``show()`` prints."""
    ctx = exc.ctx
    if ctx is None:
        return
    click.echo(ctx.get_usage(), err=True, color=ctx.color)
    if ctx.command.get_help_option(ctx) is not None:
        hint = f"'{ctx.command_path} {ctx.help_option_names[0]}'"
        click.echo(f"Try {hint} for help.", err=True, color=ctx.color)
