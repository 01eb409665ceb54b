"""The trace reader refuses hostile input within documented bounds (issue 14 item 12), naming the
line or row; the CLI takes the bounds as options.
"""

from __future__ import annotations

import inspect
import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from tubeless._cli import cli, main
from tubeless.tracing import SqliteSink, TraceReadError, read_trace


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
