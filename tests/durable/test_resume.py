"""Checkpointed agents resume from their last commit (DESIGN.md §11), in one process.

A crash is modelled exactly: inside a tool (or ``decide``) the test copies the store as it is
at that moment (what a ``kill -9`` there would leave) and later resumes from the copy.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import pytest

from tubeless import ToolError, define_agent, define_tool, pipeline_tool
from tubeless.durable import MemoryCheckpoints
from tubeless.errors import CheckpointError
from tubeless.pipeline import PipelineRun
from tubeless.testing import capture_trace

KEY = "task-1"


def copy_of(store: MemoryCheckpoints) -> MemoryCheckpoints:
    """The store as a process killed now would leave it."""
    copy = MemoryCheckpoints()
    for stored in store.list():
        with copy.acquire(stored.key) as lease:
            lease.write(stored.document)
    return copy


class World:
    """Side effects of tools, and the moment to 'crash' at."""

    def __init__(self) -> None:
        self.ran: list[tuple[str, Any, str]] = []
        self.store = MemoryCheckpoints()
        self.crashed: MemoryCheckpoints | None = None
        self.crash_in: str | None = None
        self.decisions = 0

    def effect(self, name: str, value: Any, ctx: Any) -> None:
        self.ran.append((name, value, ctx.execution["idempotency_key"]))
        if self.crash_in == name and self.crashed is None:
            self.crashed = copy_of(self.store)


def make_agent(
    world: World,
    *,
    replay: str = "unsafe",
    reconcile: Callable[..., Any] | None = None,
    calls: int = 1,
    version: str = "v1",
    limits: dict[str, int] | None = None,
    schema: Any = str,
    extra_tool: bool = False,
    crash_in_decide: int | None = None,
    description: str = "Charge.",
) -> Any:
    def charge(text: str, ctx: Any) -> str:
        world.effect("charge", text, ctx)
        return text.upper()

    def decide(state: Any, ctx: Any) -> Any:
        world.decisions += 1
        if crash_in_decide == ctx.turn and world.crashed is None:
            world.crashed = copy_of(world.store)
        if not state["seen"]:
            return {
                "kind": "continue",
                "calls": [
                    {"id": f"c{i}", "tool": "charge", "input": f"{state['q']}{i}"}
                    for i in range(calls)
                ],
            }
        return {"kind": "finish", "result": " ".join(state["seen"])}

    def reduce(state: Any, outcomes: Any) -> Any:
        seen = [o["value"] if o["ok"] else o["error"]["code"] for o in outcomes]
        return {"q": state["q"], "seen": seen}

    tools = {
        "charge": define_tool(
            description=description,
            input_schema=schema,
            output_schema=str,
            run=charge,
            replay=replay,  # type: ignore[arg-type]
            reconcile=reconcile,
        )
    }
    if extra_tool:
        tools["other"] = tools["charge"]
    return define_agent(
        id="payer",
        implementation_version=version,
        input_schema=str,
        result_schema=str,
        initial_state=lambda q: {"q": q, "seen": []},
        decide=decide,
        reduce=reduce,
        tools=tools,
        limits=limits or {"max_turns": 4, "max_decisions": 4},
    )


def run(agent: Any, store: Any, value: Any = "a", **kwargs: Any) -> PipelineRun:
    return asyncio.run(agent.run(value, checkpoints=store, checkpoint_key=KEY, **kwargs))


def source_code(result: PipelineRun) -> str | None:
    return result.errors[0].source_code if result.errors else None


def test_a_completed_key_returns_its_saved_result_and_runs_nothing() -> None:
    world = World()
    agent = make_agent(world)
    assert run(agent, world.store).value == "A0"
    before = (list(world.ran), world.decisions)
    again = run(agent, world.store)
    assert (again.status, again.value) == ("completed", "A0")
    assert (world.ran, world.decisions) == before


def test_the_default_key_is_the_entry_id_and_an_input_digest() -> None:
    world = World()
    agent = make_agent(world)
    asyncio.run(agent.run("a", checkpoints=world.store))
    [stored] = world.store.list()
    assert stored.key.startswith("payer:") and len(stored.key) == len("payer:") + 16


def test_an_unsafe_call_cut_short_gives_the_reducer_an_interrupted_outcome() -> None:
    """The call ran once; on resume the reducer sees TUBELESS_AGENT_CALL_INTERRUPTED."""
    world = World()
    world.crash_in = "charge"
    agent = make_agent(world)
    run(agent, world.store)
    assert world.crashed is not None
    resumed = run(agent, world.crashed)
    assert (resumed.status, resumed.value) == ("completed", "TUBELESS_AGENT_CALL_INTERRUPTED")
    assert [name for name, _, _ in world.ran] == ["charge"]


def test_reconcile_decides_an_unsafe_call_cut_short() -> None:
    """A value is an ok outcome, a ToolError a failed one; both see the call's key."""
    keys: list[str] = []

    def found(text: str, ctx: Any) -> str:
        keys.append(ctx.execution["idempotency_key"])
        return "RECONCILED"

    def lost(text: str, ctx: Any) -> str:
        raise ToolError("NOT_CHARGED", "no such charge")

    for reconcile, expected in ((found, "RECONCILED"), (lost, "NOT_CHARGED")):
        world = World()
        world.crash_in = "charge"
        agent = make_agent(world, reconcile=reconcile)
        run(agent, world.store)
        assert world.crashed is not None
        assert run(agent, world.crashed).value == expected
        assert len(world.ran) == 1
    assert keys == [f"{KEY}/payer/1/c0"]


def test_a_safe_call_cut_short_runs_again_with_the_same_idempotency_key() -> None:
    world = World()
    world.crash_in = "charge"
    agent = make_agent(world, replay="safe")
    run(agent, world.store)
    assert world.crashed is not None
    assert run(agent, world.crashed).value == "A0"
    assert [key for _, _, key in world.ran] == [f"{KEY}/payer/1/c0"] * 2


def test_completed_calls_of_a_batch_keep_their_outcomes() -> None:
    """Crash in the third call: the first two are not run again, the third is interrupted."""
    world = World()
    agent = make_agent(world, calls=3)

    def third(name: str, value: Any, ctx: Any) -> None:
        world.ran.append((name, value, ctx.execution["idempotency_key"]))
        if value == "a2" and world.crashed is None:
            world.crashed = copy_of(world.store)

    world.effect = third  # type: ignore[method-assign]
    run(agent, world.store)
    assert world.crashed is not None
    resumed = run(agent, world.crashed)
    assert resumed.value == "A0 A1 TUBELESS_AGENT_CALL_INTERRUPTED"
    assert [value for _, value, _ in world.ran] == ["a0", "a1", "a2"]


def test_budgets_are_restored_never_refilled() -> None:
    """The decision reserved before a crash stays spent: the resumed turn asks again."""
    world = World()
    agent = make_agent(world, crash_in_decide=2, limits={"max_turns": 4, "max_decisions": 2})
    assert run(agent, world.store).status == "completed"
    assert world.crashed is not None
    resumed = run(agent, world.crashed)
    assert resumed.status == "failed"
    assert source_code(resumed) == "TUBELESS_AGENT_LIMIT_REACHED"
    assert "max_decisions=2 exceeded (consumed=2, requested=1" in resumed.errors[0].message


def test_a_failed_key_returns_its_saved_failure_until_restarted() -> None:
    world = World()
    agent = make_agent(world, calls=2, limits={"max_turns": 4, "max_calls": 1})
    first = run(agent, world.store)
    assert source_code(first) == "TUBELESS_AGENT_LIMIT_REACHED"
    decisions = world.decisions
    again = run(agent, world.store)
    assert source_code(again) == "TUBELESS_AGENT_LIMIT_REACHED"
    assert "saved by an earlier run of checkpoint 'task-1'" in again.errors[0].message
    assert world.decisions == decisions
    run(agent, world.store, restart=True)
    assert world.decisions == decisions + 1


RESTART = "; start it over with --restart (restart=True in Python), or use another key"


@pytest.mark.parametrize(
    ("change", "said"),
    [
        pytest.param({"version": "v2"}, "implementation_version: 'v1' -> 'v2'", id="version"),
        pytest.param(
            {"limits": {"max_turns": 5, "max_decisions": 4}},
            "limits.max_turns: 4 -> 5",
            id="limits",
        ),
        pytest.param({"schema": int}, "tool 'charge': input schema changed", id="tool-schema"),
        pytest.param({"extra_tool": True}, "tool 'other' added", id="tools"),
        pytest.param(
            {"description": "Charge the card."},
            "tool 'charge': description changed",
            id="tool-description",
        ),
        pytest.param(
            {"version": "v2", "limits": {"max_turns": 4, "max_decisions": 5}},
            "implementation_version: 'v1' -> 'v2', limits.max_decisions: 4 -> 5",
            id="two-changes",
        ),
    ],
)
def test_a_changed_definition_is_refused_naming_what_changed(
    change: dict[str, Any], said: str
) -> None:
    world = World()
    world.crash_in = "charge"
    run(make_agent(world), world.store)
    assert world.crashed is not None
    saved = [s.document for s in world.crashed.list()]
    refused = run(make_agent(world, **change), world.crashed)
    assert source_code(refused) == "TUBELESS_AGENT_CHECKPOINT_MISMATCH"
    assert refused.errors[0].message.endswith(
        f"Checkpoint 'task-1' was saved by a different definition of agent 'payer': {said}{RESTART}"
    )
    assert [s.document for s in world.crashed.list()] == saved


def test_a_checkpoint_saved_without_its_parts_still_names_the_restart_flag() -> None:
    """A document written before definitions kept their parts: the definition ids, and the
    real flag."""
    world = World()
    world.crash_in = "charge"
    run(make_agent(world), world.store)
    assert world.crashed is not None
    [stored] = world.crashed.list()
    document = json.loads(stored.document)
    before = document["agents"]["payer"]["definition"]
    old_id = before["definitionId"]
    del before["parts"]
    with world.crashed.acquire(KEY) as lease:
        lease.write(json.dumps(document, sort_keys=True, separators=(",", ":")))
    changed = make_agent(world, description="Charge the card.")
    refused = run(changed, world.crashed)
    assert source_code(refused) == "TUBELESS_AGENT_CHECKPOINT_MISMATCH"
    new_id = changed.identity.definition_id
    assert refused.errors[0].message.endswith(
        f"agent 'payer': the definition changed ({old_id} -> {new_id}){RESTART}"
    )


def test_another_input_under_the_same_key_is_a_mismatch() -> None:
    world = World()
    agent = make_agent(world)
    run(agent, world.store, "a")
    refused = run(agent, world.store, "b")
    assert source_code(refused) == "TUBELESS_AGENT_CHECKPOINT_MISMATCH"
    assert "the input changed" in refused.errors[0].message


@pytest.mark.parametrize(
    "document",
    [
        "{not json",
        '{"version": 99}',
        "[]",
        '{"version": 1, "entry": "payer", "agents": {"payer": 1}}',
    ],
)
def test_a_corrupted_document_is_a_clear_error_and_is_left_alone(document: str) -> None:
    world = World()
    with world.store.acquire(KEY) as lease:
        lease.write(document)
    refused = run(make_agent(world), world.store)
    assert source_code(refused) == "TUBELESS_CHECKPOINT_INVALID"
    assert [s.document for s in world.store.list()] == [document]
    assert world.ran == [] and world.decisions == 0


def test_an_invalid_key_is_refused_before_anything_runs() -> None:
    world = World()
    with pytest.raises(CheckpointError) as caught:
        asyncio.run(make_agent(world).run("a", checkpoints=world.store, checkpoint_key=" "))
    assert caught.value.code == "TUBELESS_AGENT_INVALID_CHECKPOINT_KEY"
    assert world.decisions == 0


class FailingWrites(MemoryCheckpoints):
    """Writes fail from the ``n``-th on (a full disk)."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.left = n

    def _write(self, lease: Any, document: str) -> None:
        self.left -= 1
        if self.left < 0:
            raise OSError("disk full")
        super()._write(lease, document)


def test_a_failed_write_stops_the_run_before_the_work_it_guards() -> None:
    """Write 1 is the decision reservation, write 2 the running intent: no call starts."""
    world = World()
    result = run(make_agent(world), FailingWrites(1))
    assert result.status == "failed"
    assert source_code(result) == "TUBELESS_CHECKPOINT_INVALID"
    assert "disk full" in result.errors[0].message
    assert world.ran == []


def test_without_checkpoints_the_idempotency_key_is_the_runs_own() -> None:
    world = World()
    result = asyncio.run(make_agent(world).run("a"))
    [(_, _, key)] = world.ran
    assert key.endswith("/1/c0") and key.startswith("payer:")
    assert result.value == "A0"


def test_a_child_agent_resumes_by_route_inside_its_parent() -> None:
    """Crash inside the child's tool: the child resumes, the parent reuses nothing else."""
    world = World()
    world.crash_in = "charge"
    child = make_agent(world)

    def decide(state: Any, ctx: Any) -> Any:
        if state is None:
            return {"kind": "continue", "calls": [{"id": "d", "tool": "delegate", "input": "x"}]}
        return {"kind": "finish", "result": f"child said {state}"}

    parent = define_agent(
        id="boss",
        implementation_version="v1",
        input_schema=str,
        result_schema=str,
        initial_state=lambda q: None,
        decide=decide,
        reduce=lambda state, outcomes: outcomes[0]["value"],
        tools={"delegate": pipeline_tool(child, description="Delegate.")},
    )
    run(parent, world.store)
    assert world.crashed is not None
    with capture_trace() as sink:
        resumed = asyncio.run(
            parent.run("a", checkpoints=world.crashed, checkpoint_key=KEY, trace=sink)
        )
    assert resumed.value == "child said TUBELESS_AGENT_CALL_INTERRUPTED"
    assert [key for _, _, key in world.ran] == [f"{KEY}/boss/1/d/payer/1/c0"]
    attributes = [r["payload"]["attributes"] for r in sink.records if r["name"] == "step.attempted"]
    resumes = [
        (a["agent.checkpointKey"], a["agent.resumedTurn"])
        for a in attributes
        if "agent.checkpointKey" in a
    ]
    assert resumes == [(KEY, 1), (KEY, 1)]


def test_each_stored_document_is_canonical_json() -> None:
    """What the fast encoder writes is sorted compact JSON that re-encodes to itself."""
    from tubeless.durable._session import encode

    world = World()
    world.crash_in = "charge"
    run(make_agent(world, calls=2, replay="safe"), world.store)
    for store in (world.store, world.crashed):
        assert store is not None
        for stored in store.list():
            assert encode(json.loads(stored.document)) == stored.document


def test_an_agent_inside_a_pipeline_resumes_by_its_id() -> None:
    """The pipeline's own steps run again; the agent goes on from its commit."""
    from tubeless import define_pipeline, from_pipeline, step

    world = World()
    world.crash_in = "charge"
    prepared: list[str] = []

    def prepare(inputs: Any, ctx: Any) -> str:
        prepared.append(ctx.options)
        return str(ctx.options)

    pipeline = define_pipeline(
        id="shop",
        options_schema=str,
        steps=[
            step("prepare", prepare),
            from_pipeline(
                "pay",
                make_agent(world, replay="safe"),
                depends_on=["prepare"],
                map_options=lambda inputs, ctx: inputs["prepare"],
            ),
        ],
        finalize="pay",
    )
    assert run(pipeline, world.store).value == "A0"
    assert world.crashed is not None
    assert [s.key for s in world.crashed.list()] == [KEY]
    assert run(pipeline, world.crashed).value == "A0"
    assert prepared == ["a", "a"]
    assert [key for _, _, key in world.ran] == [f"{KEY}/payer/1/c0"] * 2


def test_a_cancelled_run_stays_resumable() -> None:
    """Cancelled while a call runs: nothing is saved as failed; the resumed run finishes."""
    from tubeless import CancelToken

    token = CancelToken()
    world = World()

    def cancel(name: str, value: Any, ctx: Any) -> None:
        world.ran.append((name, value, ctx.execution["idempotency_key"]))
        token.cancel("stop")

    world.effect = cancel  # type: ignore[method-assign]
    agent = make_agent(world, replay="safe")
    stopped = asyncio.run(agent.run("a", checkpoints=world.store, checkpoint_key=KEY, signal=token))
    assert stopped.status == "cancelled"
    assert json.loads(world.store.list()[0].document)["status"] == "running"
    world.effect = World().effect  # type: ignore[method-assign]
    assert run(agent, world.store).value == "A0"


def test_a_dry_run_opens_no_storage() -> None:
    world = World()
    agent = make_agent(world)
    result = asyncio.run(agent.run("a", dry_run=True, checkpoints=world.store, checkpoint_key=KEY))
    assert result.dry_run and world.store.list() == []


def test_a_change_inside_a_child_agent_is_named_through_the_tool_that_runs_it() -> None:
    world = World()
    world.crash_in = "charge"

    def boss(child: Any) -> Any:
        def decide(state: Any, ctx: Any) -> Any:
            if state is None:
                return {"kind": "continue", "calls": [{"id": "sub", "tool": "ask", "input": "a"}]}
            return {"kind": "finish", "result": state}

        return define_agent(
            id="boss",
            input_schema=str,
            result_schema=str,
            initial_state=lambda q: None,
            decide=decide,
            reduce=lambda state, outcomes: outcomes[0]["value"],
            tools={"ask": pipeline_tool(child, description="Ask the payer.")},
        )

    run(boss(make_agent(world)), world.store)
    assert world.crashed is not None
    refused = run(boss(make_agent(world, description="Charge the card.")), world.crashed)
    assert source_code(refused) == "TUBELESS_AGENT_CHECKPOINT_MISMATCH"
    assert refused.errors[0].message.endswith(
        "agent 'boss': tool 'ask' ('payer'): tool 'charge': description changed" + RESTART
    )
