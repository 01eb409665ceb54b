"""A batch row's key is the key its checkpoint uses (DESIGN.md §11, §13): the default key of its
validated input, ``#2``, ``#3``... for later rows of the same task; and what round 2 wrote (keys
of the raw input in the output file and the checkpoint file) is still found."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.batch import write_inputs
from tests.fixtures.cli import tubeless
from tests.fixtures.processes import write_project
from tubeless import load_project
from tubeless.batch import run_batch
from tubeless.durable import SqliteCheckpoints

PROJECT = """\
    version: 1
    project: {id: sender}
    python_path: [.]
    agents:
      sender:
        input:
          schema: {type: object, properties: {n: {type: integer, default: 3}}}
        result: {schema: {}}
        initial_state: "helpers:initial"
        decide: "helpers:decide"
        reduce: "helpers:reduce"
        tools:
          send: {run: "helpers:send", description: Sends.,
                 input: {schema: {type: integer}}, output: {schema: {type: integer}}}
    """

MODULE = """\
    import os

    def initial(validated):
        return {"n": validated["n"], "sent": None}

    def decide(state, ctx):
        if state["sent"] is None:
            return {"kind": "continue",
                    "calls": [{"id": "s", "tool": "send", "input": state["n"]}]}
        return {"kind": "finish", "result": state["sent"]}

    def reduce(state, outcomes):
        return {"n": state["n"], "sent": outcomes[0]["value"]}

    def send(n, ctx):
        with open(os.environ["MARKS"], "a", encoding="utf-8") as out:
            out.write(f"{n}\\n")
        return n * 10
    """

KEY = "sender:215ddd5567ca2590"  # {"n": 3}: the validated input of {} and of {"n": 3}
OLD_KEY = "sender:44136fa355b3678a"  # {}: the key round 2 gave the raw input


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("MARKS", str(tmp_path / "marks"))
    return write_project(tmp_path, PROJECT, MODULE)


def _marks(tmp_path: Path) -> Counter[str]:
    marks = tmp_path / "marks"
    return Counter(marks.read_text(encoding="utf-8").split()) if marks.exists() else Counter()


def _rows(project: Path, inputs: list[Any], **options: Any) -> list[dict[str, Any]]:
    async def collect() -> list[dict[str, Any]]:
        return [row async for row in run_batch(project, inputs, **options)]

    return asyncio.run(collect())


def test_rows_of_one_validated_input_are_one_task_numbered(project: Path) -> None:
    rows = _rows(project, [{}, {"n": 3}, {"n": 4}])
    assert [row["key"] for row in rows] == [KEY, f"{KEY}#2", "sender:f3e0792e105e2bfe"]


def test_a_round_2_output_file_is_reused(
    project: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Rows an older release wrote as completed (raw-input keys, repeats not numbered) are not
    run again; the rewritten file carries today's keys."""
    output = tmp_path / "out.jsonl"
    old = {"status": "completed", "result": 30, "run_id": "r", "duration_ms": 1.0}
    output.write_text(
        "".join(json.dumps({"index": index, "key": OLD_KEY, **old}) + "\n" for index in range(2)),
        encoding="utf-8",
    )
    inputs = write_inputs(tmp_path / "in.jsonl", [{}, {}])
    outcome = tubeless(capsys, "batch", project, inputs, "-o", output)
    assert outcome.code == 0, outcome.err
    assert "2 already completed, not run again" in outcome.err
    assert _marks(tmp_path) == Counter()
    rows = [json.loads(line) for line in output.read_text(encoding="utf-8").splitlines()]
    assert [row["key"] for row in rows] == [KEY, f"{KEY}#2"]


def test_round_2_checkpoint_keys_of_rows_are_resumed(project: Path, tmp_path: Path) -> None:
    """Checkpoints an older release saved for two rows of ``{}`` (``<raw key>``, ``#2``) give
    their saved results: nothing is sent again and no second task starts."""
    store = tmp_path / "runs.sqlite"
    agent = load_project(project).entry("sender")
    checkpoints = SqliteCheckpoints(store)
    try:
        for key in (OLD_KEY, f"{OLD_KEY}#2"):
            asyncio.run(agent.run({}, checkpoints=checkpoints, checkpoint_key=key))
    finally:
        checkpoints.close()
    assert _marks(tmp_path) == {"3": 2}
    rows = _rows(project, [{}, {}], checkpoints=store)
    assert [row["result"] for row in rows] == [30, 30]
    assert _marks(tmp_path) == {"3": 2}  # nothing ran again
    reopened = SqliteCheckpoints(store)
    try:
        assert [stored.key for stored in reopened.list()] == [OLD_KEY, f"{OLD_KEY}#2"]
    finally:
        reopened.close()
