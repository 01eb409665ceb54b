"""Hostile inputs files (issue 30, items 1 and 3): values JSON has no form for fail only their
row, with their line; YAML inputs, cases and input files get the project loader's bounds; a
line or a document past its size bound is refused by name."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.batch import read_rows, rows_project, write_inputs
from tests.fixtures.cli import tubeless, tubeless_process
from tubeless.batch import run_batch
from tubeless.batch._inputs import MAX_DOCUMENT_BYTES, MAX_LINE_BYTES

INVALID = "TUBELESS_BATCH_INPUT_INVALID"


def _statuses(rows: list[dict[str, Any]]) -> list[tuple[int, str]]:
    return [(row["index"], row["status"]) for row in rows]


@pytest.mark.parametrize("value", ["NaN", "Infinity", "-Infinity", "1e999", "-1e999"])
def test_a_jsonl_line_without_a_json_value_fails_only_its_row(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], value: str
) -> None:
    project = rows_project(tmp_path)
    inputs = write_inputs(
        tmp_path / "in.jsonl", [{"n": 1}, f'{{"n": {value}}}', f"[{value}]", {"n": 3}]
    )
    outcome = tubeless(capsys, "batch", project, inputs, "-o", tmp_path / "out.jsonl")
    assert outcome.code == 6, outcome.err
    rows = read_rows(tmp_path / "out.jsonl")
    assert _statuses(rows) == [(0, "completed"), (1, "failed"), (2, "failed"), (3, "completed")]
    for row, line in ((rows[1], 2), (rows[2], 3)):
        assert row["error"]["code"] == INVALID
        assert row["error"]["message"].startswith(f"line {line}: not valid JSON: ")
        assert "JSON has no NaN or infinity" in row["error"]["message"]
    assert rows[3]["result"] == {"n": 3, "square": 9}


def test_a_json_array_item_without_a_json_value_fails_only_its_row(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    project = rows_project(tmp_path)
    inputs = tmp_path / "in.json"
    inputs.write_text('[{"n": 1},\n {"n": NaN},\n\n {"n": 1e999}, {"n": 4}]', encoding="utf-8")
    outcome = tubeless(capsys, "batch", project, inputs, "-o", tmp_path / "out.jsonl")
    assert outcome.code == 6, outcome.err
    rows = read_rows(tmp_path / "out.jsonl")
    assert _statuses(rows) == [(0, "completed"), (1, "failed"), (2, "failed"), (3, "completed")]
    assert rows[1]["error"] == {
        "code": INVALID,
        "message": "line 2: not valid JSON: NaN is not a JSON value (JSON has no NaN or infinity)",
    }
    assert rows[2]["error"]["message"] == (
        "line 4: not valid JSON: the number 1e999 is out of range (JSON has no NaN or infinity)"
    )


def test_a_yaml_item_without_a_json_value_fails_only_its_row(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    project = rows_project(tmp_path)
    inputs = tmp_path / "in.yaml"
    inputs.write_text("- {n: 1}\n- {n: .nan}\n- n: -.inf\n- {n: 4}\n", encoding="utf-8")
    outcome = tubeless(capsys, "batch", project, inputs, "-o", tmp_path / "out.jsonl")
    assert outcome.code == 6, outcome.err
    rows = read_rows(tmp_path / "out.jsonl")
    assert _statuses(rows) == [(0, "completed"), (1, "failed"), (2, "failed"), (3, "completed")]
    assert rows[1]["error"]["code"] == INVALID
    assert rows[1]["error"]["message"].startswith("line 2: ")
    assert (
        "'.nan' is not a finite number (JSON has no NaN or infinity)"
        in (rows[1]["error"]["message"])
    )
    assert rows[2]["error"]["message"].startswith("line 3: ")


def test_a_python_input_without_a_json_form_fails_only_its_row(tmp_path: Path) -> None:
    project = rows_project(tmp_path)

    async def collect() -> list[dict[str, Any]]:
        inputs = [{"n": 1}, {"n": float("nan")}, {"n": {1, 2}}, {"n": 2}]
        return [row async for row in run_batch(project, inputs)]

    rows = asyncio.run(collect())
    assert _statuses(rows) == [(0, "completed"), (1, "failed"), (2, "failed"), (3, "completed")]
    assert rows[1]["error"]["code"] == INVALID
    assert rows[1]["error"]["message"].startswith("line 2: not a JSON value")
    assert rows[1]["key"] != rows[2]["key"]


# -- YAML bounds: the project loader's event pre-pass, for inputs, cases and input files --------

_FANOUT = "\n".join(
    ["- &a [x, x, x, x, x, x, x, x, x, x]"]
    + [f"- &{chr(98 + i)} [{', '.join(f'*{chr(97 + i)}' for _ in range(10))}]" for i in range(7)]
)


@pytest.mark.slow
def test_a_yaml_alias_fanout_is_refused_at_once_naming_file_and_line(tmp_path: Path) -> None:
    project = rows_project(tmp_path)
    inputs = tmp_path / "bomb.yaml"
    inputs.write_text(_FANOUT + "\n", encoding="utf-8")
    assert len(inputs.read_bytes()) < 1024
    outcome = tubeless_process("batch", project, inputs)  # hang guard: 60 s
    assert outcome.code == 2, outcome.err
    assert outcome.err.startswith(f"error: {INVALID}: {inputs}:")
    assert "values (an alias counts as all the values it stands for)" in outcome.err


def test_a_deep_yaml_list_is_refused_naming_file_and_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    project = rows_project(tmp_path)
    inputs = tmp_path / "deep.yaml"
    inputs.write_text("- " + "[" * 5000 + "]" * 5000 + "\n", encoding="utf-8")
    outcome = tubeless(capsys, "batch", project, inputs)
    assert outcome.code == 2, outcome.err
    assert outcome.err.startswith(f"error: {INVALID}: {inputs}:1:")
    assert "nested more than 64 levels deep" in outcome.err
    assert "Traceback" not in outcome.err


def test_a_yaml_inputs_file_with_two_documents_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    project = rows_project(tmp_path)
    inputs = tmp_path / "two.yaml"
    inputs.write_text("- {n: 1}\n---\n- {n: 2}\n", encoding="utf-8")
    outcome = tubeless(capsys, "batch", project, inputs)
    assert outcome.code == 2
    assert f"{inputs}:2:" in outcome.err and "more than one YAML document" in outcome.err


def test_a_cases_file_alias_fanout_is_refused(tmp_path: Path) -> None:
    project = rows_project(tmp_path)
    cases = tmp_path / "cases.yaml"
    cases.write_text(
        "version: 1\ncases:\n  - id: one\n    input:\n      bomb:\n"
        + "\n".join("        " + line for line in _FANOUT.splitlines())
        + "\n",
        encoding="utf-8",
    )
    outcome = tubeless_process("eval", project, cases)  # hang guard: 60 s
    assert outcome.code == 4, outcome.err
    assert f"error: {cases}:" in outcome.err
    assert "an alias counts as all the values it stands for" in outcome.err


@pytest.mark.slow
def test_a_yaml_input_file_of_run_is_bounded(tmp_path: Path) -> None:
    project = rows_project(tmp_path)
    bomb = tmp_path / "input.yaml"
    bomb.write_text("n: 1\nbomb:\n" + _FANOUT + "\n", encoding="utf-8")
    outcome = tubeless_process("run", project, "--input-file", bomb)  # hang guard: 60 s
    assert outcome.code == 4, outcome.err
    assert f"--input-file {bomb}:" in outcome.err
    assert "an alias counts as all the values it stands for" in outcome.err
    deep = tmp_path / "deep.yaml"
    deep.write_text("n: " + "[" * 5000 + "]" * 5000 + "\n", encoding="utf-8")
    outcome = tubeless_process("run", project, "--input-file", deep)
    assert outcome.code == 4, outcome.err
    assert "nested more than 64 levels deep" in outcome.err


# -- size bounds ---------------------------------------------------------------------------------


def test_a_jsonl_line_past_the_line_bound_fails_only_its_row(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    project = rows_project(tmp_path)
    inputs = tmp_path / "in.jsonl"
    long = json.dumps({"n": 2, "pad": "x" * MAX_LINE_BYTES})
    inputs.write_text(f'{{"n": 1}}\n{long}\n{{"n": 3}}\n', encoding="utf-8")
    outcome = tubeless(capsys, "batch", project, inputs, "-o", tmp_path / "out.jsonl")
    assert outcome.code == 6, outcome.err
    rows = read_rows(tmp_path / "out.jsonl")
    assert _statuses(rows) == [(0, "completed"), (1, "failed"), (2, "completed")]
    assert rows[1]["error"] == {
        "code": INVALID,
        "message": f"line 2: the line is longer than {MAX_LINE_BYTES:,} bytes "
        "(the bound of an inputs line)",
    }


@pytest.mark.parametrize("suffix", [".json", ".yaml"])
def test_a_json_or_yaml_inputs_file_past_the_size_bound_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], suffix: str
) -> None:
    project = rows_project(tmp_path)
    inputs = tmp_path / f"big{suffix}"
    with inputs.open("wb") as file:
        file.truncate(MAX_DOCUMENT_BYTES + 1)  # sparse: refused by its size alone
    outcome = tubeless(capsys, "batch", project, inputs)
    assert outcome.code == 2
    assert outcome.err.strip() == (
        f"error: {INVALID}: {inputs}: the file is larger than {MAX_DOCUMENT_BYTES:,} bytes, "
        "the bound of a JSON array or YAML list of inputs; write the inputs as JSONL "
        "(one input a line), which is read a line at a time"
    )
