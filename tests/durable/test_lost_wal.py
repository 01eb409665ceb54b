"""A checkpoint file separated from what it committed is refused, never started over.

After ``kill -9`` the last commits of a checkpoint file live in its ``-wal``; the lease folder
beside it records how many commits each key made. Each test kills a real run with SIGKILL while
an unsafe call is running (its ``running`` intent committed, its effect done), then damages
what the run left (the main file copied or moved alone, the ``-wal`` deleted or damaged, the
main file emptied) and runs the same command again: it must exit 2 with
``TUBELESS_CHECKPOINT_CORRUPT`` and run nothing (the effects file counts every call).
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.durable.test_kill import BODY, MODULE, _attempt, _kill
from tests.fixtures.processes import ROOT, cli_env, finish, write_project

#: Where the run is killed: the unsafe ``charge`` has run, its outcome is not saved.
KILL_AT = "tool task/orders/1/c1"
CHARGE = "charge task/orders/1/c1"


def _killed_run(tmp_path: Path) -> tuple[Path, Path, Path, dict[str, str]]:
    project = write_project(tmp_path, BODY, MODULE)
    marker, ready, store = tmp_path / "marker", tmp_path / "ready", tmp_path / "runs.sqlite"
    env = cli_env(MARKER=str(marker), READY=str(ready), PYTHONPATH=f"{ROOT}{os.pathsep}{tmp_path}")
    _kill(_attempt(project, store, env, KILL_AT, ready), ready)
    assert marker.read_text(encoding="utf-8").splitlines().count(CHARGE) == 1
    assert Path(f"{store}-wal").stat().st_size > 0  # the last commits are in the -wal
    return project, store, marker, env


def _copied_alone(store: Path) -> Path:
    elsewhere = store.parent / "elsewhere"
    elsewhere.mkdir()
    shutil.copy2(store, elsewhere / store.name)
    return elsewhere / store.name


def _moved_alone(store: Path) -> Path:
    moved = store.parent / "moved.sqlite"
    os.rename(store, moved)
    return moved


def _wal_deleted(store: Path) -> Path:
    for suffix in ("-wal", "-shm"):
        Path(f"{store}{suffix}").unlink()
    return store


def _wal_damaged(store: Path) -> Path:
    wal = Path(f"{store}-wal")
    data = bytearray(wal.read_bytes())
    for at in range(len(data) - 600, len(data) - 500):  # inside the last frame: its checksum fails
        data[at] ^= 0xFF
    wal.write_bytes(bytes(data))
    Path(f"{store}-shm").unlink()
    return store


def _main_emptied(store: Path) -> Path:
    store.write_bytes(b"")
    return store


def _main_emptied_without_wal(store: Path) -> Path:
    _wal_deleted(store)
    return _main_emptied(store)


DAMAGES = [
    pytest.param(_copied_alone, "copied-alone"),
    pytest.param(_moved_alone, "moved-alone"),
    pytest.param(_wal_deleted, "wal-deleted"),
    pytest.param(_wal_damaged, "wal-damaged"),
    pytest.param(_main_emptied, "main-emptied"),
    pytest.param(_main_emptied_without_wal, "main-emptied-no-wal"),
]


@pytest.mark.parametrize(("damage", "name"), DAMAGES, ids=[p.values[1] for p in DAMAGES])
def test_a_file_that_lost_its_commits_is_refused_and_nothing_runs_again(
    tmp_path: Path, damage: Callable[[Path], Path], name: str
) -> None:
    project, store, marker, env = _killed_run(tmp_path)
    before = marker.read_text(encoding="utf-8")
    damaged = damage(store)
    again = _attempt(project, damaged, env, None, tmp_path / "ready")
    out, err = finish(again)
    assert (again.returncode, out) == (2, ""), err
    assert err.startswith(f"error: TUBELESS_CHECKPOINT_CORRUPT: {damaged}: "), err
    assert "--restart" in err or "to start every key of it over" in err
    assert "(new)" not in err
    assert marker.read_text(encoding="utf-8") == before  # nothing ran, the charge least of all


def test_the_message_says_what_was_lost_and_what_to_copy(tmp_path: Path) -> None:
    """A file copied alone names the missing -wal and lease folder; a lost -wal beside an intact
    lease folder says how many commits are missing."""
    project, store, _, env = _killed_run(tmp_path)
    copy = _copied_alone(store)
    shutil.copytree(f"{store}.leases", f"{tmp_path}/spare.leases")
    alone = _attempt(project, copy, env, None, tmp_path / "ready")
    _, err = finish(alone)
    assert (
        f"{copy}: checkpoint 'task' was being written by a run that stopped, and the "
        f"runs.sqlite-wal and runs.sqlite.leases/ it wrote beside the file are not here"
    ) in err
    _wal_deleted(store)
    lost = _attempt(project, store, env, None, tmp_path / "ready")
    _, err = finish(lost)
    assert f"{store}: checkpoint 'task' lacks commits its lease file recorded" in err


@pytest.mark.slow
def test_restart_starts_a_refused_key_over(tmp_path: Path) -> None:
    """--restart is the way out: the key runs from the start (its unsafe call runs again, as
    the user asked)."""
    project, store, marker, env = _killed_run(tmp_path)
    _wal_deleted(store)
    command = _attempt(project, store, env, None, tmp_path / "ready")
    finish(command)
    assert command.returncode == 2
    restarted = _restart(project, store, env)
    assert restarted[0] == 0, restarted[2]
    assert "checkpoint: task (restarting)" in restarted[2]
    assert json.loads(restarted[1])["c1"] == "charge order"
    assert marker.read_text(encoding="utf-8").splitlines().count(CHARGE) == 2


def _restart(project: Path, store: Path, env: dict[str, str]) -> tuple[int, str, str]:
    command = ["run", str(project), "--checkpoints", str(store), "--key", "task", "-q"]
    done = subprocess.run(
        [sys.executable, "-m", "tubeless", *command, "--restart"],
        text=True,
        capture_output=True,
        cwd=ROOT,
        env=env,
        timeout=120,
    )
    return done.returncode, done.stdout, done.stderr


def test_after_a_clean_end_the_main_file_alone_holds_everything(tmp_path: Path) -> None:
    """A killed run resumed to its end: the -wal is folded into the file, so a copy of the file
    alone gives the saved result and runs nothing."""
    project, store, marker, env = _killed_run(tmp_path)
    last = _attempt(project, store, env, None, tmp_path / "ready")
    out, err = finish(last)
    assert last.returncode == 0, err
    wal = Path(f"{store}-wal")
    assert not wal.exists() or wal.stat().st_size == 0
    db = sqlite3.connect(store)
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    db.close()
    lines = marker.read_text(encoding="utf-8")
    copy = _copied_alone(store)
    again = _attempt(project, copy, env, None, tmp_path / "ready")
    out_again, err_again = finish(again)
    assert (again.returncode, json.loads(out_again)) == (0, json.loads(out)), err_again
    assert "completed: its saved result follows" in err_again
    assert marker.read_text(encoding="utf-8") == lines
