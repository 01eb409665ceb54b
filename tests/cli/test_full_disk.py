"""Outputs on a full disk: traces warn and leave the exit code alone, data files say what was kept.

A full disk is made real without root: the child process runs under ``RLIMIT_FSIZE`` with
``SIGXFSZ`` ignored, so every write past the limit fails with ``EFBIG`` the way ``ENOSPC`` would.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPTED = ROOT / "projects" / "scripted-agent.yaml"

pytestmark = pytest.mark.skipif(
    sys.platform != "linux", reason="RLIMIT_FSIZE behaviour differs elsewhere"
)


def _file_size_limit(limit: int) -> Callable[[], None]:
    def apply() -> None:
        import resource

        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails (EFBIG)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return apply


def _tubeless(
    tmp_path: Path, *args: str, limit: int | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tubeless", *args],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        },
        preexec_fn=None if limit is None else _file_size_limit(limit),
        timeout=120,  # a hang guard
        stdin=subprocess.DEVNULL,
    )


def _inputs(tmp_path: Path, count: int) -> Path:
    path = tmp_path / "in.jsonl"
    path.write_text(
        "".join(json.dumps({"question": f"word {i}"}) + "\n" for i in range(count)),
        encoding="utf-8",
    )
    return path


@pytest.mark.parametrize("limit", [0, 8192])
def test_run_with_a_sqlite_trace_that_cannot_even_start_warns_once(
    tmp_path: Path, limit: int
) -> None:
    done = _tubeless(
        tmp_path,
        "run",
        str(SCRIPTED),
        "--input",
        '{"question": "hello world"}',
        "--trace",
        "t.sqlite",
        "-q",
        limit=limit,
    )

    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"answer": "11 characters; HELLO; WORLD"}
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("warning: trace sink SqliteSink('t.sqlite') failed"), done.stderr


def test_batch_with_a_sqlite_trace_that_cannot_even_start_warns_once(tmp_path: Path) -> None:
    inputs = _inputs(tmp_path, 2)
    done = _tubeless(
        tmp_path, "batch", str(SCRIPTED), str(inputs), "--trace", "t.sqlite", limit=8192
    )

    assert done.returncode == 0, done.stderr
    rows = [json.loads(line) for line in done.stdout.splitlines()]
    assert [row["status"] for row in rows] == ["completed", "completed"]
    warnings = [line for line in done.stderr.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1, done.stderr
    assert "SqliteSink('t.sqlite')" in warnings[0]
    assert "error:" not in done.stderr


def test_batch_output_on_a_full_disk_names_the_file_and_what_it_kept(tmp_path: Path) -> None:
    inputs = _inputs(tmp_path, 50)
    done = _tubeless(
        tmp_path, "batch", str(SCRIPTED), str(inputs), "--output", "out.jsonl", limit=4000
    )

    assert done.returncode == 2, done.stderr
    last = done.stderr.splitlines()[-1]
    assert last.startswith("error: out.jsonl: cannot write it (File too large); it holds the ")
    assert "run the batch again with the same --output" in last
    kept = (tmp_path / "out.jsonl").read_text(encoding="utf-8").splitlines()
    assert kept and json.loads(kept[0])["status"] == "completed"


def test_a_cassette_on_a_full_disk_names_the_file_and_what_it_kept(tmp_path: Path) -> None:
    done = _tubeless(
        tmp_path,
        "run",
        str(SCRIPTED),
        "--input",
        '{"question": "hello world and more"}',
        "--record",
        "c.jsonl",
        "-q",
        limit=1500,
    )

    assert done.returncode == 6, done.stderr
    assert "cannot write the cassette c.jsonl: File too large; it keeps the " in done.stderr
    assert "OSError" not in done.stderr


def test_a_checkpoint_file_that_cannot_be_created_says_so(tmp_path: Path) -> None:
    done = _tubeless(
        tmp_path,
        "run",
        str(SCRIPTED),
        "--input",
        '{"question": "hello"}',
        "--checkpoints",
        "ck.sqlite",
        "-q",
        limit=20000,
    )

    assert done.returncode != 0
    assert "ck.sqlite: cannot write the checkpoint file" in done.stderr, done.stderr
    assert "not a checkpoint file" not in done.stderr
