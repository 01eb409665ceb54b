"""A real two-node local Ray cluster (``ray.cluster_utils.Cluster``, one CPU per node) losing
its worker node mid-row: the batch finishes, the row is retried on the surviving node, the
pool shrinks to what the cluster holds (said on stderr), and the attempt that died is in the
trace. The row's handler waits on a file this test creates: no sleeps decide anything here."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.batch import PROJECT, SQUARE_ONCE, write_inputs
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

__all__ = ["cluster"]


@pytest.mark.slow
@pytest.mark.timeout(150)
def test_a_lost_node_shrinks_the_pool_and_its_row_is_retried_on_the_survivor(
    tmp_path: Path, cluster: Any
) -> None:
    folder = tmp_path / "marks"
    (tmp_path / "project").mkdir()
    project = write_project(
        tmp_path / "project", PROJECT, gated_module(folder, textwrap.dedent(SQUARE_ONCE))
    )
    inputs = write_inputs(tmp_path / "in.jsonl", [{"n": 1}, {"n": 2}, {"n": 3}])
    trace = tmp_path / "batch.ndjson"
    worker = next(iter(cluster.worker_nodes))
    driver = start_ray_batch(cluster, project, inputs, "--trace", str(trace))
    lost_n, out, err = lose_the_worker_mid_row(driver, cluster, worker, folder, HANG_GUARD * 2)
    assert driver.returncode == 0, err
    rows = [json.loads(line) for line in out.splitlines()]
    assert [(row["status"], row.get("result")) for row in rows] == [
        ("completed", {"n": n, "square": n * n}) for n in (1, 2, 3)
    ]
    # The lost row ran on both nodes: on the worker node (lost), then on the head.
    assert sorted(node for n, node, _ in tool_starts(folder) if n == lost_n) == sorted(
        [worker.node_id, cluster.head_node.node_id]
    )
    # Said at the death when Ray already counts the lost node out, else at the end (Ray's view
    # of the cluster can lag a lost node on a loaded machine): either way, one warning.
    assert (
        "warning: a Ray actor died and the cluster now has room for 1 actor (1 CPU): the pool "
        "shrinks to 1 actor (was 2)"
    ) in err or (
        "warning: 1 actor replacing a lost one still had no room on the cluster when the batch "
        "ended: the pool ran with 1 actor of 2"
    ) in err, err
    # The attempt that died is in the trace: a root run of its own that never completed, down
    # to the tool call that was running when its node went.
    records = read_trace(trace)
    started = [r for r in records if r["name"] == "pipeline.started"]
    roots = {r["runId"] for r in started if "parentRunId" not in r}
    assert len(roots) == 4
    (attempt,) = roots - {row["run_id"] for row in rows}
    tree = {attempt}
    for record in started:  # parents start before their children
        if record.get("parentRunId") in tree:
            tree.add(record["runId"])
    completed = {r["runId"] for r in records if r["name"] == "pipeline.completed"}
    assert attempt not in completed
    assert any(r["runId"] in tree and r["pipelineId"].endswith("/tool/square") for r in started)
