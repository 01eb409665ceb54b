"""The same batch on the local, process and ray engines: identical rows (ids aside) and the same
trace shape, 200 root runs each; untraced rows (turns and calls from the agent's budget) equal
traced ones (counted from records). Ray is real: a local Ray started once for this module with
``num_cpus=2`` (in a helper process, so that each batch connects to it as to a cluster and
ships the project through Ray's runtime environment)."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.batch import (
    MODULE,
    PROJECT,
    marks,
    rows_project,
    without_ids,
    write_inputs,
)
from tests.fixtures.cli import tubeless
from tests.fixtures.processes import HANG_GUARD, cli_env, write_project
from tubeless.batch import run_batch
from tubeless.tracing import NdjsonSink, read_trace

ray = pytest.importorskip("ray")

_START_RAY = """\
import sys, ray
context = ray.init(address="local", num_cpus=2, include_dashboard=False, logging_level="error")
print(context.address_info["gcs_address"], flush=True)
sys.stdin.read()
ray.shutdown()
"""


@pytest.fixture(scope="module")
def ray_address() -> Iterator[str]:
    """A local Ray with two CPUs, for this module only (no auth token: it listens locally)."""
    patch = pytest.MonkeyPatch()
    patch.setenv("RAY_AUTH_MODE", "disabled")
    helper = subprocess.Popen(
        [sys.executable, "-c", _START_RAY],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=cli_env(RAY_AUTH_MODE="disabled"),
    )
    assert helper.stdout is not None and helper.stdin is not None
    address = helper.stdout.readline().strip()
    assert address, "Ray did not start"
    try:
        yield address
    finally:
        helper.stdin.close()
        try:
            helper.wait(HANG_GUARD * 2)
        except subprocess.TimeoutExpired:
            helper.kill()
            helper.wait()
        helper.stdout.close()
        patch.undo()


def _batch(
    project: Path, inputs: list[Any], trace: Path | None = None, **options: Any
) -> list[dict[str, Any]]:
    async def collect() -> list[dict[str, Any]]:
        sink = NdjsonSink(trace) if trace is not None else None
        try:
            return [row async for row in run_batch(project, inputs, trace=sink, **options)]
        finally:
            if sink is not None:
                sink.close()

    return asyncio.run(collect())


def _shape(records: list[dict[str, Any]]) -> Counter[tuple[str, str, str | None]]:
    return Counter((r["name"], r["pipelineId"], r.get("stepId")) for r in records)


@pytest.mark.slow
def test_200_rows_give_the_same_rows_and_trace_on_every_engine(
    tmp_path: Path, ray_address: str
) -> None:
    project = rows_project(tmp_path)
    inputs: list[Any] = [{"n": n} for n in range(198)] + [{"m": 1}, {"n": -2}]
    rows: dict[str, list[dict[str, Any]]] = {}
    shapes = {}
    for engine in ("local", "process", "ray"):
        trace = tmp_path / f"{engine}.ndjson"
        rows[engine] = _batch(
            project, inputs, trace, engine=engine, concurrency=2, ray_address=ray_address
        )
        records = read_trace(trace)
        roots = [r for r in records if r["name"] == "pipeline.started" and "parentRunId" not in r]
        assert len(roots) == 200
        assert {r["runId"] for r in roots} == {row["run_id"] for row in rows[engine]}
        shapes[engine] = _shape(records)
    untraced = _batch(project, inputs, None, engine="local", concurrency=2)  # budgets, no sink
    assert without_ids(untraced) == without_ids(rows["local"])
    assert without_ids(rows["process"]) == without_ids(rows["local"])
    assert without_ids(rows["ray"]) == without_ids(rows["local"])
    assert shapes["process"] == shapes["local"] == shapes["ray"]
    assert [row["status"] for row in rows["local"][-3:]] == ["completed", "failed", "failed"]


@pytest.mark.slow
def test_a_row_that_kills_its_ray_actor_fails_alone(
    tmp_path: Path,
    ray_address: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Through the CLI, with the cluster named by RAY_ADDRESS."""
    project = rows_project(tmp_path)
    inputs = write_inputs(tmp_path / "in.jsonl", [{"n": 1}, {"n": -1}, {"n": 3}])
    monkeypatch.setenv("RAY_ADDRESS", ray_address)
    outcome = tubeless(capsys, "batch", project, inputs, "--engine", "ray", "-c", "2")
    assert outcome.code == 6
    rows = [json.loads(line) for line in outcome.out.splitlines()]
    assert [row["status"] for row in rows] == ["completed", "failed", "completed"]
    assert rows[1]["error"]["code"] == "TUBELESS_BATCH_WORKER_DIED"
    assert rows[1]["error"]["message"] == (
        "the Ray actor running the row died (ActorDiedError); it ran 3 times and its worker "
        "died each time (--row-retries 2)"
    )


@pytest.mark.slow
@pytest.mark.parametrize("engine", ["process", "ray"])
def test_workers_commit_each_row_to_the_checkpoint_file(
    tmp_path: Path,
    ray_address: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    engine: str,
) -> None:
    """The checkpoint file reaches the workers (the process engine's spec, the Ray actor's
    init): each row's checkpoint is completed, so a rerun gives the saved results and runs no
    tool again."""
    project = rows_project(tmp_path)
    folder, store = tmp_path / "marks", tmp_path / "runs.sqlite"
    folder.mkdir()
    monkeypatch.setenv("BATCH_MARKS", str(folder))
    monkeypatch.setenv("RAY_ADDRESS", ray_address)
    inputs = write_inputs(tmp_path / "in.jsonl", [{"n": 1}, {"n": 2}, {"n": 3}])
    args = ("batch", project, inputs, "--engine", engine, "-c", "2", "--checkpoints", store)
    first = tubeless(capsys, *args)
    assert first.code == 0, first.err
    listed = tubeless(capsys, "checkpoints", "list", store, "--json")
    rows = [json.loads(line) for line in first.out.splitlines()]
    assert {c["key"]: c["status"] for c in json.loads(listed.out)["checkpoints"]} == {
        row["key"]: "completed" for row in rows
    }
    again = tubeless(capsys, *args)
    assert again.code == 0, again.err
    rerun = [json.loads(line) for line in again.out.splitlines()]
    assert [row["result"] for row in rerun] == [row["result"] for row in rows]
    assert [(row["turns"], row["calls"]) for row in rerun] == [(0, 0)] * 3  # nothing ran
    if engine == "process":  # Ray's workers do not see this test's environment
        assert len(list(folder.iterdir())) == 3  # each tool ran once, in the first batch


#: The tool kills its worker the first time it runs for ``n`` (a mark file says it ran).
DIES_ONCE = MODULE.replace(
    "        if n == -1:\n            os._exit(3)\n",
    "        once = os.path.join(os.environ['BATCH_ONCE'], str(n))\n"
    "        if not os.path.exists(once):\n"
    "            open(once, 'w').close()\n"
    "            os._exit(3)\n",
)
assert DIES_ONCE != MODULE


def test_a_row_whose_worker_died_runs_again_and_its_attempt_is_traced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """process engine: the worker dies mid-call; the row runs again on another worker (row
    retries are on by default) and completes; the trace holds both attempts, the first one
    down to the tool call that was running when its worker died."""
    once = tmp_path / "once"
    once.mkdir()
    monkeypatch.setenv("BATCH_ONCE", str(once))
    project = write_project(tmp_path, PROJECT, DIES_ONCE)
    trace = tmp_path / "batch.ndjson"
    rows = _batch(project, [{"n": 3}], trace, engine="process", concurrency=1)
    assert [(row["status"], row.get("result")) for row in rows] == [
        ("completed", {"n": 3, "square": 9})
    ]
    records = read_trace(trace)
    started = [r for r in records if r["name"] == "pipeline.started"]
    roots = {r["runId"] for r in started if "parentRunId" not in r}
    (attempt,) = roots - {rows[0]["run_id"]}
    tree = {attempt}
    for record in started:
        if record.get("parentRunId") in tree:
            tree.add(record["runId"])
    assert any(r["runId"] in tree and r["pipelineId"] == "rows/tool/square" for r in started)
    assert attempt not in {r["runId"] for r in records if r["name"] == "pipeline.completed"}


@pytest.mark.slow
def test_row_retries_bound_the_runs_of_a_row_whose_worker_keeps_dying(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    project = rows_project(tmp_path)
    folder = tmp_path / "marks"
    folder.mkdir()
    monkeypatch.setenv("BATCH_MARKS", str(folder))
    inputs = write_inputs(tmp_path / "in.jsonl", [{"n": -1}])
    dies = ("batch", project, inputs, "--engine", "process")
    outcome = tubeless(capsys, *dies, "--row-retries", "0")
    assert outcome.code == 6
    (row,) = [json.loads(line) for line in outcome.out.splitlines()]
    assert row["error"] == {
        "code": "TUBELESS_BATCH_WORKER_DIED",
        "message": "the worker process running the row died (exit status 3)",
    }
    assert marks(folder) == {-1: 1}
    outcome = tubeless(capsys, *dies)  # the default: 2 more runs
    (row,) = [json.loads(line) for line in outcome.out.splitlines()]
    assert row["error"]["message"] == (
        "the worker process running the row died (exit status 3); it ran 3 times and its "
        "worker died each time (--row-retries 2)"
    )
    assert marks(folder) == {-1: 4}


def test_ray_actors_each_connect_once_to_an_mcp_server_and_close_it(
    tmp_path: Path, ray_address: str
) -> None:
    """6 rows on 2 Ray actors: at most one server launch per actor (not one per row), and no
    server left running once the batch ends (the actors close their connections)."""
    pytest.importorskip("mcp")
    from tests.mcp.test_mcp_sharing import (
        ROOT,
        _alive,
        _batch,
        _echo_rows,
        _launches,
        _project,
    )

    path, log = _project(tmp_path)
    # Ray ships the project's folder: its Python code must be inside it.
    shutil.copy(ROOT / "tests" / "mcp" / "mcp_rows.py", tmp_path / "mcp_rows.py")
    text = path.read_text(encoding="utf-8").replace(f"python_path: [{ROOT}]", "python_path: [.]")
    path.write_text(text.replace("tests.mcp.mcp_rows:", "mcp_rows:"), encoding="utf-8")

    rows = _batch(path, _echo_rows(6), engine="ray", concurrency=2, ray_address=ray_address)

    assert [row["status"] for row in rows] == ["completed"] * 6
    launches = _launches(log)
    assert 1 <= len(launches) <= 2
    assert not [pid for pid in launches if _alive(pid)], "the batch left a server running"


def _marking_project(tmp_path: Path, folder: Path, delay: float = 0.0) -> Path:
    """The rows project, its marks folder and delay written in (Ray's workers do not have
    the driver's environment)."""
    module = MODULE.replace('os.environ.get("BATCH_MARKS")', repr(str(folder)))
    module = module.replace('os.environ.get("BATCH_DELAY")', repr(str(delay)))
    assert module.count(repr(str(folder))) == 1 and module.count(repr(str(delay))) == 1
    return write_project(tmp_path, PROJECT, module)


@pytest.mark.slow
def test_ray_rows_sent_in_batches_keep_their_order_and_a_dead_actor_costs_one_row(
    tmp_path: Path, ray_address: str
) -> None:
    """40 rows on 2 actors go in batches of several rows per call. The row that kills its
    actor runs 3 times (row retries) and fails alone; the rows sent in the same batch after it
    had not started: each of them, like every other row, ran exactly once."""
    folder = tmp_path / "marks"
    folder.mkdir()
    project = _marking_project(tmp_path, folder)
    inputs: list[Any] = [{"n": n} for n in range(40)]
    inputs[5] = {"n": -1}
    inputs[30] = {"n": -2}
    rows = _batch(project, inputs, engine="ray", concurrency=2, ray_address=ray_address)
    assert [row["index"] for row in rows] == list(range(40))
    assert [i for i, row in enumerate(rows) if row["status"] != "completed"] == [5, 30]
    assert rows[5]["error"]["code"] == "TUBELESS_BATCH_WORKER_DIED"
    assert rows[30]["status"] == "failed"
    assert [rows[i]["result"]["square"] for i in (0, 6, 39)] == [0, 36, 39 * 39]
    ran = marks(folder)
    assert ran.pop(-1) == 3
    assert set(ran.values()) == {1}, ran
    assert len(ran) == 39


@pytest.mark.slow
def test_fail_fast_cancels_the_rows_a_ray_actor_has_not_run(
    tmp_path: Path, ray_address: str
) -> None:
    """The first row fails; the rows sent with it in its batch, or waiting for an actor, come
    back cancelled instead of running."""
    folder = tmp_path / "marks"
    folder.mkdir()
    project = _marking_project(tmp_path, folder, delay=0.2)
    inputs: list[Any] = [{"n": -2}] + [{"n": n} for n in range(1, 30)]
    rows = _batch(
        project, inputs, engine="ray", concurrency=1, ray_address=ray_address, fail_fast=True
    )
    assert rows[0]["status"] == "failed"
    assert {row["status"] for row in rows[1:]} <= {"completed", "cancelled"}
    ran = marks(folder)
    assert ran[-2] == 1 and sum(ran.values()) < 10, ran
