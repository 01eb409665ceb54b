"""A2A on servers sharing one PostgreSQL database: a task started on one host is read and
answered on another (the tasks live in ``tubeless_serve_a2a_tasks``)."""

from __future__ import annotations

from pathlib import Path

import pytest
from a2a.types import GetTaskRequest, TaskState

from tests.fixtures.postgres import postgres_dsn, postgres_server
from tests.serve.protocols.served import TOKEN, protocols_in
from tests.serve.protocols.test_a2a import _client, _data, _message, _send

__all__ = ["postgres_dsn", "postgres_server"]


@pytest.mark.slow
async def test_a_task_waiting_on_one_host_is_answered_on_another(
    tmp_path: Path, postgres_dsn: str
) -> None:
    stores = ("--checkpoints", postgres_dsn, "--trace", postgres_dsn)
    with protocols_in(tmp_path) as protocols:
        a = protocols.start(*stores)
        b = protocols.start(*stores)
        async with _client(a.url, TOKEN) as client:
            task = await _send(client, _message({"text": "far", "mode": "publish"}))
        assert task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
        (pending,) = _data(task.status.message.parts[1])["pending"]
        async with _client(b.url, TOKEN) as client:
            kept = await client.get_task(GetTaskRequest(id=task.id))
            reply = {"decisions": [{"digest": pending["digest"], "approve": True}]}
            done = await _send(client, _message(reply, task_id=task.id, context_id=task.context_id))
    assert kept.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    assert done.status.state == TaskState.TASK_STATE_COMPLETED
    assert _data(done.artifacts[0].parts[0]) == {"outs": ["published far-1"]}
    assert len(protocols.marks()) == 1
