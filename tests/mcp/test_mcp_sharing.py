"""Connections shared across a batch's rows (one per engine worker; ``per_run: true`` keeps one
per run), a shared connection that dies, and ``max_concurrency`` per server: real SDK servers
(tests/mcp/mcp_test_server.py), which log ``pid N`` each time one starts."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.mcp_servers import SERVER, one_turn_agent
from tests.mcp.conftest import stdio_served
from tubeless.batch import run_batch
from tubeless.errors import AgentDefinitionError
from tubeless.mcp import MCP_CONNECTION_FAILED, McpServer
from tubeless.project import load_project

ROOT = Path(__file__).resolve().parents[2]

PROJECT = """\
version: 1
project: {{id: mcp-rows}}
python_path: [{root}]
mcp_servers:
  t:
    command: [python, {server}, stdio]
    env: {{MCP_TEST_LOG: {log}{variant}}}
{extra}
agents:
  rows:
    input: {{schema: {{type: object}}}}
    result: {{schema: {{}}}}
    initial_state: tests.mcp.mcp_rows:initial
    decide: tests.mcp.mcp_rows:decide
    reduce: tests.mcp.mcp_rows:reduce
    limits: {{max_concurrency: 3}}
    tools:
      t: {{mcp: t, include: [echo, crash, gate]}}
"""


def _project(
    tmp_path: Path, extra: str = "", *, variant: str = "", name: str = "project.yaml"
) -> tuple[Path, Path]:
    log = tmp_path / "server.log"
    path = tmp_path / name
    indented = "\n".join(f"    {line}" for line in extra.splitlines())
    text = PROJECT.format(
        root=ROOT,
        server=SERVER,
        log=log,
        extra=indented,
        variant=f", MCP_TEST_VARIANT: {variant}" if variant else "",
    )
    path.write_text(text, encoding="utf-8")
    return path, log


def _launches(log: Path) -> list[int]:
    lines = log.read_text().splitlines() if log.exists() else []
    return [int(line.split()[1]) for line in lines if line.startswith("pid ")]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _batch(path: Path, inputs: list[Any], **options: Any) -> list[dict[str, Any]]:
    async def collect() -> list[dict[str, Any]]:
        return [row async for row in run_batch(path, inputs, **options)]

    return asyncio.run(collect())


def _echo_rows(n: int) -> list[Any]:
    return [{"calls": [["t__echo", {"text": f"row {i}"}]]} for i in range(n)]


@pytest.mark.parametrize(("engine", "workers"), [("local", 2), ("process", 2)])
def test_a_batch_starts_one_server_per_engine_worker(
    tmp_path: Path, engine: str, workers: int
) -> None:
    """6 rows, 2 workers: the local engine's batch is one worker; each process is one."""
    path, log = _project(tmp_path)

    rows = _batch(path, _echo_rows(6), engine=engine, concurrency=workers)

    assert [row["status"] for row in rows] == ["completed"] * 6
    assert [row["result"] for row in rows] == [[{"echo": f"row {i}"}] for i in range(6)]
    launches = _launches(log)
    assert 1 <= len(launches) <= (1 if engine == "local" else workers)
    assert not [pid for pid in launches if _alive(pid)], "the batch left a server running"


def test_per_run_servers_start_once_per_row(tmp_path: Path) -> None:
    path, log = _project(tmp_path, "per_run: true")

    rows = _batch(path, _echo_rows(6), engine="local", concurrency=2)

    assert [row["status"] for row in rows] == ["completed"] * 6
    assert len(_launches(log)) == 6
    assert not [pid for pid in _launches(log) if _alive(pid)]


def test_a_shared_connection_that_dies_fails_the_rows_using_it_and_later_rows_reconnect(
    tmp_path: Path,
) -> None:
    path, log = _project(tmp_path)
    inputs = [
        {"calls": [["t__echo", {"text": "before"}]]},
        {"calls": [["t__crash", {}]]},
        {"calls": [["t__echo", {"text": "after"}]]},
        {"calls": [["t__echo", {"text": "later"}]]},
    ]

    rows = _batch(path, inputs, engine="local", concurrency=1)

    assert [row["status"] for row in rows] == ["completed", "failed", "completed", "completed"]
    assert rows[1]["error"]["code"] == MCP_CONNECTION_FAILED
    assert "closed the connection" in rows[1]["error"]["message"]
    assert [rows[i]["result"] for i in (0, 2, 3)] == [
        [{"echo": "before"}],
        [{"echo": "after"}],
        [{"echo": "later"}],
    ]
    assert len(_launches(log)) == 2
    assert not [pid for pid in _launches(log) if _alive(pid)]


def test_rows_sharing_a_connection_each_record_the_servers_tools_in_their_checkpoint(
    tmp_path: Path,
) -> None:
    """The server's descriptors join every row's checkpoint identity, shared connection or not
    (tests/mcp/test_mcp_checkpoints.py shows a changed descriptor refusing a resume)."""
    from tubeless.durable import SqliteCheckpoints

    path, log = _project(tmp_path)
    checkpoints = tmp_path / "runs.sqlite"
    inputs = [{"calls": [["t__gate", {}]]}, {"calls": [["t__echo", {"text": "x"}]]}]

    rows = _batch(path, inputs, engine="local", concurrency=2, checkpoints=checkpoints)

    assert [row["status"] for row in rows] == ["completed", "completed"]
    assert len(_launches(log)) == 1
    store = SqliteCheckpoints(checkpoints)
    try:
        documents = [store.acquire(row["key"]).read() or "" for row in rows]
    finally:
        store.close()
    servers = [json.loads(d)["agents"]["rows"]["definition"]["servers"] for d in documents]
    assert servers[0] == servers[1]
    assert set(servers[0]) == {"t__echo", "t__crash", "t__gate"}


def test_max_concurrency_bounds_the_calls_in_flight_to_one_server(tmp_path: Path) -> None:
    """One turn makes three calls of ``gate`` (which waits for three in flight) and the agent
    may run three at once: the server sees three together unless it allows one."""
    calls: list[tuple[str, Any]] = [("t__gate", {}), ("t__gate", {}), ("t__gate", {})]

    def most_in_flight(**options: Any) -> int:
        served = stdio_served(tmp_path / f"{len(options)}.log")
        run = asyncio.run(one_turn_agent(served.make(**options), ["gate"], calls, []).run({}))
        assert run.status == "completed"
        assert [o["value"] for o in run.value] == ["through"] * 3
        return max(int(line.split()[1]) for line in served.wait_for("inflight "))

    assert most_in_flight() == 3
    assert most_in_flight(max_concurrency=1) == 1


def test_max_concurrency_from_yaml_reaches_the_server(tmp_path: Path) -> None:
    path, log = _project(tmp_path, "max_concurrency: 1")
    calls = {"calls": [["t__gate", {}], ["t__gate", {}], ["t__gate", {}]]}

    [row] = _batch(path, [calls], engine="local", concurrency=1)

    assert row["result"] == ["through"] * 3
    lines = log.read_text().splitlines()
    assert [line for line in lines if line.startswith("inflight ")] == ["inflight 1"] * 3


@pytest.mark.parametrize("bad", [0, -1, True, 1.5])
def test_max_concurrency_must_be_a_positive_int(bad: Any) -> None:
    with pytest.raises(AgentDefinitionError, match="max_concurrency must be an integer above 0"):
        McpServer.stdio("t", ["server"], max_concurrency=bad)


def test_sharing_and_concurrency_settings_leave_the_definition_identity_alone(
    tmp_path: Path,
) -> None:
    """They change how tools are reached, not what they do."""
    plain, _ = _project(tmp_path)
    tuned, _ = _project(
        tmp_path,
        "per_run: true\nmax_concurrency: 2\nmax_result_bytes: 1000\nmax_result_blocks: 10",
        name="tuned.yaml",
    )

    assert load_project(tuned).entry().identity == load_project(plain).entry().identity
