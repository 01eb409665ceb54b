"""Checkpointed runs and approvals (DESIGN.md §11, §12) through the Python API: a run with no
answer stops ``waiting``, answers are committed before the call they allow, and an approval binds
to one digest across resumes."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from tubeless import define_agent, define_tool
from tubeless.agent import ApprovalWaiting
from tubeless.durable import MemoryCheckpoints
from tubeless.errors import APPROVAL_REQUIRED, PipelineExecutionError
from tubeless.pipeline import PipelineRun

KEY = "task-1"


def copy_of(store: MemoryCheckpoints) -> MemoryCheckpoints:
    """The store as a process killed now would leave it."""
    copy = MemoryCheckpoints()
    for stored in store.list():
        with copy.acquire(stored.key) as lease:
            lease.write(stored.document)
    return copy


def document(store: MemoryCheckpoints) -> dict[str, Any]:
    with store.acquire(KEY) as lease:
        text = lease.read()
    assert text is not None
    loaded: dict[str, Any] = json.loads(text)
    return loaded


def rewrite(store: MemoryCheckpoints, change: Any) -> None:
    saved = document(store)
    change(saved)
    with store.acquire(KEY) as lease:
        lease.write(json.dumps(saved, sort_keys=True, separators=(",", ":")))


def approve_saved(store: MemoryCheckpoints, approved: bool = True) -> None:
    """What ``tubeless approve`` records: the pending request's exact digest."""
    from tubeless.durable._decide import record_decision

    with store.acquire(KEY) as lease:
        text = lease.read()
        assert text is not None
        lease.write(record_decision(text, KEY, "go", approved=approved, reason=None))


class World:
    def __init__(self) -> None:
        self.ran: list[tuple[str, Any]] = []
        self.inside: MemoryCheckpoints | None = None
        self.store = MemoryCheckpoints()


def make_agent(world: World) -> Any:
    def draft(text: str, ctx: Any) -> str:
        world.ran.append(("draft", text))
        return text.upper()

    def launch(text: str, ctx: Any) -> str:
        world.ran.append(("launch", text))
        world.inside = copy_of(world.store)
        return f"launched {text}"

    def decide(state: Any, ctx: Any) -> Any:
        if state["seen"] is not None:
            return {"kind": "finish", "result": state["seen"]}
        return {
            "kind": "continue",
            "calls": [
                {"id": "d1", "tool": "draft", "input": "x"},
                {"id": "go", "tool": "launch", "input": "rocket"},
            ],
        }

    def reduce(state: Any, outcomes: Any) -> Any:
        return {"seen": [o["value"] if o["ok"] else o["error"]["code"] for o in outcomes]}

    text: Any = str
    return define_agent(
        id="gate",
        input_schema=str,
        result_schema=list,
        initial_state=lambda q: {"seen": None},
        decide=decide,
        reduce=reduce,
        tools={
            "draft": define_tool(
                description="Draft.", input_schema=text, output_schema=text, run=draft
            ),
            "launch": define_tool(
                description="Launch.",
                input_schema=text,
                output_schema=text,
                run=launch,
                approval="always",
            ),
        },
    )


def run(agent: Any, store: MemoryCheckpoints, **kwargs: Any) -> PipelineRun:
    return asyncio.run(agent.run("q", checkpoints=store, checkpoint_key=KEY, **kwargs))


def test_a_run_with_no_answer_waits_and_raises_a_clear_waiting_error() -> None:
    world = World()
    agent = make_agent(world)

    result = run(agent, world.store)
    with pytest.raises(PipelineExecutionError) as raised:
        asyncio.run(agent.run_or_raise("q", checkpoints=world.store, checkpoint_key=KEY))

    assert result.status == "failed" and result.errors[0].source_code == APPROVAL_REQUIRED
    waiting = raised.value.__cause__
    assert isinstance(waiting, ApprovalWaiting)
    assert waiting.code == APPROVAL_REQUIRED and waiting.key == KEY
    assert [(r["route"], r["call_id"], r["tool"]) for r in waiting.pending] == [
        ("gate", "go", "launch")
    ]
    assert world.ran == []  # nothing of the batch ran, twice
    assert document(world.store)["status"] == "waiting"


def test_an_approver_s_answer_is_committed_before_the_call_runs() -> None:
    world = World()
    at_prompt: list[MemoryCheckpoints] = []

    def approver(request: Any) -> bool:
        at_prompt.append(copy_of(world.store))  # a crash while the person reads
        return True

    result = run(make_agent(world), world.store, approver=approver)

    assert result.status == "completed" and result.value == ["X", "launched rocket"]
    [crashed] = at_prompt
    saved = document(crashed)
    assert saved["status"] == "waiting"
    assert [r["call_id"] for r in saved["approvals"]["pending"]] == ["go"]
    assert world.inside is not None
    inside = document(world.inside)  # a crash inside the approved call
    assert inside["approvals"]["pending"] == []
    assert [(d["call_id"], d["approved"]) for d in inside["approvals"]["decisions"]] == [
        ("go", True)
    ]


def test_a_pending_request_survives_a_crash_at_the_prompt_and_resumes_once_approved() -> None:
    world = World()
    crashed: list[MemoryCheckpoints] = []

    def approver(request: Any) -> bool:
        crashed.append(copy_of(world.store))  # what a kill -9 at the prompt leaves
        return False

    run(make_agent(world), world.store, approver=approver)
    store = crashed[0]
    again = World()
    assert run(make_agent(again), store).errors[0].source_code == APPROVAL_REQUIRED
    approve_saved(store)
    resumed = run(make_agent(again), store)

    assert resumed.status == "completed" and resumed.value == ["X", "launched rocket"]
    assert again.ran.count(("launch", "rocket")) == 1


def test_a_resumed_call_with_other_arguments_waits_again_and_never_runs_under_old_one() -> None:
    world = World()
    agent = make_agent(world)
    run(agent, world.store)
    old = document(world.store)["approvals"]["pending"][0]["digest"]
    approve_saved(world.store)

    def other_arguments(saved: dict[str, Any]) -> None:
        saved["agents"]["gate"]["decision"]["calls"][1]["input"] = "other"

    rewrite(world.store, other_arguments)
    result = run(agent, world.store)

    assert result.errors[0].source_code == APPROVAL_REQUIRED
    assert world.ran == []
    [pending] = document(world.store)["approvals"]["pending"]
    assert pending["input"] == "other" and pending["digest"] != old
    assert [d["digest"] for d in document(world.store)["approvals"]["decisions"]] == [old]


def test_denied_from_the_checkpoint_is_an_outcome_in_decision_order() -> None:
    world = World()
    agent = make_agent(world)
    run(agent, world.store)
    approve_saved(world.store, approved=False)

    result = run(agent, world.store)

    assert result.value == ["X", "TUBELESS_TOOL_DENIED"]
    assert world.ran == [("draft", "x")]


def test_a_child_agent_waiting_stops_its_parent_and_both_resume_once_approved() -> None:
    """The request names the child's route; no agent of the tree is saved as failed."""
    from tubeless import pipeline_tool

    world = World()
    child = make_agent(world)

    def decide(state: Any, ctx: Any) -> Any:
        if state is None:
            return {"kind": "continue", "calls": [{"id": "sub", "tool": "ask", "input": "q"}]}
        return {"kind": "finish", "result": state}

    parent = define_agent(
        id="boss",
        input_schema=str,
        result_schema=list,
        initial_state=lambda q: None,
        decide=decide,
        reduce=lambda state, outcomes: outcomes[0]["value"],
        tools={"ask": pipeline_tool(child, description="Ask the child.")},
    )

    waiting = run(parent, world.store)
    saved = document(world.store)
    [request] = saved["approvals"]["pending"]
    assert waiting.errors[0].source_code == APPROVAL_REQUIRED
    assert (saved["status"], request["route"], request["key"]) == (
        "waiting",
        "boss/1/sub/gate",
        KEY,
    )
    assert {route: e["phase"] for route, e in saved["agents"].items()} == {
        "boss": "calls",
        "boss/1/sub/gate": "calls",
    }
    approve_saved(world.store)
    resumed = run(parent, world.store)

    assert resumed.status == "completed" and resumed.value == ["X", "launched rocket"]
    assert world.ran == [("draft", "x"), ("launch", "rocket")]


def test_cancelling_while_the_approver_waits_keeps_the_request_pending() -> None:
    """No gated call runs, and the request stays pending in the checkpoint."""
    from tubeless.pipeline import CancelToken

    world = World()
    token = CancelToken()

    async def approver(request: Any) -> bool:
        token.cancel("stop")
        await asyncio.Event().wait()  # a person who never answers
        return True

    result = run(make_agent(world), world.store, approver=approver, signal=token)

    assert result.status == "cancelled"
    assert ("launch", "rocket") not in world.ran
    saved = document(world.store)
    assert saved["status"] == "waiting"
    assert [r["call_id"] for r in saved["approvals"]["pending"]] == ["go"]
    assert saved["approvals"]["decisions"] == []


def test_two_invocations_of_one_agent_each_need_their_own_approval() -> None:
    """A pipeline that runs agent ``gate`` twice: the second invocation is ``gate#2`` in the
    checkpoint, in its approval request and in its decision; the first one's approval never
    answers for it."""
    from tubeless import define_pipeline, from_pipeline

    world = World()
    agent = make_agent(world)
    pipeline = define_pipeline(
        id="twice",
        options_schema=str,
        steps=[
            from_pipeline("first", agent),
            from_pipeline("second", agent, depends_on=["first"]),
        ],
        finalize="second",
    )
    first = run(pipeline, world.store)
    assert first.errors[0].source_code == APPROVAL_REQUIRED
    [request] = document(world.store)["approvals"]["pending"]
    assert request["route"] == "gate"
    approve_saved(world.store)

    second = run(pipeline, world.store)

    assert second.errors[0].source_code == APPROVAL_REQUIRED
    saved = document(world.store)
    [request] = saved["approvals"]["pending"]
    assert (saved["status"], request["route"], request["call_id"]) == ("waiting", "gate#2", "go")
    assert sorted(saved["agents"]) == ["gate", "gate#2"]
    assert world.ran.count(("launch", "rocket")) == 1  # the second launch waits for its own
    approve_saved(world.store)

    third = run(pipeline, world.store)

    assert third.status == "completed" and third.value == ["X", "launched rocket"]
    assert world.ran.count(("launch", "rocket")) == 2
    decisions = document(world.store)["approvals"]["decisions"]
    assert [d["route"] for d in decisions] == ["gate", "gate#2"]
