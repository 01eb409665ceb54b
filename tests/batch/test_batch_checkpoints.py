"""``tubeless batch --checkpoints``: every row runs durably under its own key, so a row cut
short mid-run (the driver killed with SIGKILL) resumes on the rerun without running its
completed calls again. Every wait is a hang guard, never a timing."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.batch import write_inputs
from tests.fixtures.cli import tubeless
from tests.fixtures.processes import (
    HANG_GUARD,
    ROOT,
    cli_env,
    finish,
    start_batch,
    wait_for_file,
    write_project,
)
from tubeless.batch import run_batch

PROJECT = """\
    version: 1
    project: {id: steps}
    python_path: [.]
    agents:
      steps:
        input: {schema: {type: object, properties: {n: {type: integer}}, required: [n]}}
        result: {schema: {}}
        initial_state: "helpers:initial"
        decide: "helpers:decide"
        reduce: "helpers:reduce"
        limits: {max_turns: 4}
        tools:
          first: {run: "helpers:first", description: The first call.,
                  input: {schema: {type: integer}}, output: {schema: {type: integer}}}
          second: {run: "helpers:second", description: The second call., replay: safe,
                   input: {schema: {type: integer}}, output: {schema: {type: integer}}}
    """

MODULE = """\
    import os, time

    def initial(raw):
        return {"n": raw["n"], "done": []}

    def decide(state, ctx):
        if os.environ.get("DECIDE_FAILS"):
            raise RuntimeError("decide failed")
        tools = ["first", "second"]
        if len(state["done"]) < 2:
            tool = tools[len(state["done"])]
            return {"kind": "continue", "calls": [{"id": tool, "tool": tool, "input": state["n"]}]}
        return {"kind": "finish", "result": {"n": state["n"], "done": state["done"]}}

    def reduce(state, outcomes):
        return {"n": state["n"], "done": [*state["done"], outcomes[0]["value"]]}

    def _mark(tool, n, ctx):
        with open(os.environ["MARKS"], "a", encoding="utf-8") as out:
            out.write(f"{tool} {n} {ctx.execution['idempotency_key']}\\n")
            out.flush()
            os.fsync(out.fileno())

    def first(n, ctx):
        _mark("first", n, ctx)
        return n + 1

    def second(n, ctx):
        _mark("second", n, ctx)
        ready = os.environ.get("READY")
        if ready and n == 1:
            with open(ready, "w") as out:
                out.write(str(os.getpid()))
            time.sleep(60)  # the test kills the driver here
        return n + 2
    """


def _marks(path: Path) -> Counter[tuple[str, int]]:
    lines = path.read_text(encoding="utf-8").splitlines() if path.exists() else []
    return Counter((line.split()[0], int(line.split()[1])) for line in lines)


def _gone(pid: int) -> bool:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return True
    except OSError:
        return False
    return "\nState:\tZ" in status  # a zombie holds no lock


def _batch(
    project: Path, inputs: Path, store: Path, *extra: str, env: dict[str, str]
) -> subprocess.Popen[str]:
    return start_batch(project, inputs, "--checkpoints", store, *extra, env=env)


@pytest.mark.parametrize("engine", ["local", "process"])
def test_a_row_killed_mid_run_resumes_on_rerun_without_repeating_its_completed_calls(
    tmp_path: Path, engine: str
) -> None:
    project = write_project(tmp_path, PROJECT, MODULE)
    inputs = write_inputs(tmp_path / "in.jsonl", [{"n": 0}, {"n": 1}, {"n": 2}])
    store, marks, ready = tmp_path / "runs.sqlite", tmp_path / "marks", tmp_path / "ready"
    env = cli_env(MARKS=str(marks), PYTHONPATH=f"{ROOT}{os.pathsep}{tmp_path}")
    first = _batch(project, inputs, store, "--engine", engine, env={**env, "READY": str(ready)})
    wait_for_file(ready, first)
    while not ready.read_text():  # the pid is written just after the file appears
        time.sleep(0.01)
    worker = int(ready.read_text())
    first.send_signal(signal.SIGKILL)
    finish(first)
    assert first.returncode == -signal.SIGKILL
    deadline = time.monotonic() + HANG_GUARD
    while not _gone(worker):  # a process worker exits once its driver's pipe closes
        assert time.monotonic() < deadline, "the worker outlived its driver"
        time.sleep(0.02)
    assert _marks(marks) == {("first", 0): 1, ("second", 0): 1, ("first", 1): 1, ("second", 1): 1}

    rerun = _batch(project, inputs, store, "--engine", engine, env=env)
    out, err = finish(rerun)
    assert rerun.returncode == 0, err
    rows = [json.loads(line) for line in out.splitlines()]
    assert [row["result"] for row in rows] == [
        {"n": 0, "done": [1, 2]},
        {"n": 1, "done": [2, 3]},
        {"n": 2, "done": [3, 4]},
    ]
    # Row 0 completed: its saved result, nothing ran. Row 1 resumed at its second call (a
    # safe call cut short re-runs); its first call ran once. Row 2 ran once.
    assert _marks(marks) == {
        ("first", 0): 1,
        ("second", 0): 1,
        ("first", 1): 1,
        ("second", 1): 2,
        ("first", 2): 1,
        ("second", 2): 1,
    }
    keys = {line.split()[2] for line in marks.read_text(encoding="utf-8").splitlines()}
    assert {key.split("/")[0] for key in keys} == {row["key"] for row in rows}


def test_rows_with_the_same_input_run_under_keys_of_their_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """run_batch(checkpoints=): the second row with an input gets ``<key>#2``, so identical
    rows never share a lease (nor a saved result), concurrently or on a rerun."""
    project = write_project(tmp_path, PROJECT, MODULE)
    marks, store = tmp_path / "marks", tmp_path / "runs.sqlite"
    monkeypatch.setenv("MARKS", str(marks))

    async def collect() -> list[dict[str, Any]]:
        return [
            row
            async for row in run_batch(
                project, [{"n": 5}, {"n": 5}, {"n": 6}], concurrency=2, checkpoints=store
            )
        ]

    rows = asyncio.run(collect())
    assert [row["status"] for row in rows] == ["completed"] * 3
    assert rows[1]["key"] == f"{rows[0]['key']}#2"  # a row's key is its checkpoint's key
    assert _marks(marks) == {("first", 5): 2, ("second", 5): 2, ("first", 6): 1, ("second", 6): 1}
    capsys.readouterr()
    listed = tubeless(capsys, "checkpoints", "list", store, "--json")
    assert listed.code == 0, listed.err
    saved = {c["key"]: c["status"] for c in json.loads(listed.out)["checkpoints"]}
    assert saved == {row["key"]: "completed" for row in rows}
    again = asyncio.run(collect())
    assert [row["result"] for row in again] == [row["result"] for row in rows]
    assert sum(_marks(marks).values()) == 6  # nothing ran again: every row had its result


@pytest.mark.parametrize("other", ["--trace", "-o"])
def test_the_checkpoint_file_must_differ_from_the_trace_and_output(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], other: str
) -> None:
    project = write_project(tmp_path, PROJECT, MODULE)
    inputs = write_inputs(tmp_path / "in.jsonl", [{"n": 0}])
    same = tmp_path / "same.db"
    outcome = tubeless(capsys, "batch", project, inputs, "--checkpoints", same, other, same)
    assert outcome.code == 1
    assert "--checkpoints" in outcome.err and not same.exists()


def test_retry_failed_starts_a_failed_rows_checkpoint_over(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A row whose run failed keeps its saved failure on a rerun; --retry-failed retries it
    from the start (restart), and it completes."""
    project = write_project(tmp_path, PROJECT, MODULE)
    inputs = write_inputs(tmp_path / "in.jsonl", [{"n": 4}])
    store = tmp_path / "runs.sqlite"
    monkeypatch.setenv("MARKS", str(tmp_path / "marks"))
    monkeypatch.setenv("DECIDE_FAILS", "1")
    failed = tubeless(capsys, "batch", project, inputs, "--checkpoints", store)
    assert failed.code == 6
    monkeypatch.delenv("DECIDE_FAILS")
    again = tubeless(capsys, "batch", project, inputs, "--checkpoints", store)
    assert again.code == 6
    assert "saved by an earlier run of checkpoint" in json.loads(again.out)["error"]["message"]
    retried = tubeless(capsys, "batch", project, inputs, "--checkpoints", store, "--retry-failed")
    assert retried.code == 0, retried.err
    assert json.loads(retried.out)["result"] == {"n": 4, "done": [5, 6]}
