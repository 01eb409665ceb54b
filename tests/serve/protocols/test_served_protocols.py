"""AG-UI, A2A and MCP on a real ``tubeless serve`` process, each driven by its official client
(httpx reading AG-UI's SSE, the a2a-sdk client, the MCP SDK's streamable-HTTP client): protocol
runs are ordinary served runs (listed by ``/v1/runs``, checkpointed, cancelled, answered), the
server's token guards them (the agent card excepted), and one token never sees another's."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
from a2a.client.card_resolver import parse_agent_card
from a2a.types import (
    AgentCard,
    CancelTaskRequest,
    GetTaskRequest,
    ListTasksRequest,
    SendMessageRequest,
    TaskState,
)
from google.protobuf import json_format
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests.fixtures.processes import HANG_GUARD
from tests.serve.conftest import Server, wait_status
from tests.serve.protocols.served import TOKEN, Protocols, protocols_in
from tests.serve.protocols.sse import check_order, parse_sse
from tests.serve.protocols.test_a2a import _client, _data, _message, _send
from tubeless.serve.protocols._a2a_send import send_message_rule


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Protocols, Server]]:
    with protocols_in(tmp_path_factory.mktemp("served")) as protocols:
        yield protocols, protocols.start()


def _api(server: Server) -> httpx.Client:
    return server.client(TOKEN)


def _ag_ui(
    server: Server, thread: str, token: str | None = TOKEN, **fields: Any
) -> tuple[httpx.Response, list[Any]]:
    body = {"threadId": thread, "runId": str(uuid.uuid4()), "messages": [], **fields}
    headers = {"authorization": f"Bearer {token}"} if token else {}
    with (
        httpx.Client(base_url=server.url, timeout=HANG_GUARD, headers=headers) as client,
        client.stream("POST", "/ag-ui/worker", json=body) as response,
    ):
        response.read()
        lines = list(response.iter_lines())
    if response.headers["content-type"].startswith("text/event-stream"):
        return response, parse_sse(lines)
    return response, []


def _served_run(server: Server, key: str) -> dict[str, Any]:
    with _api(server) as api:
        (run,) = [r for r in api.get("/v1/runs").json()["runs"] if r["key"] == key]
    return run


# -- AG-UI ---------------------------------------------------------------------------------------


def test_an_ag_ui_run_streams_to_its_result_and_is_a_served_run(
    served: tuple[Protocols, Server],
) -> None:
    _, server = served
    response, events = _ag_ui(
        server, "ag-full", forwardedProps={"input": {"text": "hi", "steps": 2}}
    )
    assert response.status_code == 200
    check_order(events)
    kinds = [event.type.value for event in events]
    assert kinds.count("TOOL_CALL_RESULT") == 2 and "STATE_SNAPSHOT" in kinds
    assert events[-1].type.value == "RUN_FINISHED"
    assert events[-1].result == {"outs": ["HI-1", "HI-2"]}
    run = _served_run(server, "ag-full")  # threadId is the checkpoint key
    assert (run["entry"], run["status"], run["calls"]) == ("worker", "completed", 2)
    assert run["result"] == {"outs": ["HI-1", "HI-2"]}


def test_ag_ui_refuses_a_bad_input_and_a_missing_token_before_any_event(
    served: tuple[Protocols, Server],
) -> None:
    _, server = served
    refused, events = _ag_ui(server, "ag-bad", forwardedProps={"input": {"text": 3}})
    assert (refused.status_code, events) == (422, [])
    assert refused.json()["error"]["code"] == "TUBELESS_OPTIONS_VALIDATION_FAILED"
    anonymous, _ = _ag_ui(server, "ag-anon", token=None, forwardedProps={"input": {"text": "x"}})
    assert anonymous.status_code == 401
    assert anonymous.json()["error"]["code"] == "TUBELESS_SERVE_UNAUTHORIZED"
    with _api(server) as api:
        keys = {r["key"] for r in api.get("/v1/runs").json()["runs"]}
    assert not keys & {"ag-bad", "ag-anon"}


@pytest.mark.slow
def test_an_ag_ui_interrupt_is_answered_after_the_server_was_killed(tmp_path: Path) -> None:
    """The run waits for approval; kill -9; a new server; ``resume[]`` approves and the same
    run finishes, the approved call having run once."""
    with protocols_in(tmp_path) as protocols:
        first = protocols.start()
        body = {"input": {"text": "hi", "mode": "publish"}}
        _, events = _ag_ui(first, "ag-restart", forwardedProps=body)
        check_order(events)
        outcome = events[-1].outcome
        assert outcome.type == "interrupt"
        (interrupt,) = outcome.interrupts
        waiting = _served_run(first, "ag-restart")
        assert waiting["status"] == "waiting"
        assert interrupt.id == waiting["pending_approvals"][0]["digest"]
        assert protocols.marks() == []
        first.kill()

        second = protocols.start()
        answer = {"interruptId": interrupt.id, "status": "resolved", "payload": {"approve": True}}
        _, resumed = _ag_ui(second, "ag-restart", resume=[answer])
        check_order(resumed)
        assert resumed[-1].type.value == "RUN_FINISHED"
        assert resumed[-1].result == {"outs": ["published hi-1"]}
        done = _served_run(second, "ag-restart")
        assert (done["run_id"], done["status"]) == (waiting["run_id"], "completed")
        assert len(protocols.marks()) == 1


# -- A2A -----------------------------------------------------------------------------------------


async def test_the_agent_card_needs_no_token_and_names_the_served_address(
    served: tuple[Protocols, Server],
) -> None:
    _, server = served
    async with httpx.AsyncClient() as http:
        response = await http.get(f"{server.url}/.well-known/agent-card.json")
    assert response.status_code == 200
    card = parse_agent_card(response.json())
    assert json_format.ParseDict(response.json(), AgentCard()) == card  # strict: no stray field
    assert (card.name, card.version) == ("Served protocols", "worker-3")
    assert [skill.id for skill in card.skills] == ["worker"]
    assert card.supported_interfaces[0].url == f"{server.url}/a2a"
    assert card.security_schemes["bearer"].http_auth_security_scheme.scheme == "bearer"


async def test_an_a2a_task_waits_for_input_and_a_reply_completes_its_served_run(
    served: tuple[Protocols, Server],
) -> None:
    protocols, server = served
    before = len(protocols.marks())
    async with _client(server.url, TOKEN) as client:
        task = await _send(client, _message({"text": "note", "mode": "publish"}))
        assert task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
        (pending,) = _data(task.status.message.parts[1])["pending"]
        assert _served_run(server, task.id)["pending_approvals"][0]["digest"] == pending["digest"]
        reply = {"decisions": [{"digest": pending["digest"], "approve": True}]}
        done = await _send(client, _message(reply, task_id=task.id, context_id=task.context_id))
    assert done.status.state == TaskState.TASK_STATE_COMPLETED
    assert _data(done.artifacts[0].parts[0]) == {"outs": ["published note-1"]}
    run = _served_run(server, task.id)  # the task id is the checkpoint key
    assert (run["status"], run["result"]) == ("completed", {"outs": ["published note-1"]})
    assert len(protocols.marks()) == before + 1


async def test_cancel_task_cancels_the_served_run(served: tuple[Protocols, Server]) -> None:
    protocols, server = served
    async with _client(server.url, TOKEN) as client:
        message = _message({"text": "c", "mode": "wait"})
        task = await _send(client, message, immediately=True)
        protocols.wait_for("waiting-c-1")
        cancelled = await client.cancel_task(CancelTaskRequest(id=task.id))
        fetched = await client.get_task(GetTaskRequest(id=task.id))
    assert cancelled.status.state == TaskState.TASK_STATE_CANCELED
    assert fetched.status.state == TaskState.TASK_STATE_CANCELED
    with _api(server) as api:
        run = wait_status(api, _served_run(server, task.id)["run_id"], {"cancelled", "failed"})
    assert run["status"] == "cancelled"


async def test_an_a2a_message_with_a_refused_input_starts_nothing(
    served: tuple[Protocols, Server],
) -> None:
    _, server = served
    async with _client(server.url, TOKEN) as client:
        with pytest.raises(Exception) as refused:
            await _send(client, _message({"text": "x", "mode": "dance"}))
    assert type(refused.value).__name__ == "InvalidParamsError"
    assert "TUBELESS_OPTIONS_VALIDATION_FAILED" in str(refused.value)


# -- MCP -----------------------------------------------------------------------------------------


async def test_mcp_over_streamable_http_lists_and_calls_the_entries(
    served: tuple[Protocols, Server],
) -> None:
    _, server = served
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {TOKEN}"}, timeout=HANG_GUARD)
    async with http, Client(streamable_http_client(f"{server.url}/mcp", http_client=http)) as mcp:
        tools = await mcp.list_tools()
        called = await mcp.call_tool("worker", {"text": "via mcp"})
        refused = await mcp.call_tool("worker", {"text": 3})
        approval = await mcp.call_tool("worker", {"text": "p", "mode": "publish"})
    assert [tool.name for tool in tools.tools] == ["worker"]
    assert tools.tools[0].input_schema["required"] == ["text"]
    assert called.structured_content == {"outs": ["VIA MCP-1"]}
    assert refused.is_error
    assert refused.structured_content["error"]["code"] == "TUBELESS_OPTIONS_VALIDATION_FAILED"
    assert approval.is_error  # no elicitation over stateless HTTP: nothing needing it ran
    assert approval.structured_content["error"]["code"] == "TUBELESS_APPROVAL_REQUIRED"


async def test_mcp_needs_the_token(served: tuple[Protocols, Server]) -> None:
    _, server = served
    async with httpx.AsyncClient() as http:
        response = await http.post(f"{server.url}/mcp", json={})
    assert response.status_code == 401


# -- owners --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def open_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A ``--no-auth`` server on loopback: every bearer token passes, each is its own caller."""
    with protocols_in(tmp_path_factory.mktemp("open")) as protocols:
        yield protocols.start(auth=False)


async def test_tasks_and_threads_of_one_token_are_invisible_to_another(
    open_server: Server,
) -> None:
    async with (
        _client(open_server.url, "token-one") as one,
        _client(open_server.url, "token-two") as two,
    ):
        mine = await _send(one, _message({"text": "mine"}))
        theirs = await _send(two, _message({"text": "theirs"}))
        listed_one = await one.list_tasks(ListTasksRequest())
        listed_two = await two.list_tasks(ListTasksRequest())
        with pytest.raises(Exception) as hidden:
            await two.get_task(GetTaskRequest(id=mine.id))
    assert [task.id for task in listed_one.tasks] == [mine.id]
    assert [task.id for task in listed_two.tasks] == [theirs.id]
    assert type(hidden.value).__name__ == "TaskNotFoundError"

    _ag_ui(open_server, "shared-thread", token="token-one", forwardedProps={"input": {"text": "a"}})
    taken, events = _ag_ui(
        open_server, "shared-thread", token="token-two", forwardedProps={"input": {"text": "b"}}
    )
    assert (taken.status_code, events) == (409, [])
    assert taken.json()["error"]["code"] == "TUBELESS_SERVE_CONFLICT"


@pytest.mark.slow
async def test_a2a_tasks_outlive_a_killed_server(tmp_path: Path) -> None:
    """Killed while one task waits for input and another one's run is in a call: after the
    restart the first takes its reply, and the second reads as its run ended (the call that
    was running is not run again: an unsafe call is reported interrupted)."""
    with protocols_in(tmp_path) as protocols:
        first = protocols.start()
        async with _client(first.url, TOKEN) as client:
            task = await _send(client, _message({"text": "late", "mode": "publish"}))
            working = await _send(client, _message({"text": "k", "mode": "wait"}), immediately=True)
        assert task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
        protocols.wait_for("waiting-k-1")
        first.kill()

        second = protocols.start()
        async with _client(second.url, TOKEN) as client:
            kept = await client.get_task(GetTaskRequest(id=task.id))
            reply = {"approve": True}
            done = await _send(client, _message(reply, task_id=task.id, context_id=task.context_id))
            listed = await client.list_tasks(ListTasksRequest())
            deadline = time.monotonic() + HANG_GUARD
            while True:
                resumed = await client.get_task(GetTaskRequest(id=working.id))
                if resumed.status.state not in (
                    TaskState.TASK_STATE_SUBMITTED,
                    TaskState.TASK_STATE_WORKING,
                ):
                    break
                assert time.monotonic() < deadline, "the task stayed working"
                await asyncio.sleep(0.05)
    assert kept.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    assert done.status.state == TaskState.TASK_STATE_COMPLETED
    assert _data(done.artifacts[0].parts[0]) == {"outs": ["published late-1"]}
    assert sorted(t.id for t in listed.tasks) == sorted([task.id, working.id])
    assert len(protocols.marks()) == 1
    assert resumed.status.state == TaskState.TASK_STATE_COMPLETED
    assert _data(resumed.artifacts[0].parts[0]) == {"outs": ["TUBELESS_AGENT_CALL_INTERRUPTED"]}


async def test_send_message_returns_the_task_at_once_unless_asked_to_wait(
    served: tuple[Protocols, Server],
) -> None:
    """tubeless's rule (``configuration.blocking``, default false) mapped onto a2a-sdk 1.x's
    ``returnImmediately`` (default false): without a word the task comes back submitted."""
    _, server = served
    async with _client(server.url, TOKEN) as client:
        request = SendMessageRequest(message=_message({"text": "now"}))
        (response,) = [r async for r in client.send_message(request)]
        assert response.task.status.state == TaskState.TASK_STATE_SUBMITTED
        deadline = time.monotonic() + HANG_GUARD
        while True:
            task = await client.get_task(GetTaskRequest(id=response.task.id))
            if task.status.state == TaskState.TASK_STATE_COMPLETED:
                break
            assert time.monotonic() < deadline, task.status.state
            await asyncio.sleep(0.05)
    message = {
        "messageId": "raw-1",
        "role": "ROLE_USER",
        "parts": [{"data": {"text": "raw"}}],
    }
    waits = [{"configuration": {"blocking": True}}, {"configuration": {"returnImmediately": False}}]
    headers = {"authorization": f"Bearer {TOKEN}", "a2a-version": "1.0"}
    async with httpx.AsyncClient(base_url=server.url, headers=headers, timeout=HANG_GUARD) as http:
        for n, extra in enumerate(waits):
            params = {"message": {**message, "messageId": f"raw-{n}"}, **extra}
            body = {"jsonrpc": "2.0", "id": n, "method": "SendMessage", "params": params}
            answer = (await http.post("/a2a", json=body)).json()
            assert answer["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED", answer


@pytest.mark.parametrize(
    ("params", "returns_at_once"),
    [
        pytest.param({}, True, id="nothing-said"),
        pytest.param({"configuration": {"blocking": True}}, False, id="blocking"),
        pytest.param({"configuration": {"blocking": False}}, True, id="not-blocking"),
        pytest.param({"configuration": {"returnImmediately": False}}, False, id="explicit-false"),
        pytest.param({"configuration": {"returnImmediately": True}}, True, id="immediately"),
        pytest.param({"metadata": {"blocking": True}}, False, id="sdk-metadata"),
    ],
)
def test_the_send_message_rule(params: dict[str, Any], returns_at_once: bool) -> None:
    body = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": params}
    changed = send_message_rule(json.dumps(body).encode())
    assert changed is not None
    config = json.loads(changed)["params"]["configuration"]
    assert config == {**config, "returnImmediately": returns_at_once}
    assert "blocking" not in config
    other = {**body, "method": "GetTask"}
    assert send_message_rule(json.dumps(other).encode()) is None
    assert send_message_rule(b"not json") is None


def test_a_new_input_on_a_finished_thread_starts_the_thread_over(
    served: tuple[Protocols, Server],
) -> None:
    _, server = served
    _, first = _ag_ui(server, "ag-again", forwardedProps={"input": {"text": "one"}})
    _, second = _ag_ui(server, "ag-again", forwardedProps={"input": {"text": "two"}})
    assert first[-1].result == {"outs": ["ONE-1"]}
    assert second[-1].result == {"outs": ["TWO-1"]}  # not the saved end of the first
    with _api(server) as api:
        runs = [r for r in api.get("/v1/runs").json()["runs"] if r["key"] == "ag-again"]
    assert [r["status"] for r in runs] == ["completed", "completed"]


def test_an_ag_ui_client_that_goes_away_cancels_the_served_run(
    served: tuple[Protocols, Server],
) -> None:
    protocols, server = served
    body = {
        "threadId": "ag-gone",
        "runId": "r",
        "messages": [],
        "forwardedProps": {"input": {"text": "g", "mode": "wait"}},
    }
    headers = {"authorization": f"Bearer {TOKEN}"}
    with (
        httpx.Client(base_url=server.url, timeout=HANG_GUARD, headers=headers) as client,
        client.stream("POST", "/ag-ui/worker", json=body) as response,
    ):
        for line in response.iter_lines():
            if '"TOOL_CALL_END"' in line:  # the call is under way: leave
                break
    protocols.wait_for("waiting-g-1")
    with _api(server) as api:
        run = wait_status(api, _served_run(server, "ag-gone")["run_id"], {"cancelled", "failed"})
    assert run["status"] == "cancelled"
    assert run["error"]["code"] == "TUBELESS_RUN_CANCELLED"


async def test_a_cancelled_mcp_tool_call_cancels_its_served_run(
    served: tuple[Protocols, Server],
) -> None:
    protocols, server = served
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {TOKEN}"}, timeout=HANG_GUARD)
    async with http, Client(streamable_http_client(f"{server.url}/mcp", http_client=http)) as mcp:
        call = asyncio.create_task(mcp.call_tool("worker", {"text": "m", "mode": "wait"}))
        await asyncio.to_thread(protocols.wait_for, "waiting-m-1")
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
    with _api(server) as api:
        listed = api.get("/v1/runs").json()["runs"]  # newest first
        mine = next(r for r in listed if r["key"].startswith("worker:"))  # an MCP run's key
        run = wait_status(api, mine["run_id"], {"cancelled", "failed"})
    assert run["status"] == "cancelled"


async def test_an_input_nested_past_the_api_bound_is_refused(
    served: tuple[Protocols, Server],
) -> None:
    _, server = served
    deep: Any = "x"
    for _ in range(80):
        deep = [deep]
    refused, _ = _ag_ui(server, "ag-deep", forwardedProps={"input": {"text": "x", "more": deep}})
    assert refused.status_code == 422
    assert "nests deeper than 64 levels" in refused.json()["error"]["message"]


@pytest.mark.parametrize("path", ["/ag-ui/worker", "/a2a", "/mcp"])
def test_the_protocol_endpoints_pass_the_servers_host_and_size_guards(
    served: tuple[Protocols, Server], path: str
) -> None:
    _, server = served
    with _api(server) as api:
        foreign = api.post(path, json={}, headers={"host": "rebound.example"})
        big = api.post(path, content=b"[" + b"0," * 600_000 + b"0]")
    assert (foreign.status_code, foreign.json()["error"]["code"]) == (
        403,
        "TUBELESS_SERVE_FORBIDDEN_HOST",
    )
    assert (big.status_code, big.json()["error"]["code"]) == (413, "TUBELESS_SERVE_TOO_LARGE")
