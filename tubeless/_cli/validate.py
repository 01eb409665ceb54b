"""``tubeless validate``: check project files in CI, without importing anything from them.

By default each file goes through :func:`tubeless.project.check_project` (safe loading, the
meta-schema, cross-references and template syntax), which imports and runs nothing from the
project, so the command is safe on untrusted pull requests. ``--resolve`` goes through
:func:`tubeless.project.load_project` instead, which also imports every reference and compiles
the agents and pipelines.

What a project file is has one rule, for folders, named files and the pre-commit hook alike
(:mod:`tubeless.project._files`): a ``.yaml`` / ``.yml`` file whose top level has any project key,
or whose ``yaml-language-server`` header names the project schema, and that is not an eval cases
file; so a project with a misspelt key is checked, never passed over. A named file that does not
follow it is skipped with a note; a run that finds no project file at all exits 2 unless
``--allow-empty`` is given.

Every file is checked, whatever the earlier ones gave; the exit code comes from
:func:`tubeless._cli._exit.exit_code_for` (the ``validate`` column of DESIGN.md §6), and a file
that cannot be read (2) outranks an invalid one (4).

The project package is imported inside the command: ``tubeless --help`` imports this module
and must not pay for pydantic, jsonschema or yaml (:mod:`tubeless.errors` is cheap, and
:mod:`tubeless._cli._exit` imports it anyway).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

import click

from tubeless._cli._exit import EXIT_LOAD, EXIT_OK, EXIT_VALIDATION, exit_code_for
from tubeless.errors import (
    AgentDefinitionError,
    DocumentError,
    PipelineDefinitionError,
    ReferenceResolutionError,
    TemplateError,
    is_definition_code,
)

__all__ = ["validate"]

Format = Literal["text", "json", "github"]

#: C0 and C1 controls, DEL, the bidi controls that can reorder what a terminal shows, and lone
#: surrogates (a ``"\udcff"`` key, or a file name that is not UTF-8), which no output can encode.
_UNPRINTABLE: Final = re.compile(
    r"[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\ud800-\udfff]"
)


@dataclass(frozen=True, kw_only=True, slots=True)
class _Problem:
    """One problem of one file, in the shape of ``--format json``."""

    code: str | None
    message: str
    pointer: str | None = None
    line: int | None = None
    column: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "code": self.code,
            "message": self.message,
            "pointer": self.pointer,
            "line": self.line,
            "column": self.column,
        }


@dataclass(frozen=True, kw_only=True, slots=True)
class _Outcome:
    """What checking one file gave."""

    file: str
    exit_code: int = EXIT_OK
    problems: tuple[_Problem, ...] = ()

    @property
    def ok(self) -> bool:
        return self.exit_code == EXIT_OK


@click.command("validate")
@click.argument("file_or_dir", nargs=-1, required=True, type=click.Path(path_type=str))
@click.option(
    "--format",
    "output_format",
    type=click.Choice(["text", "json", "github"]),
    default=None,
    help="text (default): 'ok: FILE' on stdout, 'error: FILE:LINE:COL POINTER: MESSAGE' on "
    "stderr; json: one object on stdout; github: ::error annotations on stdout, their paths "
    "relative to $GITHUB_WORKSPACE when it is set.",
)
@click.option("--json", "as_json", is_flag=True, help="Same as --format json.")
@click.option(
    "--resolve",
    is_flag=True,
    help="Also import every reference and compile the agents and pipelines. This runs the "
    "project's Python code: use it only on files you trust.",
)
@click.option(
    "--allow-empty",
    is_flag=True,
    help="Exit 0 with a warning when the paths hold no project file (default: exit 2).",
)
def validate(
    file_or_dir: Sequence[str],
    output_format: Format | None,
    as_json: bool,
    resolve: bool,
    allow_empty: bool,
) -> None:
    """Check project files: structure, meta-schema, cross-references and template syntax.

    Without --resolve nothing is imported or run from the projects, so this is safe on
    untrusted pull requests.

    A project file is a *.yaml or *.yml file whose top level has a project key (version: 1,
    project:, agents:, pipelines:, python_path:, mcp_servers:, allow_modules:) at the start of a
    line, or whose yaml-language-server header names the project schema; eval cases files (cases:
    or entry: and no project-only key) are not. A DIR is searched recursively for them (hidden
    folders such as .git are skipped; other YAML files, such as CI configs, are passed over) and
    they are checked in sorted order. A FILE that is not a project file is skipped with a note
    on stderr; a FILE that does not exist is an error.

    Exit status: 0 when every file is valid, 4 when a file is invalid, 2 when a file is missing
    or unreadable (this outranks 4) or when no project file is found at all (unless
    --allow-empty), 1 for a usage error.
    """
    if as_json and output_format not in (None, "json"):
        raise click.UsageError(f"--json conflicts with --format {output_format}")
    chosen: Format = "json" if as_json else output_format or "text"
    files, empty_folders = _files(file_or_dir)
    if not files and not allow_empty:
        _report_nothing_found(file_or_dir, chosen)
        click.get_current_context().exit(EXIT_LOAD)
    for folder in empty_folders:
        click.echo(_printable(f"warning: {folder}: no project files found"), err=True)
    outcomes = [_check(file, resolve=resolve) for file in files]
    _report(outcomes, chosen)
    codes = {outcome.exit_code for outcome in outcomes}
    for code in (EXIT_LOAD, EXIT_VALIDATION):
        if code in codes:
            click.get_current_context().exit(code)
    assert codes <= {EXIT_OK}, codes


# -- finding files ------------------------------------------------------------------------------
def _files(paths: Sequence[str]) -> tuple[list[str], list[str]]:
    """The files to check, in argument order (each directory's in sorted order), once each; and
    the directories in which none was found."""
    from tubeless.project._spi import projects_in

    found: dict[str, None] = {}
    empty_folders: list[str] = []
    for path in paths:
        if os.path.isdir(path):
            projects = list(projects_in(path))
            if not projects:
                empty_folders.append(path)
            found.update(dict.fromkeys(projects))
        elif _named_file_is_checked(path):
            found[path] = None  # a missing file is reported when it is checked
    return list(found), empty_folders


def _named_file_is_checked(path: str) -> bool:
    """Whether a file named on the command line is a project file; a note says why not.

    Anything that is not a regular file (missing, a special file) is left to the check, which
    reports it; so is a file that cannot be read.
    """
    from tubeless.project._spi import not_a_project

    if not os.path.isfile(path):
        return True
    reason = not_a_project(path)
    if reason is None:
        return True
    click.echo(_printable(f"skipped: {path}: not a project file ({reason})"), err=True)
    return False


# -- checking -----------------------------------------------------------------------------------
def _check(file: str, *, resolve: bool) -> _Outcome:
    from tubeless.project import check_project, load_project

    try:
        if resolve:
            load_project(file)
        else:
            check_project(file)
    except OSError as exc:
        reason = exc.strerror or str(exc) or type(exc).__name__
        return _Outcome(
            file=file,
            exit_code=exit_code_for(exc, command="validate"),
            problems=(_Problem(code=None, message=reason),),
        )
    except (DocumentError, TemplateError, ReferenceResolutionError) as exc:
        _show_traceback(exc)
        problems = tuple(_Problem(**issue.to_dict()) for issue in exc.issues) or (
            _Problem(code=exc.code, message=exc.message),
        )
        return _Outcome(
            file=file, exit_code=exit_code_for(exc, command="validate"), problems=problems
        )
    except (PipelineDefinitionError, AgentDefinitionError) as exc:
        _show_traceback(exc)
        return _Outcome(
            file=file,
            exit_code=exit_code_for(exc, command="validate"),
            problems=_definition_problems(exc),
        )
    return _Outcome(file=file)


def _show_traceback(exc: BaseException) -> None:
    """Under ``--debug``: the traceback of what ``exc`` restates (a failed import, the core's
    own definition error), then of ``exc``."""
    state = getattr(click.get_current_context(silent=True), "obj", None)  # the CliState
    if getattr(state, "debug", False) is True and exc.__cause__ is not None:
        import traceback

        click.echo("".join(traceback.format_exception(exc)).rstrip("\n"), err=True)


def _definition_problems(
    exc: PipelineDefinitionError | AgentDefinitionError,
) -> tuple[_Problem, ...]:
    """The core's problems, each where ``load_project`` located it."""
    if exc.issues:
        return tuple(_Problem(**issue.to_dict()) for issue in exc.issues)
    return (_Problem(code=exc.code, message=exc.message),)  # not from a project file


# -- reporting ----------------------------------------------------------------------------------
def _report_nothing_found(paths: Sequence[str], output_format: Format) -> None:
    """The error for a run whose paths hold no project file (each format stays well formed)."""
    from tubeless.project._spi import RULE

    message = _printable(
        f"{', '.join(paths)}: no project files found ({RULE}); pass --allow-empty to accept this"
    )
    if output_format == "json":
        click.echo(json.dumps({"ok": False, "files": []}, indent=2))
    elif output_format == "github":
        click.echo(f"::error::{_escape_data(message)}")
    click.echo(f"error: {message}", err=True)


def _report(outcomes: Sequence[_Outcome], output_format: Format) -> None:
    if output_format == "json":
        files = [
            {
                "file": outcome.file,
                "ok": outcome.ok,
                "errors": [problem.to_dict() for problem in outcome.problems],
            }
            for outcome in outcomes
        ]
        document = {"ok": all(outcome.ok for outcome in outcomes), "files": files}
        # ensure_ascii escapes every control and bidi character a hostile file could hold.
        click.echo(json.dumps(document, indent=2))
        return
    for outcome in outcomes:
        if output_format == "github":
            for problem in outcome.problems:
                click.echo(_printable(_annotation(outcome.file, problem)))
        elif outcome.ok:
            click.echo(_printable(f"ok: {outcome.file}"))
        else:
            for problem in outcome.problems:
                click.echo(_printable(f"error: {_text(outcome, problem)}"), err=True)


def _printable(line: str) -> str:
    """``line`` with control and bidi characters escaped (``\\n``, ``\\x1b``, ``\\u202e``).

    Pointers and file names come from the checked files, which may be hostile (validate runs on
    pull requests): one problem stays one line, and nothing reaches the terminal as a control.
    """
    return _UNPRINTABLE.sub(lambda match: repr(match.group())[1:-1], line)


def _text(outcome: _Outcome, problem: _Problem) -> str:
    """``<file>:<line>:<col> <pointer>: <message>`` (as ``DocumentIssue.format()`` gives it)."""
    message = problem.message
    if problem.code is not None and is_definition_code(problem.code):
        message = f"[{problem.code}] {message}"
    if problem.line is None:
        return f"{outcome.file}: {message}"
    return f"{outcome.file}:{problem.line}:{problem.column} {problem.pointer or '/'}: {message}"


def _annotation(file: str, problem: _Problem) -> str:
    """A GitHub Actions ``::error`` workflow command for one problem."""
    properties = [f"file={_escape_property(_repository_path(file))}"]
    message = problem.message
    if problem.line is not None:
        properties += [f"line={problem.line}", f"col={problem.column}"]
        message = f"{problem.pointer or '/'}: {message}"
    if problem.code is not None:
        properties.append(f"title={_escape_property(problem.code)}")
    return f"::error {','.join(properties)}::{_escape_data(message)}"


def _repository_path(file: str) -> str:
    """``file`` as GitHub attaches annotations to it: normalised, without ``./``, and relative
    to the repository root when it is inside it.

    The root is ``$GITHUB_WORKSPACE`` when it is set (a step with ``working-directory:`` runs
    in a folder below it, and GitHub reads ``file=`` from the root), else the current directory.
    A file outside the root stays as it was given (normalised): GitHub shows it in the log
    without attaching it to a file.
    """
    path = os.path.normpath(file)
    root = os.environ.get("GITHUB_WORKSPACE") or None
    if root is None and not os.path.isabs(path):
        return path
    absolute = os.path.abspath(path)
    # Symlinks: getcwd() has them resolved and the workspace may not; compare with the file's
    # folder resolved too, but keep the file's own name (a symlinked project is annotated under
    # the name it was given).
    resolved = os.path.join(os.path.realpath(os.path.dirname(absolute)), os.path.basename(path))
    roots = [os.getcwd()] if root is None else [os.path.abspath(root), os.path.realpath(root)]
    for base in roots:
        for candidate in (absolute, resolved):
            try:
                relative = os.path.relpath(candidate, base)
            except ValueError:  # another drive on Windows
                continue
            if relative != os.pardir and not relative.startswith(os.pardir + os.sep):
                return relative
    return path


def _escape_data(text: str) -> str:
    """Escape a workflow command's message as GitHub's toolkit does."""
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_property(text: str) -> str:
    """Escape a workflow command's property value (``:`` and ``,`` delimit properties)."""
    return _escape_data(text).replace(":", "%3A").replace(",", "%2C")
