"""A real two-node local Ray cluster sharing Postgres checkpoints and a Postgres trace, losing
its worker node mid-row (issue 34, "Engines across machines").

Each row charges once (an unsafe tool: a marker file per idempotency key counts the side
effects), then squares its number (a safe tool that waits on a gate file this test creates).
The worker node goes while its row waits at the gate. The row is retried on the surviving node
once the dead worker's lease expired, resumes there from the shared checkpoint (the charge is
not made again), and completes; the output has each row once, and the attempt that died is a
root run of its own in the Postgres trace. No sleep decides anything: gates and process exits.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.batch.test_ray_cluster import _wait_gone, cluster
from tests.fixtures.batch import write_inputs
from tests.fixtures.postgres import postgres_dsn, postgres_server
from tests.fixtures.processes import HANG_GUARD, ROOT, cli_env, write_project
from tubeless.tracing import read_trace

ray = pytest.importorskip("ray")
pytest.importorskip("psycopg")

__all__ = ["cluster", "postgres_dsn", "postgres_server"]

#: Seconds a lease lives unrenewed: the dead worker's row is taken over this long after.
LEASE_TTL_S = 2

PROJECT = """\
    version: 1
    project: {id: rows}
    python_path: [.]
    agents:
      rows:
        input:
          schema: {type: object, properties: {n: {type: integer}}, required: [n],
                   additionalProperties: false}
        result: {schema: {}}
        initial_state: "helpers:initial"
        decide: "helpers:decide"
        reduce: "helpers:reduce"
        limits: {max_turns: 4}
        tools:
          charge: {run: "helpers:charge", description: Charge once., replay: unsafe,
                   input: {schema: {type: integer}}, output: {schema: {type: string}}}
          square: {run: "helpers:square", description: Square a number., replay: safe,
                   input: {schema: {type: integer}}, output: {schema: {type: integer}}}
    """

MODULE = """\
    import hashlib
    import json
    import os
    import time
    import uuid

    FOLDER = {folder!r}


    def initial(raw):
        return {{"n": raw["n"], "receipt": None, "square": None}}


    def decide(state, ctx):
        if state["receipt"] is None:
            return {{"kind": "continue", "calls": [{{"id": "c1", "tool": "charge",
                                                    "input": state["n"]}}]}}
        if state["square"] is None:
            return {{"kind": "continue", "calls": [{{"id": "c2", "tool": "square",
                                                    "input": state["n"]}}]}}
        return {{"kind": "finish", "result": {{"n": state["n"], "square": state["square"],
                                               "receipt": state["receipt"]}}}}


    def reduce(state, outcomes):
        outcome = outcomes[0]
        value = outcome["value"] if outcome["ok"] else "failed"
        field = "receipt" if state["receipt"] is None else "square"
        return {{**state, field: value}}


    def _node():
        import ray

        return ray.get_runtime_context().get_node_id()


    def charge(n, ctx):
        key = ctx.execution["idempotency_key"]
        name = hashlib.sha256(key.encode()).hexdigest()[:16] + "." + uuid.uuid4().hex
        with open(os.path.join(FOLDER, "charges", name), "w") as out:
            json.dump({{"n": n, "key": key, "node": _node()}}, out)
        return f"receipt {{n}}"


    def square(n, ctx):
        mark = f"{{n}}.{{_node()}}.{{os.getpid()}}.{{uuid.uuid4().hex}}"
        open(os.path.join(FOLDER, "started", mark), "w").close()
        deadline = time.monotonic() + 90
        while not os.path.exists(os.path.join(FOLDER, "gate")):
            if time.monotonic() > deadline:
                raise RuntimeError("the gate never opened")
            time.sleep(0.02)
        return n * n
    """


def _started(folder: Path) -> list[tuple[int, str, int]]:
    """``(n, node id, pid)`` of each time ``square`` started."""
    found = []
    for mark in (folder / "started").iterdir():
        n, node, pid, _ = mark.name.split(".")
        found.append((int(n), node, int(pid)))
    return found


def _charges(folder: Path) -> list[dict[str, Any]]:
    return [json.loads(path.read_text()) for path in (folder / "charges").iterdir()]


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_a_node_lost_mid_row_resumes_its_row_elsewhere_from_postgres(
    tmp_path: Path, cluster: Any, postgres_dsn: str
) -> None:
    folder = tmp_path / "marks"
    (folder / "started").mkdir(parents=True)
    (folder / "charges").mkdir()
    (tmp_path / "project").mkdir()
    project = write_project(tmp_path / "project", PROJECT, MODULE.format(folder=str(folder)))
    inputs = write_inputs(tmp_path / "in.jsonl", [{"n": 1}, {"n": 2}, {"n": 3}])
    store = f"{postgres_dsn}?lease_ttl_s={LEASE_TTL_S}"
    worker = next(iter(cluster.worker_nodes))
    # Two nodes as two machines would be: nothing on disk shared but the project's files.
    assert cluster.head_node.get_temp_dir_path() != worker.get_temp_dir_path()
    driver = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tubeless",
            "batch",
            str(project),
            str(inputs),
            "--engine",
            "ray",
            "-c",
            "2",
            "--checkpoints",
            store,
            "--trace",
            postgres_dsn,
        ],
        text=True,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=cli_env(RAY_ADDRESS=cluster.address, RAY_AUTH_MODE="disabled"),
    )
    try:
        deadline = time.monotonic() + HANG_GUARD * 2
        while len(_started(folder)) < 2:  # one row on each node, both waiting at the gate
            assert driver.poll() is None, driver.communicate()
            assert time.monotonic() < deadline, "the rows never started"
            time.sleep(0.05)
        lost = [(n, pid) for n, node, pid in _started(folder) if node == worker.node_id]
        assert len(lost) == 1, _started(folder)
        cluster.remove_node(worker, allow_graceful=False)
        _wait_gone(lost[0][1])
        (folder / "gate").touch()
        out, err = driver.communicate(timeout=HANG_GUARD * 3)
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.communicate()
    assert driver.returncode == 0, err
    rows = [json.loads(line) for line in out.splitlines()]
    # Every row completed, each once, in input order.
    assert [(row["index"], row["status"], row.get("result")) for row in rows] == [
        (n - 1, "completed", {"n": n, "square": n * n, "receipt": f"receipt {n}"})
        for n in (1, 2, 3)
    ]
    lost_n = lost[0][0]
    # The lost row's square ran on the worker node (lost), then again on the head: it is safe.
    assert sorted(node for n, node, _ in _started(folder) if n == lost_n) == sorted(
        [worker.node_id, cluster.head_node.node_id]
    )
    # The charge (unsafe) ran once per idempotency key, also for the row that moved: the head
    # resumed it from the checkpoint the worker node had committed.
    charges = _charges(folder)
    keys = [charge["key"] for charge in charges]
    assert len(keys) == len(set(keys)) == 3, charges
    assert sorted(charge["n"] for charge in charges) == [1, 2, 3]
    (moved,) = [charge for charge in charges if charge["n"] == lost_n]
    assert moved["node"] == worker.node_id
    # The attempt that died is in the Postgres trace: a root run of its own that never
    # completed, down to the square call that was running when its node went.
    records = read_trace(postgres_dsn)
    started = [r for r in records if r["name"] == "pipeline.started"]
    roots = {r["runId"] for r in started if "parentRunId" not in r}
    finals = {row["run_id"] for row in rows}
    attempts = roots - finals
    assert attempts, roots
    completed = {r["runId"] for r in records if r["name"] == "pipeline.completed"}
    assert finals <= completed
    died = [a for a in attempts if a not in completed]
    assert len(died) == 1, (attempts, completed)
    tree = {died[0]}
    for record in started:  # parents start before their children
        if record.get("parentRunId") in tree:
            tree.add(record["runId"])
    assert any(r["runId"] in tree and r["pipelineId"].endswith("/tool/square") for r in started)
    # The retried attempt resumed the checkpoint the lost node committed, at the square's turn.
    (final,) = [row for row in rows if row["result"]["n"] == lost_n]
    resumes = [
        r["payload"]["attributes"].get("agent.resumedTurn")
        for r in records
        if r["runId"] == final["run_id"] and r["name"] == "step.attempted"
    ]
    assert resumes == [2], resumes
