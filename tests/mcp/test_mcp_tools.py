"""MCP tools against a real SDK server, over stdio and streamable HTTP (the ``served`` fixture):
listing, calling, errors, crashes, timeouts, cancellation and what an agent may call."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.mcp_servers import Served, one_turn_agent, source_codes, start_http
from tests.mcp.conftest import http_served, stdio_served
from tubeless import CancelToken, Schema, define_agent, pipeline_tool
from tubeless.errors import AGENT_INVALID_DECISION
from tubeless.mcp import (
    MCP_CONNECTION_FAILED,
    MCP_TIMEOUT,
    MCP_TOOL_MISSING,
    MCP_UNAVAILABLE,
    McpError,
    mcp_tools,
)
from tubeless.testing import capture_trace


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _assert_stdio_process_gone(served: Served) -> None:
    if served.transport == "stdio":
        assert served.pids(), "the stdio server never started"
        assert not [pid for pid in served.pids() if _alive(pid)]


def _assert_the_server_saw_the_cancellation(served: Served) -> None:
    """The server's handler was interrupted; over stdio by a notifications/cancelled naming
    the call. (At protocol 2026-07-28 streamable HTTP has no client notifications: the SDK
    cancels by closing the request's response stream, which interrupts the handler.)"""
    served.wait_for("interrupted hang")
    if served.transport == "stdio":
        assert len(served.wait_for("cancelled ")) == 1


def test_decide_sees_the_servers_descriptors_and_calls_return_values_or_outcomes(
    served: Served,
) -> None:
    """Descriptions and input schemas come from the server; structured content when present,
    else the text; isError and JSON-RPC errors are recoverable outcomes."""
    seen: list[Any] = []
    calls = [
        ("t__echo", {"text": "hi"}),
        ("t__shout", {"text": "hi"}),
        ("t__fail", {}),
        ("t__protocol", {}),
    ]
    agent = one_turn_agent(served.make(), ["echo", "shout", "fail", "protocol"], calls, seen)

    result = agent.run_sync({})

    text_schema = {
        "type": "object",
        "properties": {"text": {"type": "string"}},
        "required": ["text"],
    }
    assert [(c["name"], c["description"]) for c in seen[0]] == [
        ("t__echo", "Echoes the text back as structured content."),
        ("t__fail", "Always reports a tool error (isError)."),
        ("t__protocol", "Always answers with a JSON-RPC error."),
        ("t__shout", "Answers the text in capitals, as text content."),
    ]
    assert seen[0][0]["input_json_schema"] == text_schema
    assert seen[0][1]["input_json_schema"] == {"type": "object", "properties": {}}
    assert result == [
        {"id": "c0", "tool": "t__echo", "ok": True, "value": {"echo": "hi"}},
        {"id": "c1", "tool": "t__shout", "ok": True, "value": "HI"},
        {
            "id": "c2",
            "tool": "t__fail",
            "ok": False,
            "error": {"code": "MCP_TOOL_ERROR", "message": "it broke"},
        },
        {
            "id": "c3",
            "tool": "t__protocol",
            "ok": False,
            "error": {
                "code": "MCP_PROTOCOL_ERROR",
                "message": "the server refused the request (JSON-RPC error -32602)",
            },
        },
    ]
    assert served.lines().count("call echo") == 1
    assert served.pids() if served.transport == "stdio" else True
    _assert_stdio_process_gone(served)


def test_a_result_with_an_image_keeps_every_block_over_either_transport(served: Served) -> None:
    agent = one_turn_agent(served.make(), ["picture"], [("t__picture", {})], [])

    [outcome] = agent.run_sync({})

    assert outcome["value"] == {
        "text": "a caption",
        "content": [
            {"type": "text", "text": "a caption"},
            {"type": "image", "mime_type": "image/png", "data": "iVBORw0KGgo="},
            {"type": "resource_link", "uri": "test://picture", "name": "picture", "size": 8},
        ],
    }


def test_arguments_are_validated_by_the_servers_schema_before_any_call(served: Served) -> None:
    calls = [("t__shout", {"text": "fine"}), ("t__echo", {"words": "no text"})]
    agent = one_turn_agent(served.make(), ["echo", "shout"], calls, [])

    run = asyncio.run(agent.run({}))

    assert run.status == "failed"
    assert AGENT_INVALID_DECISION in source_codes(run)
    assert not [line for line in served.lines() if line.startswith("call ")]
    _assert_stdio_process_gone(served)


def test_a_tool_that_is_not_included_cannot_be_called(served: Served) -> None:
    agent = one_turn_agent(served.make(), ["echo"], [("t__secret", {})], [])

    run = asyncio.run(agent.run({}))

    assert run.status == "failed"
    assert AGENT_INVALID_DECISION in source_codes(run)
    assert "Unknown agent tool: 't__secret'" in run.errors[0].format()
    assert "call secret" not in served.lines()


def test_an_included_tool_the_server_lacks_fails_the_run_listing_what_it_offers(
    served: Served,
) -> None:
    agent = one_turn_agent(served.make(), ["echo", "nope"], [("t__echo", {"text": "x"})], [])

    run = asyncio.run(agent.run({}))

    assert run.status == "failed"
    assert MCP_TOOL_MISSING in source_codes(run)
    assert (
        "MCP server 't' offers no tool 'nope' (it offers: chatty, crash, echo, fail, gate, hang, "
        "many, picture, progress, protocol, secret, shout)."
    ) in run.errors[0].format()
    assert not [line for line in served.lines() if line.startswith("call ")]
    _assert_stdio_process_gone(served)


@pytest.mark.parametrize("transport", ["stdio", "http"])
def test_a_server_that_crashes_mid_call_fails_the_run(transport: str, tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    process = None
    if transport == "stdio":
        served = stdio_served(log)
    else:
        process, url = start_http(log, tmp_path)
        served = http_served(log, url)
    agent = one_turn_agent(served.make(), ["crash"], [("t__crash", {})], [])

    run = asyncio.run(agent.run({}))

    assert run.status == "failed"
    assert MCP_CONNECTION_FAILED in source_codes(run)
    assert "MCP server 't' " in run.errors[0].format()
    assert "during tool 'crash'" in run.errors[0].format()
    _assert_stdio_process_gone(served)
    if process is not None:
        assert process.wait(timeout=30) == 3


def test_a_server_that_hangs_fails_the_run_at_its_timeout(served: Served) -> None:
    agent = one_turn_agent(served.make(timeout_s=3), ["hang"], [("t__hang", {})], [])

    run = asyncio.run(agent.run({}))

    assert run.status == "failed"
    assert MCP_TIMEOUT in source_codes(run)
    assert "MCP server 't' did not answer tool 'hang' within 3 s." in run.errors[0].format()
    _assert_the_server_saw_the_cancellation(served)
    _assert_stdio_process_gone(served)


def test_a_cancelled_run_sends_the_cancellation_and_stops_the_server(served: Served) -> None:
    signal = CancelToken()
    agent = one_turn_agent(served.make(), ["hang"], [("t__hang", {})], [])

    async def scenario() -> Any:
        running = asyncio.ensure_future(agent.run({}, signal=signal))
        while "call hang" not in served.lines():
            await asyncio.sleep(0.02)
        signal.cancel("stop")
        return await running

    run = asyncio.run(asyncio.wait_for(scenario(), 30))

    assert run.status == "cancelled"
    _assert_the_server_saw_the_cancellation(served)
    _assert_stdio_process_gone(served)


def test_dry_runs_skip_mcp_tools_and_start_no_server(served: Served) -> None:
    agent = one_turn_agent(served.make(), ["echo"], [("t__echo", {"text": "x"})], [])

    run = asyncio.run(agent.run({}, dry_run=True))

    assert run.status == "failed"  # the skipped tool leaves no outcome; nothing is invented
    pids = served.pids() if served.transport == "stdio" else []
    assert pids == []
    assert "call echo" not in served.lines()


def test_without_the_sdk_a_run_fails_naming_the_extra(
    served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "mcp", None)
    agent = one_turn_agent(served.make(), ["echo"], [("t__echo", {"text": "x"})], [])

    run = asyncio.run(agent.run({}))

    assert MCP_UNAVAILABLE in source_codes(run)
    assert (
        "MCP servers need the optional mcp SDK: pip install 'tubeless[mcp]'"
        in run.errors[0].format()
    )
    assert served.pids() == ([] if served.transport == "stdio" else served.pids())


def test_mcp_error_carries_its_code_and_server() -> None:
    error = McpError(MCP_TIMEOUT, "MCP server 'a' did not answer.", server="a")
    assert (error.code, error.message, error.server) == (
        "TUBELESS_MCP_TIMEOUT",
        "MCP server 'a' did not answer.",
        "a",
    )


def test_mcp_calls_are_traced_like_other_tools_without_their_arguments_or_results(
    tmp_path: Path,
) -> None:
    served = stdio_served(tmp_path / "server.log")
    calls = [("t__echo", {"text": "private words"}), ("t__shout", {"text": "private words"})]
    agent = one_turn_agent(served.make(), ["echo", "shout"], calls, [])

    with capture_trace() as trace:
        run = asyncio.run(agent.run({}, trace=trace))

    assert run.status == "completed"
    tool_runs = {
        record["pipelineId"]
        for record in trace.records
        if record.get("pipelineId", "").startswith("mcp-agent/tool/")
    }
    assert tool_runs == {"mcp-agent/tool/t__echo", "mcp-agent/tool/t__shout"}
    text = json.dumps(trace.records)
    assert "private words" not in text and "PRIVATE WORDS" not in text


def test_mcp_calls_are_charged_to_max_calls_before_any_starts(tmp_path: Path) -> None:
    served = stdio_served(tmp_path / "server.log")
    calls = [("t__echo", {"text": "a"}), ("t__echo", {"text": "b"})]
    agent = define_agent(
        id="mcp-limited",
        input_schema=Schema.json({"type": "object"}),
        result_schema=Schema.json({}),
        initial_state=lambda _: [],
        decide=lambda state, ctx: {
            "kind": "continue",
            "calls": [{"id": f"c{i}", "tool": t, "input": a} for i, (t, a) in enumerate(calls)],
        },
        tools=mcp_tools(served.make(), ["echo"]),
        limits={"max_calls": 1},
    )

    run = asyncio.run(agent.run({}))

    assert run.status == "failed"
    assert "TUBELESS_AGENT_LIMIT_REACHED" in source_codes(run)
    assert not [line for line in served.lines() if line.startswith("call ")]
    _assert_stdio_process_gone(served)


def test_one_connection_per_server_per_run_shared_with_a_child_agent(tmp_path: Path) -> None:
    """Two turns of the parent and a child agent using the same server: one server process."""
    served = stdio_served(tmp_path / "server.log")
    server = served.make()

    def script(*batches: list[dict[str, Any]]) -> Any:
        def decide(state: Any, ctx: Any) -> Any:
            if ctx.turn <= len(batches):
                return {"kind": "continue", "calls": batches[ctx.turn - 1]}
            return {"kind": "finish", "result": state}

        return decide

    child = define_agent(
        id="child",
        input_schema=Schema.json({"type": "object"}),
        result_schema=Schema.json({}),
        initial_state=lambda _: None,
        decide=script([{"id": "s", "tool": "t__shout", "input": {"text": "child"}}]),
        reduce=lambda state, outcomes: outcomes[0]["value"],
        tools=mcp_tools(server, ["shout"]),
    )
    parent = define_agent(
        id="parent",
        input_schema=Schema.json({"type": "object"}),
        result_schema=Schema.json({}),
        initial_state=lambda _: [],
        decide=script(
            [{"id": "c", "tool": "child", "input": {}}],
            [{"id": "e", "tool": "t__echo", "input": {"text": "parent"}}],
        ),
        reduce=lambda state, outcomes: [*state, *(o["value"] for o in outcomes)],
        tools={
            **mcp_tools(server, ["echo"]),
            "child": pipeline_tool(child, description="A child agent with MCP tools."),
        },
    )

    assert parent.run_sync({}) == ["CHILD", {"echo": "parent"}]
    assert len(served.pids()) == 1
    _assert_stdio_process_gone(served)
