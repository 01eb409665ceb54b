"""The MCP server adapter in process (the SDK client connected to the SDK server object):
approvals through elicitation, and the answer shapes."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import mcp_types as types
import pytest
from mcp import Client

from tubeless.durable import SqliteCheckpoints
from tubeless.project import load_project
from tubeless.serve.protocols import LocalRunner, bearer_identity
from tubeless.serve.protocols._mcp import mcp_server

ROOT = Path(__file__).parents[3]


@pytest.fixture
async def approvals_runner(tmp_path: Path) -> AsyncIterator[LocalRunner]:
    store = SqliteCheckpoints(tmp_path / "runs.sqlite")
    runner = LocalRunner(load_project(ROOT / "projects" / "approvals.yaml"), checkpoints=store)
    try:
        yield runner
    finally:
        await runner.close()
        store.close()


def _answers(*answers: dict[str, Any] | None) -> Any:
    asked: list[str] = []
    queue = list(answers)

    async def elicit(context: Any, params: Any) -> types.ElicitResult:
        asked.append(params.message)
        answer = queue.pop(0)
        if answer is None:
            return types.ElicitResult(action="decline")
        return types.ElicitResult(action="accept", content=answer)

    return elicit, asked


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_elicitation_answers_the_approvals_and_the_run_completes(
    approvals_runner: LocalRunner, mode: str
) -> None:
    elicit, asked = _answers({"approve": True}, None)
    server = mcp_server(approvals_runner)
    async with Client(server, elicitation_callback=elicit, mode=mode) as client:  # type: ignore[arg-type]
        result = await client.call_tool("approvals", {"to": "ops@elsewhere.org"})
    assert not result.is_error, result.content
    assert result.structured_content == {
        "drafted": "RELEASE NOTES",
        "published": True,
        "mailed": False,
        "denied": ["mail"],
    }
    assert len(asked) == 2
    assert "tool 'publish' (call 'publish')" in asked[0]
    assert "tool 'send_mail' (call 'mail')" in asked[1]


async def test_the_streamable_http_app_lists_and_calls_tools_over_real_http(
    tmp_path: Path,
) -> None:
    import httpx2
    from mcp.client.streamable_http import streamable_http_client
    from starlette.routing import Mount

    from tests.serve.protocols.conftest import SCRIPTED, make_runner, serving
    from tubeless.serve.protocols._mcp import mcp_http_app

    runner = make_runner(SCRIPTED, tmp_path / "runs.sqlite")
    app = mcp_http_app(runner)
    progress: list[str | None] = []

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append(message)

    lifespan = lambda: app.router.lifespan_context(app)  # noqa: E731
    with serving(runner, [Mount("/", app)], lifespans=(lifespan,)) as url:
        http = httpx2.AsyncClient(headers={"Authorization": "Bearer one"})
        transport = streamable_http_client(f"{url}/mcp", http_client=http)
        async with http, Client(transport) as client:
            listed = await client.list_tools()
            result = await client.call_tool(
                "scripted-agent", {"question": "over http"}, progress_callback=on_progress
            )
    assert [tool.name for tool in listed.tools] == ["scripted-agent"]
    assert result.structured_content == {"answer": "9 characters; OVER; HTTP"}
    assert progress[-1] == "run completed"
    owner = bearer_identity({"authorization": "Bearer one"})
    assert [view.status for view in runner.list(caller=owner)] == ["completed"]


async def test_a_run_past_its_limits_is_a_tool_error_with_the_limit_code(tmp_path: Path) -> None:
    from tests.serve.protocols.agents import agents_project

    runner = LocalRunner(agents_project(tmp_path), checkpoints=SqliteCheckpoints(tmp_path / "r"))
    try:
        async with Client(mcp_server(runner)) as client:
            result = await client.call_tool("looping", {"text": "x"})
    finally:
        await runner.close()
    assert result.is_error
    assert result.content[0].text.startswith("TUBELESS_AGENT_LIMIT_REACHED: ")
