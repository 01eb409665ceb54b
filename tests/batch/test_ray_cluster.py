"""A real two-node local Ray cluster (``ray.cluster_utils.Cluster``, one CPU per node) losing
its worker node mid-row: the batch finishes, the row is retried on the surviving node, the
pool shrinks to what the cluster holds (said on stderr), and the attempt that died is in the
trace. The row's handler waits on a file this test creates: no sleeps decide anything here."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.batch import PROJECT, write_inputs
from tests.fixtures.processes import HANG_GUARD, ROOT, cli_env, write_project
from tubeless.tracing import read_trace

ray = pytest.importorskip("ray")

RAY_ARGS = ("--engine", "ray", "-c", "2", "--trace")

#: The tool records the node it runs on, then waits for ``gate`` (a hang guard of its own).
GATED = """\
    import os
    import time
    import uuid

    FOLDER = {folder!r}


    def initial(raw):
        return {{"n": raw["n"], "square": None}}


    def decide(state, ctx):
        if state["square"] is None:
            call = {{"id": "c1", "tool": "square", "input": state["n"]}}
            return {{"kind": "continue", "calls": [call]}}
        return {{"kind": "finish", "result": {{"n": state["n"], "square": state["square"]}}}}


    def reduce(state, outcomes):
        outcome = outcomes[0]
        return {{"n": state["n"], "square": outcome["value"] if outcome["ok"] else "failed"}}


    def square(n, ctx):
        import ray

        node = ray.get_runtime_context().get_node_id()
        mark = f"{{n}}.{{node}}.{{os.getpid()}}.{{uuid.uuid4().hex}}"
        open(os.path.join(FOLDER, "started", mark), "w").close()
        deadline = time.monotonic() + 90
        while not os.path.exists(os.path.join(FOLDER, "gate")):
            if time.monotonic() > deadline:
                raise RuntimeError("the gate never opened")
            time.sleep(0.02)
        return n * n
    """


@pytest.fixture
def cluster(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """A head and a worker node, one CPU each, each with a temporary folder of its own (as two
    machines have); a lost node is noticed within about a second. The folders are short paths
    under the system's temporary folder: Ray's sockets live in them."""
    from ray.cluster_utils import Cluster

    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    folders = [tempfile.mkdtemp(prefix="tb-ray-") for _ in range(2)]
    made = Cluster(
        initialize_head=True,
        head_node_args={
            "num_cpus": 1,
            "temp_dir": folders[0],
            "_system_config": {
                "health_check_period_ms": 500,
                "health_check_timeout_ms": 500,
                "health_check_failure_threshold": 2,
            },
        },
    )
    try:
        made.add_node(num_cpus=1, temp_dir=folders[1])
        made.wait_for_nodes()
        yield made
    finally:
        made.shutdown()
        for folder in folders:
            shutil.rmtree(folder, ignore_errors=True)


def _started(folder: Path) -> list[tuple[int, str, int]]:
    """``(n, node id, pid)`` of each time the tool started."""
    found = []
    for mark in (folder / "started").iterdir():
        n, node, pid, _ = mark.name.split(".")
        found.append((int(n), node, int(pid)))
    return found


def _wait_gone(pid: int) -> None:
    """Until process ``pid`` has ended (the actor of the lost node must not finish its row)."""
    deadline = time.monotonic() + HANG_GUARD
    while True:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        assert time.monotonic() < deadline, f"the lost node's actor (pid {pid}) lives on"
        time.sleep(0.05)


@pytest.mark.slow
@pytest.mark.timeout(150)
def test_a_lost_node_shrinks_the_pool_and_its_row_is_retried_on_the_survivor(
    tmp_path: Path, cluster: Any
) -> None:
    folder = tmp_path / "marks"
    (folder / "started").mkdir(parents=True)
    (tmp_path / "project").mkdir()
    project = write_project(tmp_path / "project", PROJECT, GATED.format(folder=str(folder)))
    inputs = write_inputs(tmp_path / "in.jsonl", [{"n": 1}, {"n": 2}, {"n": 3}])
    trace = tmp_path / "batch.ndjson"
    worker = next(iter(cluster.worker_nodes))
    driver = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tubeless",
            "batch",
            str(project),
            str(inputs),
            *RAY_ARGS,
            str(trace),
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
        out, err = driver.communicate(timeout=HANG_GUARD * 2)
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.communicate()
    assert driver.returncode == 0, err
    rows = [json.loads(line) for line in out.splitlines()]
    assert [(row["status"], row.get("result")) for row in rows] == [
        ("completed", {"n": n, "square": n * n}) for n in (1, 2, 3)
    ]
    # The lost row ran on both nodes: on the worker node (lost), then on the head.
    assert sorted(node for n, node, _ in _started(folder) if n == lost[0][0]) == sorted(
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
