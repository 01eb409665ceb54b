"""Exceptions from user code that are not ``Exception`` subclasses (issue 14 items 3 and 4): a
tool's ``StopIteration`` fails the run, a user ``BaseException`` fails it with a complete trace,
a ``KeyboardInterrupt`` cancels it, and the CLI exits with the documented code for each.

Every wait is a hang guard (DESIGN.md §9).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.processes import (
    HANG_GUARD,
    assert_trace_complete,
    error_lines,
    one_tool_agent,
    write_project,
)
from tubeless import Pipeline, PipelineRun, define_agent, define_tool
from tubeless import errors as codes
from tubeless._cli import main
from tubeless.testing import capture_trace
from tubeless.tracing import read_trace


class Custom(BaseException):
    """A user's own ``BaseException`` subclass."""


def _agent(tool: Callable[..., Any], decide: Callable[..., Any] | None = None) -> Pipeline:
    """Turn 1 calls ``work`` once; turn 2 finishes."""

    def default_decide(state: Any, ctx: Any) -> Any:
        if state["done"]:
            return {"kind": "finish", "result": "done"}
        return {"kind": "continue", "calls": [{"id": "c1", "tool": "work", "input": "x"}]}

    return define_agent(
        id="faulty",
        input_schema=Any,
        result_schema=Any,
        initial_state=lambda validated: {"done": False},
        decide=decide or default_decide,
        reduce=lambda state, outcomes: {"done": True},
        tools={
            "work": define_tool(description="Works.", input_schema=str, output_schema=str, run=tool)
        },
    )


def _run(target: Pipeline) -> tuple[PipelineRun, list[dict[str, Any]]]:
    async def go() -> PipelineRun:
        return await asyncio.wait_for(target.run({}, trace=trace), HANG_GUARD)

    with capture_trace() as trace:
        run = asyncio.run(go())
    return run, trace.records


def _sync_raising(exc: BaseException) -> Callable[..., Any]:
    def tool(text: str, ctx: Any) -> str:
        raise exc

    return tool


def _async_raising(exc: BaseException) -> Callable[..., Any]:
    async def tool(text: str, ctx: Any) -> str:
        raise exc

    return tool


def _exhausted(text: str, ctx: Any) -> str:
    return str(next(iter(())))  # the real case: next() on an exhausted iterator


# -- item 3 ----------------------------------------------------------------------------------------
def test_a_sync_tool_raising_stop_iteration_fails_the_run() -> None:
    """Issue 14 item 3: a sync tool raising StopIteration fails the run (it used to hang)."""
    run, records = _run(_agent(_exhausted))
    assert run.status == "failed"
    assert_trace_complete(records)
    (tool_run,) = [
        r
        for r in records
        if r["name"] == "pipeline.completed" and r["pipelineId"] == "faulty/tool/work"
    ]
    assert tool_run["payload"]["status"] == "failed"
    error = tool_run["error"]
    assert error["code"] == codes.STEP_FAILED
    assert "StopIteration" in json.dumps(error)  # the original stays on the cause chain


def test_a_sync_tool_raising_stop_iteration_exits_6_from_the_cli(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 14 item 3: the CLI reports the StopIteration failure as a failed run (exit 6)."""
    path = write_project(tmp_path, _PROJECT, _MODULE)
    trace = tmp_path / "run.ndjson"
    code = main(["run", str(path), "--trace", str(trace), "-q", "--input", '{"mode": "stop"}'])
    err = capsys.readouterr().err
    assert code == 6, err
    assert len(error_lines(err)) == 1
    assert_trace_complete(read_trace(trace))


# -- item 4 ----------------------------------------------------------------------------------------
RAISED = [
    pytest.param(SystemExit(0), id="SystemExit-0"),
    pytest.param(SystemExit(3), id="SystemExit-3"),
    pytest.param(GeneratorExit(), id="GeneratorExit"),
    pytest.param(Custom("custom"), id="custom-BaseException"),
]


@pytest.mark.parametrize("exc", RAISED)
@pytest.mark.parametrize("where", ["sync-tool", "async-tool", "decide"])
def test_a_base_exception_from_user_code_fails_the_run_with_a_complete_trace(
    exc: BaseException, where: str
) -> None:
    """Issue 14 item 4: SystemExit, GeneratorExit and custom BaseExceptions from decide or a tool
    end as failed runs; ``run()`` returns (never raises) and the trace is complete."""
    target = _target(exc, where)
    run, records = _run(target)
    assert run.status == "failed"
    assert_trace_complete(records)
    assert records[-1]["payload"]["status"] == "failed"


@pytest.mark.parametrize("where", ["sync-tool", "async-tool", "decide"])
def test_a_keyboard_interrupt_from_user_code_cancels_the_run(where: str) -> None:
    """Issue 14 item 4: a user's KeyboardInterrupt ends the run cancelled, with a full trace."""
    run, records = _run(_target(KeyboardInterrupt(), where))
    assert run.status == "cancelled"
    assert {error.kind for error in run.errors} == {"cancellation"}
    assert_trace_complete(records)
    assert records[-1]["payload"]["status"] == "cancelled"


def _target(exc: BaseException, where: str) -> Pipeline:
    if where == "sync-tool":
        return _agent(_sync_raising(exc))
    if where == "async-tool":
        return _agent(_async_raising(exc))

    def decide(state: Any, ctx: Any) -> Any:
        raise exc

    return _agent(_sync_raising(RuntimeError("never called")), decide)


_PROJECT = one_tool_agent("faulty", "work", "Works.")
_MODULE = """\
    class Custom(BaseException):
        pass

    RAISED = {"exit0": SystemExit(0), "exit3": SystemExit(3), "generator": GeneratorExit(),
              "custom": Custom("custom"), "interrupt": KeyboardInterrupt()}

    def initial(validated):
        return {"mode": validated["mode"], "where": validated.get("where", "tool"), "done": False}

    def decide(state, ctx):
        if state["where"] == "decide" and state["mode"] in RAISED:
            raise RAISED[state["mode"]]
        if state["done"]:
            return {"kind": "finish", "result": "done"}
        return {"kind": "continue", "calls": [{"id": "c1", "tool": "work", "input": state["mode"]}]}

    def reduce(state, outcomes):
        return {**state, "done": True}

    def work(mode, ctx):
        if mode == "stop":
            return next(iter(()))
        raise RAISED[mode]
"""


@pytest.mark.parametrize(
    ("mode", "expected"),
    [("exit0", 6), ("exit3", 6), ("generator", 6), ("custom", 6), ("interrupt", 7)],
)
@pytest.mark.parametrize("where", ["tool", "decide"])
def test_the_cli_exits_with_the_documented_code_for_user_base_exceptions(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], mode: str, expected: int, where: str
) -> None:
    """Issue 14 item 4: exit 6 for a failed run (7 for KeyboardInterrupt), one error line, and
    a trace that ends with the root's completion."""
    path = write_project(tmp_path, _PROJECT, _MODULE)
    trace = tmp_path / "run.ndjson"
    raw = json.dumps({"mode": mode, "where": where})
    code = main(["run", str(path), "--trace", str(trace), "-q", "--input", raw])
    out, err = capsys.readouterr()
    assert code == expected, err
    assert out == ""
    assert len(error_lines(err)) == 1, err
    records = read_trace(trace)
    assert_trace_complete(records)
    assert records[-1]["payload"]["status"] == ("cancelled" if expected == 7 else "failed")
