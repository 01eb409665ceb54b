"""A2A 1.0 over real HTTP, driven by the a2a-sdk client: the card validates as the SDK's
model; a run is a Task (blocking, streamed, subscribed to); approvals are INPUT_REQUIRED
answered by a reply; cancel; refused input; tasks of one token invisible to another."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from a2a.client import ClientConfig, create_client
from a2a.client.card_resolver import parse_agent_card
from a2a.types import (
    AgentCard,
    CancelTaskRequest,
    GetTaskRequest,
    ListTasksRequest,
    Message,
    Part,
    Role,
    SendMessageRequest,
    SubscribeToTaskRequest,
    Task,
    TaskState,
)
from google.protobuf import json_format
from google.protobuf.struct_pb2 import Struct, Value

from tests.serve.protocols.agents import agents_project
from tests.serve.protocols.conftest import APPROVALS, HANG_GUARD_S, make_runner, serving
from tubeless.durable import SqliteCheckpoints
from tubeless.serve.protocols import LocalRunner, bearer_identity
from tubeless.serve.protocols._a2a import a2a_routes


@pytest.fixture
def approvals(tmp_path: Path) -> Iterator[str]:
    runner = make_runner(APPROVALS, tmp_path / "runs.sqlite")
    with serving(runner, lambda url: a2a_routes(runner, base_url=url)) as url:
        yield url


@pytest.fixture
def python_agents(tmp_path: Path) -> Iterator[tuple[str, LocalRunner]]:
    runner = LocalRunner(
        agents_project(tmp_path), checkpoints=SqliteCheckpoints(tmp_path / "runs.sqlite")
    )
    with serving(runner, lambda url: a2a_routes(runner, base_url=url)) as url:
        yield url, runner


@asynccontextmanager
async def _client(url: str, token: str = "one", *, streaming: bool = False) -> AsyncIterator[Any]:
    async with httpx.AsyncClient(
        headers={"Authorization": f"Bearer {token}"}, timeout=HANG_GUARD_S
    ) as http:
        client = await create_client(
            url, client_config=ClientConfig(httpx_client=http, streaming=streaming)
        )
        try:
            yield client
        finally:
            await client.close()


def _message(
    data: Any, *, entry: str | None = None, task_id: str | None = None, context_id: str = ""
) -> Message:
    message = Message(message_id=f"m-{id(data)}-{task_id}", role=Role.ROLE_USER)
    message.parts.append(Part(data=json_format.ParseDict(data, Value())))
    if entry is not None:
        message.metadata.CopyFrom(json_format.ParseDict({"entry": entry}, Struct()))
    if task_id is not None:
        message.task_id = task_id
        message.context_id = context_id
    return message


async def _send(client: Any, message: Message, *, immediately: bool = False) -> Task:
    request = SendMessageRequest(message=message)
    if immediately:  # tubeless's default; said here all the same
        request.configuration.return_immediately = True
    else:  # wait for the task to stop: how an a2a-sdk 1.x client asks it of tubeless
        request.metadata.update({"blocking": True})
    responses = [response async for response in client.send_message(request)]
    assert responses[-1].HasField("task"), responses
    task: Task = responses[-1].task
    return task


def _data(part: Part) -> Any:
    return json_format.MessageToDict(part)["data"]


async def test_the_card_is_generated_from_the_project_and_validates(approvals: str) -> None:
    async with httpx.AsyncClient() as http:  # no token needed for the card
        response = await http.get(f"{approvals}/.well-known/agent-card.json")
    assert response.status_code == 200
    card = parse_agent_card(response.json())
    strict = json_format.ParseDict(response.json(), AgentCard())  # unknown fields refused
    assert strict == card
    assert card.name == "Approvals"
    assert card.version == "approvals-v1"
    assert [skill.id for skill in card.skills] == ["approvals"]
    assert card.skills[0].description.startswith("Drafts, publishes and mails a note")
    assert card.supported_interfaces[0].url == f"{approvals}/a2a"
    assert card.supported_interfaces[0].protocol_binding == "JSONRPC"
    assert card.security_schemes["bearer"].http_auth_security_scheme.scheme == "bearer"
    assert "bearer" in card.security_requirements[0].schemes


async def test_a_task_waits_for_input_and_a_reply_with_the_decisions_completes_it(
    approvals: str,
) -> None:
    async with _client(approvals) as client:
        task = await _send(client, _message({"to": "ops@elsewhere.org"}))
        assert task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
        assert not task.artifacts
        text = task.status.message.parts[0].text
        assert "call 'publish' to tool 'publish' needs approval (digest sha256:" in text
        pending = {p["call_id"]: p for p in _data(task.status.message.parts[1])["pending"]}
        assert set(pending) == {"publish", "mail"}

        reply = {"decisions": [{"digest": pending["publish"]["digest"], "approve": True}]}
        done = await _send(client, _message(reply, task_id=task.id, context_id=task.context_id))
    assert done.id == task.id
    assert done.status.state == TaskState.TASK_STATE_COMPLETED
    (artifact,) = done.artifacts
    assert artifact.name == "result"
    assert _data(artifact.parts[0]) == {
        "drafted": "RELEASE NOTES",
        "published": True,
        "mailed": False,  # no decision for it: denied
        "denied": ["mail"],
    }


async def test_send_streaming_message_streams_a_task_to_its_end(
    python_agents: tuple[str, LocalRunner],
) -> None:
    url, _ = python_agents
    async with _client(url, streaming=True) as client:
        request = SendMessageRequest(message=_message({"text": "streamed"}, entry="echo"))
        kinds, states = [], []
        async for response in client.send_message(request):
            kinds.append(response.WhichOneof("payload"))
            if response.HasField("status_update"):
                states.append(response.status_update.status.state)
    assert kinds[0] == "task"
    assert "artifact_update" in kinds
    assert states[0] == TaskState.TASK_STATE_WORKING
    assert states[-1] == TaskState.TASK_STATE_COMPLETED


async def test_a_returned_task_is_followed_with_subscribe_and_cancel_task_cancels_its_run(
    python_agents: tuple[str, LocalRunner],
) -> None:
    url, runner = python_agents
    async with _client(url) as client, _client(url, streaming=True) as streaming:
        task = await _send(client, _message({"text": "x"}, entry="hanging"), immediately=True)
        assert task.status.state in (TaskState.TASK_STATE_SUBMITTED, TaskState.TASK_STATE_WORKING)
        seen: list[Any] = []
        subscribed = asyncio.Event()

        async def follow() -> None:
            async for response in streaming.subscribe(SubscribeToTaskRequest(id=task.id)):
                subscribed.set()  # the first answer is the task as it stands
                if response.HasField("status_update"):
                    seen.append(response.status_update.status.state)
                elif response.HasField("task"):
                    seen.append(response.task.status.state)

        following = asyncio.create_task(follow())
        await asyncio.wait_for(subscribed.wait(), HANG_GUARD_S)
        for _ in range(int(HANG_GUARD_S / 0.02)):  # until the hanging tool runs
            view = runner.find(task.id, caller=_caller("one"))
            if view is not None and any(e == "call" for e in _kinds(runner, view.run_id)):
                break
            await asyncio.sleep(0.02)
        cancelled = await client.cancel_task(CancelTaskRequest(id=task.id))
        await asyncio.wait_for(following, HANG_GUARD_S)
        fetched = await client.get_task(GetTaskRequest(id=task.id))
    assert cancelled.status.state == TaskState.TASK_STATE_CANCELED
    assert fetched.status.state == TaskState.TASK_STATE_CANCELED
    assert seen[-1] == TaskState.TASK_STATE_CANCELED
    view = runner.find(task.id, caller=_caller("one"))
    assert view is not None and view.status == "cancelled"


def _kinds(runner: LocalRunner, run_id: str) -> list[str]:
    return [event.kind for event in runner._runs[run_id].events]


def _caller(token: str) -> str | None:
    return bearer_identity({"authorization": f"Bearer {token}"})


async def test_an_invalid_input_is_refused_before_a_task_exists(
    python_agents: tuple[str, LocalRunner],
) -> None:
    url, runner = python_agents
    async with _client(url) as client:
        with pytest.raises(Exception) as refused:
            await _send(client, _message({"text": 3}, entry="echo"))
        listed = await client.list_tasks(ListTasksRequest())
    assert "TUBELESS_OPTIONS_VALIDATION_FAILED" in str(refused.value)
    assert type(refused.value).__name__ == "InvalidParamsError"
    # the SDK keeps a record of the refused request, but nothing ran
    assert [task.status.state for task in listed.tasks] in ([], [TaskState.TASK_STATE_FAILED])
    assert runner.list(caller=_caller("one")) == []


async def test_tasks_of_one_token_are_invisible_to_another(
    python_agents: tuple[str, LocalRunner],
) -> None:
    url, _ = python_agents
    async with _client(url, "one") as one, _client(url, "two") as two:
        mine = await _send(one, _message({"text": "mine"}, entry="echo"))
        theirs = await _send(two, _message({"text": "theirs"}, entry="echo"))
        listed_one = await one.list_tasks(ListTasksRequest())
        listed_two = await two.list_tasks(ListTasksRequest())
        with pytest.raises(Exception) as hidden:
            await two.get_task(GetTaskRequest(id=mine.id))
        with pytest.raises(Exception) as not_cancelled:
            await two.cancel_task(CancelTaskRequest(id=mine.id))
        still = await one.get_task(GetTaskRequest(id=mine.id))
    assert [task.id for task in listed_one.tasks] == [mine.id]
    assert [task.id for task in listed_two.tasks] == [theirs.id]
    assert type(hidden.value).__name__ == "TaskNotFoundError"
    assert type(not_cancelled.value).__name__ == "TaskNotFoundError"
    assert still.status.state == TaskState.TASK_STATE_COMPLETED
