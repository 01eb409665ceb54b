"""Agent limits: turns, calls, decisions, depth and concurrency are hard, per-invocation bounds.

Seed "Failure, cancellation, and limits", DESIGN §3 (Limits, limit messages), UPSTREAM §4.5 and
§4.8. Concurrency is shown with counters and events, never with timing.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from typing import Any

import pydantic
import pytest

from tubeless import (
    Limits,
    Pipeline,
    PipelineExecutionError,
    define_agent,
    define_pipeline,
    define_tool,
    pipeline_tool,
    step,
)
from tubeless.agent import LimitReachedError
from tubeless.errors import AGENT_LIMIT_REACHED
from tubeless.pipeline import PipelineRun
from tubeless.testing import call, capture_trace, continue_with, finish, scripted

ROOT = "agent-root"


def _echo_tool(started: list[str]) -> Any:
    async def echo(value: str, ctx: Any) -> str:
        started.append(value)
        return value

    return define_tool(description="Echo text.", input_schema=str, output_schema=str, run=echo)


def _agent(decide: Any, *, tools: dict[str, Any], limits: Any, **extra: Any) -> Pipeline:
    fields: dict[str, Any] = {
        "id": "bounded",
        "input_schema": dict[str, Any],
        "result_schema": str,
        "initial_state": lambda validated: {},
        "decide": decide,
        "tools": tools,
        "limits": limits,
    }
    fields.update(extra)
    return define_agent(**fields)


def _chain(exc: BaseException | None) -> Iterator[BaseException]:
    """``exc``, its causes, and the errors of any run an exception in the chain carries."""
    seen: set[int] = set()
    pending = [exc]
    while pending:
        current = pending.pop(0)
        while current is not None and id(current) not in seen:
            seen.add(id(current))
            yield current
            inner = getattr(current, "run", None)
            if isinstance(inner, PipelineRun):
                pending.extend(error.exception for error in inner.errors)
            current = current.__cause__ or current.__context__


def _limit_error(run: PipelineRun) -> LimitReachedError:
    for error in run.errors:
        for exc in _chain(error.exception):
            if isinstance(exc, LimitReachedError):
                return exc
    raise AssertionError(f"no LimitReachedError in {[e.format() for e in run.errors]}")


def _limit_fields(error: LimitReachedError) -> dict[str, Any]:
    return {
        "code": error.code,
        "limit": error.limit,
        "bound": error.bound,
        "consumed": error.consumed,
        "requested": error.requested,
        "scope": error.scope,
        "message": error.message,
    }


def _expected(limit: str, bound: int, consumed: int, requested: int) -> dict[str, Any]:
    return {
        "code": AGENT_LIMIT_REACHED,
        "limit": limit,
        "bound": bound,
        "consumed": consumed,
        "requested": requested,
        "scope": ROOT,
        "message": (
            f"Agent {limit}={bound} exceeded "
            f"(consumed={consumed}, requested={requested}, scope={ROOT})"
        ),
    }


def _assert_limit_failure(run: PipelineRun, **expected: Any) -> None:
    assert run.status == "failed"
    assert run.errors[0].source_code == AGENT_LIMIT_REACHED
    assert _limit_fields(_limit_error(run)) == _expected(**expected)


# -- max_turns ------------------------------------------------------------------------------------


async def test_finishing_on_the_last_allowed_turn_succeeds() -> None:
    started: list[str] = []
    decide = scripted(continue_with(call("echo", "a")), finish("done"))
    agent = _agent(decide, tools={"echo": _echo_tool(started)}, limits={"max_turns": 2})

    assert await agent.run_or_raise({}) == "done"
    assert started == ["a"]


async def test_a_single_turn_agent_may_finish_at_once() -> None:
    agent = _agent(scripted(finish("done")), tools={}, limits=Limits(max_turns=1))
    assert await agent.run_or_raise({}) == "done"


@pytest.mark.parametrize(
    ("max_turns", "decisions", "started_before"),
    [
        pytest.param(1, [continue_with(call("echo", "t1"))], [], id="max_turns-1"),
        pytest.param(
            2,
            [continue_with(call("echo", "t1")), continue_with(call("echo", "t2"))],
            ["t1"],
            id="max_turns-2",
        ),
    ],
)
async def test_continuing_on_the_last_allowed_turn_fails_before_its_tools_start(
    max_turns: int, decisions: list[Any], started_before: list[str]
) -> None:
    started: list[str] = []
    decide = scripted(*decisions)
    agent = _agent(decide, tools={"echo": _echo_tool(started)}, limits={"max_turns": max_turns})

    run = await agent.run({}, run_id=ROOT)

    _assert_limit_failure(run, limit="max_turns", bound=max_turns, consumed=max_turns, requested=1)
    assert started == started_before
    decide.assert_done()


async def test_a_max_turns_error_says_how_many_calls_the_refused_decision_asked_for() -> None:
    decide = scripted(continue_with(call("echo", "a"), call("echo", "b"), call("echo", "c")))
    agent = _agent(decide, tools={"echo": _echo_tool([])}, limits={"max_turns": 1})

    run = await agent.run({}, run_id=ROOT)

    assert _limit_error(run).calls == 3


# -- max_calls ------------------------------------------------------------------------------------


async def test_a_batch_larger_than_the_call_budget_fails_before_any_handler_starts() -> None:
    started: list[str] = []
    decide = scripted(continue_with(*(call("echo", f"c{i}") for i in range(4))))
    agent = _agent(decide, tools={"echo": _echo_tool(started)}, limits={"max_calls": 3})

    run = await agent.run({}, run_id=ROOT)

    _assert_limit_failure(run, limit="max_calls", bound=3, consumed=0, requested=4)
    assert started == []


async def test_a_batch_larger_than_the_remaining_budget_fails_after_earlier_batches() -> None:
    started: list[str] = []
    decide = scripted(
        continue_with(call("echo", "a"), call("echo", "b")),
        continue_with(call("echo", "c"), call("echo", "d")),
    )
    agent = _agent(decide, tools={"echo": _echo_tool(started)}, limits={"max_calls": 3})

    run = await agent.run({}, run_id=ROOT)

    _assert_limit_failure(run, limit="max_calls", bound=3, consumed=2, requested=2)
    assert started == ["a", "b"]


async def test_batches_that_exactly_use_up_the_call_budget_are_admitted() -> None:
    started: list[str] = []
    decide = scripted(
        continue_with(call("echo", "a"), call("echo", "b")),
        continue_with(call("echo", "c")),
        finish("done"),
    )
    agent = _agent(decide, tools={"echo": _echo_tool(started)}, limits={"max_calls": 3})

    assert await agent.run_or_raise({}) == "done"
    assert started == ["a", "b", "c"]


async def test_call_budgets_belong_to_one_invocation() -> None:
    started: list[str] = []

    def decide(state: Any, ctx: Any) -> Any:
        if ctx.turn == 1:
            return continue_with(call("echo", "a"), call("echo", "b"), call("echo", "c"))
        return finish("done")

    agent = _agent(decide, tools={"echo": _echo_tool(started)}, limits={"max_calls": 3})

    assert await agent.run_or_raise({}) == "done"
    assert await agent.run_or_raise({}) == "done"
    assert started == ["a", "b", "c"] * 2


async def test_admitted_calls_are_charged_even_when_dispatch_stops_early() -> None:
    """A fatal first call stops dispatch; the whole batch was still admitted and charged."""
    started: list[str] = []

    async def explode(value: str, ctx: Any) -> str:
        started.append(value)
        raise RuntimeError("not a ToolError: fatal")

    tools = {
        "echo": _echo_tool(started),
        "explode": define_tool(
            description="Fail fatally.", input_schema=str, output_schema=str, run=explode
        ),
    }
    decide = scripted(continue_with(call("explode", "first"), call("echo", "second")))
    agent = _agent(decide, tools=tools, limits={"max_calls": 3, "max_concurrency": 1})

    with capture_trace() as trace:
        run = await agent.run({}, run_id=ROOT, trace=trace)

    assert run.status == "failed"
    assert started == ["first"]
    admissions = [
        record["payload"]["attributes"]
        for record in trace.records
        if record["name"] == "step.attempted"
        and record.get("stepId") == "calls"
        and "agent.callCount" in record["payload"]["attributes"]
    ]
    assert admissions == [
        {"agent.runId": ROOT, "agent.turn": 1, "agent.callsAdmitted": 2, "agent.callCount": 2}
    ]
    dispatched = [
        record["payload"]["attributes"]["agent.callId"]
        for record in trace.records
        if record["name"] == "step.attempted"
        and record.get("stepId") == "calls"
        and "agent.callId" in record["payload"]["attributes"]
    ]
    assert dispatched == ["explode-0"]  # one attribution per call actually dispatched
    tool_runs = [
        r
        for r in trace.records
        if r["name"] == "pipeline.started" and r["pipelineId"].startswith("bounded/tool/")
    ]
    assert len(tool_runs) == 1


async def test_max_calls_0_lets_an_agent_finish_at_once() -> None:
    agent = _agent(scripted(finish("done")), tools={}, limits={"max_calls": 0})
    assert await agent.run_or_raise({}) == "done"


async def test_max_calls_0_rejects_any_call() -> None:
    started: list[str] = []
    agent = _agent(
        scripted(continue_with(call("echo", "a"))),
        tools={"echo": _echo_tool(started)},
        limits={"max_calls": 0},
    )

    run = await agent.run({}, run_id=ROOT)

    _assert_limit_failure(run, limit="max_calls", bound=0, consumed=0, requested=1)
    assert started == []


# -- max_decisions ---------------------------------------------------------------------------------


async def test_max_decisions_bounds_the_decision_callbacks() -> None:
    started: list[str] = []
    decide = scripted(
        continue_with(call("echo", "a")),
        continue_with(call("echo", "b")),
        finish("never asked"),
    )
    agent = _agent(
        decide, tools={"echo": _echo_tool(started)}, limits={"max_decisions": 2, "max_turns": 5}
    )

    run = await agent.run({}, run_id=ROOT)

    _assert_limit_failure(run, limit="max_decisions", bound=2, consumed=2, requested=1)
    assert [turn for turn, _, _ in decide.seen] == [1, 2]
    assert started == ["a", "b"]


async def test_a_finishing_decision_counts_against_max_decisions() -> None:
    decide = scripted(continue_with(call("echo", "a")), finish("done"))
    agent = _agent(decide, tools={"echo": _echo_tool([])}, limits={"max_decisions": 2})
    assert await agent.run_or_raise({}) == "done"


# -- max_depth ------------------------------------------------------------------------------------


class ChildInput(pydantic.BaseModel):
    text: str


def _child(ran: list[Any]) -> Pipeline:
    def shout(inputs: dict[str, Any], ctx: Any) -> str:
        ran.append(ctx.options)
        return ctx.options.text.upper()

    return define_pipeline(
        id="shout", options_schema=ChildInput, result_schema=str, steps=[step("shout", shout)]
    )


async def test_max_depth_0_rejects_a_pipeline_tool_call_before_the_child_starts() -> None:
    ran: list[Any] = []
    started: list[str] = []
    tools = {
        "echo": _echo_tool(started),
        "shout": pipeline_tool(_child(ran), description="Shout the text."),
    }
    decide = scripted(continue_with(call("echo", "a"), call("shout", {"text": "b"})))
    agent = _agent(decide, tools=tools, limits={"max_depth": 0})

    run = await agent.run({}, run_id=ROOT)

    _assert_limit_failure(run, limit="max_depth", bound=0, consumed=0, requested=1)
    assert ran == []
    assert started == []


async def test_max_depth_0_still_runs_handler_tools() -> None:
    started: list[str] = []
    decide = scripted(continue_with(call("echo", "a")), finish("done"))
    agent = _agent(decide, tools={"echo": _echo_tool(started)}, limits={"max_depth": 0})

    assert await agent.run_or_raise({}) == "done"
    assert started == ["a"]


async def test_max_depth_1_allows_one_delegation_edge() -> None:
    ran: list[Any] = []

    def decide(state: Any, ctx: Any) -> Any:
        if ctx.turn == 1:
            return continue_with(call("shout", {"text": "hi"}))
        return finish(state["value"])

    agent = _agent(
        decide,
        tools={"shout": pipeline_tool(_child(ran), description="Shout the text.")},
        limits={"max_depth": 1},
        reduce=lambda state, outcomes: {"value": outcomes[0]["value"]},
    )

    assert await agent.run_or_raise({}) == "HI"
    assert ran == [ChildInput(text="hi")]


# -- the error ------------------------------------------------------------------------------------


async def test_limit_errors_surface_through_run_or_raise_with_their_source_code() -> None:
    agent = _agent(
        scripted(continue_with(call("echo", "a"), call("echo", "b"))),
        tools={"echo": _echo_tool([])},
        limits={"max_calls": 1},
    )

    with pytest.raises(PipelineExecutionError) as caught:
        await agent.run_or_raise({}, run_id=ROOT)

    assert caught.value.source_code == AGENT_LIMIT_REACHED
    found = [exc for exc in _chain(caught.value) if isinstance(exc, LimitReachedError)]
    assert [_limit_fields(exc) for exc in found[:1]] == [
        _expected(limit="max_calls", bound=1, consumed=0, requested=2)
    ]
    assert AGENT_LIMIT_REACHED in str(caught.value)


async def test_a_limit_error_is_never_a_recoverable_outcome() -> None:
    """Exhaustion fails the run; the reducer never sees it and no further decision is asked."""
    reduced: list[Any] = []
    decide = scripted(continue_with(call("echo", "a"), call("echo", "b")), finish("never"))
    agent = _agent(
        decide,
        tools={"echo": _echo_tool([])},
        limits={"max_calls": 1},
        reduce=lambda state, outcomes: reduced.append(outcomes) or state,
    )

    run = await agent.run({})

    assert run.status == "failed"
    assert run.value is None
    assert reduced == []
    assert decide.remaining == 1


# -- max_concurrency -------------------------------------------------------------------------------


class _Gauge:
    """Counts active handlers; ``overlap`` is set once two are active at the same time."""

    def __init__(self) -> None:
        self.active = 0
        self.peak = 0
        self.started: list[str] = []
        self.overlap = asyncio.Event()

    async def run(self, value: str, ctx: Any, *, wait_for_overlap: bool) -> str:
        self.active += 1
        self.peak = max(self.peak, self.active)
        self.started.append(value)
        try:
            if self.active >= 2:
                self.overlap.set()
            if wait_for_overlap:
                await asyncio.wait_for(self.overlap.wait(), timeout=60)  # hang guard only
            # Give the loop many chances to start more handlers than the limit allows.
            for _ in range(20):
                await asyncio.sleep(0)
            return value
        finally:
            self.active -= 1


@pytest.mark.parametrize(
    ("max_concurrency", "expected_peak"),
    [pytest.param(1, 1, id="concurrency-1"), pytest.param(2, 2, id="concurrency-2")],
)
async def test_max_concurrency_bounds_the_active_tool_handlers_of_a_batch(
    max_concurrency: int, expected_peak: int
) -> None:
    gauge = _Gauge()

    async def handler(value: str, ctx: Any) -> str:
        return await gauge.run(value, ctx, wait_for_overlap=max_concurrency > 1)

    tool = define_tool(description="Hold a slot.", input_schema=str, output_schema=str, run=handler)
    decide = scripted(
        continue_with(*(call("hold", f"c{i}") for i in range(4))),
        finish("done"),
    )
    agent = _agent(decide, tools={"hold": tool}, limits={"max_concurrency": max_concurrency})

    assert await agent.run_or_raise({}) == "done"
    assert gauge.peak == expected_peak
    assert gauge.overlap.is_set() is (expected_peak > 1)
    assert sorted(gauge.started) == ["c0", "c1", "c2", "c3"]


async def test_outcomes_keep_decision_order_when_calls_complete_out_of_order() -> None:
    release_first = asyncio.Event()
    second_done = asyncio.Event()

    async def handler(value: str, ctx: Any) -> str:
        if value == "first":
            await asyncio.wait_for(release_first.wait(), timeout=60)  # hang guard only
        else:
            second_done.set()
            release_first.set()
        return value

    tool = define_tool(description="Order.", input_schema=str, output_schema=str, run=handler)
    seen: list[Any] = []

    def reduce(state: Any, outcomes: Any) -> Any:
        seen.extend(o["id"] for o in outcomes)
        return state

    decide = scripted(
        continue_with(call("order", "first", id="one"), call("order", "second", id="two")),
        finish("done"),
    )
    agent = _agent(decide, tools={"order": tool}, limits={"max_concurrency": 2}, reduce=reduce)

    assert await agent.run_or_raise({}) == "done"
    assert second_done.is_set()
    assert seen == ["one", "two"]


async def test_sync_handlers_in_worker_threads_overlap_up_to_max_concurrency() -> None:
    lock = threading.Lock()
    pair = threading.Barrier(2, timeout=60)  # two must overlap; the timeout is a hang guard
    counts = {"active": 0, "peak": 0}

    def handler(value: str, ctx: Any) -> str:
        with lock:
            counts["active"] += 1
            counts["peak"] = max(counts["peak"], counts["active"])
        try:
            pair.wait()
            return value
        finally:
            with lock:
                counts["active"] -= 1

    tool = define_tool(description="Pair up.", input_schema=str, output_schema=str, run=handler)
    decide = scripted(continue_with(*(call("pair", f"c{i}") for i in range(4))), finish("done"))
    agent = _agent(decide, tools={"pair": tool}, limits={"max_concurrency": 2})

    assert await agent.run_or_raise({}) == "done"
    assert counts["peak"] == 2


async def test_run_or_raise_chains_the_limit_error_itself_as_the_cause() -> None:
    """``PipelineExecutionError.__cause__`` is the original error, not a child-run wrapper."""
    from tubeless.agent import LimitReachedError

    greedy = define_agent(
        id="greedy",
        input_schema=dict,
        result_schema=str,
        initial_state=lambda _: {},
        decide=scripted(continue_with(*[call("echo", "x") for _ in range(4)])),
        tools={
            "echo": define_tool(
                description="Echo.", input_schema=str, output_schema=str, run=lambda text, ctx: text
            )
        },
        limits={"max_calls": 3},
    )
    with pytest.raises(PipelineExecutionError) as info:
        await greedy.run_or_raise({})
    cause = info.value.__cause__
    assert isinstance(cause, LimitReachedError)
    assert (cause.limit, cause.bound, cause.consumed, cause.requested) == ("max_calls", 3, 0, 4)
