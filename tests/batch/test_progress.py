"""Batch progress: a rich bar (done, failed, rate, ETA) on a terminal, plain lines otherwise."""

from __future__ import annotations

import os
import pty
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.fixtures.batch import rows_project, write_inputs
from tests.fixtures.cli import tubeless
from tests.fixtures.processes import HANG_GUARD, ROOT, cli_env


def test_a_terminal_gets_a_progress_bar(tmp_path: Path) -> None:
    project = rows_project(tmp_path)
    inputs = write_inputs(tmp_path / "in.jsonl", [{"n": 1}, {"m": 2}, {"n": 3}])
    master, slave = pty.openpty()
    env = cli_env(TERM="xterm-256color", COLUMNS="100")
    env.pop("NO_COLOR", None)
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tubeless",
            "batch",
            str(project),
            str(inputs),
            "-o",
            str(tmp_path / "out.jsonl"),
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=slave,
        cwd=ROOT,
        env=env,
    )
    os.close(slave)
    seen = b""
    deadline = time.monotonic() + HANG_GUARD
    while time.monotonic() < deadline:
        ready, _, _ = select.select([master], [], [], 0.1)
        if not ready:
            if process.poll() is not None:
                break
            continue
        try:
            data = os.read(master, 65536)
        except OSError:
            break
        if not data:
            break
        seen += data
    process.communicate(timeout=HANG_GUARD)
    os.close(master)
    text = seen.decode("utf-8", "replace")
    assert process.returncode == 6
    assert "━" in text and "3/3" in text and "1 failed" in text  # the bar, done, failed
    assert "rows done" not in text  # no plain progress lines on a terminal
    assert "batch: 3 rows: 2 completed, 1 failed" in text


def test_plain_lines_elsewhere(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    project = rows_project(tmp_path)
    inputs = write_inputs(tmp_path / "in.jsonl", [{"n": n} for n in range(20)])
    outcome = tubeless(capsys, "batch", project, inputs, "-o", tmp_path / "out.jsonl")
    progress = [line for line in outcome.err.splitlines() if "rows done" in line]
    assert [line.split(",")[0] for line in progress] == [
        f"batch: {n}/20 rows done" for n in range(2, 21, 2)
    ]
    assert outcome.err.splitlines()[-2:][0] == "batch: 20 rows: 20 completed, 0 failed"
