"""``tubeless batch`` and ``run_batch`` on the local and process engines: rows in input order,
failures that stay in their row, resume from the output file, retry and fail-fast."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.batch import marks, read_rows, rows_project, without_ids, write_inputs
from tests.fixtures.cli import tubeless
from tubeless.batch import run_batch
from tubeless.batch._spi import summarize


def _run(project: Path, inputs: Any, **options: Any) -> list[dict[str, Any]]:
    async def collect() -> list[dict[str, Any]]:
        return [row async for row in run_batch(project, inputs, **options)]

    return asyncio.run(collect())


def test_rows_come_in_input_order_with_turns_calls_and_results(tmp_path: Path) -> None:
    project = rows_project(tmp_path)
    rows = _run(project, [{"n": n} for n in range(6)], concurrency=3)
    assert [row["index"] for row in rows] == list(range(6))
    assert without_ids(rows)[2] == {
        "index": 2,
        "key": rows[2]["key"],
        "status": "completed",
        "result": {"n": 2, "square": 4},
        "run_id": "<id>",
        "duration_ms": 0,
        "turns": 2,
        "calls": 1,
    }
    assert rows[2]["key"].startswith("rows:") and len(rows[2]["key"]) == len("rows:") + 16
    assert len({row["run_id"] for row in rows}) == 6


def test_bad_input_lines_fail_only_their_row_with_the_line_number(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    project = rows_project(tmp_path)
    inputs = write_inputs(tmp_path / "in.jsonl", [{"n": 1}, "{not json", "", {"m": 2}, {"n": 3}])
    outcome = tubeless(capsys, "batch", project, inputs, "-o", tmp_path / "out.jsonl")
    assert outcome.code == 6
    rows = read_rows(tmp_path / "out.jsonl")
    assert [(row["index"], row["status"]) for row in rows] == [
        (0, "completed"),
        (1, "failed"),
        (2, "failed"),
        (3, "completed"),
    ]
    assert rows[1]["error"] == {
        "code": "TUBELESS_BATCH_INPUT_INVALID",
        "message": "line 2: not valid JSON: Expecting property name enclosed in double quotes",
    }
    assert rows[1]["run_id"] is None
    assert rows[2]["error"]["code"] == "TUBELESS_OPTIONS_VALIDATION_FAILED"
    assert rows[2]["error"]["message"].startswith("line 4: ")
    assert rows[3]["result"] == {"n": 3, "square": 9}
    assert (
        "batch: 4 rows: 2 completed, 2 failed (TUBELESS_BATCH_INPUT_INVALID 1, "
        "TUBELESS_OPTIONS_VALIDATION_FAILED 1)" in outcome.err
    )
    assert "row 1 failed: TUBELESS_BATCH_INPUT_INVALID: line 2: not valid JSON" in outcome.err


@pytest.mark.parametrize(
    "suffix, text",
    [
        pytest.param(".json", '[{"n": 1},\n {"n": 2}]', id="json-array"),
        pytest.param(".yaml", "- {n: 1}\n- n: 2\n", id="yaml-list"),
    ],
)
def test_json_arrays_and_yaml_lists_are_inputs_too(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], suffix: str, text: str
) -> None:
    project = rows_project(tmp_path)
    inputs = tmp_path / f"in{suffix}"
    inputs.write_text(text, encoding="utf-8")
    outcome = tubeless(capsys, "batch", project, "rows", inputs)
    assert outcome.code == 0
    results = [json.loads(line)["result"] for line in outcome.out.splitlines()]
    assert results == [{"n": 1, "square": 1}, {"n": 2, "square": 4}]


def test_an_inputs_file_that_is_not_a_list_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    project = rows_project(tmp_path)
    inputs = tmp_path / "in.json"
    inputs.write_text('{"n": 1}', encoding="utf-8")
    outcome = tubeless(capsys, "batch", project, inputs)
    assert (outcome.code, outcome.err.strip()) == (
        2,
        f"error: TUBELESS_BATCH_INPUT_INVALID: {inputs}: expected a JSON array of inputs",
    )


def test_usage_and_load_errors_exit_1_and_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    project = rows_project(tmp_path)
    inputs = write_inputs(tmp_path / "in.jsonl", [{"n": 1}])
    assert tubeless(capsys, "batch", project).code == 1
    assert tubeless(capsys, "batch", project, inputs, "--engine", "gpu").code == 1
    assert tubeless(capsys, "batch", project, "nope", inputs).code == 2
    assert tubeless(capsys, "batch", project, tmp_path / "missing.jsonl").code == 2
    same = tubeless(
        capsys,
        "batch",
        project,
        inputs,
        "-o",
        tmp_path / "a.ndjson",
        "--trace",
        tmp_path / "a.ndjson",
    )
    assert same.code == 1
    assert "error: --output and --trace must be different files" in same.err


def test_a_rerun_with_the_same_output_skips_completed_rows(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    project = rows_project(tmp_path)
    (tmp_path / "marks").mkdir()
    monkeypatch.setenv("BATCH_MARKS", str(tmp_path / "marks"))
    inputs = write_inputs(tmp_path / "in.jsonl", [{"n": 1}, {"n": -2}, {"n": 3}])
    output = tmp_path / "out.jsonl"
    assert tubeless(capsys, "batch", project, inputs, "-o", output).code == 6
    first = read_rows(output)
    write_inputs(inputs, [{"n": 1}, {"n": -2}, {"n": 4}])  # row 2 changed: its key differs
    again = tubeless(capsys, "batch", project, inputs, "-o", output)
    assert again.code == 6
    second = read_rows(output)
    assert second[0] == first[0]  # reused as it was
    assert second[2]["result"] == {"n": 4, "square": 16}
    assert marks(tmp_path / "marks") == {1: 1, -2: 2, 3: 1, 4: 1}
    assert "1 already completed, not run again" in again.err


def test_retry_failed_runs_a_failed_row_once_more(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    project = rows_project(tmp_path)
    (tmp_path / "marks").mkdir()
    monkeypatch.setenv("BATCH_MARKS", str(tmp_path / "marks"))
    rows = _run(project, [{"n": -2}, {"n": 2}], retry_failed=True)
    assert [row["status"] for row in rows] == ["failed", "completed"]
    assert rows[0]["error"]["code"] == "TUBELESS_STEP_FAILED"
    assert rows[0]["error"]["message"].endswith(
        "rows/tool/square failed at step tool: no square for -2"
    )
    assert marks(tmp_path / "marks") == {-2: 2, 2: 1}


@pytest.mark.slow
def test_a_handler_that_kills_its_worker_fails_only_its_row(tmp_path: Path) -> None:
    project = rows_project(tmp_path)
    rows = _run(
        project,
        [{"n": 1}, {"n": -1}, {"n": 3}, {"n": 4}],
        engine="process",
        concurrency=2,
        retry_failed=True,
        row_retries=1,
    )
    assert [row["status"] for row in rows] == ["completed", "failed", "completed", "completed"]
    assert rows[1]["error"] == {
        "code": "TUBELESS_BATCH_WORKER_DIED",
        "message": "the worker process running the row died (exit status 3); it ran 2 times "
        "and its worker died each time (--row-retries 1)",
    }
    assert [row["result"]["square"] for row in rows if row["status"] == "completed"] == [1, 9, 16]


def test_fail_fast_starts_no_row_after_a_failure(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    project = rows_project(tmp_path)
    inputs = write_inputs(
        tmp_path / "in.jsonl", [{"n": 1}, {"m": 0}, *({"n": n} for n in range(2, 10))]
    )
    outcome = tubeless(capsys, "batch", project, inputs, "-o", tmp_path / "o.jsonl", "--fail-fast")
    assert outcome.code == 6
    assert [row["index"] for row in read_rows(tmp_path / "o.jsonl")] == [0, 1]


def test_summary_counts_codes_and_percentiles() -> None:
    rows = [
        {"status": "completed", "run_id": "a", "duration_ms": d, "turns": 2, "calls": 1}
        for d in (1.0, 2.0, 3.0, 4.0)
    ]
    rows.append(
        {
            "status": "failed",
            "run_id": None,
            "duration_ms": 0,
            "error": {"code": "X", "message": "m"},
            "turns": 0,
            "calls": 0,
        }
    )
    summary = summarize(rows, skipped=1)
    assert summary.lines() == [
        "5 rows: 4 completed, 1 failed (X 1); 1 already completed, not run again",
        "duration p50 2.5 ms, p95 3.9 ms; turns 8, calls 4",
    ]


def test_worker_engines_refuse_a_pipeline_object(tmp_path: Path) -> None:
    """process and ray load the entry from its project file: an object is refused at once."""
    from tubeless.errors import BatchError
    from tubeless.project import load_project

    entry = load_project(rows_project(tmp_path)).entry()
    with pytest.raises(BatchError) as caught:
        _run(entry, [{"n": 1}], engine="process")  # type: ignore[arg-type]
    assert caught.value.code == "TUBELESS_BATCH_ENGINE_UNAVAILABLE"
    assert caught.value.message == (
        "the process engine loads the entry from its project file in each worker: pass the "
        "project's path (or an EntrySource), not a pipeline object"
    )


@pytest.mark.parametrize("engine", ["local", "process"])
def test_stdout_holds_only_rows(tmp_path: Path, engine: str) -> None:
    """A handler's print() goes to stderr, never among the rows (worker processes too)."""
    from tests.fixtures.cli import tubeless_process

    project = rows_project(tmp_path)
    inputs = write_inputs(tmp_path / "in.jsonl", [{"n": 7}, {"n": 8}])
    outcome = tubeless_process("batch", project, inputs, "--engine", engine)
    assert outcome.code == 0, outcome.err
    assert [json.loads(line)["result"]["square"] for line in outcome.out.splitlines()] == [49, 64]
    assert "noise from a handler" in outcome.err
