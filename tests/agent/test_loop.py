"""The turn loop: outcomes, failure classification, draining, cancellation, dry runs, planning.

UPSTREAM §4.5-4.10 and §7 items 21, 23 and 24; DESIGN §3 (outcomes, callbacks, cancellation).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Sequence
from typing import Annotated, Any

import pytest
from pydantic import BaseModel, BeforeValidator
from typing_extensions import TypedDict

from tests.fixtures.runs import chain_codes
from tubeless import (
    CancelToken,
    PipelineExecutionError,
    ToolError,
    define_agent,
    define_pipeline,
    define_tool,
    pipeline_tool,
    step,
)
from tubeless import errors as codes
from tubeless.frozen import FrozenDict
from tubeless.testing import call, capture_trace, continue_with, finish, scripted

# -- helpers ------------------------------------------------------------------------------------


class CodedError(Exception):
    """An application error that carries a ``code`` attribute but is not a ``ToolError``."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


class LookAlikeToolError(Exception):
    """Named like the real thing, with the same ``code``/``message`` attributes."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def text_tool(
    run: Callable[..., Any],
    *,
    preview: Callable[..., Any] | None = None,
    input_schema: Any = str,
    output_schema: Any = str,
) -> Any:
    return define_tool(
        description="Work on a piece of text.",
        input_schema=input_schema,
        output_schema=output_schema,
        run=run,
        preview=preview,
    )


def make_agent(
    tools: dict[str, Any],
    decide: Callable[..., Any],
    *,
    reduce: Callable[..., Any] | None = None,
    dry_run: Callable[..., Any] | None = None,
    initial_state: Callable[..., Any] | None = None,
    limits: dict[str, int] | None = None,
    id: str = "loop-agent",
) -> Any:
    return define_agent(
        id=id,
        input_schema=dict[str, Any],
        result_schema=Any,
        initial_state=initial_state or (lambda validated: {"seen": []}),
        decide=decide,
        dry_run=dry_run,
        reduce=reduce,
        tools=tools,
        limits=limits,
    )


class Reductions:
    """A reducer that records every batch of outcomes it is given."""

    def __init__(self) -> None:
        self.batches: list[tuple[Any, ...]] = []

    def __call__(self, state: Any, outcomes: Sequence[Any]) -> Any:
        self.batches.append(tuple(outcomes))
        return state


def tool_runs(records: list[dict[str, Any]]) -> dict[str, str]:
    """``itemKey -> status`` of every tool run that completed (started runs only)."""
    return {
        r["itemKey"]: r["payload"]["status"]
        for r in records
        if r["name"] == "pipeline.completed" and "/tool/" in r["pipelineId"]
    }


def started_tool_calls(records: list[dict[str, Any]]) -> list[str]:
    return [
        r["itemKey"]
        for r in records
        if r["name"] == "pipeline.started" and "/tool/" in r["pipelineId"]
    ]


async def until(predicate: Callable[[], bool], what: str) -> None:
    """Yield to the loop until ``predicate()`` holds (a hang guard, never a timing assertion)."""
    for _ in range(100_000):
        if predicate():
            return
        await asyncio.sleep(0)
    raise AssertionError(f"never happened: {what}")


# -- outcomes -------------------------------------------------------------------------------------


async def test_outcomes_reach_reduce_in_decision_order_even_when_later_calls_finish_first() -> None:
    third_finished = asyncio.Event()
    finished: list[str] = []

    async def work(text: str, ctx: Any) -> str:
        if text == "first":
            await third_finished.wait()
        finished.append(text)
        if text == "third":
            third_finished.set()
        return text.upper()

    reductions = Reductions()
    decide = scripted(
        continue_with(
            call("work", "first", "c0"), call("work", "second", "c1"), call("work", "third", "c2")
        ),
        finish("done"),
    )
    agent = make_agent(
        {"work": text_tool(work)}, decide, reduce=reductions, limits={"max_concurrency": 3}
    )

    run = await agent.run({})

    assert run.status == "completed"
    assert finished.index("third") < finished.index("first")
    assert reductions.batches == [
        (
            {"id": "c0", "tool": "work", "ok": True, "value": "FIRST"},
            {"id": "c1", "tool": "work", "ok": True, "value": "SECOND"},
            {"id": "c2", "tool": "work", "ok": True, "value": "THIRD"},
        )
    ]


async def test_reduce_runs_exactly_once_per_batch_after_the_whole_batch_settled() -> None:
    settled: list[str] = []

    async def work(text: str, ctx: Any) -> str:
        for _ in range(3):
            await asyncio.sleep(0)
        settled.append(text)
        return text

    seen_at_reduce: list[tuple[int, list[str]]] = []

    def reduce(state: Any, outcomes: Sequence[Any]) -> Any:
        seen_at_reduce.append((len(outcomes), sorted(settled)))
        return state

    decide = scripted(
        continue_with(call("work", "a"), call("work", "b"), call("work", "c")),
        continue_with(call("work", "d"), call("work", "e")),
        finish("done"),
    )
    agent = make_agent(
        {"work": text_tool(work)}, decide, reduce=reduce, limits={"max_concurrency": 2}
    )

    run = await agent.run({})

    assert run.status == "completed"
    assert seen_at_reduce == [(3, ["a", "b", "c"]), (2, ["a", "b", "c", "d", "e"])]


async def test_a_handler_tool_error_becomes_a_failed_outcome_and_the_run_continues() -> None:
    async def lookup(text: str, ctx: Any) -> str:
        if text == "absent":
            raise ToolError("NOT_FOUND", "x")
        return text.upper()

    reductions = Reductions()
    decide = scripted(
        continue_with(call("lookup", "absent", "c0"), call("lookup", "here", "c1")),
        lambda state, ctx: finish(f"turn {ctx.turn}"),
    )
    agent = make_agent({"lookup": text_tool(lookup)}, decide, reduce=reductions)

    run = await agent.run({})

    assert (run.status, run.value) == ("completed", "turn 2")
    assert reductions.batches == [
        (
            {
                "id": "c0",
                "tool": "lookup",
                "ok": False,
                "error": {"code": "NOT_FOUND", "message": "x"},
            },
            {"id": "c1", "tool": "lookup", "ok": True, "value": "HERE"},
        )
    ]
    failed = reductions.batches[0][0]
    assert type(failed) is FrozenDict
    assert type(failed["error"]) is FrozenDict
    assert decide.remaining == 0


class Measure(TypedDict):
    n: int


async def test_successful_outcomes_carry_the_validated_output_frozen_in_a_tuple() -> None:
    async def measure(text: str, ctx: Any) -> dict[str, Any]:
        return {"n": str(len(text))}  # the output schema turns "5" into 5

    outcomes_seen: list[Any] = []

    def reduce(state: Any, outcomes: Sequence[Any]) -> Any:
        outcomes_seen.append(outcomes)
        return state

    decide = scripted(continue_with(call("measure", "hello", "m")), finish(None))
    agent = make_agent(
        {"measure": text_tool(measure, output_schema=Measure)}, decide, reduce=reduce
    )

    run = await agent.run({})

    assert run.status == "completed"
    [outcomes] = outcomes_seen
    assert isinstance(outcomes, tuple)  # a FrozenTuple: outcomes are frozen plain data
    assert outcomes == ({"id": "m", "tool": "measure", "ok": True, "value": {"n": 5}},)
    [outcome] = outcomes
    assert type(outcome) is FrozenDict
    assert type(outcome["value"]) is FrozenDict
    assert type(outcome["value"]["n"]) is int
    with pytest.raises(TypeError):
        outcome["ok"] = False  # type: ignore[index]


@pytest.mark.parametrize(
    ("error", "source_code"),
    [
        pytest.param(RuntimeError("boom"), codes.STEP_FAILED, id="plain-exception"),
        pytest.param(CodedError("NOT_FOUND", "x"), "NOT_FOUND", id="same-code-attribute"),
        pytest.param(LookAlikeToolError("NOT_FOUND", "x"), "NOT_FOUND", id="look-alike-class"),
    ],
)
async def test_any_other_handler_exception_is_fatal_and_keeps_its_source_code(
    error: Exception, source_code: str
) -> None:
    async def lookup(text: str, ctx: Any) -> str:
        raise error

    reductions = Reductions()
    decide = scripted(continue_with(call("lookup", "word")), finish("never"))
    agent = make_agent({"lookup": text_tool(lookup)}, decide, reduce=reductions)

    run = await agent.run({})

    assert (run.status, run.finalized) == ("failed", False)
    assert reductions.batches == []
    assert decide.remaining == 1
    assert PipelineExecutionError(run).source_code == source_code


def _raise_tool_error(value: Any) -> Any:
    raise ToolError("NOT_FOUND", "from a validator")


class ChildInput(TypedDict):
    text: Annotated[str, BeforeValidator(_raise_tool_error)]


class PlainChildInput(TypedDict):
    text: str


def _validator_cases() -> list[Any]:
    rejecting = Annotated[str, BeforeValidator(_raise_tool_error)]

    def mapper_raises(validated: Any) -> Any:
        raise ToolError("NOT_FOUND", "from a mapper")

    return [
        pytest.param(
            lambda handler: text_tool(handler, input_schema=rejecting),
            "x",
            id="handler-tool-input-schema",
        ),
        pytest.param(
            lambda handler: pipeline_tool(
                define_pipeline(
                    id="child-rejects",
                    options_schema=ChildInput,
                    steps=[step("work", lambda inputs, ctx: handler(ctx.options["text"], ctx))],
                ),
                description="A child whose input validator raises a ToolError.",
            ),
            {"text": "x"},
            id="child-pipeline-options-schema",
        ),
        pytest.param(
            lambda handler: pipeline_tool(
                define_pipeline(
                    id="child-mapped",
                    options_schema=PlainChildInput,
                    steps=[step("work", lambda inputs, ctx: handler(ctx.options["text"], ctx))],
                ),
                description="A child behind a mapper that raises a ToolError.",
                input_schema=str,
                map_options=mapper_raises,
            ),
            "x",
            id="pipeline-tool-map-options",
        ),
        pytest.param(
            lambda handler: pipeline_tool(
                define_pipeline(
                    id="child-arguments",
                    options_schema=PlainChildInput,
                    steps=[step("work", lambda inputs, ctx: handler(ctx.options["text"], ctx))],
                ),
                description="A child behind an argument schema that raises a ToolError.",
                input_schema=rejecting,
                map_options=lambda validated: {"text": validated},
            ),
            "x",
            id="pipeline-tool-input-schema",
        ),
    ]


@pytest.mark.parametrize(("build", "argument"), _validator_cases())
async def test_a_tool_error_raised_by_an_argument_validator_or_mapper_is_fatal(
    build: Callable[..., Any], argument: Any
) -> None:
    handled: list[Any] = []

    def handler(text: str, ctx: Any) -> str:
        handled.append(text)
        return text

    reductions = Reductions()
    decide = scripted(continue_with(call("target", argument, "c0")), finish("never"))
    agent = make_agent({"target": build(handler)}, decide, reduce=reductions)

    run = await agent.run({})

    assert (run.status, run.finalized) == ("failed", False)
    assert handled == []
    assert reductions.batches == []
    assert decide.remaining == 1
    assert "NOT_FOUND" in chain_codes(run.errors[0])


async def test_a_tool_error_raised_by_reduce_is_fatal() -> None:
    async def work(text: str, ctx: Any) -> str:
        return text

    def reduce(state: Any, outcomes: Sequence[Any]) -> Any:
        raise ToolError("NOT_FOUND", "from the reducer")

    decide = scripted(continue_with(call("work", "a")), finish("never"))
    agent = make_agent({"work": text_tool(work)}, decide, reduce=reduce)

    run = await agent.run({})

    assert (run.status, run.finalized) == ("failed", False)
    assert decide.remaining == 1
    assert run.errors[0].source_code == "NOT_FOUND"


async def test_an_output_rejected_by_the_output_schema_is_fatal() -> None:
    async def count(text: str, ctx: Any) -> Any:
        return "not a number"

    reductions = Reductions()
    decide = scripted(continue_with(call("count", "abc")), finish("never"))
    agent = make_agent({"count": text_tool(count, output_schema=int)}, decide, reduce=reductions)

    with capture_trace() as trace:
        run = await agent.run({}, trace=trace)

    assert (run.status, run.finalized) == ("failed", False)
    assert reductions.batches == []
    assert decide.remaining == 1
    assert codes.STEP_OUTPUT_VALIDATION_FAILED in chain_codes(run.errors[0])
    assert tool_runs(trace.records) == {"count-0": "failed"}


# -- draining, dispatch stop, cancellation ---------------------------------------------------------


async def test_a_fatal_failure_drains_active_siblings_without_cancelling_them() -> None:
    b_started = asyncio.Event()
    observed: list[bool] = []

    with capture_trace() as trace:

        def a_failed() -> bool:
            return tool_runs(trace.records).get("a") == "failed"

        async def work(text: str, ctx: Any) -> str:
            if text == "a":
                await b_started.wait()
                raise RuntimeError("fatal")
            b_started.set()
            await until(a_failed, "call a's tool run failed")
            observed.append(ctx.signal.cancelled)
            return "B"

        reductions = Reductions()
        decide = scripted(
            continue_with(call("work", "a", "a"), call("work", "b", "b")), finish("never")
        )
        agent = make_agent(
            {"work": text_tool(work)}, decide, reduce=reductions, limits={"max_concurrency": 2}
        )
        run = await agent.run({}, trace=trace)

    assert run.status == "failed"
    assert observed == [False]
    assert tool_runs(trace.records) == {"a": "failed", "b": "completed"}
    assert reductions.batches == []
    assert decide.remaining == 1


async def test_no_further_calls_are_dispatched_after_a_fatal_failure() -> None:
    started: list[str] = []

    async def work(text: str, ctx: Any) -> str:
        started.append(text)
        if text == "c0":
            raise RuntimeError("fatal")
        return text

    decide = scripted(
        continue_with(*(call("work", f"c{i}", f"c{i}") for i in range(4))), finish("never")
    )
    agent = make_agent({"work": text_tool(work)}, decide, limits={"max_concurrency": 1})

    with capture_trace() as trace:
        run = await agent.run({}, trace=trace)

    assert run.status == "failed"
    assert started == ["c0"]
    assert started_tool_calls(trace.records) == ["c0"]


async def test_cancelling_the_signal_mid_batch_stops_dispatch_and_skips_the_reducer() -> None:
    token = CancelToken()
    started: list[str] = []
    both_started = asyncio.Event()
    saw_cancel: list[bool] = []

    async def work(text: str, ctx: Any) -> str:
        started.append(text)
        if len(started) == 2:
            both_started.set()
        await ctx.signal.wait()
        saw_cancel.append(ctx.signal.cancelled)
        return text

    reductions = Reductions()
    decide = scripted(
        continue_with(call("work", "a", "a"), call("work", "b", "b"), call("work", "c", "c")),
        finish("never"),
    )
    agent = make_agent(
        {"work": text_tool(work)}, decide, reduce=reductions, limits={"max_concurrency": 2}
    )

    task = asyncio.create_task(agent.run({}, signal=token))
    await asyncio.wait_for(both_started.wait(), 30)
    token.cancel("stop")
    run = await asyncio.wait_for(task, 30)

    assert (run.status, run.finalized) == ("cancelled", False)
    assert started == ["a", "b"]
    assert saw_cancel == [True, True]
    assert reductions.batches == []
    assert decide.remaining == 1
    assert asyncio.all_tasks() == {asyncio.current_task()}


async def test_cancelling_the_task_awaiting_run_reraises_and_leaves_no_task() -> None:
    started = asyncio.Event()
    interrupted: list[str] = []

    async def work(text: str, ctx: Any) -> str:
        if text == "b":
            started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            interrupted.append(text)
            raise
        return text

    decide = scripted(
        continue_with(call("work", "a", "a"), call("work", "b", "b")), finish("never")
    )
    agent = make_agent({"work": text_tool(work)}, decide, limits={"max_concurrency": 2})

    with capture_trace() as trace:
        task = asyncio.create_task(agent.run({}, trace=trace, run_id="interrupted"))
        await asyncio.wait_for(started.wait(), 30)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    assert sorted(interrupted) == ["a", "b"]
    assert asyncio.all_tasks() == {asyncio.current_task()}
    root_completed = [
        r
        for r in trace.records
        if r["name"] == "pipeline.completed" and r["runId"] == "interrupted"
    ]
    assert [r["payload"]["status"] for r in root_completed] == ["cancelled"]


async def test_a_sync_tool_handler_runs_in_a_worker_thread_while_decide_runs_on_the_loop() -> None:
    loop_thread = threading.get_ident()
    threads: dict[str, int] = {}

    def work(text: str, ctx: Any) -> str:
        threads["tool"] = threading.get_ident()
        return text

    def decide(state: Any, ctx: Any) -> Any:
        threads[f"decide-{ctx.turn}"] = threading.get_ident()
        return continue_with(call("work", "a")) if ctx.turn == 1 else finish("done")

    agent = make_agent({"work": text_tool(work)}, decide)

    run = await agent.run({})

    assert run.status == "completed"
    assert threads["tool"] != loop_thread
    assert (threads["decide-1"], threads["decide-2"]) == (loop_thread, loop_thread)


# -- dry runs -------------------------------------------------------------------------------------


async def test_a_dry_run_skips_an_agent_without_a_preview_source_and_fails_finalization() -> None:
    initialized: list[Any] = []

    def initial_state(validated: Any) -> Any:
        initialized.append(validated)
        return {}

    async def work(text: str, ctx: Any) -> str:
        return text

    decide = scripted(finish("never"))
    agent = make_agent({"work": text_tool(work, preview=work)}, decide, initial_state=initial_state)

    run = await agent.run({}, dry_run=True)

    report = run.step("agent")
    assert (report.status, report.reason) == ("skipped", "dry-run")
    assert (run.status, run.finalized, run.value) == ("failed", False, None)
    assert [(e.code, e.source_code) for e in run.errors] == [
        (codes.FINALIZATION_FAILED, codes.REQUIRED_OUTPUTS_MISSING)
    ]
    assert decide.seen == []
    assert initialized == []


async def test_a_dry_run_takes_decisions_from_dry_run_and_runs_tool_previews() -> None:
    handled: list[str] = []

    def handler(label: str) -> Callable[..., Any]:
        async def run(text: str, ctx: Any) -> str:
            handled.append(f"{label}:{text}:{ctx.dry_run}")
            return f"{label}-{text}"

        return run

    decide = scripted(finish("live"))
    preview_source = scripted(
        continue_with(call("work", "a", "c0")),
        lambda state, ctx: finish({"dry_run": ctx.dry_run, "state": state}),
    )
    agent = make_agent(
        {"work": text_tool(handler("run"), preview=handler("preview"))},
        decide,
        dry_run=preview_source,
        reduce=lambda state, outcomes: {"seen": [o["value"] for o in outcomes]},
    )

    run = await agent.run({}, dry_run=True)

    assert run.status == "completed"
    assert run.value == {"dry_run": True, "state": {"seen": ("preview-a",)}}
    assert handled == ["preview:a:True"]
    assert decide.seen == []
    assert preview_source.remaining == 0


async def test_in_a_dry_run_a_tool_without_preview_is_skipped_and_the_turn_fails() -> None:
    handled: list[str] = []

    async def with_preview(text: str, ctx: Any) -> str:
        handled.append(f"preview:{text}")
        return text

    async def no_preview(text: str, ctx: Any) -> str:
        handled.append(f"run:{text}")
        return text

    reductions = Reductions()
    source = scripted(
        continue_with(call("shown", "a", "c0"), call("hidden", "b", "c1")), finish("never")
    )
    agent = make_agent(
        {
            "shown": text_tool(with_preview, preview=with_preview),
            "hidden": text_tool(no_preview),
        },
        source,
        dry_run=source,
        reduce=reductions,
    )

    with capture_trace() as trace:
        run = await agent.run({}, dry_run=True, trace=trace)

    assert (run.status, run.finalized) == ("failed", False)
    assert handled == ["preview:a"]
    assert reductions.batches == []
    assert source.remaining == 1
    assert codes.REQUIRED_OUTPUTS_MISSING in chain_codes(run.errors[0])
    skipped = [
        (r["itemKey"], r["stepId"], r["payload"])
        for r in trace.records
        if r["name"] == "step.skipped" and "/tool/" in r["pipelineId"]
    ]
    assert skipped == [("c1", "tool", {"status": "skipped", "reason": "dry-run"})]


# -- planning -------------------------------------------------------------------------------------


async def test_plan_never_calls_initial_state_decide_dry_run_validators_or_tools() -> None:
    calls: list[str] = []

    def recorder(label: str, result: Any = None) -> Callable[..., Any]:
        def record(*args: Any) -> Any:
            calls.append(label)
            return args[0] if result is None else result

        return record

    def validator(label: str) -> Any:
        def check(value: Any) -> Any:
            calls.append(label)
            return value

        return BeforeValidator(check)

    child = define_pipeline(
        id="plan-child",
        options_schema={
            "type": "object",
            "properties": {"text": {"type": "string"}},
            "required": ["text"],
        },
        steps=[step("work", recorder("child step", "done"))],
    )
    agent = define_agent(
        id="plan-agent",
        input_schema=Annotated[dict[str, Any], validator("input validator")],
        result_schema=Annotated[str, validator("result validator")],
        initial_state=recorder("initial_state", {}),
        decide=recorder("decide", finish("x")),
        dry_run=recorder("dry_run", finish("x")),
        reduce=recorder("reduce", {}),
        tools={
            "work": define_tool(
                description="Work.",
                input_schema=Annotated[str, validator("tool validator")],
                output_schema=Annotated[str, validator("output validator")],
                run=recorder("tool run", "x"),
                preview=recorder("tool preview", "x"),
            ),
            "child": pipeline_tool(
                child,
                description="A child.",
                input_schema=Annotated[str, validator("argument validator")],
                map_options=recorder("map_options", {"text": "x"}),
            ),
        },
    )

    plans = [agent.plan(), agent.plan(dry_run=True), agent.plan(targets=["agent"])]

    assert [p.ok for p in plans] == [True, True, True]
    assert calls == []


# -- concurrent invocations -----------------------------------------------------------------------


async def test_concurrent_root_runs_of_one_agent_keep_separate_state_and_budgets() -> None:
    barrier = asyncio.Barrier(4)

    async def shout(text: str, ctx: Any) -> str:
        await barrier.wait()  # all four calls of both runs are active at once
        return text.upper()

    def decide(state: Any, ctx: Any) -> Any:
        if not state["results"]:
            words = state["question"].split()
            return continue_with(*(call("shout", w, f"w{i}") for i, w in enumerate(words)))
        return finish(" ".join(state["results"]))

    agent = define_agent(
        id="parallel-agent",
        input_schema=dict[str, str],
        result_schema=str,
        initial_state=lambda validated: {"question": validated["question"], "results": []},
        decide=decide,
        reduce=lambda state, outcomes: {**state, "results": [o["value"] for o in outcomes]},
        tools={"shout": text_tool(shout)},
        limits={"max_calls": 2, "max_concurrency": 2},
    )

    first, second = await asyncio.wait_for(
        asyncio.gather(agent.run({"question": "a b"}), agent.run({"question": "c d"})), 30
    )

    assert [(first.status, first.value), (second.status, second.value)] == [
        ("completed", "A B"),
        ("completed", "C D"),
    ]


class _Point(BaseModel):
    x: int


async def _point(value: int, ctx: Any) -> _Point:
    return _Point(x=value)


_point_tool = define_tool(
    description="Make a point.", input_schema=int, output_schema=_Point, run=_point
)


async def test_a_model_output_reaches_reduce_exactly_but_cannot_enter_state() -> None:
    """Outcome values are the exact validated output; a model instance is not plain state."""
    seen: list[Any] = []

    def keep_x(state: Any, outcomes: Any) -> dict[str, Any]:
        seen.append(outcomes[0]["value"])
        return {"x": outcomes[0]["value"].x}

    def keep_outcome(state: Any, outcomes: Any) -> dict[str, Any]:
        return {"outcomes": list(outcomes)}

    def agent(reduce: Any) -> Any:
        return define_agent(
            id="points",
            input_schema=dict,
            result_schema=int,
            initial_state=lambda _: {},
            decide=scripted(continue_with(call("point", 7)), finish(7)),
            reduce=reduce,
            tools={"point": _point_tool},
        )

    assert await agent(keep_x).run_or_raise({}) == 7
    assert seen == [_Point(x=7)]
    run = await agent(keep_outcome).run({})
    assert run.status == "failed"
    assert run.errors[0].source_code == "TUBELESS_AGENT_INVALID_STATE"
