"""Data files named on the command line: no device or pipe read forever, no file clobbered.

``--replay`` refuses named pipes and devices by name and bounds a cassette's size; ``--record``
and ``batch --output`` refuse a symbolic link instead of truncating its target; options naming
the same file (``--record`` and ``--checkpoints``, ``batch --output`` and INPUTS) are usage
errors.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

MAX_CASSETTE_BYTES = 64 * 2**20  # the documented bound (docs/testing.md)

ROOT = Path(__file__).resolve().parents[2]
SCRIPTED = ROOT / "projects" / "scripted-agent.yaml"
QUESTION = '{"question": "hello world"}'


def _tubeless(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tubeless", *args],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        },
        timeout=120,  # a hang guard: a FIFO used to block forever, /dev/zero to exhaust memory
        stdin=subprocess.DEVNULL,
    )


def _run(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return _tubeless(tmp_path, "run", str(SCRIPTED), "--input", QUESTION, "-q", *args)


def test_replay_refuses_a_device_by_name(tmp_path: Path) -> None:
    done = _run(tmp_path, "--replay", "/dev/zero")

    assert done.returncode != 0
    assert "cannot read the cassette /dev/zero: not a regular file (a character device)" in (
        done.stderr
    ), done.stderr


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes")
def test_replay_refuses_a_named_pipe_by_name(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "pipe.jsonl")

    done = _run(tmp_path, "--replay", "pipe.jsonl")

    assert done.returncode != 0
    assert "cannot read the cassette pipe.jsonl: not a regular file (a named pipe)" in done.stderr


def test_replay_refuses_a_cassette_larger_than_the_bound(tmp_path: Path) -> None:
    big = tmp_path / "big.jsonl"
    with big.open("wb") as file:  # sparse: no disk is used
        file.truncate(MAX_CASSETTE_BYTES + 1)

    done = _run(tmp_path, "--replay", "big.jsonl")

    assert done.returncode != 0
    assert "big.jsonl: the cassette is larger than the 64 MiB a cassette may hold" in done.stderr


def test_record_refuses_a_symbolic_link_and_leaves_its_target_alone(tmp_path: Path) -> None:
    target = tmp_path / "precious.txt"
    target.write_text("keep me\n", encoding="utf-8")
    target.chmod(0o644)
    (tmp_path / "c.jsonl").symlink_to(target)

    done = _run(tmp_path, "--record", "c.jsonl")

    assert done.returncode != 0
    assert "cannot write the cassette c.jsonl: is a symbolic link" in done.stderr, done.stderr
    assert target.read_text(encoding="utf-8") == "keep me\n"
    assert target.stat().st_mode & 0o777 == 0o644


@pytest.mark.parametrize("option", ["--record", "--replay"])
def test_a_cassette_that_is_also_the_checkpoint_file_is_refused(
    tmp_path: Path, option: str
) -> None:
    done = _run(tmp_path, option, "same.db", "--checkpoints", "./same.db")

    assert done.returncode == 1, done.stderr
    assert done.stderr.startswith(
        f"error: {option} and --checkpoints name the same file (same.db)"
    ), done.stderr
    assert not (tmp_path / "same.db").exists()


def test_a_cassette_that_is_also_the_input_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "input.json").write_text(QUESTION, encoding="utf-8")

    done = _tubeless(
        tmp_path, "run", str(SCRIPTED), "--input-file", "input.json", "--record", "input.json"
    )

    assert done.returncode == 1, done.stderr
    assert "--record and --input-file name the same file (input.json)" in done.stderr
    assert (tmp_path / "input.json").read_text(encoding="utf-8") == QUESTION


def test_batch_output_that_is_the_inputs_file_is_refused(tmp_path: Path) -> None:
    inputs = tmp_path / "in.jsonl"
    text = json.dumps({"question": "a b"}) + "\n"
    inputs.write_text(text, encoding="utf-8")

    done = _tubeless(tmp_path, "batch", str(SCRIPTED), "in.jsonl", "--output", str(inputs))

    assert done.returncode == 1, done.stderr
    assert "error: INPUTS and --output name the same file (in.jsonl)" in done.stderr
    assert inputs.read_text(encoding="utf-8") == text


def test_batch_output_refuses_a_symbolic_link(tmp_path: Path) -> None:
    inputs = tmp_path / "in.jsonl"
    inputs.write_text(json.dumps({"question": "a b"}) + "\n", encoding="utf-8")
    target = tmp_path / "precious.txt"
    target.write_text("keep me\n", encoding="utf-8")
    (tmp_path / "out.jsonl").symlink_to(target)

    done = _tubeless(tmp_path, "batch", str(SCRIPTED), "in.jsonl", "--output", "out.jsonl")

    assert done.returncode == 2, done.stderr
    assert "error: out.jsonl: is a symbolic link" in done.stderr
    assert target.read_text(encoding="utf-8") == "keep me\n"
