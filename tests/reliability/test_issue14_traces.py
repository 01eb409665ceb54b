"""Issue 14 (hostile input and faults), the trace items: reader bounds (12), an NDJSON file
removed mid-run (14), and what a crash may lose (18). Each test's docstring names its item."""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from tests.fixtures.traces import sink_warnings as _sink_warnings
from tubeless import define_pipeline, step
from tubeless._cli import cli, main
from tubeless.agent import define_agent, define_tool
from tubeless.testing import capture_trace
from tubeless.tracing import NdjsonSink, SqliteSink, TraceReadError, read_trace
from tubeless.tracing.sqlite import read_sqlite


# -- item 12: the reader bounds -----------------------------------------------------------------
def _line(index: int = 0, **payload: Any) -> str:
    record = {
        "version": 3,
        "name": "pipeline.log",
        "runId": "p:1",
        "pipelineId": "p",
        "timestampMs": 1_700_000_000_000 + index,
        "stepId": "s",
        "payload": {"level": "log", "message": f"line {index}", **payload},
    }
    return json.dumps(record, separators=(",", ":")) + "\n"


def _show(capsys: pytest.CaptureFixture[str], path: Path) -> tuple[int, str, str]:
    code = main(["trace", "show", str(path)])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_the_documented_bounds_are_read_trace_s_defaults() -> None:
    """Issue 14 item 12: 64 MiB per file, 1 MiB per line, 100,000 records, unless told."""
    parameters = inspect.signature(read_trace).parameters
    defaults = {
        name: parameters[name].default for name in ("max_bytes", "max_line_bytes", "max_records")
    }
    assert defaults == {"max_bytes": 64 << 20, "max_line_bytes": 1 << 20, "max_records": 100_000}


def test_a_huge_ndjson_file_is_refused_before_it_is_read(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Issue 14 item 12: a 2.4 GB trace (sparse: no disk used) exits 2 at once, not OOM."""
    path = tmp_path / "huge.ndjson"
    with path.open("wb") as file:
        file.write(_line().encode())
        file.truncate(2_400_000_000)

    assert _show(capsys, path) == (
        2,
        "",
        f"error: {path}: the file has 2400000000 bytes, more than the 67108864 allowed "
        "(--max-bytes raises the bound)\n",
    )


@pytest.mark.parametrize(
    ("bound", "value", "problem"),
    [
        pytest.param(
            "max_bytes",
            3 * len(_line()) - 1,
            f": the file has {3 * len(_line()) + 1} bytes, more than the "
            f"{3 * len(_line()) - 1} allowed",
            id="file",
        ),
        pytest.param(
            "max_line_bytes",
            len(_line()) - 1,
            f":3: the line has more than the {len(_line()) - 1} bytes allowed",
            id="line",
        ),
        pytest.param("max_records", 2, ":3: more than the 2 records allowed", id="records"),
    ],
)
def test_lowered_bounds_refuse_a_small_ndjson_trace_naming_the_line(
    tmp_path: Path, bound: str, value: int, problem: str
) -> None:
    """Issue 14 item 12: each bound is a reader argument; the error names file and line."""
    path = tmp_path / "t.ndjson"
    lines = [_line(0), _line(1), _line(10)]  # the third line is one byte longer
    path.write_text("".join(lines), encoding="utf-8")
    assert len(read_trace(path)) == 3

    with pytest.raises(TraceReadError) as caught:
        read_trace(path, **{bound: value})
    assert caught.value.message == f"{path}{problem}"


def test_trace_show_and_convert_take_the_bounds_as_options(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Issue 14 item 12: the CLI's bounds are the reader's defaults, and options raise them."""
    from tubeless.tracing.reader import MAX_RECORDS, MAX_TRACE_BYTES

    path = tmp_path / "t.ndjson"
    path.write_text("".join(_line(i) for i in range(3)), encoding="utf-8")
    refused = main(["trace", "show", str(path), "--max-records", "2"])
    refused_err = capsys.readouterr().err
    converted = main(
        [
            "trace",
            "convert",
            str(path),
            str(tmp_path / "t.sqlite"),
            "--max-records",
            "3",
            "--max-bytes",
            str(path.stat().st_size),
        ]
    )
    capsys.readouterr()
    small = main(["trace", "convert", str(path), str(tmp_path / "u.sqlite"), "--max-bytes", "9"])
    small_err = capsys.readouterr().err
    help_text = CliRunner().invoke(cli, ["trace", "show", "--help"]).output

    assert (refused, converted, small) == (2, 0, 2)
    assert refused_err == (
        f"error: {path}:3: more than the 2 records allowed (--max-records raises the bound)\n"
    )
    assert small_err.startswith(f"error: {path}: the file has ")
    assert f"[default: {MAX_TRACE_BYTES};" in help_text
    assert f"[default: {MAX_RECORDS};" in help_text


def test_a_line_over_one_mib_is_refused_by_default(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Issue 14 item 12: the default line bound, with a 1.1 MiB line."""
    path = tmp_path / "long.ndjson"
    path.write_text(_line(0) + _line(1, filler="x" * (1_100 * 1024)), encoding="utf-8")

    assert _show(capsys, path) == (
        2,
        "",
        f"error: {path}:2: the line has more than the 1048576 bytes allowed\n",
    )


@pytest.mark.parametrize(
    ("payload", "problem"),
    [
        pytest.param(
            '{"deep":' + "[" * 100_000 + "]" * 100_000 + "}",
            "JSON nested too deeply to read",
            id="deep-nesting",
        ),
        pytest.param(
            '{"n":' + "7" * 5_000 + "}",
            "invalid JSON: a number with more than 4300 digits",
            id="5000-digits",
        ),
    ],
)
def test_hostile_json_on_a_line_exits_2_naming_the_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, payload: str, problem: str
) -> None:
    """Issue 14 item 12: deep nesting and huge numbers are located errors, not exit 6."""
    path = tmp_path / "hostile.ndjson"
    hostile = _line(1).replace('{"level":"log","message":"line 1"}', payload)
    path.write_text(_line(0) + hostile, encoding="utf-8")

    code, out, err = _show(capsys, path)
    assert (code, out) == (2, "")
    assert err.startswith(f"error: {path}:2: {problem}")
    assert err.count("\n") == 1


def test_a_duration_too_large_for_a_float_exits_2_naming_the_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Issue 14 item 12: valid JSON, but a 400-digit ``durationMs``: located, not exit 6."""
    path = tmp_path / "t.ndjson"
    completed = {
        "version": 3,
        "name": "pipeline.completed",
        "runId": "p:1",
        "pipelineId": "p",
        "timestampMs": 1,
        "durationMs": 10**400,
        "payload": {"status": "completed"},
    }
    path.write_text(_line(0) + json.dumps(completed) + "\n", encoding="utf-8")

    assert _show(capsys, path) == (
        2,
        "",
        (
            f"error: {path}:2: not a trace record: pipeline.completed: 'durationMs' is too large "
            "for a float (401 digits)\n"
        ),
    )


def test_hostile_json_in_a_sqlite_row_exits_2_naming_the_row(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Issue 14 item 12: the same JSON in a stored row is a located error too."""
    path = tmp_path / "hostile.sqlite"
    with SqliteSink(path) as sink:
        sink.export(json.loads(_line(0)))
    with sqlite3.connect(path) as conn:
        conn.execute("DROP TRIGGER pipeline_run_events_no_update")
        conn.execute(
            "UPDATE pipeline_run_events SET payload_json = ?",
            ('{"deep":' + "[" * 100_000 + "]" * 100_000 + "}",),
        )
    conn.close()

    code, out, err = _show(capsys, path)
    assert (code, out) == (2, "")
    assert err.startswith(f"error: {path}: row 1: JSON nested too deeply to read")


def test_a_lowered_record_bound_refuses_a_sqlite_store(tmp_path: Path) -> None:
    """Issue 14 item 12: ``max_records`` bounds SQLite reads too."""
    path = tmp_path / "t.sqlite"
    with SqliteSink(path) as sink:
        for index in range(3):
            sink.export(json.loads(_line(index)))
    assert len(read_trace(path)) == 3
    with pytest.raises(TraceReadError, match="more than the 2 records allowed"):
        read_trace(path, max_records=2)


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
