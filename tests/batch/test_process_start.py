"""How the ``process`` engine starts its workers: forked from the driver once it has loaded the
project where that is safe, spawned as fresh interpreters elsewhere; a forked worker behaves
as a spawned one does (its own signals, stdin and stdout; its death reported by its exit
status; gone when the driver is).

The project's module records the process that imported it: a forked worker has it from the
driver (its parent), a spawned one imported it itself."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.processes import HANG_GUARD, ROOT, cli_env, write_project
from tests.fixtures.terminal import TerminalRun

PROJECT = """\
    version: 1
    project: {id: starts}
    python_path: [.]
    agents:
      starts:
        input: {schema: {type: object, properties: {n: {type: integer}}, required: [n]}}
        result: {schema: {}}
        initial_state: "helpers:initial"
        decide: "helpers:decide"
        reduce: "helpers:reduce"
        tools:
          where: {run: "helpers:where", description: Say which process ran the call.,
                  input: {schema: {type: integer}}, output: {schema: {type: object}}}
    """

MODULE = """\
    import os
    import signal
    import sys
    import time

    IMPORTED_BY = os.getpid()


    def initial(raw):
        return {"n": raw["n"], "where": None}


    def decide(state, ctx):
        if state["where"] is None:
            call = {"id": "c1", "tool": "where", "input": state["n"]}
            return {"kind": "continue", "calls": [call]}
        return {"kind": "finish", "result": state["where"]}


    def reduce(state, outcomes):
        return {"n": state["n"], "where": outcomes[0]["value"]}


    def where(n, ctx):
        pids = os.environ.get("START_PIDS")
        if pids:
            open(os.path.join(pids, str(os.getpid())), "w").close()
        if n == -3:
            os.kill(os.getpid(), signal.SIGTERM)
        print("a handler's line", flush=True)
        time.sleep(float(os.environ.get("START_DELAY", "0")))
        return {
            "imported_by": IMPORTED_BY,
            "pid": os.getpid(),
            "parent": os.getppid(),
            "stdin": sys.stdin.read(),
        }
    """

_THREADED = """\
import asyncio, json, sys, threading
from tubeless.batch import run_batch

stop = threading.Event()
threading.Thread(target=stop.wait, daemon=True).start()  # a second thread: no fork


async def main():
    async for row in run_batch(sys.argv[1], [{"n": 1}, {"n": 2}], engine="process",
                               concurrency=2):
        print(json.dumps(row), flush=True)


asyncio.run(main())
stop.set()
"""


_COMMAND = (sys.executable, "-m", "tubeless", "batch")


def _batch(
    project: Path, *options: str, stdin: str = "", **env: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*_COMMAND, str(project), "-", "--engine", "process", *options],
        input=stdin,
        text=True,
        capture_output=True,
        cwd=ROOT,
        env=cli_env(**env),
        timeout=HANG_GUARD,
    )


def _rows(stdout: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stdout.splitlines()]


def _inputs(*ns: int) -> str:
    return "".join(json.dumps({"n": n}) + "\n" for n in ns)


def test_workers_are_forked_from_the_driver_that_loaded_the_project(tmp_path: Path) -> None:
    """Inputs from stdin, two workers: each row ran in a child of the driver that did not
    import the project itself; the rows' stdin is empty (the driver's is its inputs) and
    what a handler prints is not on stdout."""
    project = write_project(tmp_path, PROJECT, MODULE)
    done = _batch(project, "-c", "2", stdin=_inputs(*range(6)))
    assert done.returncode == 0, done.stderr
    rows = _rows(done.stdout)
    assert [row["index"] for row in rows] == list(range(6))
    results = [row["result"] for row in rows]
    (driver,) = {result["imported_by"] for result in results}
    assert {result["parent"] for result in results} == {driver}
    assert driver not in {result["pid"] for result in results}
    assert {result["stdin"] for result in results} == {""}
    assert "a handler's line" in done.stderr


def test_workers_are_forked_by_a_driver_showing_its_progress_bar(tmp_path: Path) -> None:
    """On a terminal the driver draws a live progress bar, refreshed without a thread of its
    own: the workers are still forked from the driver (their parent, which imported the
    project for them), and the bar shows every row done."""
    project = write_project(tmp_path, PROJECT, MODULE)
    inputs = tmp_path / "in.jsonl"
    inputs.write_text(_inputs(*range(4)), encoding="utf-8")
    run = TerminalRun(project, inputs, "--engine", "process", "-c", "2", command="batch")
    code, out = run.finish()
    assert code == 0, run.screen.text
    results = [row["result"] for row in _rows(out)]
    assert {result["imported_by"] for result in results} == {run.process.pid}
    assert {result["parent"] for result in results} == {run.process.pid}
    screen = "\n".join(run.screen.text)
    assert "━" in screen and "4/4" in screen and "0 failed" in screen, screen
    assert "batch: 4 rows: 4 completed, 0 failed" in screen


def _counted(lines: list[str]) -> bool:
    """Whether the bar counts at least one of the 40 rows done."""
    return re.search(r"\b[1-9][0-9]?/40\b", "\n".join(lines)) is not None


def test_sigint_cancels_a_terminal_batch_of_forked_workers(tmp_path: Path) -> None:
    """SIGINT to the driver and its workers (as a terminal sends it to the whole group) while
    the bar shows: the workers, forked, ignore it (none is replaced); the driver cancels the
    batch (exit 7), and the rows that completed are on stdout."""
    project = write_project(tmp_path, PROJECT, MODULE)
    pids = tmp_path / "pids"
    pids.mkdir()
    inputs = tmp_path / "in.jsonl"
    inputs.write_text(_inputs(*range(40)), encoding="utf-8")
    run = TerminalRun(
        project,
        inputs,
        "--engine",
        "process",
        "-c",
        "2",
        command="batch",
        START_PIDS=str(pids),
        START_DELAY="0.2",
    )
    workers: set[int] = set()
    try:
        # Both workers ran a row (a file each, named by its pid) and the bar counts rows done.
        run.read_until(lambda screen: len(list(pids.iterdir())) >= 2 and _counted(screen.text))
        assert run.process.poll() is None, "the batch ended before it could be interrupted"
        workers = {int(path.name) for path in pids.iterdir()}
        for pid in (*workers, run.process.pid):
            os.kill(pid, signal.SIGINT)
        code, out = run.finish()
    finally:
        if run.process.poll() is None:
            run.process.kill()
            run.process.wait()
        for pid in workers:
            if _gone(pid) is False:
                os.kill(pid, signal.SIGKILL)
    screen = "\n".join(run.screen.text)
    assert code == 7, screen
    assert "batch: SIGINT received; cancelling the rows in flight" in screen
    assert "error: TUBELESS_RUN_CANCELLED: SIGINT received; the batch was cancelled" in screen
    completed = [row["result"] for row in _rows(out) if row["status"] == "completed"]
    assert 0 < len(completed) < 40
    assert {result["parent"] for result in completed} == {run.process.pid}
    assert {int(path.name) for path in pids.iterdir()} == workers  # none died of it


def test_workers_are_spawned_with_a_sqlite_checkpoint_file(tmp_path: Path) -> None:
    """SQLite keeps per-process state about open files, which a fork would share: each worker
    is a fresh interpreter that imports the project itself."""
    project = write_project(tmp_path, PROJECT, MODULE)
    done = _batch(
        project, "-c", "2", "--checkpoints", str(tmp_path / "c.sqlite"), stdin=_inputs(1, 2)
    )
    assert done.returncode == 0, done.stderr
    for row in _rows(done.stdout):
        assert row["result"]["imported_by"] == row["result"]["pid"]


def test_workers_are_spawned_when_the_driver_runs_other_threads(tmp_path: Path) -> None:
    """A fork copies only the forking thread: a lock another thread holds would stay held."""
    project = write_project(tmp_path, PROJECT, MODULE)
    done = subprocess.run(
        [sys.executable, "-c", _THREADED, str(project)],
        text=True,
        capture_output=True,
        cwd=ROOT,
        env=cli_env(),
        timeout=HANG_GUARD,
    )
    assert done.returncode == 0, done.stderr
    for row in _rows(done.stdout):
        assert row["result"]["imported_by"] == row["result"]["pid"]


def test_a_forked_worker_killed_by_sigterm_fails_its_row_and_not_the_batch(
    tmp_path: Path,
) -> None:
    """The driver's SIGTERM handling (cancel the batch) is not the worker's: the worker dies
    of it, its row says so, the other rows complete and the batch is not cancelled."""
    project = write_project(tmp_path, PROJECT, MODULE)
    done = _batch(project, "-c", "2", "--row-retries", "0", stdin=_inputs(1, -3, 2, 3))
    assert done.returncode == 6, done.stderr
    rows = _rows(done.stdout)
    assert [row["status"] for row in rows] == ["completed", "failed", "completed", "completed"]
    assert rows[1]["error"] == {
        "code": "TUBELESS_BATCH_WORKER_DIED",
        "message": "the worker process running the row died (killed by SIGTERM)",
    }
    assert rows[3]["result"]["parent"] == rows[0]["result"]["imported_by"]


def _gone(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="ascii")
    except FileNotFoundError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] == "Z"  # ended, not yet reaped by its new parent


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
def test_forked_workers_exit_when_the_driver_is_killed(tmp_path: Path) -> None:
    project = write_project(tmp_path, PROJECT, MODULE)
    pids = tmp_path / "pids"
    pids.mkdir()
    driver = subprocess.Popen(
        [*_COMMAND, str(project), "-", "--engine", "process", "-c", "2"],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        text=True,
        cwd=ROOT,
        env=cli_env(START_PIDS=str(pids), START_DELAY="0.2"),
    )
    try:
        assert driver.stdin is not None
        driver.stdin.write(_inputs(*range(40)))
        driver.stdin.close()
        deadline = time.monotonic() + HANG_GUARD
        while len(list(pids.iterdir())) < 2:
            assert driver.poll() is None and time.monotonic() < deadline, "no two workers ran"
            time.sleep(0.02)
        workers = {int(path.name) for path in pids.iterdir()}
        driver.send_signal(signal.SIGKILL)
        driver.wait(HANG_GUARD)
        while not all(_gone(pid) for pid in workers):
            assert time.monotonic() < deadline, "a worker outlived its driver"
            time.sleep(0.02)
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()
        for path in pids.iterdir():
            if not _gone(int(path.name)):
                os.kill(int(path.name), signal.SIGKILL)
