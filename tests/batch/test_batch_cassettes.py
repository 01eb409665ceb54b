"""``tubeless batch --record-dir / --replay-dir``: one cassette per row; a replay takes every
decision from its row's cassette (decide is never called) and fails only the row that
diverges, with ``TUBELESS_REPLAY_DIVERGED`` as that row's error code."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from tests.fixtures.batch import read_rows, rows_project, write_inputs
from tests.fixtures.cli import tubeless


@pytest.fixture
def recorded(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[Path, Path, Path]:
    project = rows_project(tmp_path)
    inputs = write_inputs(tmp_path / "in.jsonl", [{"n": 1}, {"n": 2}, {"n": 3}])
    folder = tmp_path / "cassettes"
    outcome = tubeless(capsys, "batch", project, inputs, "--record-dir", folder)
    assert outcome.code == 0, outcome.err
    return project, inputs, folder


def test_each_row_records_its_own_private_cassette(recorded: tuple[Path, Path, Path]) -> None:
    _, _, folder = recorded
    assert sorted(p.name for p in folder.iterdir()) == [
        "0.cassette.jsonl",
        "1.cassette.jsonl",
        "2.cassette.jsonl",
    ]
    for cassette in folder.iterdir():
        assert stat.S_IMODE(cassette.stat().st_mode) == 0o600
    lines = [json.loads(line) for line in (folder / "1.cassette.jsonl").read_text().splitlines()]
    assert lines[0]["kind"] == "header"
    assert lines[-1] == {
        "kind": "result",
        "route": "rows",
        "ok": True,
        "result": {"n": 2, "square": 4},
    }


@pytest.mark.parametrize("engine", ["local", "process"])
def test_a_replayed_batch_fails_only_the_row_that_diverges(
    recorded: tuple[Path, Path, Path],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    engine: str,
) -> None:
    project, inputs, folder = recorded
    # Row 1's recorded decision asked to square 2; its cassette now says 5: the tool's live
    # outcome (25) differs from the recorded one (4).
    cassette = folder / "1.cassette.jsonl"
    text = cassette.read_text().replace('"input":2}', '"input":5}')
    cassette.write_text(text)
    output = Path(folder.parent / "out.jsonl")
    outcome = tubeless(
        capsys, "batch", project, inputs, "--replay-dir", folder, "--engine", engine, "-o", output
    )
    assert outcome.code == 6, outcome.err
    rows = read_rows(output)
    assert [row["status"] for row in rows] == ["completed", "failed", "completed"]
    assert rows[1]["error"] == {
        "code": "TUBELESS_REPLAY_DIVERGED",
        "message": "replay diverged at route 'rows' turn 1 call 'c1': the outcome differs "
        "at /value",
    }
    assert [rows[0]["result"], rows[2]["result"]] == [{"n": 1, "square": 1}, {"n": 3, "square": 9}]


def test_a_replay_calls_no_decide_and_a_row_without_a_cassette_fails_alone(
    recorded: tuple[Path, Path, Path],
    capsys: pytest.CaptureFixture[str],
) -> None:
    project, _, folder = recorded
    helpers = next(project.parent.glob("helpers_*.py"))
    helpers.write_text(
        helpers.read_text().replace(
            "def decide(state, ctx):",
            "def decide(state, ctx):\n    raise RuntimeError('no model')"
            "\n\n\ndef _unused(state, ctx):",
        )
    )
    inputs = write_inputs(folder.parent / "more.jsonl", [{"n": 1}, {"n": 2}, {"n": 3}, {"n": 4}])
    outcome = tubeless(capsys, "batch", project, inputs, "--replay-dir", folder)
    assert outcome.code == 6
    rows = [json.loads(line) for line in outcome.out.splitlines()]
    assert [row["status"] for row in rows] == ["completed"] * 3 + ["failed"]
    assert rows[3]["error"]["code"] == "TUBELESS_CASSETTE_INVALID"
    assert "3.cassette.jsonl" in rows[3]["error"]["message"]


def test_record_and_replay_dirs_together_are_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    project = rows_project(tmp_path)
    inputs = write_inputs(tmp_path / "in.jsonl", [{"n": 1}])
    outcome = tubeless(
        capsys, "batch", project, inputs, "--record-dir", tmp_path, "--replay-dir", tmp_path
    )
    assert outcome.code == 1
    assert "Give --record-dir or --replay-dir, not both." in outcome.err
    missing = tubeless(capsys, "batch", project, inputs, "--replay-dir", tmp_path / "nope")
    assert missing.code == 2


def test_cassettes_never_reach_the_trace(
    recorded: tuple[Path, Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    project, inputs, folder = recorded
    trace = folder.parent / "t.ndjson"
    outcome = tubeless(capsys, "batch", project, inputs, "--replay-dir", folder, "--trace", trace)
    assert outcome.code == 0, outcome.err
    assert "cassette" not in trace.read_text()
    assert os.fspath(folder) not in trace.read_text()
