"""When the file sinks write through to the OS (issue 13, "Traces while a run is going on").

The rule (docs/traces.md, "When records reach the file"): every record is handed to the OS (and,
for SQLite, committed) by the end of the turn that made it (the turn's ``pipeline.completed``)
or of the root run, and at most 250 ms after it was exported, whatever the run does meanwhile.
A ``kill -9`` therefore loses no record of a finished turn.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tubeless.tracing import NdjsonSink, SqliteSink, read_trace
from tubeless.tracing.ndjson import read_ndjson
from tubeless.tracing.sqlite import read_sqlite

ROOT = Path(__file__).resolve().parents[2]
HANG_GUARD = 30.0  # seconds; a hang guard, never a timing assertion (DESIGN.md §9)
#: The hang guard of a wait that includes ``tubeless run`` starting (slow on a loaded machine).
START_GUARD = 90.0
TERMINAL = {"step.complete", "step.failed", "step.cancelled", "step.skipped"}
TIMER_THREAD = "tubeless-trace-flush"

PROJECT = """\
version: 1
project: {id: two-turns}
python_path: [.]
agents:
  two-turns:
    input: {schema: {type: object}}
    result: {schema: {}}
    initial_state: {turns: "0"}
    decide: "MODULE:decide"
    reduce: "MODULE:reduce"
    limits: {max_turns: 5, max_calls: 20, max_decisions: 5}
    tools:
      fast: {run: "MODULE:fast", description: Fast., input: {schema: {type: string}},
             output: {schema: {type: string}}}
      block: {run: "MODULE:block", description: Blocks., input: {schema: {type: string}},
              output: {schema: {type: string}}}
"""
MODULE = """\
import pathlib, time

READY = pathlib.Path(__file__).with_name("READY")


def decide(state, ctx):
    if ctx.turn == 1:
        return {"kind": "continue",
                "calls": [{"id": f"c{i}", "tool": "fast", "input": f"w{i}"} for i in range(2)]}
    if ctx.turn == 2:
        return {"kind": "continue", "calls": [{"id": "b", "tool": "block", "input": "x"}]}
    return {"kind": "finish", "result": "done"}


def reduce(state, outcomes):
    return {"turns": str(int(state["turns"]) + 1)}


async def fast(value, ctx):
    return value.upper()


def block(value, ctx):
    READY.write_text("turn 1 has finished")
    time.sleep(600)
    return value
"""


def _project(tmp_path: Path) -> Path:
    module = f"two_turns_{uuid.uuid4().hex}"
    (tmp_path / f"{module}.py").write_text(MODULE, encoding="utf-8")
    path = tmp_path / "two-turns.yaml"
    path.write_text(PROJECT.replace("MODULE", module), encoding="utf-8")
    return path


def _wait_for(condition: Callable[[], bool], what: str, guard: float = HANG_GUARD) -> None:
    deadline = time.monotonic() + guard
    while not condition():
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.01)


def _killed_mid_turn_2(tmp_path: Path, *traces: Path) -> None:
    """Run the project with ``traces``; SIGKILL it once turn 2's call is blocking."""
    args = [a for trace in traces for a in ("--trace", str(trace))]
    process = subprocess.Popen(
        [sys.executable, "-m", "tubeless", "run", str(_project(tmp_path)), *args, "-q"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    try:
        ready = tmp_path / "READY"
        _wait_for(
            lambda: ready.exists() or process.poll() is not None, "turn 2's call", START_GUARD
        )
        assert ready.exists(), process.communicate(timeout=HANG_GUARD)
    finally:
        process.kill()
        process.communicate(timeout=HANG_GUARD)
    assert process.returncode == -signal.SIGKILL


def _turn_tree(records: list[dict[str, Any]], index: int) -> list[dict[str, Any]]:
    """The records of turn ``index`` and of every run below it."""
    turns = {
        r["runId"]
        for r in records
        if r["name"] == "pipeline.started" and r.get("iteration", {}).get("index") == index
    }
    assert len(turns) == 1, f"turn {index} is not in the {len(records)} records"
    tree = set(turns)
    for r in records:  # a child's pipeline.started follows its parent's records
        if r["name"] == "pipeline.started" and r.get("parentRunId") in tree:
            tree.add(r["runId"])
    return [r for r in records if r["runId"] in tree]


def _assert_finished(records: list[dict[str, Any]]) -> None:
    """Every run started here completed, and every started step attempt ended once."""
    started = Counter(r["runId"] for r in records if r["name"] == "pipeline.started")
    completed = Counter(r["runId"] for r in records if r["name"] == "pipeline.completed")
    assert started and started == completed
    running = {r["attemptId"] for r in records if r["name"] == "step.running" and not r["payload"]}
    ended = Counter(r["attemptId"] for r in records if r["name"] in TERMINAL and "attemptId" in r)
    assert running == set(ended) and set(ended.values()) == {1}


@pytest.mark.parametrize("suffix", [".ndjson", ".sqlite"])
def test_kill_9_after_a_turn_leaves_every_record_of_that_turn(tmp_path: Path, suffix: str) -> None:
    """Turn 1 (two calls) has finished and turn 2's call blocks: SIGKILL loses nothing of it."""
    trace = tmp_path / f"run{suffix}"
    _killed_mid_turn_2(tmp_path, trace)

    records = read_trace(trace, allow_partial_tail=True)
    turn_1 = _turn_tree(records, 1)
    assert len({r["runId"] for r in turn_1}) == 3  # the turn and its two calls
    _assert_finished(turn_1)
    root = records[0]
    assert root["name"] == "pipeline.started" and "parentRunId" not in root


def test_both_sinks_hold_the_same_records_after_a_kill_9(tmp_path: Path) -> None:
    """Both sinks wrote through at the same points: the same records up to turn 1's end."""
    ndjson, store = tmp_path / "run.ndjson", tmp_path / "run.sqlite"
    _killed_mid_turn_2(tmp_path, ndjson, store)

    lines, rows = read_ndjson(ndjson, allow_partial_tail=True), read_sqlite(store)
    shorter = min(len(lines), len(rows))
    assert lines[:shorter] == rows[:shorter]
    assert _turn_tree(lines, 1) == _turn_tree(rows, 1)


def _record(name: str = "step.running", run_id: str = "p:1") -> dict[str, Any]:
    if name == "pipeline.completed":
        payload = {
            "status": "completed",
            "dryRun": False,
            "errorCount": 0,
            "finalized": True,
            "stepCount": 1,
        }
        return {
            "version": 3,
            "name": name,
            "runId": run_id,
            "pipelineId": "p",
            "timestampMs": 1_700_000_000_000,
            "payload": payload,
        }
    return {
        "version": 3,
        "name": name,
        "runId": run_id,
        "pipelineId": "p",
        "timestampMs": 1_700_000_000_000,
        "stepId": "s",
        "attemptId": "s:1",
        "payload": {},
    }


def _timer_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == TIMER_THREAD]


def _open(kind: str, path: Path) -> NdjsonSink | SqliteSink:
    return NdjsonSink(path) if kind == "ndjson" else SqliteSink(path)


@pytest.mark.parametrize("kind", ["ndjson", "sqlite"])
def test_a_turn_or_root_run_end_writes_through_at_once(tmp_path: Path, kind: str) -> None:
    """A turn's or a root's ``pipeline.completed`` reaches the file before ``export`` returns."""
    path = tmp_path / f"t.{kind}"
    sink = _open(kind, path)
    turn_end = {
        **_record("pipeline.completed", "p/turn:1"),
        "parentRunId": "p:1",
        "iteration": {"runId": "p:1", "stepId": "agent", "attemptId": "a", "index": 1},
    }
    try:
        sink.export(_record())
        sink.export(turn_end)
        assert len(read_trace(path)) == 2
        sink.export(_record())
        sink.export(_record("pipeline.completed"))
        assert len(read_trace(path)) == 4
    finally:
        sink.close()


@pytest.mark.parametrize("kind", ["ndjson", "sqlite"])
def test_a_quiet_sink_writes_through_by_itself_and_leaves_no_thread(
    tmp_path: Path, kind: str
) -> None:
    """A record followed by silence reaches the file without a flush; the timer then ends."""
    path = tmp_path / f"t.{kind}"
    before = set(_timer_threads())  # other tests' sinks may still have timers pending
    sink = _open(kind, path)
    try:
        sink.export(_record())
        _wait_for(lambda: path.exists() and len(read_trace(path)) == 1, "the timed write")
        _wait_for(lambda: set(_timer_threads()) <= before, "the timer thread to end")
    finally:
        sink.close()


@pytest.mark.parametrize("kind", ["ndjson", "sqlite"])
def test_closing_a_sink_stops_its_timer(tmp_path: Path, kind: str) -> None:
    """``close`` ends a pending timer at once: no thread outlives the sink."""
    before = set(_timer_threads())  # other tests' sinks may still have timers pending
    sink = _open(kind, tmp_path / f"t.{kind}")
    sink.export(_record())
    sink.close()
    assert set(_timer_threads()) <= before
    assert len(read_trace(tmp_path / f"t.{kind}")) == 1


@pytest.mark.parametrize("kind", ["ndjson", "sqlite"])
def test_a_busy_sink_never_starts_a_timer_per_record_or_per_run(
    tmp_path: Path, kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """2,000 records with 200 run ends among them start one pending timer at a time (one per
    250 ms window at most), not one per record or per run end."""
    starts = 0
    original = threading.Timer.start

    def counting(timer: threading.Timer) -> None:
        nonlocal starts
        starts += 1
        original(timer)

    monkeypatch.setattr(threading.Timer, "start", counting)
    sink = _open(kind, tmp_path / f"t.{kind}")
    try:
        for index in range(2_000):
            sink.export(_record("pipeline.completed" if index % 10 == 9 else "step.running"))
    finally:
        sink.close()
    assert len(read_trace(tmp_path / f"t.{kind}")) == 2_000
    assert 1 <= starts < 20
