"""A paused worker cannot commit after another took its key over (DESIGN.md §20).

Worker A is stopped (SIGSTOP) inside an unsafe call, past its lease's time to live; the key is
taken over and worker B resumes the run to the end; then A continues (SIGCONT): its call's
outcome is refused (a stale fence), it starts no other call, and it ends cancelled with
``TUBELESS_CHECKPOINT_LEASE_LOST``, leaving B's document as it was. Every wait is a hang guard.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.fixtures.leases import two_call_worker, two_calls
from tests.fixtures.postgres import postgres_dsn, postgres_server
from tests.fixtures.processes import HANG_GUARD, ROOT, cli_env, finish, wait_for_file, write_project
from tubeless.durable import open_checkpoints
from tubeless.errors import CHECKPOINT_LOCKED, CheckpointError

__all__ = ["postgres_dsn", "postgres_server"]

BODY = two_call_worker("charge", "Charges.")

MODULE = (
    """\
import os, time

def _mark(*words):
    with open(os.environ["MARKER"], "a", encoding="utf-8") as out:
        out.write(" ".join([os.environ["WHO"], *words]) + "\\n")
        out.flush()
        os.fsync(out.fileno())
"""
    + two_calls("charge")
    + """
def reduce(state, outcomes):
    return {"seen": [o["value"] if o["ok"] else o["error"]["code"] for o in outcomes]}

def charge(text, ctx):
    _mark("start", text)
    if os.environ.get("PAUSE") == text:
        with open(os.environ["READY"], "w") as ready:
            ready.write("paused")
        deadline = time.monotonic() + 60
        while not os.path.exists(os.environ["GO"]) and time.monotonic() < deadline:
            time.sleep(0.01)
    _mark("end", text)
    return text.upper()
"""
)

SCRIPT = """\
import asyncio, json, sys
from tubeless import load_project
from tubeless.durable import open_checkpoints

project, where, key = sys.argv[1:4]
store = open_checkpoints(where, lease_ttl_s=1)
entry = load_project(project).get("worker")
run = asyncio.run(entry.run({}, checkpoints=store, checkpoint_key=key))
print(json.dumps({"status": run.status, "codes": [e.code for e in run.errors],
                  "value": run.value if run.status == "completed" else None}))
"""


def _worker(
    tmp_path: Path, project: Path, where: str, who: str, **extra: str
) -> subprocess.Popen[str]:
    script = tmp_path / "worker.py"
    script.write_text(SCRIPT, encoding="utf-8")
    env = cli_env(
        WHO=who,
        MARKER=str(tmp_path / "marker"),
        READY=str(tmp_path / "ready"),
        GO=str(tmp_path / "go"),
        PYTHONPATH=f"{ROOT}{os.pathsep}{tmp_path}",
        **extra,
    )
    return subprocess.Popen(
        [sys.executable, str(script), str(project), where, "task"],
        text=True,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )


def _take_over(where: str) -> None:
    """Acquire the key as soon as its paused holder's lease expires, then let it go."""
    deadline = time.monotonic() + HANG_GUARD
    store = open_checkpoints(where, lease_ttl_s=1)
    try:
        while True:
            try:
                lease = store.acquire("task")
            except CheckpointError as exc:
                assert exc.code == CHECKPOINT_LOCKED, exc
                assert time.monotonic() < deadline, "the paused worker's lease never expired"
                time.sleep(0.05)
                continue
            lease.close()
            return
    finally:
        store.close()


def _zombie_cannot_commit(tmp_path: Path, where: str) -> None:
    project = write_project(tmp_path, BODY, MODULE)
    a = _worker(tmp_path, project, where, "A", PAUSE="a")
    try:
        wait_for_file(tmp_path / "ready", a)
        a.send_signal(signal.SIGSTOP)
        _take_over(where)
        b = _worker(tmp_path, project, where, "B")
        out_b, err_b = finish(b)
        assert b.returncode == 0, err_b
        (tmp_path / "go").write_text("go", encoding="utf-8")
    finally:
        a.send_signal(signal.SIGCONT)
    out_a, err_a = finish(a)
    assert a.returncode == 0, err_a
    assert json.loads(out_b) == {
        "status": "completed",
        "codes": [],
        "value": ["TUBELESS_AGENT_CALL_INTERRUPTED", "B"],
    }
    assert json.loads(out_a) == {
        "status": "cancelled",
        "codes": ["TUBELESS_CHECKPOINT_LEASE_LOST"],
        "value": None,
    }
    lines = (tmp_path / "marker").read_text(encoding="utf-8").splitlines()
    assert [line for line in lines if line.startswith("A")] == ["A start a", "A end a"]
    assert [line for line in lines if line.startswith("B")] == ["B start b", "B end b"]
    store = open_checkpoints(where)
    [stored] = store.list()
    store.close()
    assert json.loads(stored.document)["status"] == "completed"  # B's, never A's


@pytest.mark.slow
def test_a_paused_sqlite_worker_cannot_commit_after_a_takeover(tmp_path: Path) -> None:
    _zombie_cannot_commit(tmp_path, str(tmp_path / "runs.sqlite"))


@pytest.mark.slow
def test_a_paused_postgres_worker_cannot_commit_after_a_takeover(
    tmp_path: Path, postgres_dsn: str
) -> None:
    _zombie_cannot_commit(tmp_path, postgres_dsn)
