"""Signals reach a run whose event loop is busy (issue 14 item 6): a traced batch of quick calls, a
template's nested loops, and signals in quick succession.

Every wait is a hang guard (DESIGN.md §9).
"""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import pytest

from tests.fixtures.processes import (
    HANG_GUARD,
    assert_trace_complete,
    error_lines,
    finish,
    read_line_with,
    start_run,
    wait_for_file,
    write_project,
)
from tubeless.tracing import read_trace

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


@pytest.mark.slow
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
