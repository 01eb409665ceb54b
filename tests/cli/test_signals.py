"""Stopping ``tubeless run`` with SIGINT and SIGTERM (issue 13 "Stopping", issue 14 item 16).

A first signal cancels the run cooperatively; a second one stops waiting for handlers that
ignore the cancellation (even a sync handler blocked in a worker thread) and exits 7 at once,
after the trace sinks are flushed. Either way the CLI prints exactly one ``error:`` line.
Each test runs the CLI in a real process; every wait is a hang guard, never a timing.
"""

from __future__ import annotations

import signal
import textwrap
from pathlib import Path

import pytest

from tests.fixtures.processes import (
    assert_trace_complete,
    error_lines,
    finish,
    one_tool_agent,
    read_line_with,
    start_run,
    wait_for_file,
    write_project,
)
from tubeless.tracing import read_trace

AGENT = one_tool_agent("stopping", "nap", "Sleeps.")


def _agent(tmp_path: Path, nap: str) -> Path:
    """An agent whose one turn calls ``nap`` once; ``nap`` is given as module source."""
    return write_project(
        tmp_path,
        AGENT,
        textwrap.dedent(f"""\
        import asyncio, pathlib, time

        READY = pathlib.Path({str(tmp_path / "ready")!r})

        def initial(validated):
            return {{"done": False}}

        def decide(state, ctx):
            if state["done"]:
                return {{"kind": "finish", "result": "done"}}
            return {{"kind": "continue", "calls": [{{"id": "c1", "tool": "nap", "input": "x"}}]}}

        def reduce(state, outcomes):
            return {{"done": True}}

    """)
        + nap,
    )


BLOCKING = """\
def nap(text, ctx):
    READY.write_text("ready")
    time.sleep(600)  # ignores ctx.signal: only the process exit ends this thread
    return text
"""

COOPERATIVE = """\
async def nap(text, ctx):
    READY.write_text("ready")
    await ctx.signal.wait()
    ctx.signal.raise_if_cancelled()
"""


@pytest.mark.parametrize(
    ("first", "second", "said"),
    [
        pytest.param(signal.SIGINT, signal.SIGINT, "SIGINT received twice", id="SIGINT-SIGINT"),
        pytest.param(
            signal.SIGTERM, signal.SIGTERM, "SIGTERM received twice", id="SIGTERM-SIGTERM"
        ),
        pytest.param(
            signal.SIGINT, signal.SIGTERM, "SIGINT and SIGTERM received", id="SIGINT-SIGTERM"
        ),
    ],
)
def test_a_second_signal_stops_a_blocking_sync_tool_at_once_and_exits_7(
    tmp_path: Path, first: signal.Signals, second: signal.Signals, said: str
) -> None:
    """The tool sleeps 600 s in a worker thread; the run ends within the hang guard (far
    shorter)."""
    path = _agent(tmp_path, BLOCKING)
    ndjson, sqlite = tmp_path / "run.ndjson", tmp_path / "run.sqlite"
    process = start_run(path, "--trace", ndjson, "--trace", sqlite)
    wait_for_file(tmp_path / "ready", process)
    process.send_signal(first)
    before = read_line_with(process, "cancelling the run")  # the plain report's one notice
    process.send_signal(second)
    out, rest = finish(process)
    err = "".join(before) + rest
    assert process.returncode == 7, err
    assert out == ""
    assert error_lines(err) == [
        f"error: TUBELESS_RUN_CANCELLED: {said}; the run was cancelled without waiting for "
        "its handlers"
    ]
    assert err.count("cancelling the run") == 1
    for trace in (ndjson, sqlite):
        records = read_trace(trace)
        assert_trace_complete(records)
        assert records[-1]["payload"]["status"] == "cancelled"
        tool_runs = [
            r
            for r in records
            if r["name"] == "pipeline.completed" and r["pipelineId"] == "stopping/tool/nap"
        ]
        assert [r["payload"]["status"] for r in tool_runs] == ["cancelled"]


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_one_signal_prints_exactly_one_error_line_naming_the_signal(
    tmp_path: Path, signum: signal.Signals
) -> None:
    """Issue 14 item 16: a signal-cancelled run prints one line, not a notice plus the error."""
    path = _agent(tmp_path, COOPERATIVE)
    trace = tmp_path / "run.ndjson"
    process = start_run(path, "--trace", trace, "-q")
    wait_for_file(tmp_path / "ready", process)
    process.send_signal(signum)
    out, err = finish(process)
    assert (process.returncode, out) == (7, "")
    assert err == (
        f"error: TUBELESS_RUN_CANCELLED: {signum.name} received; the run was cancelled\n"
    )
    records = read_trace(trace)
    assert_trace_complete(records)
    assert records[-1]["payload"]["status"] == "cancelled"


def test_the_plain_report_prints_one_cancelling_notice_then_the_report_ends(
    tmp_path: Path,
) -> None:
    path = _agent(tmp_path, COOPERATIVE)
    process = start_run(path)
    wait_for_file(tmp_path / "ready", process)
    process.send_signal(signal.SIGINT)
    out, err = finish(process)
    assert (process.returncode, out) == (7, "")
    lines = err.splitlines()
    assert "SIGINT received; cancelling the run (again to stop waiting)" in lines
    assert lines[-2].startswith("Pipeline stopping: done in ")
    assert lines[-2].endswith("(status=cancelled, steps=1, errors=1)")
    assert lines[-1] == "error: TUBELESS_RUN_CANCELLED: SIGINT received; the run was cancelled"


def test_a_cancelled_tool_call_says_what_was_cancelled(tmp_path: Path) -> None:
    """The call finished after the signal, so its result was dropped: the label names the call."""
    path = _agent(
        tmp_path,
        """\
def nap(text, ctx):
    READY.write_text("ready")
    deadline = time.monotonic() + 30  # a hang guard
    while not ctx.signal.cancelled and time.monotonic() < deadline:
        time.sleep(0.01)
    return text  # returns normally, after the cancellation
""",
    )
    trace = tmp_path / "run.ndjson"
    process = start_run(path, "--trace", trace)
    wait_for_file(tmp_path / "ready", process)
    process.send_signal(signal.SIGINT)
    _, err = finish(process)
    assert process.returncode == 7, err
    records = read_trace(trace)
    (tool_run,) = [
        r
        for r in records
        if r["name"] == "pipeline.completed" and r["pipelineId"] == "stopping/tool/nap"
    ]
    message = tool_run["error"]["message"]
    assert message == (
        "Run of 'stopping/tool/nap' for item 'c1' was cancelled before its result was "
        "finalized: SIGINT received"
    )
    assert f"- nap [c1]: cancelled: {message}" in err


@pytest.mark.slow
def test_signals_after_the_run_ended_never_kill_the_process(tmp_path: Path) -> None:
    """Late signals (while the process exits) are ignored: exit 7, never death by SIGINT."""
    path = _agent(tmp_path, COOPERATIVE)
    for _ in range(2):
        (tmp_path / "ready").unlink(missing_ok=True)
        process = start_run(path, "-q")
        wait_for_file(tmp_path / "ready", process)
        process.send_signal(signal.SIGINT)
        read_line_with(process, "error:")  # the run has ended; the process is exiting
        for late in (signal.SIGINT, signal.SIGTERM, signal.SIGINT):
            if process.poll() is None:
                process.send_signal(late)
        _, rest = finish(process)
        assert process.returncode == 7, rest
        assert error_lines(rest) == []
