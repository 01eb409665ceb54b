"""``limits.on_limit``: ``fail`` (the default) fails an exhausted run; ``finish`` asks decide once
more with ``ctx.final=True`` and completes with its finish (DESIGN §12)."""

from __future__ import annotations

from typing import Any

import pytest

from tubeless import Limits, Pipeline, define_agent, define_tool, pipeline_tool
from tubeless.errors import (
    AGENT_INVALID_DECISION,
    AGENT_INVALID_DEFINITION,
    AGENT_LIMIT_REACHED,
    AgentDefinitionError,
)
from tubeless.frozen import thaw
from tubeless.testing import call, capture_trace, continue_with, finish


class Seen:
    """A decide that plays ``decisions`` in order and keeps what each ``ctx`` said."""

    def __init__(self, *decisions: Any) -> None:
        self.decisions = list(decisions)
        self.asked: list[dict[str, Any]] = []

    def __call__(self, state: Any, ctx: Any) -> Any:
        self.asked.append({"turn": ctx.turn, "final": ctx.final, "remaining": thaw(ctx.remaining)})
        return self.decisions.pop(0)


def _echo(started: list[str]) -> Any:
    async def echo(value: str, ctx: Any) -> str:
        started.append(value)
        return value

    return define_tool(description="Echo text.", input_schema=str, output_schema=str, run=echo)


def _agent(decide: Any, limits: Any, started: list[str], agent_id: str = "bounded") -> Pipeline:
    return define_agent(
        id=agent_id,
        input_schema=dict[str, Any],
        result_schema=str,
        initial_state=lambda validated: {},
        decide=decide,
        tools={"echo": _echo(started)},
        limits=limits,
    )


def _limit_reached(records: list[dict[str, Any]]) -> list[str]:
    attributes = [
        r["payload"].get("attributes", {}) for r in records if r["name"] == "step.attempted"
    ]
    return [a["agent.limitReached"] for a in attributes if "agent.limitReached" in a]


async def test_finish_on_max_turns_asks_a_final_decision_and_completes_with_it() -> None:
    started: list[str] = []
    decide = Seen(continue_with(call("echo", "a")), continue_with(call("echo", "b")), finish("ok"))
    agent = _agent(decide, {"max_turns": 2, "on_limit": "finish"}, started)

    with capture_trace() as trace:
        run = await agent.run({}, trace=trace)

    assert (run.status, run.value) == ("completed", "ok")
    assert started == ["a"]  # the refused batch never started
    assert decide.asked == [
        {"turn": 1, "final": False, "remaining": {"turns": 1, "decisions": 99, "calls": 100}},
        {"turn": 2, "final": False, "remaining": {"turns": 0, "decisions": 98, "calls": 99}},
        {"turn": 2, "final": True, "remaining": {"turns": 0, "decisions": 98, "calls": 99}},
    ]
    assert _limit_reached(trace.records) == ["max_turns"]


async def test_finish_on_max_calls_shows_what_is_left_of_the_call_budget() -> None:
    started: list[str] = []
    decide = Seen(
        continue_with(call("echo", "a")),
        continue_with(call("echo", "b"), call("echo", "c")),
        finish("partial"),
    )
    agent = _agent(decide, Limits(max_calls=2, on_limit="finish"), started)

    with capture_trace() as trace:
        run = await agent.run({}, trace=trace)

    assert (run.status, run.value) == ("completed", "partial")
    assert started == ["a"]
    assert decide.asked[-1] == {
        "turn": 2,
        "final": True,
        "remaining": {"turns": 18, "decisions": 98, "calls": 1},
    }
    assert _limit_reached(trace.records) == ["max_calls"]


async def test_finish_on_max_decisions_asks_one_uncharged_final_decision() -> None:
    started: list[str] = []
    decide = Seen(continue_with(call("echo", "a")), finish("last"))
    agent = _agent(decide, {"max_decisions": 1, "on_limit": "finish"}, started)

    with capture_trace() as trace:
        run = await agent.run({}, trace=trace)

    assert (run.status, run.value) == ("completed", "last")
    assert decide.asked[-1] == {
        "turn": 2,
        "final": True,
        "remaining": {"turns": 18, "decisions": 0, "calls": 99},
    }
    assert _limit_reached(trace.records) == ["max_decisions"]


async def test_a_final_decision_that_continues_fails_with_an_invalid_decision() -> None:
    started: list[str] = []
    decide = Seen(continue_with(call("echo", "a")), continue_with(call("echo", "b")))
    agent = _agent(decide, {"max_turns": 1, "on_limit": "finish"}, started)

    run = await agent.run({})

    assert run.status == "failed"
    assert run.errors[0].source_code == AGENT_INVALID_DECISION
    assert (
        "Agent max_turns=1 was reached: the final decision (ctx.final) must finish"
        in run.errors[0].format()
    )
    assert started == []


async def test_fail_is_the_default_and_an_exhausted_budget_fails_as_before() -> None:
    decide = Seen(continue_with(call("echo", "a")))
    run = await _agent(decide, {"max_turns": 1}, []).run({})

    assert run.errors[0].source_code == AGENT_LIMIT_REACHED
    assert [a["final"] for a in decide.asked] == [False]


async def test_on_limit_fail_keeps_the_identity_and_finish_changes_the_definition_id() -> None:
    plain = _agent(Seen(), {"max_turns": 3}, []).identity
    fail = _agent(Seen(), {"max_turns": 3, "on_limit": "fail"}, []).identity
    ending = _agent(Seen(), {"max_turns": 3, "on_limit": "finish"}, []).identity

    assert fail == plain
    assert ending.structural_fingerprint != plain.structural_fingerprint
    assert ending.definition_id != plain.definition_id
    # The policy sits in the definition's metadata; the agent entry keeps the original shape.
    snapshot = _agent(Seen(), {"max_turns": 3, "on_limit": "finish"}, []).definition_snapshot()
    assert snapshot["metadata"]["agentPolicies"] == {"agent": {"onLimit": "finish"}}
    assert "onLimit" not in str(snapshot["steps"])


def test_an_unknown_on_limit_is_a_definition_error() -> None:
    with pytest.raises(AgentDefinitionError) as caught:
        Limits(on_limit="stop")  # type: ignore[arg-type]
    assert caught.value.code == AGENT_INVALID_DEFINITION
    assert caught.value.message == (
        "Agent limit on_limit must be 'fail', 'finish' or 'wait', not 'stop'."
    )


async def test_a_subagent_finishes_when_its_parent_s_shared_call_budget_runs_out() -> None:
    started: list[str] = []
    child_decide = Seen(continue_with(call("echo", "c1"), call("echo", "c2")), finish("child"))
    child = _agent(child_decide, {"on_limit": "finish"}, started, agent_id="child")
    parent_decide = Seen(continue_with(call("ask", {}, "sub")), finish("parent"))
    parent = define_agent(
        id="parent",
        input_schema=dict[str, Any],
        result_schema=str,
        initial_state=lambda validated: {},
        decide=parent_decide,
        tools={"ask": pipeline_tool(child, description="Ask the child.")},
        limits={"max_calls": 2},
    )
    run = await parent.run({})

    assert (run.status, run.value) == ("completed", "parent")
    assert started == []  # the child's two calls would exceed the parent's one left
    assert child_decide.asked[-1]["final"] is True
    assert child_decide.asked[-1]["remaining"]["calls"] == 1
