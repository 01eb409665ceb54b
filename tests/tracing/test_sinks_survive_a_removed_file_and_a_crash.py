"""Sinks survive faults (issue 14 items 14 and 18): an NDJSON file removed or replaced mid-run is
retired with one warning, and a crash loses no record of a finished turn.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.traces import sink_warnings as _sink_warnings
from tubeless import define_pipeline, step
from tubeless.agent import define_agent, define_tool
from tubeless.testing import capture_trace
from tubeless.tracing import NdjsonSink, SqliteSink
from tubeless.tracing.sqlite import read_sqlite


# -- item 14: an NDJSON file removed mid-run ---------------------------------------------------
def _pipeline_calling(on_middle: Any) -> Any:
    def middle(inputs: dict[str, Any], ctx: Any) -> int:
        on_middle()
        return 1

    steps = [step(f"s{i}", lambda inputs, ctx: 1) for i in range(20)]
    steps.append(step("middle", middle))
    steps += [step(f"t{i}", lambda inputs, ctx: 1) for i in range(20)]
    return define_pipeline(id="long", steps=steps)


def test_an_ndjson_file_whose_folder_is_removed_mid_run_is_retired_with_one_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 14 item 14: the sink stops writing into the unlinked file and says so, once."""
    folder = tmp_path / "traces"
    sink = NdjsonSink(folder / "run.ndjson")
    with caplog.at_level(logging.WARNING), capture_trace() as healthy:
        run = asyncio.run(
            _pipeline_calling(lambda: shutil.rmtree(folder)).run(None, trace=[sink, healthy])
        )
    sink.close()

    assert run.status == "completed"
    (warning,) = _sink_warnings(caplog)
    assert warning == (
        f"trace sink NdjsonSink({str(folder / 'run.ndjson')!r}) failed and was retired: "
        f"{folder / 'run.ndjson'} was removed or replaced while the run wrote to it"
    )
    assert healthy.records[-1]["name"] == "pipeline.completed"


def test_an_ndjson_file_replaced_mid_run_is_retired_and_the_new_file_left_alone(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 14 item 14: a file moved away and replaced (log rotation) is not the sink's."""
    path = tmp_path / "run.ndjson"
    sink = NdjsonSink(path)

    def rotate() -> None:
        path.rename(tmp_path / "old.ndjson")
        path.write_text("", encoding="utf-8")

    with caplog.at_level(logging.WARNING):
        asyncio.run(_pipeline_calling(rotate).run(None, trace=sink))
    sink.close()

    assert len(_sink_warnings(caplog)) == 1
    assert path.read_text(encoding="utf-8") == ""


# -- item 18: a crash loses no record of a finished turn ----------------------------------------
def test_a_sqlite_store_holds_every_row_of_a_finished_turn_while_the_run_goes_on(
    tmp_path: Path,
) -> None:
    """Issue 14 item 18: a reader sees turn 1 whole while turn 2 runs (fewer than 64 rows in)."""
    path = tmp_path / "run.sqlite"
    seen: list[list[dict[str, Any]]] = []

    def look(value: str, ctx: Any) -> str:
        seen.append(read_sqlite(path))
        return value

    agent = define_agent(
        id="look",
        input_schema=dict,
        result_schema=str,
        initial_state=lambda validated: {"turn": 0},
        decide=lambda state, ctx: (
            {"kind": "continue", "calls": [{"id": f"t{ctx.turn}", "tool": "look", "input": "x"}]}
            if ctx.turn <= 2
            else {"kind": "finish", "result": "done"}
        ),
        reduce=lambda state, outcomes: {"turn": state["turn"] + 1},
        tools={
            "look": define_tool(
                description="Reads the trace.", input_schema=str, output_schema=str, run=look
            )
        },
    )
    with SqliteSink(path) as sink:
        run = asyncio.run(agent.run({}, trace=sink))
    assert run.status == "completed"

    during_turn_2 = seen[1]
    assert len(during_turn_2) < 64
    turn_1 = next(
        r["runId"]
        for r in during_turn_2
        if r["name"] == "pipeline.started" and r.get("iteration", {}).get("index") == 1
    )
    everything = read_sqlite(path)
    assert [r for r in during_turn_2 if r["runId"] == turn_1] == [
        r for r in everything if r["runId"] == turn_1
    ]
    assert during_turn_2 == everything[: len(during_turn_2)]
