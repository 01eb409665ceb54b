"""The one fold of the trace stream (``tubeless.tracing.fold``): the run kinds it names for
every reader (and the OpenTelemetry exporter to come), the turn and call facts it keeps, and
records it survives that the projection used to raise on."""

from __future__ import annotations

import asyncio
import functools
import gc
from typing import Any

import pytest

from examples.agent_delegation import delegating_agent
from examples.scripted_agent import scripted_agent
from tubeless.testing import capture_trace
from tubeless.tracing import run_trees
from tubeless.tracing.fold import TraceFold

Records = list[dict[str, Any]]


@functools.cache
def _recorded(name: str) -> tuple[dict[str, Any], ...]:
    pipeline = {"scripted": scripted_agent, "delegation": delegating_agent}[name]

    async def record() -> Records:
        with capture_trace() as trace:
            await pipeline.run({"question": "red blue"}, trace=trace)
        return trace.records

    return tuple(asyncio.run(record()))


def _folded(records: Any, **options: Any) -> TraceFold:
    fold = TraceFold(**options)
    for record in records:
        fold.add(record)
    return fold


def test_every_run_has_a_kind_agent_turn_call_or_pipeline() -> None:
    """Delegation: the agent's turns, its calls (one of which runs an agent), the subagent's own
    turns and calls, and the summarize pipeline tool's call run."""
    fold = _folded(_recorded("delegation"))
    kinds = [(run.pipeline_id, run.kind) for run in fold.runs]

    assert kinds[:3] == [
        ("delegating-agent", "agent"),
        ("delegating-agent/turn", "turn"),
        ("scripted-agent", "call"),  # a pipeline tool running an agent is a call of the turn
    ]
    assert ("scripted-agent/turn", "turn") in kinds
    assert ("scripted-agent/tool/count", "call") in kinds
    assert {kind for _, kind in kinds} == {"agent", "turn", "call"}
    subagent = fold.runs[2]
    assert any(step.agent for step in subagent.steps.values())  # and still an agent underneath


def test_turn_facts_and_call_tools_are_the_same_live_and_stored() -> None:
    """The bounded root scope a reporter uses reads the same turns as the whole fold."""
    records = _recorded("scripted")
    whole, live = _folded(records), _folded(records, scope="root")

    assert live.root is not None and live.root.status == "completed"
    agent = live.root.steps["agent"]
    assert agent.agent and agent.turn_count == 2 and agent.turns is not None
    newest, first = agent.turns
    stored = [run for run in whole.runs if run.kind == "turn"]
    assert (
        [(t.index, t.decision, t.call_count, t.calls_admitted) for t in stored]
        == [
            (first.index, first.decision, first.call_count, first.calls_admitted),
            (newest.index, newest.decision, newest.call_count, newest.calls_admitted),
        ]
        == [(1, "continue", 3, 3), (2, "finish", 0, 3)]
    )
    assert [(c.call_id, c.tool, c.run is not None) for c in first.calls.values()] == [
        ("length", "count", True),
        ("word-0", "uppercase", True),
        ("word-1", "uppercase", True),
    ]
    # Completed turns and calls are forgotten by id: only the root is still looked up.
    assert [live.run(t.run_id) for t in (first, newest)] == [None, None]


@pytest.mark.parametrize(
    "completed",
    [
        pytest.param({"durationMs": 10**400, "payload": {"status": "completed"}}, id="huge-int"),
        pytest.param({"payload": {"status": ["completed"]}}, id="unhashable-status"),
    ],
)
def test_malformed_numbers_and_statuses_do_not_break_run_trees(completed: dict[str, Any]) -> None:
    """The projection used to raise OverflowError / TypeError on these; a reader must not."""
    started = {"name": "pipeline.started", "runId": "r", "pipelineId": "p", "payload": {}}
    [tree] = run_trees([started, {"name": "pipeline.completed", "runId": "r", **completed}])

    assert (tree.run_id, tree.duration_ms) == ("r", None)
    assert tree.status == ("completed" if completed.get("durationMs") else "failed")


def test_a_live_fold_frees_what_its_window_drops_without_the_cycle_collector() -> None:
    """Root scope keeps the root, 32 turns and the calls of two; with the cycle collector off,
    every other turn and call run is already gone (nothing it let go points back at it)."""
    from examples.text import count
    from tubeless import define_agent
    from tubeless.tracing.fold import MAX_TURNS
    from tubeless.tracing.runs import Run

    turns = 60
    agent = define_agent(
        id="lets-go",
        input_schema=dict,
        result_schema=str,
        initial_state=lambda validated: {},
        decide=lambda state, ctx: (
            {
                "kind": "continue",
                "calls": [{"id": f"c{i}", "tool": "count", "input": "ab"} for i in range(3)],
            }
            if ctx.turn < turns
            else {"kind": "finish", "result": "done"}
        ),
        reduce=lambda state, outcomes: state,
        tools={"count": count},
        limits={"max_turns": turns, "max_decisions": turns, "max_calls": 3 * turns},
    )

    async def record() -> Records:
        with capture_trace() as trace:
            await agent.run({}, trace=trace)
        return trace.records

    records = asyncio.run(record())
    gc.collect()
    gc.disable()
    try:
        fold = _folded(records, scope="root")
        alive = [o for o in gc.get_objects() if type(o) is Run and o.run_id.startswith("lets-go")]
    finally:
        gc.enable()
    assert fold.root is not None and fold.root.steps["agent"].turn_count == turns
    # The root, the window of turns, and the three calls of the last turn that had calls.
    assert len(alive) == 1 + MAX_TURNS + 3
