"""The MCP server's tool descriptors (names, descriptions, input schemas, as the server gave
them) join the checkpoint identity: a run resumed against a server whose tools changed is
refused with ``TUBELESS_AGENT_CHECKPOINT_MISMATCH`` naming what changed. Against the real SDK
test server over stdio (its ``MCP_TEST_VARIANT`` changes what it lists)."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.mcp_servers import SERVER
from tubeless import CancelToken, Schema, define_agent
from tubeless.durable import SqliteCheckpoints
from tubeless.errors import CHECKPOINT_MISMATCH, deepest_source_code
from tubeless.frozen import thaw
from tubeless.mcp import McpServer, mcp_tools


def _agent(log: Path, variant: str | None, token: CancelToken | None = None) -> Any:
    """Turn 1 echoes; turn 2 (the first time, with ``token``) cancels the run mid-way."""
    env = {"MCP_TEST_LOG": str(log), **({"MCP_TEST_VARIANT": variant} if variant else {})}
    server = McpServer.stdio("t", [sys.executable, str(SERVER), "stdio"], env=env)

    async def decide(state: Any, ctx: Any) -> Any:
        if ctx.turn == 1:
            return {"kind": "continue",
                    "calls": [{"id": "e1", "tool": "t__echo", "input": {"text": "hi"}}]}
        if token is not None:
            token.cancel("stopped after turn 1")
            await asyncio.sleep(0)
        return {"kind": "finish", "result": state}

    return define_agent(
        id="mcp-durable",
        input_schema=Schema.json({"type": "object"}),
        result_schema=Schema.json({}),
        initial_state=lambda _: [],
        decide=decide,
        reduce=lambda state, outcomes: [*state, *(thaw(o) for o in outcomes)],
        tools=mcp_tools(server, ["echo", "shout"]),
    )


def _interrupted(tmp_path: Path) -> tuple[SqliteCheckpoints, Path]:
    store, log = SqliteCheckpoints(tmp_path / "runs.sqlite"), tmp_path / "server.log"
    token = CancelToken()
    run = asyncio.run(_agent(log, None, token).run({}, checkpoints=store, checkpoint_key="k",
                                                    signal=token))
    assert run.status == "cancelled"
    assert log.read_text().count("call echo") == 1
    return store, log


@pytest.mark.parametrize("variant, changed", [
    pytest.param("description", "MCP server 't' changed tool 'echo' (registered as 't__echo'): "
                 "its description", id="description"),
    pytest.param("schema", "MCP server 't' changed tool 'echo' (registered as 't__echo'): its "
                 "input schema", id="input-schema"),
])
def test_a_resumed_run_against_changed_server_tools_is_refused_naming_the_change(
    tmp_path: Path, variant: str, changed: str
) -> None:
    store, log = _interrupted(tmp_path)
    run = asyncio.run(_agent(log, variant).run({}, checkpoints=store, checkpoint_key="k"))
    assert run.status == "failed"
    assert deepest_source_code(run.errors[0]) == CHECKPOINT_MISMATCH
    assert run.errors[0].cause is not None
    assert run.errors[0].cause.deepest().message == (
        f"Checkpoint 'k' was saved by a different definition of agent 'mcp-durable': "
        f"{changed}; restart the key to start over, or use another key")
    assert log.read_text().count("call echo") == 1  # nothing ran against the changed server
    store.close()


def test_the_same_server_tools_resume_the_run(tmp_path: Path) -> None:
    store, log = _interrupted(tmp_path)
    run = asyncio.run(_agent(log, None).run({}, checkpoints=store, checkpoint_key="k"))
    assert run.status == "completed", run.errors
    assert [o["value"] for o in run.value] == [{"echo": "hi"}]
    assert log.read_text().count("call echo") == 1  # the completed call was not run again
    store.close()
