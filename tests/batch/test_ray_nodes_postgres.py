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
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.batch import CHARGE_THEN_SQUARE, CHARGED_PROJECT, write_inputs
from tests.fixtures.postgres import postgres_dsn, postgres_server
from tests.fixtures.processes import HANG_GUARD, write_project
from tests.fixtures.ray_cluster import (
    cluster,
    gated_module,
    lose_the_worker_mid_row,
    start_ray_batch,
    tool_starts,
)
from tubeless.tracing import read_trace

ray = pytest.importorskip("ray")
pytest.importorskip("psycopg")

__all__ = ["cluster", "postgres_dsn", "postgres_server"]

#: Seconds a lease lives unrenewed: the dead worker's row is taken over this long after.
LEASE_TTL_S = 2

#: ``charge`` marks each call in ``charges/`` (by idempotency key) with the node it ran on.
CHARGE = """
def _node():
    import ray

    return ray.get_runtime_context().get_node_id()


def charge(n, ctx):
    key = ctx.execution["idempotency_key"]
    name = hashlib.sha256(key.encode()).hexdigest()[:16] + "." + uuid.uuid4().hex
    with open(os.path.join(FOLDER, "charges", name), "w") as out:
        json.dump({"n": n, "key": key, "node": _node()}, out)
    return f"receipt {n}"
"""


def _charges(folder: Path) -> list[dict[str, Any]]:
    return [json.loads(path.read_text()) for path in (folder / "charges").iterdir()]


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_a_node_lost_mid_row_resumes_its_row_elsewhere_from_postgres(
    tmp_path: Path, cluster: Any, postgres_dsn: str
) -> None:
    folder = tmp_path / "marks"
    (folder / "charges").mkdir(parents=True)
    (tmp_path / "project").mkdir()
    module = gated_module(folder, CHARGE_THEN_SQUARE, CHARGE)
    project = write_project(tmp_path / "project", CHARGED_PROJECT, module)
    inputs = write_inputs(tmp_path / "in.jsonl", [{"n": 1}, {"n": 2}, {"n": 3}])
    store = f"{postgres_dsn}?lease_ttl_s={LEASE_TTL_S}"
    worker = next(iter(cluster.worker_nodes))
    # Two nodes as two machines would be: nothing on disk shared but the project's files.
    assert cluster.head_node.get_temp_dir_path() != worker.get_temp_dir_path()
    driver = start_ray_batch(
        cluster, project, inputs, "--checkpoints", store, "--trace", postgres_dsn
    )
    lost_n, out, err = lose_the_worker_mid_row(driver, cluster, worker, folder, HANG_GUARD * 3)
    assert driver.returncode == 0, err
    rows = [json.loads(line) for line in out.splitlines()]
    # Every row completed, each once, in input order.
    assert [(row["index"], row["status"], row.get("result")) for row in rows] == [
        (n - 1, "completed", {"n": n, "square": n * n, "receipt": f"receipt {n}"})
        for n in (1, 2, 3)
    ]
    # The lost row's square ran on the worker node (lost), then again on the head: it is safe.
    assert sorted(node for n, node, _ in tool_starts(folder) if n == lost_n) == sorted(
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
