"""``exit_code_for`` implements the exit-code table of DESIGN.md §6; ``report_error`` prints it."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import click
import pytest

from tubeless._cli import CliLoadError, exit_code_for, report_error
from tubeless.errors import (
    AGENT_INVALID_DEFINITION,
    DEFINITION_STEP_INVALID,
    DEFINITION_STEPS_EMPTY,
    OPTIONS_VALIDATION_FAILED,
    PLANNING_STEP_UNKNOWN,
    RUN_CANCELLED,
    RUN_CONCURRENCY_INVALID,
    STEP_FAILED,
    AgentDefinitionError,
    DocumentError,
    ErrorKind,
    ErrorPhase,
    PipelineDefinitionError,
    PipelineError,
    PipelineExecutionError,
    PlanningError,
    ReferenceResolutionError,
    TemplateError,
    TubelessError,
)


def error(
    code: str, kind: ErrorKind, phase: ErrorPhase, *, step_id: str | None = None
) -> PipelineError:
    return PipelineError(code=code, kind=kind, phase=phase, message=f"{code} here", step_id=step_id)


def failed_run(*errors: PipelineError, status: str = "failed") -> PipelineExecutionError:
    """A real ``PipelineExecutionError`` around a stand-in run carrying only what it reads."""
    run: Any = SimpleNamespace(pipeline_id="demo", status=status, errors=errors)
    return PipelineExecutionError(run)


CANCELLED = error(RUN_CANCELLED, "cancellation", "execution")
STEP = error(STEP_FAILED, "step", "execution", step_id="fetch")
ROOT_OPTIONS = error(OPTIONS_VALIDATION_FAILED, "validation", "execution")
CHILD_OPTIONS = error(OPTIONS_VALIDATION_FAILED, "validation", "execution", step_id="child")
PLANNING = error(PLANNING_STEP_UNKNOWN, "selection", "planning")
DEFINITION = error(DEFINITION_STEPS_EMPTY, "definition", "definition")
CONCURRENCY = error(RUN_CONCURRENCY_INVALID, "definition", "definition")

CASES = [
    # usage errors: click's own exit 2 becomes 1, for every command
    pytest.param(click.UsageError("bad usage"), "run", 1, id="usage-run"),
    pytest.param(click.UsageError("bad usage"), "validate", 1, id="usage-validate"),
    pytest.param(click.UsageError("bad usage"), "trace", 1, id="usage-trace"),
    pytest.param(click.UsageError("bad usage"), None, 1, id="usage-no-command"),
    pytest.param(click.BadParameter("not a number"), "run", 1, id="bad-parameter"),
    pytest.param(click.NoSuchOption("--bogus"), "plan", 1, id="no-such-option"),
    pytest.param(click.MissingParameter(param_hint="PROJECT"), "run", 1, id="missing-argument"),
    pytest.param(click.BadOptionUsage("--x", "needs a value"), "run", 1, id="bad-option-usage"),
    pytest.param(click.ClickException("other click failure"), "run", 1, id="click-exception"),
    # explicit exits keep their code
    pytest.param(click.exceptions.Exit(0), "run", 0, id="exit-0"),
    pytest.param(click.exceptions.Exit(5), "plan", 5, id="exit-5"),
    pytest.param(SystemExit(3), "run", 3, id="system-exit-3"),
    pytest.param(SystemExit(None), "run", 0, id="system-exit-none"),
    # interrupts
    pytest.param(click.Abort(), "run", 7, id="abort"),
    pytest.param(KeyboardInterrupt(), "run", 7, id="keyboard-interrupt"),
    pytest.param(asyncio.CancelledError(), "run", 7, id="task-cancelled"),
    # files missing or unreadable
    pytest.param(FileNotFoundError(2, "No such file", "p.yaml"), "run", 2, id="missing-file"),
    pytest.param(FileNotFoundError(2, "No such file", "p.yaml"), "validate", 2, id="missing-val"),
    pytest.param(FileNotFoundError(2, "No such file", "t.ndjson"), "trace", 2, id="missing-trace"),
    pytest.param(PermissionError(13, "Permission denied", "p.yaml"), "plan", 2, id="unreadable"),
    pytest.param(IsADirectoryError(21, "Is a directory", "p"), "run", 2, id="is-a-directory"),
    pytest.param(OSError("disk on fire"), "run", 2, id="other-os-error"),
    pytest.param(click.FileError("p.yaml", hint="unreadable"), "run", 2, id="click-file-error"),
    # documents and templates
    pytest.param(DocumentError("bad document"), "run", 4, id="document-run"),
    pytest.param(DocumentError("bad document"), "plan", 4, id="document-plan"),
    pytest.param(DocumentError("bad document"), "validate", 4, id="document-validate"),
    pytest.param(TemplateError("bad template"), "run", 4, id="template-run"),
    pytest.param(TemplateError("bad template"), "validate", 4, id="template-validate"),
    # references
    pytest.param(ReferenceResolutionError("no such module"), "run", 2, id="reference-run"),
    pytest.param(ReferenceResolutionError("no such module"), "plan", 2, id="reference-plan"),
    pytest.param(ReferenceResolutionError("no such module"), "validate", 4, id="reference-val"),
    # unknown id / cannot load
    pytest.param(CliLoadError("unknown id 'x'"), "run", 2, id="load-run"),
    pytest.param(CliLoadError("unknown id 'x'"), "graph", 2, id="load-graph"),
    pytest.param(CliLoadError("unknown run 'x'"), "trace", 1, id="load-trace"),
    # definitions
    pytest.param(PipelineDefinitionError("demo", [DEFINITION]), "run", 3, id="definition-run"),
    pytest.param(PipelineDefinitionError("demo", [DEFINITION]), "inspect", 3, id="definition-insp"),
    pytest.param(PipelineDefinitionError("demo", [DEFINITION]), "validate", 4, id="definition-val"),
    pytest.param(AgentDefinitionError("bad limits"), "run", 3, id="agent-definition-run"),
    pytest.param(AgentDefinitionError("bad limits"), "validate", 4, id="agent-definition-val"),
    pytest.param(TubelessError(DEFINITION_STEP_INVALID, "bad"), "run", 3, id="definition-code"),
    pytest.param(TubelessError(AGENT_INVALID_DEFINITION, "bad"), "list", 3, id="agent-def-code"),
    pytest.param(
        PipelineDefinitionError("demo", [CONCURRENCY]), "run", 3, id="definition-whatever-its-code"
    ),
    # planning
    pytest.param(PlanningError("demo", [PLANNING]), "run", 5, id="planning-run"),
    pytest.param(PlanningError("demo", [PLANNING]), "plan", 5, id="planning-plan"),
    pytest.param(TubelessError(PLANNING_STEP_UNKNOWN, "no step"), "run", 5, id="planning-code"),
    # failed runs
    pytest.param(failed_run(CANCELLED, status="cancelled"), "run", 7, id="run-all-cancelled"),
    pytest.param(failed_run(CANCELLED, CANCELLED), "run", 7, id="run-cancelled-twice"),
    pytest.param(failed_run(CANCELLED, STEP), "run", 6, id="run-cancelled-and-failed"),
    pytest.param(failed_run(ROOT_OPTIONS), "run", 4, id="run-input-rejected"),
    pytest.param(failed_run(CHILD_OPTIONS), "run", 6, id="run-child-input-rejected"),
    pytest.param(failed_run(PLANNING), "run", 5, id="run-planning-phase"),
    pytest.param(failed_run(STEP, PLANNING), "run", 5, id="run-any-planning-phase"),
    pytest.param(failed_run(STEP), "run", 6, id="run-step-failed"),
    # anything else
    pytest.param(TubelessError(STEP_FAILED, "step failed"), "run", 6, id="other-tubeless-error"),
    pytest.param(RuntimeError("boom"), "run", 6, id="other-exception"),
    pytest.param(ValueError("boom"), None, 6, id="other-exception-no-command"),
]


@pytest.mark.parametrize(("exc", "command", "expected"), CASES)
def test_exit_code_for(exc: BaseException, command: str | None, expected: int) -> None:
    assert exit_code_for(exc, command=command) == expected


def test_exit_code_for_a_run_reads_errors_by_duck_typing() -> None:
    """The mapper never imports the pipeline package: any ``.run.errors`` shape will do."""
    exc = failed_run(STEP)
    exc.run = SimpleNamespace(errors=[SimpleNamespace(kind="cancellation")])  # type: ignore[assignment]

    assert exit_code_for(exc, command="run") == 7


def stderr_lines(capsys: pytest.CaptureFixture[str]) -> list[str]:
    captured = capsys.readouterr()
    assert captured.out == ""
    return captured.err.splitlines()


@pytest.mark.parametrize(
    ("exc", "expected"),
    [
        pytest.param(
            TemplateError("bad template"),
            ["error: TUBELESS_TEMPLATE_INVALID: bad template"],
            id="tubeless-error",
        ),
        pytest.param(
            AgentDefinitionError("max_turns must be >= 1"),
            ["error: TUBELESS_AGENT_INVALID_DEFINITION: max_turns must be >= 1"],
            id="agent-definition",
        ),
        pytest.param(
            PipelineDefinitionError("demo", [DEFINITION, PLANNING]),
            [
                "error: TUBELESS_DEFINITION_STEPS_EMPTY: TUBELESS_DEFINITION_STEPS_EMPTY here",
                "error: TUBELESS_PLANNING_STEP_UNKNOWN: TUBELESS_PLANNING_STEP_UNKNOWN here",
            ],
            id="one-line-per-definition-problem",
        ),
        pytest.param(
            failed_run(STEP, CANCELLED),
            [
                "error: TUBELESS_STEP_FAILED: step fetch: TUBELESS_STEP_FAILED here",
                "error: TUBELESS_RUN_CANCELLED: TUBELESS_RUN_CANCELLED here",
            ],
            id="one-line-per-run-error",
        ),
        pytest.param(
            DocumentError(
                "2 problems",
                [
                    SimpleNamespace(format=lambda: "p.yaml:3:5 /version: expected 1"),
                    "p.yaml:9:1 /agents: unknown key",
                ],
            ),
            ["error: p.yaml:3:5 /version: expected 1", "error: p.yaml:9:1 /agents: unknown key"],
            id="one-line-per-document-issue",
        ),
        pytest.param(
            DocumentError("not a mapping"),
            ["error: TUBELESS_DOCUMENT_INVALID: not a mapping"],
            id="document-without-issues",
        ),
        pytest.param(
            FileNotFoundError(2, "No such file or directory", "p.yaml"),
            ["error: p.yaml: No such file or directory"],
            id="missing-file",
        ),
        pytest.param(CliLoadError("unknown id 'x'"), ["error: unknown id 'x'"], id="load"),
        pytest.param(click.Abort(), ["error: interrupted"], id="abort"),
        pytest.param(RuntimeError("boom"), ["error: RuntimeError: boom"], id="other-exception"),
        pytest.param(KeyError("b"), ["error: KeyError: 'b'"], id="other-exception-keeps-its-type"),
        pytest.param(
            ValueError("two\nlines\x1b[31m"),
            ["error: ValueError: two lines [31m"],
            id="every-line-is-one-line",
        ),
        pytest.param(RuntimeError(), ["error: RuntimeError"], id="other-exception-no-message"),
        pytest.param(click.exceptions.Exit(0), [], id="exit-prints-nothing"),
    ],
)
def test_report_error_prints_one_line_per_problem(
    exc: BaseException, expected: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    report_error(exc, debug=False)

    assert stderr_lines(capsys) == expected


def test_report_error_shows_click_usage_errors_with_the_usage_hint(
    capsys: pytest.CaptureFixture[str],
) -> None:
    ctx = click.Context(click.Command("tubeless"), info_name="tubeless")

    report_error(click.UsageError("Pass a command.", ctx), debug=False)

    assert stderr_lines(capsys) == [
        "error: Pass a command.",
        "Usage: tubeless [OPTIONS]",
        "Try 'tubeless --help' for help.",
    ]


def raised(exc: BaseException) -> BaseException:
    """``exc`` after being raised, so it carries a traceback."""
    try:
        raise exc
    except BaseException as caught:
        return caught


def test_report_error_shows_a_traceback_only_with_debug(
    capsys: pytest.CaptureFixture[str],
) -> None:
    exc = raised(RuntimeError("boom"))

    report_error(exc, debug=False)
    quiet = stderr_lines(capsys)
    report_error(exc, debug=True)
    loud = stderr_lines(capsys)

    assert quiet == ["error: RuntimeError: boom"]
    assert loud[0] == "Traceback (most recent call last):"
    assert loud[-2:] == ["RuntimeError: boom", "error: RuntimeError: boom"]
