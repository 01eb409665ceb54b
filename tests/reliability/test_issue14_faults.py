"""Faults and signals from issue 14 (items 3, 4, 6 and 7): exceptions that are not ``Exception``s,
signals while the event loop is busy, and the cost of progress in traced dispatch.

Each test's docstring names its item. Every wait is a hang guard (DESIGN.md §9); bounds are
counts, never timings.
"""

from __future__ import annotations

import asyncio
import json
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.processes import (
    HANG_GUARD,
    assert_trace_complete,
    error_lines,
    finish,
    one_tool_agent,
    read_line_with,
    start_run,
    wait_for_file,
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


# -- item 6 ----------------------------------------------------------------------------------------
_BATCH = """\
    version: 1
    project: {id: batch}
    python_path: [.]
    agents:
      batch:
        input: {schema: {type: object}}
        result: {schema: {}}
        initial_state: "helpers:initial"
        decide: "helpers:decide"
        reduce: "helpers:reduce"
        limits: {max_calls: 8000}
        tools:
          echo: {run: "helpers:echo", description: Echo., input: {schema: {type: string}},
                 output: {schema: {type: string}}}
"""


def test_a_traced_batch_of_8000_quick_calls_honours_two_signals(tmp_path: Path) -> None:
    """Issue 14 item 6: a busy batch of quick calls yields to the loop, so SIGINT cancels it."""
    path = write_project(
        tmp_path,
        _BATCH,
        f"""\
        import pathlib

        READY = pathlib.Path({str(tmp_path / "ready")!r})

        def initial(validated):
            return {{"done": False}}

        def decide(state, ctx):
            if state["done"]:
                return {{"kind": "finish", "result": "done"}}
            calls = [{{"id": f"c{{i}}", "tool": "echo", "input": "x"}} for i in range(8000)]
            return {{"kind": "continue", "calls": calls}}

        def reduce(state, outcomes):
            return {{"done": True}}

        async def echo(text, ctx):
            if not READY.exists():
                READY.write_text("ready")
            return text
    """,
    )
    ndjson = tmp_path / "run.ndjson"
    process = start_run(path, "--trace", ndjson, "-q")
    wait_for_file(tmp_path / "ready", process)
    process.send_signal(signal.SIGINT)
    process.send_signal(signal.SIGINT)
    _, err = finish(process)
    assert process.returncode == 7, err
    assert len(error_lines(err)) == 1
    records = read_trace(ndjson)
    assert_trace_complete(records)
    assert records[-1]["payload"]["status"] == "cancelled"


_TEMPLATED = """\
    version: 1
    project: {id: templated}
    python_path: [.]
    agents:
      templated:
        input: {schema: {type: object}}
        result: {schema: {}}
        initial_state:
          busy: >-
            {% for a in input.xs %}{% for b in input.xs %}{% for c in input.xs %}
            {% endfor %}{% endfor %}{% endfor %}
        decide: "helpers:decide"
"""


def test_a_template_rendering_nested_loops_can_be_interrupted(tmp_path: Path) -> None:
    """Issue 14 item 6: SIGINT during a long template render cancels the run; both traces are
    complete."""
    path = write_project(
        tmp_path,
        _TEMPLATED,
        """\
        def decide(state, ctx):
            return {"kind": "finish", "result": "done"}
    """,
    )
    ndjson, sqlite = tmp_path / "run.ndjson", tmp_path / "run.sqlite"
    source = tmp_path / "input.json"  # 2.7e10 loop passes: the render never ends by itself
    source.write_text(json.dumps({"xs": list(range(3000))}), encoding="utf-8")
    process = start_run(path, "--trace", ndjson, "--trace", sqlite, "--input-file", source)
    read_line_with(process, "-> agent")  # the agent step started: its initial state renders now
    process.send_signal(signal.SIGINT)
    _, err = finish(process)
    assert process.returncode == 7, err
    assert error_lines(err) == [
        "error: TUBELESS_RUN_CANCELLED: SIGINT received; the run was cancelled"
    ]
    for trace in (ndjson, sqlite):
        records = read_trace(trace)
        assert_trace_complete(records)
        assert records[-1]["payload"]["status"] == "cancelled"


def test_signals_in_quick_succession_never_kill_the_process(tmp_path: Path) -> None:
    """Issue 14 item 6: SIGINT after SIGINT until the process is gone (through cancellation,
    closing the sinks and exiting): it always exits 7 with one error line and a complete trace,
    never by the signal itself (exit -2)."""
    path = write_project(tmp_path, _WAITING, _WAITING_MODULE.format(ready=str(tmp_path / "ready")))
    for trial in range(2):
        (tmp_path / "ready").unlink(missing_ok=True)
        trace = tmp_path / f"run{trial}.sqlite"
        process = start_run(path, "--trace", trace, "-q")
        wait_for_file(tmp_path / "ready", process)
        deadline = time.monotonic() + HANG_GUARD
        while process.poll() is None and time.monotonic() < deadline:
            process.send_signal(signal.SIGINT)
            time.sleep(0.005)
        _, err = finish(process)
        assert process.returncode == 7, err
        assert len(error_lines(err)) == 1, err
        assert_trace_complete(read_trace(trace))


_WAITING = """\
    version: 1
    project: {id: waiting}
    python_path: [.]
    pipelines:
      waiting:
        input: {schema: {type: object}}
        steps:
          - {id: wait, run: "helpers:wait"}
"""
_WAITING_MODULE = """\
    import pathlib

    async def wait(inputs, ctx):
        pathlib.Path({ready!r}).write_text("ready")
        await ctx.signal.wait()
        ctx.signal.raise_if_cancelled()
"""


# -- item 7 ----------------------------------------------------------------------------------------
def _python_calls_in_tubeless(calls: int) -> int:
    """Python-level calls made inside ``tubeless/`` by a traced run with one batch of ``calls``."""
    import tubeless

    package = str(Path(tubeless.__file__).parent)
    target = _agent_with_batch(calls)
    count = 0

    def profile(frame: Any, event: str, arg: Any) -> None:
        nonlocal count
        if event == "call" and frame.f_code.co_filename.startswith(package):
            count += 1

    async def go() -> PipelineRun:
        with capture_trace() as trace:
            sys.setprofile(profile)
            try:
                return await target.run({}, trace=trace)
            finally:
                sys.setprofile(None)

    run = asyncio.run(go())
    assert run.status == "completed"
    return count


def _agent_with_batch(calls: int) -> Pipeline:
    def decide(state: Any, ctx: Any) -> Any:
        if state["done"]:
            return {"kind": "finish", "result": "done"}
        batch = [{"id": f"c{i}", "tool": "echo", "input": "x"} for i in range(calls)]
        return {"kind": "continue", "calls": batch}

    async def echo(text: str, ctx: Any) -> str:
        return text

    return define_agent(
        id="batch",
        input_schema=Any,
        result_schema=Any,
        initial_state=lambda validated: {"done": False},
        decide=decide,
        reduce=lambda state, outcomes: {"done": True},
        tools={
            "echo": define_tool(description="Echo.", input_schema=str, output_schema=str, run=echo)
        },
        limits={"max_calls": calls, "max_concurrency": 4},
    )


def test_traced_dispatch_does_bounded_work_per_call() -> None:
    """Issue 14 item 7: progress in a traced batch is O(1) per call: four times the calls make
    about four times the Python calls (the old full scan and sort made about sixteen)."""
    small, large = _python_calls_in_tubeless(100), _python_calls_in_tubeless(400)
    assert large < 5 * small, (small, large)
