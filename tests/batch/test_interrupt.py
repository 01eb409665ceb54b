"""An interrupted batch (SIGINT, or SIGKILL of the driver) reruns without running a completed
row again; every wait is a hang guard, never a timing."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.fixtures.batch import marks, read_rows, rows_project, write_inputs
from tests.fixtures.processes import HANG_GUARD, cli_env, finish, start_batch

ROWS = 24


def _start(
    project: Path, inputs: Path, output: Path, folder: Path, *extra: str, delay: str = "0.1"
) -> subprocess.Popen[str]:
    return start_batch(
        project,
        inputs,
        "-o",
        output,
        *extra,
        env=cli_env(BATCH_MARKS=str(folder), BATCH_DELAY=delay),
    )


def _completed(output: Path) -> set[int]:
    found = set()
    for line in output.read_text(encoding="utf-8").splitlines():
        try:
            row = json.loads(line)
        except ValueError:
            continue  # a line torn by SIGKILL
        if row["status"] == "completed":
            found.add(row["result"]["n"])
    return found


def _wait_for_rows(output: Path, process: subprocess.Popen[str], count: int) -> None:
    deadline = time.monotonic() + HANG_GUARD
    while not (output.exists() and len(_completed(output)) >= count):
        assert process.poll() is None, f"the batch ended early: {process.communicate()}"
        assert time.monotonic() < deadline, "no rows were written"
        time.sleep(0.02)


@pytest.mark.slow
@pytest.mark.parametrize(
    "how, engine",
    [
        pytest.param(signal.SIGINT, "local", id="sigint-local"),
        pytest.param(signal.SIGINT, "process", id="sigint-process"),
        pytest.param(signal.SIGKILL, "local", id="sigkill-local"),
        pytest.param(signal.SIGKILL, "process", id="sigkill-process"),
    ],
)
def test_an_interrupted_batch_reruns_no_completed_row(
    tmp_path: Path, how: signal.Signals, engine: str
) -> None:
    project = rows_project(tmp_path)
    folder = tmp_path / "marks"
    folder.mkdir()
    inputs = write_inputs(tmp_path / "in.jsonl", [{"n": n} for n in range(ROWS)])
    output = tmp_path / "out.jsonl"
    process = _start(project, inputs, output, folder, "--engine", engine, "-c", "2")
    _wait_for_rows(output, process, 3)
    process.send_signal(how)
    _, err = finish(process)
    if how == signal.SIGINT:
        assert process.returncode == 7
        assert "error: TUBELESS_RUN_CANCELLED: SIGINT received; the batch was cancelled" in err
    else:
        assert process.returncode == -signal.SIGKILL
    done_first = _completed(output)
    assert 3 <= len(done_first) < ROWS
    rerun = _start(project, inputs, output, folder, "--engine", engine, delay="0")
    _, err = finish(rerun)
    assert rerun.returncode == 0, err
    rows = read_rows(output)
    assert [row["index"] for row in rows] == list(range(ROWS))
    assert all(row["status"] == "completed" for row in rows)
    ran = marks(folder)
    assert all(ran[n] == 1 for n in done_first), ran
    assert f"; {len(done_first)} already completed, not run again" in err
