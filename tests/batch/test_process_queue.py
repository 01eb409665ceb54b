"""The ``process`` engine keeps one more row queued at each worker, sent ahead so that a worker
never waits for the driver between rows; the worker starts it only when its row before ends.

What these tests hold to: at most one row runs at a time in a worker; the output keeps input
order; a worker that dies fails (after its retries) only the row it was running, while the row
queued behind it runs once on another worker without using a retry; a cancelled batch cancels
its queued rows without running them, runs no row twice and leaves no worker behind. The tool
leaves a file per call (``<n>.<pid>.<random>``) as proof of what ran where."""

from __future__ import annotations

import asyncio
import os
import threading
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.processes import write_project
from tubeless.batch import run_batch
from tubeless.errors import BatchError
from tubeless.pipeline import CancelToken

PROJECT = """\
    version: 1
    project: {id: queued}
    python_path: [.]
    agents:
      queued:
        input: {schema: {type: object, properties: {n: {type: integer}}, required: [n]}}
        result: {schema: {}}
        initial_state: "helpers:initial"
        decide: "helpers:decide"
        reduce: "helpers:reduce"
        tools:
          work: {run: "helpers:work", description: Mark the call and say where it ran.,
                 input: {schema: {type: integer}}, output: {schema: {type: object}}}
    """

MODULE = """\
    import os
    import signal
    import time
    import uuid


    def initial(raw):
        return {"n": raw["n"], "done": None}


    def decide(state, ctx):
        if state["done"] is None:
            return {"kind": "continue", "calls": [{"id": "c1", "tool": "work",
                                                    "input": state["n"]}]}
        return {"kind": "finish", "result": state["done"]}


    def reduce(state, outcomes):
        outcome = outcomes[0]
        return {"n": state["n"], "done": outcome["value"] if outcome["ok"] else "failed"}


    def work(n, ctx):
        folder = os.environ["QUEUE_MARKS"]
        open(os.path.join(folder, f"{n}.{os.getpid()}.{uuid.uuid4().hex}"), "w").close()
        with open(os.path.join(folder, "order-log"), "a") as log:
            log.write(f"{n} ")
        # Two rows at once in one worker would find the other's file here.
        busy = os.open(os.path.join(folder, f"busy-{os.getpid()}"),
                       os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        try:
            if n == -5:  # a worker loading the project from now on fails
                with open(__file__, "a") as module:
                    module.write("\\nthis is not python\\n")
            if n in (-4, -5):
                os.kill(os.getpid(), signal.SIGKILL)
            if n == -2:
                raise ValueError("no work for -2")
            # n >= 1000 sleeps (n - 1000) ms; others $QUEUE_DELAY seconds.
            delay = float(os.environ.get("QUEUE_DELAY") or 0)
            time.sleep((n - 1000) / 1000 if n >= 1000 else delay)
        finally:
            os.close(busy)
            os.unlink(os.path.join(folder, f"busy-{os.getpid()}"))
        return {"n": n, "pid": os.getpid()}
    """


def _ran(folder: Path) -> dict[int, list[int]]:
    """The pids each ``n``'s tool call ran in, one entry per run."""
    runs: dict[int, list[int]] = {}
    for mark in folder.iterdir():
        if not mark.name.startswith(("busy-", "order-")):
            n, pid, _ = mark.name.split(".")
            runs.setdefault(int(n), []).append(int(pid))
    return runs


def _gone(pid: int) -> bool:
    """Ended and reaped (a zombie would be a worker nobody waited for)."""
    return not Path(f"/proc/{pid}").exists()


@pytest.fixture
def marks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "marks"
    folder.mkdir()
    monkeypatch.setenv("QUEUE_MARKS", str(folder))
    return folder


def _run(
    tmp_path: Path,
    ns: list[int],
    *,
    concurrency: int,
    cancel_after_marks: int | None = None,
    cancel_from_a_thread: bool = False,
    **options: Any,
) -> list[dict[str, Any]]:
    """The batch's rows on the process engine; with ``cancel_after_marks``, the batch is
    cancelled (as SIGINT does) once that many tool calls started."""
    project = write_project(tmp_path, PROJECT, MODULE)
    token = CancelToken()
    folder = Path(os.environ["QUEUE_MARKS"])

    async def watch() -> None:
        assert cancel_after_marks is not None
        while sum(map(len, _ran(folder).values())) < cancel_after_marks:
            await asyncio.sleep(0.005)
        if cancel_from_a_thread:  # as a caller's own thread may
            thread = threading.Thread(target=token.cancel, args=("cancelled by the test",))
            thread.start()
            await asyncio.to_thread(thread.join)
        else:
            token.cancel("cancelled by the test")

    async def main() -> list[dict[str, Any]]:
        watcher = None if cancel_after_marks is None else asyncio.create_task(watch())
        try:
            return [
                row
                async for row in run_batch(
                    project,
                    [{"n": n} for n in ns],
                    engine="process",
                    concurrency=concurrency,
                    signal=token,
                    **options,
                )
            ]
        finally:
            if watcher is not None:
                watcher.cancel()

    return asyncio.run(main())


@pytest.mark.skipif(not Path("/proc/self").exists(), reason="reads /proc")
def test_queued_rows_run_one_at_a_time_per_worker_in_input_order(
    tmp_path: Path, marks: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One worker fed by two slots, then two workers fed by four: every row ran once, never
    beside another row in its worker, and the rows come back in input order; on one worker
    they also started in input order."""
    monkeypatch.setenv("QUEUE_DELAY", "0.005")
    rows = _run(tmp_path, list(range(12)), concurrency=1)
    assert [(row["index"], row["status"]) for row in rows] == [(i, "completed") for i in range(12)]
    ran = _ran(marks)
    assert {n: len(pids) for n, pids in ran.items()} == dict.fromkeys(range(12), 1)
    assert len({pid for pids in ran.values() for pid in pids}) == 1
    for pids in ran.values():
        assert _gone(pids[0])
    started = (marks / "order-log").read_text(encoding="utf-8").split()
    assert started == [str(n) for n in range(12)]

    for mark in marks.iterdir():
        mark.unlink()
    rows = _run(tmp_path, list(range(30)), concurrency=2)
    assert [(row["index"], row["status"]) for row in rows] == [(i, "completed") for i in range(30)]
    assert [row["result"]["n"] for row in rows] == list(range(30))
    ran = _ran(marks)
    assert {n: len(pids) for n, pids in ran.items()} == dict.fromkeys(range(30), 1)
    assert len({pid for pids in ran.values() for pid in pids}) <= 2


@pytest.mark.skipif(not Path("/proc/self").exists(), reason="reads /proc")
def test_a_row_queued_behind_a_killed_worker_runs_once_on_another_without_a_retry(
    tmp_path: Path, marks: Path
) -> None:
    """Quick rows, so each is sent ahead: the worker is SIGKILLed by its row while the next row
    waits queued behind it. With no row retries, the killed row fails as its worker died; the
    queued row never started there, so it runs (once) on the replacement worker and completes:
    it used no retry."""
    rows = _run(tmp_path, [1, 2, -4, 3, 4], concurrency=1, row_retries=0)
    assert [row["status"] for row in rows] == ["completed"] * 2 + ["failed"] + ["completed"] * 2
    assert rows[2]["error"] == {
        "code": "TUBELESS_BATCH_WORKER_DIED",
        "message": "the worker process running the row died (killed by SIGKILL)",
    }
    ran = _ran(marks)
    assert {n: len(pids) for n, pids in ran.items()} == {-4: 1, 1: 1, 2: 1, 3: 1, 4: 1}
    (killed,) = ran[-4]
    assert {rows[i]["result"]["pid"] for i in (0, 1)} == {killed}
    assert {rows[i]["result"]["pid"] for i in (3, 4)} == {ran[3][0]} != {killed}
    assert all(_gone(pid) for pids in ran.values() for pid in pids)


def test_the_killed_row_uses_its_retries_and_the_queued_rows_none(
    tmp_path: Path, marks: Path
) -> None:
    """Default row retries: the row that kills its worker runs three times and fails saying
    so; each row queued behind it ran exactly once, on two workers."""
    rows = _run(tmp_path, [-4, 1, 2, 3, 4, 5], concurrency=2)
    assert [row["status"] for row in rows] == ["failed"] + ["completed"] * 5
    assert rows[0]["error"] == {
        "code": "TUBELESS_BATCH_WORKER_DIED",
        "message": "the worker process running the row died (killed by SIGKILL); it ran 3 "
        "times and its worker died each time (--row-retries 2)",
    }
    ran = _ran(marks)
    assert {n: len(pids) for n, pids in ran.items()} == {-4: 3, 1: 1, 2: 1, 3: 1, 4: 1, 5: 1}


@pytest.mark.skipif(not Path("/proc/self").exists(), reason="reads /proc")
@pytest.mark.parametrize("from_a_thread", [False, True], ids=["loop", "thread"])
def test_a_cancelled_batch_does_not_start_its_queued_row(
    tmp_path: Path, marks: Path, from_a_thread: bool
) -> None:
    """One worker: a quick row, so the next ones are sent ahead; the second row runs (0.4 s)
    with the third queued when the batch is cancelled. The running row comes back cancelled
    (or completed, had it ended); the queued one comes back cancelled without having started;
    no row ran twice and the worker is gone. The token may be cancelled from the event loop
    or from another thread."""
    rows = _run(
        tmp_path,
        [1001, 1400, 1401, 1402],
        concurrency=1,
        cancel_after_marks=2,
        cancel_from_a_thread=from_a_thread,
    )
    statuses = {row["index"]: row["status"] for row in rows}
    assert statuses[0] == "completed"
    assert statuses[1] in {"cancelled", "completed"}
    assert statuses[2] == "cancelled"
    assert set(statuses) == {0, 1, 2}
    ran = _ran(marks)
    assert {n: len(pids) for n, pids in ran.items()} == {1001: 1, 1400: 1}
    assert _gone(ran[1400][0])


@pytest.mark.skipif(not Path("/proc/self").exists(), reason="reads /proc")
def test_fail_fast_runs_no_row_twice_and_leaves_no_worker(
    tmp_path: Path, marks: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first row fails at once with two workers and rows queued at both: the batch stops;
    every row that comes back is failed, completed or cancelled, none ran twice, few ran at
    all, and both workers are gone."""
    monkeypatch.setenv("QUEUE_DELAY", "0.2")
    rows = _run(tmp_path, [-2, *range(1, 20)], concurrency=2, fail_fast=True)
    assert rows[0]["status"] == "failed"
    assert {row["status"] for row in rows[1:]} <= {"completed", "cancelled"}
    ran = _ran(marks)
    assert all(len(pids) == 1 for pids in ran.values()), ran
    assert len(ran) <= 4, ran
    for pids in ran.values():
        assert _gone(pids[0])


def test_a_replacement_worker_that_cannot_load_fails_the_batch_and_leaves_no_worker(
    tmp_path: Path, marks: Path
) -> None:
    """One worker, spawned (a SQLite checkpoint file): a row breaks the project's module and
    kills its worker; the replacement cannot load the project, so the batch fails saying so
    (the row to retry and the row queued behind it wait for that worker), and no worker is
    left running."""
    with pytest.raises(BatchError) as raised:
        _run(
            tmp_path,
            [1, -5, 2, 3, 4],
            concurrency=1,
            checkpoints=str(tmp_path / "c.sqlite"),
        )
    assert raised.value.code == "TUBELESS_BATCH_ENGINE_UNAVAILABLE"
    assert "a worker could not load the entry" in str(raised.value)
    for pids in _ran(marks).values():
        assert all(_gone(pid) for pid in pids)


def test_no_row_waits_behind_a_slow_row_while_the_other_worker_is_free(
    tmp_path: Path, marks: Path
) -> None:
    """Rows of 0.3 s and more are not sent ahead: while the first worker runs a 3 s row, the
    four rows after it all run on the second worker, none queued behind the slow one."""
    rows = _run(tmp_path, [4000, 1300, 1301, 1302, 1303], concurrency=2)
    assert [row["status"] for row in rows] == ["completed"] * 5
    slow = rows[0]["result"]["pid"]
    assert {row["result"]["pid"] for row in rows[1:]} == {rows[1]["result"]["pid"]} != {slow}
