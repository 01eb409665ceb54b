"""Bounded chaos (issue 34): two workers compete for one key while one of them is killed
(SIGKILL, and a fresh worker takes its place) or paused past its lease (SIGSTOP, then SIGCONT)
at a random moment, on SQLite and on PostgreSQL. Whatever happens, the task completes with the
uninterrupted answer's shape, every worker ends, and no unsafe call runs twice for one
idempotency key. The seed of each round is in its failure message; every wait is a hang guard.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from tests.fixtures.postgres import postgres_dsn, postgres_server  # noqa: F401 (fixtures)
from tests.fixtures.processes import HANG_GUARD, ROOT, cli_env, write_project

BODY = """\
    version: 1
    project: {id: chaos}
    python_path: [.]
    agents:
      chaos:
        input: {schema: {type: object}}
        result: {schema: {}}
        initial_state: "helpers:initial"
        decide: "helpers:decide"
        reduce: "helpers:reduce"
        limits: {max_turns: 5, max_concurrency: 1}
        tools:
          read: {run: "helpers:read", description: Reads., replay: safe,
                 input: {schema: {type: string}}, output: {schema: {type: string}}}
          charge: {run: "helpers:charge", description: Charges.,
                   input: {schema: {type: string}}, output: {schema: {type: string}}}
    """

MODULE = """\
    import os, random, time

    def _effect(tool, ctx):
        with open(os.environ["MARKER"], "a", encoding="utf-8") as out:
            out.write(f"{tool} {ctx.execution['idempotency_key']}\\n")
            out.flush()
            os.fsync(out.fileno())
        time.sleep(random.uniform(0, 0.15))

    def initial(value):
        return {"log": []}

    def decide(state, ctx):
        if ctx.turn > 3:
            return {"kind": "finish", "result": len(state["log"])}
        return {"kind": "continue", "calls": [
            {"id": f"r{ctx.turn}", "tool": "read", "input": "x"},
            {"id": f"c{ctx.turn}", "tool": "charge", "input": "y"}]}

    def reduce(state, outcomes):
        return {"log": [*state["log"], *(o["ok"] for o in outcomes)]}

    def read(text, ctx):
        _effect("read", ctx)
        return text

    def charge(text, ctx):
        _effect("charge", ctx)
        return text
    """

WORKER = """\
import asyncio, json, sys, time
from tubeless import load_project
from tubeless.durable import open_checkpoints

project, where = sys.argv[1:3]
entry = load_project(project).get("chaos")
deadline = time.monotonic() + 60
while True:
    store = open_checkpoints(where, lease_ttl_s=1)
    try:
        run = asyncio.run(entry.run({}, checkpoints=store, checkpoint_key="task"))
    finally:
        store.close()
    if run.status == "completed":
        print(json.dumps(run.value))
        break
    assert time.monotonic() < deadline, [(e.code, e.message) for e in run.errors]
    time.sleep(0.05)  # the key is held (LOCKED), or it was taken from us (LEASE_LOST)
"""

ROUNDS = 3


def _start(tmp_path: Path, project: Path, where: str) -> subprocess.Popen[str]:
    script = tmp_path / "worker.py"
    if not script.exists():
        script.write_text(WORKER, encoding="utf-8")
    env = cli_env(MARKER=str(tmp_path / "marker"), PYTHONPATH=f"{ROOT}{os.pathsep}{tmp_path}")
    return subprocess.Popen(
        [sys.executable, str(script), str(project), where],
        text=True,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )


def _round(tmp_path: Path, where: str, seed: int) -> None:
    chance = random.Random(seed)
    project = write_project(tmp_path, BODY, MODULE)
    workers = [_start(tmp_path, project, where) for _ in range(2)]
    killed: list[subprocess.Popen[str]] = []
    try:
        time.sleep(chance.uniform(0.5, 2.5))  # a random moment of the run (not an assertion)
        victim = chance.choice(workers)
        if victim.poll() is None:
            if chance.random() < 0.5:
                victim.send_signal(signal.SIGKILL)
                victim.communicate(timeout=HANG_GUARD)
                workers.remove(victim)
                killed.append(victim)
                workers.append(_start(tmp_path, project, where))
            else:
                victim.send_signal(signal.SIGSTOP)
                time.sleep(1.5)  # past the 1 s lease: the other worker may take over
                victim.send_signal(signal.SIGCONT)
        outs = [worker.communicate(timeout=HANG_GUARD * 3) for worker in workers]
    finally:
        for worker in workers + killed:
            if worker.poll() is None:
                worker.send_signal(signal.SIGCONT)
                worker.kill()
            worker.communicate()  # closes its pipes
    context = f"seed {seed}"
    for worker, (out, err) in zip(workers, outs, strict=True):
        assert worker.returncode == 0, f"{context}: {err}"
        assert json.loads(out) == 6, context  # three turns of two outcomes each
    lines = (tmp_path / "marker").read_text(encoding="utf-8").splitlines()
    charges = Counter(line for line in lines if line.startswith("charge"))
    assert all(count == 1 for count in charges.values()), f"{context}: {charges}"
    assert len(charges) <= 3, context


def _rounds(tmp_path: Path, where_of: object) -> None:
    base = random.randrange(1_000_000)
    for number in range(ROUNDS):
        folder = tmp_path / f"round-{number}"
        folder.mkdir()
        where = where_of(folder) if callable(where_of) else str(where_of)
        _round(folder, where, base + number)


@pytest.mark.slow
def test_chaos_on_sqlite(tmp_path: Path) -> None:
    _rounds(tmp_path, lambda folder: str(folder / "runs.sqlite"))


@pytest.mark.slow
def test_chaos_on_postgres(tmp_path: Path, postgres_server: object) -> None:  # noqa: F811
    def fresh(folder: Path) -> str:
        return postgres_server.dsn(postgres_server.create_database())  # type: ignore[attr-defined]

    _rounds(tmp_path, fresh)
