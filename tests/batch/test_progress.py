"""Batch progress: a rich bar (done, failed, rate, ETA) on a terminal, plain lines otherwise."""

from __future__ import annotations

import json
import os
import pty
import re
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.fixtures.batch import rows_project, write_inputs
from tests.fixtures.cli import tubeless
from tests.fixtures.processes import HANG_GUARD, ROOT, cli_env
from tests.fixtures.terminal import TerminalRun


def _batch_on_a_terminal(*args: str | Path) -> tuple[int, str]:
    """``tubeless batch ARGS`` with stderr on a pty: its exit code and what the terminal got."""
    master, slave = pty.openpty()
    env = cli_env(TERM="xterm-256color", COLUMNS="100")
    env.pop("NO_COLOR", None)
    process = subprocess.Popen(
        [sys.executable, "-m", "tubeless", "batch", *map(str, args)],
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
    return process.returncode, seen.decode("utf-8", "replace")


def test_a_terminal_gets_a_progress_bar(tmp_path: Path) -> None:
    project = rows_project(tmp_path)
    inputs = write_inputs(tmp_path / "in.jsonl", [{"n": 1}, {"m": 2}, {"n": 3}])
    code, text = _batch_on_a_terminal(project, inputs, "-o", tmp_path / "out.jsonl")
    assert code == 6
    assert "━" in text and "3/3" in text and "1 failed" in text  # the bar, done, failed
    assert "rows done" not in text  # no plain progress lines on a terminal
    assert "batch: 3 rows: 2 completed, 1 failed" in text


_ESCAPES = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\r")


def test_a_terminal_lists_the_failed_rows_at_the_end(tmp_path: Path) -> None:
    """Index, key (the row's checkpoint key), code and message of each failed row, after the
    summary: the bar alone shows only a count."""
    project = rows_project(tmp_path)
    output = tmp_path / "out.jsonl"
    inputs = write_inputs(tmp_path / "in.jsonl", [{"n": 1}, {"m": 2}, {"n": -2}, {"m": 2}])
    code, text = _batch_on_a_terminal(project, inputs, "-o", output)
    assert code == 6
    rows = [json.loads(line) for line in output.read_text(encoding="utf-8").splitlines()]
    assert rows[3]["key"] == f"{rows[1]['key']}#2"
    lines = _ESCAPES.sub("", text).splitlines()
    [start] = [i for i, line in enumerate(lines) if "batch: 4 rows: 1 completed, 3 failed" in line]
    listed = lines[start + 2 :]
    assert len(listed) == 3, lines
    for line, row in zip(listed, (rows[1], rows[2], rows[3]), strict=True):
        error = row["error"]
        assert line == (
            f"batch: row {row['index']} failed ({row['key']}): {error['code']}: {error['message']}"
        )


def test_plain_lines_elsewhere(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    project = rows_project(tmp_path)
    inputs = write_inputs(tmp_path / "in.jsonl", [{"n": n} for n in range(20)])
    outcome = tubeless(capsys, "batch", project, inputs, "-o", tmp_path / "out.jsonl")
    progress = [line for line in outcome.err.splitlines() if "rows done" in line]
    assert [line.split(",")[0] for line in progress] == [
        f"batch: {n}/20 rows done" for n in range(2, 21, 2)
    ]
    assert outcome.err.splitlines()[-2:][0] == "batch: 20 rows: 20 completed, 0 failed"


def test_rows_go_to_stdout_while_the_bar_shows_on_the_terminal(tmp_path: Path) -> None:
    """``tubeless batch P in.jsonl > rows.jsonl`` in a terminal: the rows reach stdout, not the
    terminal the bar is drawn on."""
    project = rows_project(tmp_path)
    inputs = write_inputs(tmp_path / "in.jsonl", [{"n": 1}, {"n": 2}, {"n": 3}])
    run = TerminalRun(project, inputs, command="batch")
    code, out = run.finish()
    assert code == 0, run.screen.text
    assert [json.loads(line)["index"] for line in out.splitlines()] == [0, 1, 2]
    screen = "\n".join(run.screen.text)
    assert "3/3" in screen and '"index"' not in screen, screen
