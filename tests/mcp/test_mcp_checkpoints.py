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
from tubeless import Schema, define_agent
from tubeless.durable import SqliteCheckpoints
from tubeless.errors import CHECKPOINT_MISMATCH, deepest_source_code
from tubeless.frozen import thaw
from tubeless.mcp import McpServer, mcp_tools


def _agent(log: Path, variant: str | None, reached: asyncio.Event | None = None) -> Any:
    """Turn 1 echoes; turn 2 finishes, or (with ``reached``) says so and waits to be
    cancelled: the run stops mid-way, its checkpoint resumable."""
    env = {"MCP_TEST_LOG": str(log), **({"MCP_TEST_VARIANT": variant} if variant else {})}
    server = McpServer.stdio("t", [sys.executable, str(SERVER), "stdio"], env=env)

    async def decide(state: Any, ctx: Any) -> Any:
        if ctx.turn == 1:
            return {
                "kind": "continue",
                "calls": [{"id": "e1", "tool": "t__echo", "input": {"text": "hi"}}],
            }
        if reached is not None:
            reached.set()
            await asyncio.sleep(3600)  # the test cancels the run here
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

    async def interrupt() -> None:
        reached = asyncio.Event()
        task = asyncio.create_task(
            _agent(log, None, reached).run({}, checkpoints=store, checkpoint_key="k")
        )
        await reached.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(interrupt())
    assert [c.key for c in store.list()] == ["k"]
    assert '"phase":"decide"' in store.list()[0].document  # cut short before turn 2's decision
    assert log.read_text().count("call echo") == 1
    return store, log


@pytest.mark.parametrize(
    "variant, changed",
    [
        pytest.param(
            "description",
            "MCP server 't' changed tool 'echo' (registered as 't__echo'): its description",
            id="description",
        ),
        pytest.param(
            "schema",
            "MCP server 't' changed tool 'echo' (registered as 't__echo'): its input schema",
            id="input-schema",
        ),
    ],
)
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
        f"{changed}; start it over with --restart (restart=True in Python), or use another key"
    )
    assert log.read_text().count("call echo") == 1  # nothing ran against the changed server
    # The refusal left the checkpoint as it was: the original server resumes it.
    resumed = asyncio.run(_agent(log, None).run({}, checkpoints=store, checkpoint_key="k"))
    assert resumed.status == "completed", resumed.errors
    store.close()


def test_the_same_server_tools_resume_the_run(tmp_path: Path) -> None:
    store, log = _interrupted(tmp_path)
    run = asyncio.run(_agent(log, None).run({}, checkpoints=store, checkpoint_key="k"))
    assert run.status == "completed", run.errors
    assert [o["value"] for o in run.value] == [{"echo": "hi"}]
    assert log.read_text().count("call echo") == 1  # the completed call was not run again
    # A completed key gives its saved result without starting the server at all.
    starts = log.read_text().count("pid ")
    again = asyncio.run(_agent(log, "description").run({}, checkpoints=store, checkpoint_key="k"))
    assert again.status == "completed" and again.value == run.value
    assert log.read_text().count("pid ") == starts
    store.close()
