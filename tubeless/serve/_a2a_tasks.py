"""The A2A tasks of a served project, kept in the run registry's file so they outlive a server.

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

import sqlite3
import threading
import time
from typing import TYPE_CHECKING

from a2a.server.owner_resolver import resolve_user_scope
from a2a.server.tasks import InMemoryTaskStore, TaskStore
from a2a.types import ListTasksRequest, ListTasksResponse, Task, TaskState
from google.protobuf import json_format  # type: ignore[import-untyped]

from tubeless.serve.protocols import ProjectRunner
from tubeless.serve.protocols._a2a import settled_task

if TYPE_CHECKING:
    from a2a.server.context import ServerCallContext

#: States of a task whose run may have stopped meanwhile.
_UNSETTLED = (TaskState.TASK_STATE_SUBMITTED, TaskState.TASK_STATE_WORKING)

__all__ = ["DurableTaskStore"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS serve_a2a_tasks (
    task_id TEXT NOT NULL,
    owner TEXT NOT NULL,
    task_json TEXT NOT NULL,
    updated_at_ms INTEGER NOT NULL,
    PRIMARY KEY (owner, task_id)
)
"""


class DurableTaskStore(TaskStore):
    """A ``TaskStore`` in a SQLite file (the run registry's); see the module docstring."""

    def __init__(self, path: str, runner: ProjectRunner) -> None:
        self._runner = runner
        self._opened_ms = int(time.time() * 1000)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA busy_timeout = 10000")
        self._db.execute(_SCHEMA)

    def close(self) -> None:
        with self._lock:
            self._db.close()

    async def save(self, task: Task, context: ServerCallContext) -> None:
        text = json_format.MessageToJson(task, indent=None)
        with self._lock:
            self._db.execute(
                "INSERT INTO serve_a2a_tasks (task_id, owner, task_json, updated_at_ms) "
                "VALUES (?, ?, ?, ?) ON CONFLICT (owner, task_id) DO UPDATE SET "
                "task_json = excluded.task_json, updated_at_ms = excluded.updated_at_ms",
                (task.id, resolve_user_scope(context), text, int(time.time() * 1000)),
            )

    async def get(self, task_id: str, context: ServerCallContext) -> Task | None:
        with self._lock:
            found = self._db.execute(
                "SELECT task_json, updated_at_ms FROM serve_a2a_tasks "
                "WHERE owner = ? AND task_id = ?",
                (resolve_user_scope(context), task_id),
            ).fetchone()
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
        with self._lock:
            rows = self._db.execute(
                "SELECT task_json, updated_at_ms FROM serve_a2a_tasks WHERE owner = ?",
                (resolve_user_scope(context),),
            ).fetchall()
        # The SDK's filters, order and page tokens, over this owner's tasks.
        scratch = InMemoryTaskStore(use_copying=False)
        for text, saved_ms in rows:
            task = await self._settled(json_format.Parse(text, Task()), saved_ms, context)
            await scratch.save(task, context)
        return await scratch.list(params, context)

    async def delete(self, task_id: str, context: ServerCallContext) -> None:
        with self._lock:
            self._db.execute(
                "DELETE FROM serve_a2a_tasks WHERE owner = ? AND task_id = ?",
                (resolve_user_scope(context), task_id),
            )
