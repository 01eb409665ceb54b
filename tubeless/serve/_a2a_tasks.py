"""The A2A tasks of a served project, kept where the run registry is so they outlive a server.

a2a-sdk's request handler keeps every task it answers for (``GetTask``, ``ListTasks``, a reply
on a task waiting for input) in a ``TaskStore``. Its in-memory store forgets them when the
process ends, while the run behind a task is durable: a reply after a restart would find no
task. This store writes each task, as the SDK's own JSON, to a ``serve_a2a_tasks`` table beside
``serve_runs`` (a data file already: 0600), under its owner (the caller the request was made
by), and reads it back from there on every ``get`` and ``list``, so every worker and every
later server sees the same tasks. Listing applies the SDK's own filters and paging, over the
owner's tasks only.

A task last saved by an earlier server and read while it is still submitted or working
although its run has stopped (the server stopped while a request followed the run, and the run
went on after the restart) is brought to the run's state as it is read, and saved so. A task
this server saved has a request following it here, which settles it itself.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from a2a.server.owner_resolver import resolve_user_scope
from a2a.server.tasks import InMemoryTaskStore, TaskStore
from a2a.types import ListTasksRequest, ListTasksResponse, Task, TaskState
from google.protobuf import json_format  # type: ignore[import-untyped]

from tubeless.serve._db import open_db
from tubeless.serve.protocols import ProjectRunner
from tubeless.serve.protocols._a2a import settled_task

if TYPE_CHECKING:
    from a2a.server.context import ServerCallContext

#: States of a task whose run may have stopped meanwhile.
_UNSETTLED = (TaskState.TASK_STATE_SUBMITTED, TaskState.TASK_STATE_WORKING)

__all__ = ["DurableTaskStore"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS {table} (
    task_id TEXT NOT NULL,
    owner TEXT NOT NULL,
    task_json TEXT NOT NULL,
    updated_at_ms BIGINT NOT NULL,
    PRIMARY KEY (owner, task_id)
)
"""


class DurableTaskStore(TaskStore):
    """A ``TaskStore`` where the run registry is (its SQLite file, or the PostgreSQL database
    of the checkpoints); see the module docstring."""

    def __init__(self, where: str, runner: ProjectRunner) -> None:
        self._runner = runner
        self._opened_ms = int(time.time() * 1000)
        self._db = open_db(where)
        self._t = self._db.table("serve_a2a_tasks")
        self._db.ensure([_SCHEMA.format(table=self._t)], [])

    def close(self) -> None:
        self._db.close()

    async def save(self, task: Task, context: ServerCallContext) -> None:
        text = json_format.MessageToJson(task, indent=None)
        self._db.run(
            f"INSERT INTO {self._t} (task_id, owner, task_json, updated_at_ms) "
            "VALUES (?, ?, ?, ?) ON CONFLICT (owner, task_id) DO UPDATE SET "
            "task_json = excluded.task_json, updated_at_ms = excluded.updated_at_ms",
            (task.id, resolve_user_scope(context), text, int(time.time() * 1000)),
        )

    async def get(self, task_id: str, context: ServerCallContext) -> Task | None:
        found = self._db.one(
            f"SELECT task_json, updated_at_ms FROM {self._t} WHERE owner = ? AND task_id = ?",
            (resolve_user_scope(context), task_id),
        )
        if found is None:
            return None
        return await self._settled(json_format.Parse(found[0], Task()), found[1], context)

    async def _settled(self, task: Task, saved_ms: int, context: ServerCallContext) -> Task:
        if task.status.state not in _UNSETTLED or saved_ms >= self._opened_ms:
            return task
        view = self._runner.find(task.id, caller=resolve_user_scope(context) or None)
        if view is None or view.status == "running":
            return task
        settled: Task = settled_task(task, view)
        await self.save(settled, context)
        return settled

    async def list(self, params: ListTasksRequest, context: ServerCallContext) -> ListTasksResponse:
        rows = self._db.rows(
            f"SELECT task_json, updated_at_ms FROM {self._t} WHERE owner = ?",
            (resolve_user_scope(context),),
        )
        # The SDK's filters, order and page tokens, over this owner's tasks.
        scratch = InMemoryTaskStore(use_copying=False)
        for text, saved_ms in rows:
            task = await self._settled(json_format.Parse(text, Task()), saved_ms, context)
            await scratch.save(task, context)
        return await scratch.list(params, context)

    async def delete(self, task_id: str, context: ServerCallContext) -> None:
        self._db.run(
            f"DELETE FROM {self._t} WHERE owner = ? AND task_id = ?",
            (resolve_user_scope(context), task_id),
        )
