"""``protocol_routes``: AG-UI, A2A and MCP mounted together on one app (as ``tubeless serve``
mounts them), each answering over real HTTP, the MCP session manager run by the app's
lifespan, and one caller identity shared by all three."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests.serve.protocols.conftest import SCRIPTED, make_runner, serving
from tubeless.serve.protocols import bearer_identity, protocol_routes

HEADERS = {"Authorization": "Bearer one", "Host": "agents.example.com"}


async def test_the_three_protocols_answer_on_one_app(tmp_path: Path) -> None:
    runner = make_runner(SCRIPTED, tmp_path / "runs.sqlite")
    protocols = protocol_routes(runner, base_url="https://agents.example.com")
    with serving(runner, protocols.routes, lifespans=(protocols.lifespan,)) as url:
        async with httpx.AsyncClient(base_url=url, headers=HEADERS, timeout=30) as http:
            card = (await http.get("/.well-known/agent-card.json")).json()
            body = {
                "threadId": "t",
                "runId": "r",
                "messages": [],
                "forwardedProps": {"input": {"question": "all three"}},
            }
            streamed = (await http.post("/ag-ui/scripted-agent", json=body)).text
        mcp_http = httpx2.AsyncClient(headers=HEADERS)
        async with (
            mcp_http,
            Client(streamable_http_client(f"{url}/mcp", http_client=mcp_http)) as mcp,
        ):
            called = await mcp.call_tool("scripted-agent", {"question": "via mcp"})

    assert card["supportedInterfaces"][0]["url"] == "https://agents.example.com/a2a"
    last = json.loads([line for line in streamed.splitlines() if line.startswith("data: ")][-1][6:])
    assert last["type"] == "RUN_FINISHED"
    assert last["result"] == {"answer": "9 characters; ALL; THREE"}
    assert called.structured_content == {"answer": "7 characters; VIA; MCP"}
    owner = bearer_identity({"authorization": "Bearer one"})
    assert len(runner.list(caller=owner)) == 2  # the AG-UI run and the MCP run
