"""A SQLite checkpoint file's lease lock files (``<file>.leases/``) go when their run ends, and
removing them never lets two runs hold one key: an acquirer that locked a file that was removed
meanwhile tries again on the file now at that path."""

from __future__ import annotations

import fcntl
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.batch import rows_project, write_inputs
from tests.fixtures.cli import tubeless
from tubeless.durable import SqliteCheckpoints
from tubeless.errors import CHECKPOINT_LOCKED, CheckpointError


def test_a_batch_leaves_no_lock_file_behind(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    project = rows_project(tmp_path)
    inputs = write_inputs(tmp_path / "in.jsonl", [{"n": n} for n in range(12)])
    store = tmp_path / "runs.sqlite"
    outcome = tubeless(capsys, "batch", project, inputs, "-c", "3", "--checkpoints", store)
    assert outcome.code == 0, outcome.err
    assert list(Path(f"{store}.leases").iterdir()) == []


def test_a_released_key_leaves_no_file_and_can_be_taken_again(tmp_path: Path) -> None:
    store = SqliteCheckpoints(tmp_path / "runs.sqlite")
    with store.acquire("k") as lease:
        lease.write("{}")
        assert len(list(Path(f"{store.path}.leases").iterdir())) == 1
        assert store.holder("k") is not None
    assert list(Path(f"{store.path}.leases").iterdir()) == []
    assert store.holder("k") is None
    with store.acquire("k") as lease:
        assert lease.read() == "{}"
    store.close()


def test_an_acquirer_that_locked_a_removed_file_tries_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The interleaving that removal makes possible, forced: B opens the key's lock file, A
    releases the key (removing the file) and C takes it (a new file); only then does B's lock
    call run. B must not hold the key beside C."""
    path = tmp_path / "runs.sqlite"
    a, b, c = SqliteCheckpoints(path), SqliteCheckpoints(path), SqliteCheckpoints(path)
    first = a.acquire("k")
    real = fcntl.flock
    taken: list[Any] = []

    def interleaved(fd: int, operation: int) -> None:
        if not taken and operation & fcntl.LOCK_EX:
            taken.append(None)
            first.close()  # A's run ends: its lock file goes
            taken.append(c.acquire("k"))  # C makes a new lock file and holds it
        real(fd, operation)

    monkeypatch.setattr(fcntl, "flock", interleaved)
    with pytest.raises(CheckpointError) as refused:
        b.acquire("k")
    assert refused.value.code == CHECKPOINT_LOCKED
    taken[1].close()
    monkeypatch.setattr(fcntl, "flock", real)
    with b.acquire("k"):
        pass
    for store in (a, b, c):
        store.close()
