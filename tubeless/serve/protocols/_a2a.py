"""A2A 1.0 on ``a2a-sdk`` 1.x: the agent card and JSON-RPC at ``/a2a``, a run being a Task.

The SDK does the protocol: its ``DefaultRequestHandler`` answers ``SendMessage``,
``SendStreamingMessage``, ``GetTask``, ``ListTasks``, ``CancelTask`` and ``SubscribeToTask``
over its task store; this module gives it an ``AgentExecutor`` that drives the
:class:`ProjectRunner`, the card, and the caller's identity.

* **Card** (``/.well-known/agent-card.json``, no token needed): the project's name and
  description, ``version`` = the default entry's ``implementation_version``, one skill per
  entry (id = entry id), the JSON-RPC interface at ``/a2a``, and a bearer ``securitySchemes``
  entry that every request must satisfy. ``agent_card`` builds it as the SDK's own model.
* **A task is a run.** A message picks its entry with ``metadata.entry`` (else the project's
  default); its first data part is the entry's input (a text part, for an entry whose input is
  a string), validated before the task is created: a refused input is a JSON-RPC
  ``InvalidParams`` error naming ``TUBELESS_OPTIONS_VALIDATION_FAILED``. The task id is the
  run's checkpoint key. The result is an artifact ``result`` with one data part.
* **Approvals**: a run that waits is ``TASK_STATE_INPUT_REQUIRED``; its status message names
  each pending call and digest (text) and lists them in a data part ``{"pending": [{call_id,
  tool, digest, input}]}``. The answer is a message on the same task whose data part is
  ``{"approve": bool, "reason"?}`` (every pending call) or ``{"decisions": [{"digest" |
  "call_id", "approve", "reason"?}]}``; a call without a well-formed yes is denied.
* **Owners**: each request's caller (``caller_of``, by default a hash of its bearer token) owns
  the tasks it creates; the task store and the runner show a task to its owner only.

``SendMessage`` returns at once with the task (``TASK_STATE_SUBMITTED``; follow it with
``GetTask`` or ``SubscribeToTask``) unless the request asks to wait, in which case it answers
once the task stopped (completed, failed, canceled or input-required). A2A 1.0 and a2a-sdk 1.x
name this ``configuration.returnImmediately``, waiting by default; tubeless keeps the rule of
A2A 0.3 (``configuration.blocking``, returning at once by default) and maps it onto the SDK's
field before the SDK reads the request: a request waits when its ``configuration.blocking`` is
true, when it sets ``configuration.returnImmediately`` to false explicitly, or when its
``metadata.blocking`` is true (the way an a2a-sdk 1.x client, whose request model has no
``blocking`` and never sends a false field, asks for it). ``SendStreamingMessage`` streams
either way.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from tubeless.errors import RUN_FAILED, SERVE_CONFLICT, SERVE_NOT_FOUND
from tubeless.serve.protocols._a2a_send import returns_at_once
from tubeless.serve.protocols._identity import bearer_identity
from tubeless.serve.protocols._runner import (
    Caller,
    EntryInfo,
    ProjectInfo,
    ProjectRunner,
    RunEvent,
    RunnerError,
    RunView,
)

if TYPE_CHECKING:
    from a2a.server.agent_execution import AgentExecutor
    from a2a.server.tasks import TaskStore
    from a2a.types import AgentCard
    from starlette.requests import Request
    from starlette.routing import BaseRoute

__all__ = ["a2a_routes", "agent_card", "decisions_of"]

#: Reads the caller's identity from a request (``None``: anonymous).
CallerOf = Callable[["Request"], Caller]

BEARER = "bearer"


def agent_card(info: ProjectInfo, base_url: str, *, rpc_path: str = "/a2a") -> AgentCard:
    """The project's agent card, as the SDK's ``AgentCard`` model."""
    from a2a.types import (
        AgentCapabilities,
        AgentCard,
        AgentInterface,
        AgentSkill,
        HTTPAuthSecurityScheme,
        SecurityRequirement,
        SecurityScheme,
        StringList,
    )

    skills = [
        AgentSkill(
            id=entry.id,
            name=entry.name or entry.id,
            description=entry.description or entry.name or entry.id,
            tags=[entry.kind],
            input_modes=_input_modes(entry),
            output_modes=["application/json"],
        )
        for entry in info.entries.values()
    ]
    return AgentCard(
        name=info.name or info.id,
        description=info.description or info.name or info.id,
        version=info.version,
        supported_interfaces=[
            AgentInterface(
                url=base_url.rstrip("/") + rpc_path,
                protocol_binding="JSONRPC",
                protocol_version="1.0",
            )
        ],
        capabilities=AgentCapabilities(streaming=True, push_notifications=False),
        security_schemes={
            BEARER: SecurityScheme(
                http_auth_security_scheme=HTTPAuthSecurityScheme(
                    scheme="bearer",
                    description="The server's token (Authorization: Bearer <token>).",
                )
            )
        },
        security_requirements=[SecurityRequirement(schemes={BEARER: StringList()})],
        default_input_modes=["application/json", "text/plain"],
        default_output_modes=["application/json"],
        skills=skills,
    )


def _input_modes(entry: EntryInfo) -> list[str]:
    if entry.input_json_schema.get("type") == "string":
        return ["text/plain", "application/json"]
    return ["application/json"]


def _owner(context: Any) -> Caller:
    """The caller a request context was built for (the task store's owner)."""
    name = context.user.user_name
    return str(name) if name else None


def decisions_of(data: Any) -> dict[str, tuple[bool, str | None]]:
    """Digest or call id (``"*"``: every pending call) → (approve, reason) from a reply's data
    part; anything malformed gives no entry, which denies."""
    found: dict[str, tuple[bool, str | None]] = {}
    if not isinstance(data, Mapping):
        return found
    items = data.get("decisions")
    if items is None and "approve" in data:
        items = [{**data, "digest": "*"}]
    for item in items if isinstance(items, list) else ():
        if not isinstance(item, Mapping):
            continue
        name = item.get("digest", item.get("call_id"))
        if not isinstance(name, str):
            continue
        reason = item.get("reason")
        found[name] = (item.get("approve") is True, reason if isinstance(reason, str) else None)
    return found


def _executor(runner: ProjectRunner) -> AgentExecutor:
    from a2a.helpers import (
        get_data_parts,
        get_text_parts,
        new_data_part,
        new_task,
        new_text_part,
    )
    from a2a.server.agent_execution import AgentExecutor
    from a2a.server.tasks import TaskUpdater
    from a2a.types import InvalidParamsError, Message, TaskState

    info = runner.info

    def agent_message(updater: TaskUpdater, text: str, data: Any = None) -> Message:
        parts = [new_text_part(text)]
        if data is not None:
            parts.append(new_data_part(data))
        return updater.new_agent_message(parts)

    def entry_and_input(message: Message) -> tuple[EntryInfo, Any]:
        metadata = dict(message.metadata) if message.HasField("metadata") else {}
        entry_id = metadata.get("entry") or info.default or next(iter(info.entries), None)
        entry = info.entries.get(str(entry_id))
        if entry is None:
            raise InvalidParamsError(message=f"{SERVE_NOT_FOUND}: no entry {entry_id!r}")
        data = get_data_parts(list(message.parts))
        if data:
            return entry, data[0]
        texts = get_text_parts(list(message.parts))
        if texts and entry.input_json_schema.get("type") == "string":
            return entry, "\n".join(texts)
        return entry, None

    class Executor(AgentExecutor):
        """Runs a task's entry through the runner and reports it on the task."""

        async def execute(self, context: Any, event_queue: Any) -> None:
            caller = _owner(context.call_context)
            task_id, context_id = context.task_id, context.context_id
            updater = TaskUpdater(event_queue, task_id, context_id)
            message = context.message
            if context.current_task is None:
                entry, raw = entry_and_input(message)
                try:
                    runner.validate(entry.id, raw)
                except RunnerError as exc:
                    raise InvalidParamsError(message=f"{exc.code}: {exc.message}") from None
                state = TaskState.TASK_STATE_SUBMITTED
                await event_queue.enqueue_event(
                    new_task(task_id, context_id, state, history=[message])
                )
                view = await runner.start(entry.id, raw, key=task_id, caller=caller)
                since = 0
            else:
                waiting = runner.find(task_id, caller=caller)
                if waiting is None or waiting.status != "waiting":
                    raise InvalidParamsError(
                        message=f"{SERVE_CONFLICT}: task {task_id!r} waits for no decision"
                    )
                since = waiting.events
                data = get_data_parts(list(message.parts)) if message is not None else []
                decided = decisions_of(data[0] if data else None)
                everyone = decided.get("*")
                for pending in waiting.pending:
                    approve, reason = (
                        decided.get(pending.digest)
                        or decided.get(pending.call_id)
                        or everyone
                        or (False, None)
                    )
                    await runner.answer(
                        waiting.run_id,
                        pending.call_id,
                        digest=pending.digest,
                        approve=approve,
                        reason=reason,
                        caller=caller,
                    )
                view = runner.get(waiting.run_id, caller=caller)
            await updater.start_work()
            async for event in runner.events(view.run_id, since=since):
                text = _working_text(event)
                if text is not None:
                    await updater.update_status(
                        TaskState.TASK_STATE_WORKING, agent_message(updater, text)
                    )
            await self._settle(updater, runner.get(view.run_id, caller=caller))

        async def _settle(self, updater: TaskUpdater, view: RunView) -> None:
            if view.status == "completed":
                await updater.add_artifact([new_data_part(view.result)], name="result")
                await updater.complete()
            elif view.status == "cancelled":
                await updater.cancel()
            else:
                text, data = stop_message(view)
                message = agent_message(updater, text, data)
                if view.status == "waiting":
                    await updater.requires_input(message)
                else:
                    await updater.failed(message)

        async def cancel(self, context: Any, event_queue: Any) -> None:
            caller = _owner(context.call_context)
            view = runner.find(context.task_id, caller=caller)
            if view is not None:
                await runner.cancel(view.run_id, caller=caller)
            updater = TaskUpdater(event_queue, context.task_id, context.context_id)
            await updater.cancel()

    return Executor()


def stop_message(view: RunView) -> tuple[str, dict[str, Any]]:
    """The text and data of the status message of a task whose run waits for approvals (the
    pending calls) or failed (the error)."""
    if view.status == "waiting":
        pending = [
            {"call_id": p.call_id, "tool": p.tool, "digest": p.digest, "input": p.input}
            for p in view.pending
        ]
        lines = [
            f"call {p.call_id!r} to tool {p.tool!r} needs approval (digest {p.digest})"
            for p in view.pending
        ]
        text = "; ".join(lines) + (
            '. Reply on this task with a data part {"approve": true|false, '
            '"reason": "..."} or {"decisions": [{"digest", "approve", "reason"}]}.'
        )
        return text, {"pending": pending}
    error = view.error or {"code": RUN_FAILED, "message": "failed"}
    return f"{error['code']}: {error['message']}", {"error": dict(error)}


def settled_task(task: Any, view: RunView) -> Any:
    """A copy of ``task`` (the SDK's model) brought to where its stopped run is, for a task no
    executor followed to the end (its server stopped in between)."""
    import uuid

    from a2a.helpers import new_data_part, new_text_part
    from a2a.types import Artifact, Message, Role, Task, TaskState

    states = {
        "completed": TaskState.TASK_STATE_COMPLETED,
        "cancelled": TaskState.TASK_STATE_CANCELED,
        "waiting": TaskState.TASK_STATE_INPUT_REQUIRED,
        "failed": TaskState.TASK_STATE_FAILED,
    }
    settled = Task()
    settled.CopyFrom(task)
    settled.status.Clear()
    settled.status.state = states[view.status]
    settled.status.timestamp.GetCurrentTime()
    if view.status == "completed":
        artifact = Artifact(artifact_id=str(uuid.uuid4()), name="result")
        artifact.parts.append(new_data_part(view.result))
        settled.artifacts.append(artifact)
    elif view.status in ("waiting", "failed"):
        text, data = stop_message(view)
        message = Message(
            message_id=str(uuid.uuid4()),
            role=Role.ROLE_AGENT,
            task_id=task.id,
            context_id=task.context_id,
        )
        message.parts.extend([new_text_part(text), new_data_part(data)])
        settled.status.message.CopyFrom(message)
    return settled


def _working_text(event: RunEvent) -> str | None:
    """A short working-status line for the events a client may want to follow."""
    if event.kind == "call":
        return f"turn {event.turn}: call {event.call_id!r} to tool {event.tool!r}"
    if event.kind == "state":
        return f"turn {event.turn}: state committed"
    return None


def a2a_routes(
    runner: ProjectRunner,
    *,
    base_url: str,
    caller_of: CallerOf | None = bearer_identity,
    rpc_path: str = "/a2a",
    task_store: TaskStore | None = None,
) -> list[BaseRoute]:
    """The agent card route and the JSON-RPC route over ``runner`` (see the module docstring).
    Authentication is the mounting app's middleware (the card needs no token). ``task_store``
    keeps the SDK's tasks (default: in memory, for the life of the process)."""
    from a2a.auth.user import User
    from a2a.server.request_handlers import DefaultRequestHandler
    from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
    from a2a.server.routes.common import DefaultServerCallContextBuilder
    from a2a.server.tasks import InMemoryTaskStore
    from starlette.routing import Route

    class CallerUser(User):
        def __init__(self, name: Caller) -> None:
            self._name = name or ""

        @property
        def is_authenticated(self) -> bool:
            return bool(self._name)

        @property
        def user_name(self) -> str:
            return self._name

    class Builder(DefaultServerCallContextBuilder):
        def build_user(self, request: Request) -> User:
            return CallerUser(caller_of(request) if caller_of is not None else None)

    card = agent_card(runner.info, base_url, rpc_path=rpc_path)
    handler = DefaultRequestHandler(
        agent_executor=_executor(runner),
        task_store=task_store if task_store is not None else InMemoryTaskStore(),
        agent_card=card,
    )
    (rpc,) = create_jsonrpc_routes(handler, rpc_path, context_builder=Builder())
    assert isinstance(rpc, Route)
    waiting_rule = Route(rpc_path, returns_at_once(rpc.endpoint), methods=["POST"])
    return [*create_agent_card_routes(card), waiting_rule]
