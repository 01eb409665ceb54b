"""Child composition: from_pipeline, for_each_pipeline and iterate_pipeline (UPSTREAM §1.9)."""

from __future__ import annotations

import asyncio
from typing import Any

import pydantic
import pytest

from tubeless import errors as codes
from tubeless.errors import PipelineDefinitionError, PipelineExecutionError
from tubeless.pipeline import (
    CancelToken,
    define_pipeline,
    for_each_pipeline,
    from_pipeline,
    iterate_pipeline,
    step,
)
from tubeless.testing import capture_trace


class CodedError(Exception):
    """An application error carrying its own ``code`` attribute."""

    def __init__(self, code: str, message: str = "boom") -> None:
        super().__init__(message)
        self.code = code


def _started(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in records if r["name"] == "pipeline.started"]


def _children_of(records: list[dict[str, Any]], run_id: str) -> list[dict[str, Any]]:
    """``pipeline.started`` records of the direct children of ``run_id``, in start order."""
    return [r for r in _started(records) if r.get("parentRunId") == run_id]


def _attempt_of(records: list[dict[str, Any]], run_id: str, step_id: str) -> str:
    running = [
        r
        for r in records
        if r["name"] == "step.running" and r["runId"] == run_id and r["stepId"] == step_id
    ]
    return str(running[0]["attemptId"])


def _double_child(calls: list[Any] | None = None) -> Any:
    async def double(inputs: dict[str, Any], ctx: Any) -> int:
        if calls is not None:
            calls.append(ctx.options)
        return int(ctx.options["n"]) * 2

    return define_pipeline(id="child", steps=[step("double", double)])


# -- from_pipeline ----------------------------------------------------------------------------


class ParentOptions(pydantic.BaseModel):
    n: int
    label: str = "default"


async def test_from_pipeline_forwards_the_parents_validated_options() -> None:
    """Without map_options the child receives the parent's options after validation."""
    seen: list[Any] = []

    async def record(inputs: dict[str, Any], ctx: Any) -> str:
        seen.append(ctx.options)
        return "ok"

    child = define_pipeline(id="child", steps=[step("record", record)])
    parent = define_pipeline(
        id="parent", steps=[from_pipeline("sub", child)], options_schema=ParentOptions
    )

    run = await parent.run({"n": "3"})

    assert run.status == "completed", run.errors
    assert seen == [ParentOptions(n=3, label="default")]
    assert run.value == "ok"


async def test_from_pipeline_child_revalidates_forwarded_options_with_its_own_schema() -> None:
    """The child validates forwarded options with its own options schema."""

    class ChildOptions(pydantic.BaseModel):
        n: int

    seen: list[Any] = []

    async def record(inputs: dict[str, Any], ctx: Any) -> None:
        seen.append(ctx.options)

    child = define_pipeline(id="child", steps=[step("record", record)], options_schema=ChildOptions)
    parent = define_pipeline(id="parent", steps=[from_pipeline("sub", child)])

    ok = await parent.run({"n": "4"})
    bad = await parent.run({"n": "not a number"})

    assert ok.status == "completed", ok.errors
    assert seen == [ChildOptions(n=4)]
    assert bad.status == "failed"
    assert bad.errors[0].code == codes.CHILD_FAILED
    assert bad.errors[0].source_code == codes.OPTIONS_VALIDATION_FAILED


async def test_from_pipeline_applies_map_options_and_map_result() -> None:
    """map_options builds the child input from the step inputs; map_result reshapes the result."""
    calls: list[Any] = []

    async def map_result(value: int) -> dict[str, int]:
        return {"doubled": value}

    parent = define_pipeline(
        id="parent",
        steps=[
            step("source", lambda inputs, ctx: 21),
            from_pipeline(
                "sub",
                _double_child(calls),
                map_options=lambda inputs, ctx: {"n": inputs["source"]},
                map_result=map_result,
                depends_on=["source"],
            ),
        ],
    )

    run = await parent.run()

    assert run.status == "completed", run.errors
    assert calls == [{"n": 21}]
    assert run.value == {"doubled": 42}


async def test_from_pipeline_child_failure_is_child_failed_with_the_original_code() -> None:
    """A failed child fails the parent step with TUBELESS_CHILD_FAILED; MY_CODE stays visible."""

    async def explode(inputs: dict[str, Any], ctx: Any) -> None:
        raise CodedError("MY_CODE", "the child broke")

    child = define_pipeline(id="child", steps=[step("explode", explode)])
    after: list[str] = []
    parent = define_pipeline(
        id="parent",
        steps=[
            from_pipeline("sub", child),
            step("after", lambda inputs, ctx: after.append("ran"), depends_on=["sub"]),
        ],
    )

    run = await parent.run()

    assert run.status == "failed"
    error = run.errors[0]
    assert (error.code, error.kind, error.phase, error.step_id) == (
        codes.CHILD_FAILED,
        "child",
        "execution",
        "sub",
    )
    assert error.source_code == "MY_CODE"
    assert "child" in error.message and "explode" in error.message
    assert run.step("sub").status == "failed"
    assert after == []
    with pytest.raises(PipelineExecutionError) as raised:
        await parent.run_or_raise()
    assert raised.value.code == codes.CHILD_FAILED
    assert raised.value.source_code == "MY_CODE"


async def test_from_pipeline_invalid_child_plan_fails_before_any_child_step() -> None:
    """Controls naming an unknown child target fail the parent step; no child step runs."""
    ran: list[str] = []
    child = define_pipeline(
        id="child", steps=[step("work", lambda inputs, ctx: ran.append("work"))]
    )
    parent = define_pipeline(
        id="parent", steps=[from_pipeline("sub", child, controls={"targets": ["nope"]})]
    )

    with capture_trace() as trace:
        run = await parent.run(trace=trace)

    assert run.status == "failed"
    assert run.errors[0].code == codes.CHILD_FAILED
    assert run.errors[0].step_id == "sub"
    assert run.errors[0].source_code == codes.PLANNING_TARGET_UNKNOWN
    assert ran == []
    child_records = [r for r in trace.records if r["pipelineId"] == "child"]
    assert [r["name"] for r in child_records] == ["pipeline.started", "pipeline.completed"]


async def test_from_pipeline_controls_may_be_computed_from_inputs() -> None:
    """A controls callable selects the child's steps per invocation."""
    ran: list[str] = []
    child = define_pipeline(
        id="child",
        steps=[
            step("a", lambda inputs, ctx: ran.append("a")),
            step("b", lambda inputs, ctx: ran.append("b")),
        ],
        targets=[],
    )
    parent = define_pipeline(
        id="parent",
        steps=[from_pipeline("sub", child, controls=lambda inputs, ctx: {"step_ids": ["b"]})],
    )

    run = await parent.run()

    assert run.status == "completed", run.errors
    assert ran == ["b"]


async def test_from_pipeline_child_is_dry_when_the_parent_is() -> None:
    """A dry parent forces a dry child: the child's preview handler runs, not its run handler."""
    real: list[str] = []

    async def preview(inputs: dict[str, Any], ctx: Any) -> str:
        return f"PREVIEW dry={ctx.dry_run}"

    child = define_pipeline(
        id="child",
        steps=[step("work", lambda inputs, ctx: real.append("ran"), dry_run=preview)],
    )
    parent = define_pipeline(id="parent", steps=[from_pipeline("sub", child)])

    with capture_trace() as trace:
        run = await parent.run(dry_run=True, trace=trace)

    assert run.status == "completed", run.errors
    assert run.value == "PREVIEW dry=True"
    assert real == []
    child_started = _children_of(trace.records, run.run_id)
    assert [r["payload"]["dryRun"] for r in child_started] == [True]


async def test_composed_steps_are_opaque_in_the_parent_plan() -> None:
    """Child steps never appear in the parent plan; the step carries nested_pipeline metadata."""
    child = define_pipeline(
        id="child",
        steps=[step("a", lambda inputs, ctx: 1), step("b", lambda inputs, ctx: 2, depends_on="a")],
    )
    parent = define_pipeline(
        id="parent",
        steps=[
            from_pipeline("single", child),
            for_each_pipeline(
                "fan",
                child,
                items=lambda inputs, ctx: [],
                key=lambda item, index: str(index),
                map_options=lambda item, index, inputs, ctx: item,
                concurrency=3,
            ),
            iterate_pipeline(
                "loop",
                child,
                max_iterations=5,
                initial_state=lambda inputs, ctx: 0,
                map_options=lambda state, inputs, ctx: state,
                transition=lambda result, state, ctx: {"kind": "finish", "result": result},
            ),
        ],
    )

    plan = parent.plan()

    assert [s.id for s in plan.steps] == ["single", "fan", "loop"]
    nested = {s.id: s.nested_pipeline for s in plan.steps}
    for step_id, mode in [("single", "single"), ("fan", "for-each"), ("loop", "iterate")]:
        assert nested[step_id] is not None
        assert nested[step_id]["mode"] == mode
        assert nested[step_id]["pipelineId"] == "child"
        assert list(nested[step_id]["stepIds"]) == ["a", "b"]
    assert nested["fan"]["concurrency"] == 3
    assert nested["loop"]["maxIterations"] == 5


# -- for_each_pipeline ------------------------------------------------------------------------


async def test_for_each_returns_results_in_input_order_when_item_zero_finishes_last() -> None:
    """Results follow item order, not completion order."""
    finished: list[int] = []
    done = {i: asyncio.Event() for i in range(3)}

    async def work(inputs: dict[str, Any], ctx: Any) -> str:
        index = ctx.options["index"]
        if index == 0:
            await done[1].wait()
            await done[2].wait()
        finished.append(index)
        done[index].set()
        return f"result-{index}"

    child = define_pipeline(id="child", steps=[step("work", work)])
    parent = define_pipeline(
        id="parent",
        steps=[
            for_each_pipeline(
                "fan",
                child,
                items=lambda inputs, ctx: ["a", "b", "c"],
                key=lambda item, index: item,
                map_options=lambda item, index, inputs, ctx: {"index": index},
                concurrency=3,
            )
        ],
    )

    run = await parent.run()

    assert run.status == "completed", run.errors
    assert finished[-1] == 0
    assert run.value == ["result-0", "result-1", "result-2"]


async def test_for_each_duplicate_keys_fail_before_any_child_starts() -> None:
    """Duplicate keys fail the step (source TUBELESS_FOR_EACH_DUPLICATE_KEY); no child runs."""
    called: list[Any] = []
    mapped: list[Any] = []
    child = define_pipeline(
        id="child", steps=[step("work", lambda inputs, ctx: called.append(ctx.options))]
    )

    def map_options(item: Any, index: int, inputs: Any, ctx: Any) -> Any:
        mapped.append(item)
        return item

    parent = define_pipeline(
        id="parent",
        steps=[
            for_each_pipeline(
                "fan",
                child,
                items=lambda inputs, ctx: ["x", "y", "x"],
                key=lambda item, index: item,
                map_options=map_options,
                concurrency=3,
            )
        ],
    )

    with capture_trace() as trace:
        run = await parent.run(trace=trace)

    assert run.status == "failed"
    error = run.errors[0]
    assert error.step_id == "fan"
    assert error.source_code == codes.FOR_EACH_DUPLICATE_KEY
    assert error.fan_out is None
    assert called == []
    assert mapped == []
    assert _children_of(trace.records, run.run_id) == []


async def test_for_each_respects_its_concurrency_bound() -> None:
    """With concurrency=2 over six items, at most two children are active at once."""
    active = 0
    peak = 0
    seen: list[int] = []

    async def work(inputs: dict[str, Any], ctx: Any) -> int:
        nonlocal active, peak
        active += 1
        peak = max(peak, active)
        for _ in range(5):
            await asyncio.sleep(0)
        active -= 1
        seen.append(ctx.options)
        return int(ctx.options)

    child = define_pipeline(id="child", steps=[step("work", work)])
    parent = define_pipeline(
        id="parent",
        steps=[
            for_each_pipeline(
                "fan",
                child,
                items=lambda inputs, ctx: list(range(6)),
                key=lambda item, index: f"k{index}",
                map_options=lambda item, index, inputs, ctx: item,
                concurrency=2,
            )
        ],
    )

    run = await parent.run()

    assert run.status == "completed", run.errors
    assert peak == 2
    assert sorted(seen) == list(range(6))
    assert run.value == list(range(6))


async def test_for_each_failing_item_is_child_failed_with_a_fan_out_summary() -> None:
    """A failed item fails the step with TUBELESS_CHILD_FAILED and a bounded fan_out summary."""

    async def work(inputs: dict[str, Any], ctx: Any) -> str:
        if ctx.options == "bad":
            raise CodedError("ITEM_BAD", "item exploded")
        return str(ctx.options)

    child = define_pipeline(id="child", steps=[step("work", work)])
    parent = define_pipeline(
        id="parent",
        steps=[
            for_each_pipeline(
                "fan",
                child,
                items=lambda inputs, ctx: ["ok", "fine", "bad", "later"],
                key=lambda item, index: f"key-{item}",
                map_options=lambda item, index, inputs, ctx: item,
            )
        ],
    )

    with capture_trace() as trace:
        run = await parent.run(trace=trace)

    assert run.status == "failed"
    error = run.errors[0]
    assert (error.code, error.kind, error.phase, error.step_id) == (
        codes.CHILD_FAILED,
        "child",
        "execution",
        "fan",
    )
    assert error.source_code == "ITEM_BAD"
    fan_out = error.fan_out
    assert set(fan_out) >= {"failures", "failureCount", "omittedFailureCount"}
    assert fan_out["failureCount"] == 1
    assert fan_out["omittedFailureCount"] == 0
    [failure] = fan_out["failures"]
    assert set(failure) == {"index", "key", "keyTruncated", "cancelled", "error"}
    assert failure["index"] == 2
    assert failure["key"] == "key-bad"
    assert failure["keyTruncated"] is False
    assert failure["cancelled"] is False
    assert isinstance(failure["error"], dict)
    assert isinstance(failure["error"]["message"], str)
    assert "ITEM_BAD" in _source_codes(failure["error"])
    [failed] = [r for r in trace.records if r["name"] == "step.failed" and r["runId"] == run.run_id]
    assert failed["error"]["fanOut"] == fan_out


def _source_codes(node: dict[str, Any] | None) -> list[str]:
    found: list[str] = []
    while node is not None:
        if "sourceCode" in node:
            found.append(node["sourceCode"])
        node = node.get("cause")
    return found


async def test_for_each_fan_out_summary_is_bounded_to_32_failures() -> None:
    """Beyond 32 failed items the summary counts the rest as omittedFailureCount."""
    total = 34
    started = 0
    all_started = asyncio.Event()

    async def work(inputs: dict[str, Any], ctx: Any) -> None:
        nonlocal started
        started += 1
        if started == total:
            all_started.set()
        await all_started.wait()
        raise CodedError("ITEM_BAD")

    child = define_pipeline(id="child", steps=[step("work", work)])
    long_key = "k" * 1500
    parent = define_pipeline(
        id="parent",
        steps=[
            for_each_pipeline(
                "fan",
                child,
                items=lambda inputs, ctx: list(range(total)),
                key=lambda item, index: long_key if index == 0 else f"k{index}",
                map_options=lambda item, index, inputs, ctx: item,
                concurrency=total,
            )
        ],
    )

    run = await parent.run()

    fan_out = run.errors[0].fan_out
    assert fan_out["failureCount"] == total
    assert fan_out["omittedFailureCount"] == total - 32
    assert [f["index"] for f in fan_out["failures"]] == list(range(32))
    first = fan_out["failures"][0]
    assert first["keyTruncated"] is True
    assert first["key"] == "k" * 1024
    assert fan_out["failures"][1]["keyTruncated"] is False


async def test_fan_out_children_carry_item_key_and_parent_run_id() -> None:
    """Every record of a fan-out child run has itemKey = its key and parentRunId = the parent."""
    parent = define_pipeline(
        id="parent",
        steps=[
            for_each_pipeline(
                "fan",
                _double_child(),
                items=lambda inputs, ctx: [1, 2, 3],
                key=lambda item, index: f"item-{item}",
                map_options=lambda item, index, inputs, ctx: {"n": item},
                concurrency=2,
            )
        ],
    )

    with capture_trace() as trace:
        run = await parent.run(trace=trace)

    assert run.status == "completed", run.errors
    assert run.value == [2, 4, 6]
    children = _children_of(trace.records, run.run_id)
    assert sorted(r["itemKey"] for r in children) == ["item-1", "item-2", "item-3"]
    for started in children:
        records = trace.for_run(started["runId"])
        assert {r["itemKey"] for r in records} == {started["itemKey"]}
        assert {r["parentRunId"] for r in records} == {run.run_id}
        assert records[-1]["name"] == "pipeline.completed"
    assert all("itemKey" not in r for r in trace.for_run(run.run_id))


async def test_for_each_settles_every_running_child_before_the_step_returns() -> None:
    """After one item fails, the still-running siblings finish before the parent step ends."""
    siblings_started = 0
    siblings_running = asyncio.Event()
    release = asyncio.Event()
    settled: list[int] = []

    async def work(inputs: dict[str, Any], ctx: Any) -> int:
        nonlocal siblings_started
        index = ctx.options
        if index == 0:
            await siblings_running.wait()
            release.set()
            raise CodedError("ITEM_BAD")
        siblings_started += 1
        if siblings_started == 2:
            siblings_running.set()
        await release.wait()
        for _ in range(10):
            await asyncio.sleep(0)
        settled.append(index)
        return int(index)

    child = define_pipeline(id="child", steps=[step("work", work)])
    parent = define_pipeline(
        id="parent",
        steps=[
            for_each_pipeline(
                "fan",
                child,
                items=lambda inputs, ctx: [0, 1, 2],
                key=lambda item, index: str(item),
                map_options=lambda item, index, inputs, ctx: item,
                concurrency=3,
            )
        ],
    )

    with capture_trace() as trace:
        run = await parent.run(trace=trace)

    assert run.status == "failed"
    assert sorted(settled) == [1, 2]
    names = [(r["name"], r["runId"]) for r in trace.records]
    parent_failed = names.index(("step.failed", run.run_id))
    for started in _children_of(trace.records, run.run_id):
        assert names.index(("pipeline.completed", started["runId"])) < parent_failed
    assert [t for t in asyncio.all_tasks() if t is not asyncio.current_task()] == []


# -- iterate_pipeline -------------------------------------------------------------------------


def _looping(child: Any, transition: Any, *, max_iterations: Any = 5, first: int = 1) -> Any:
    """A parent whose one step ``loop`` iterates ``child`` on an integer state from ``first``."""
    return define_pipeline(
        id="parent",
        steps=[
            iterate_pipeline(
                "loop",
                child,
                max_iterations=max_iterations,
                initial_state=lambda inputs, ctx: first,
                map_options=lambda state, inputs, ctx: state,
                transition=transition,
            )
        ],
    )


def _counter_child(calls: list[Any]) -> Any:
    async def add_one(inputs: dict[str, Any], ctx: Any) -> int:
        calls.append(ctx.options)
        return int(ctx.options["count"]) + 1

    return define_pipeline(id="counter", steps=[step("add_one", add_one)])


async def test_iterate_runs_the_child_until_finish_and_returns_the_result() -> None:
    """Each iteration runs the child; finish's result is the step output."""
    calls: list[Any] = []
    transitions: list[tuple[Any, Any]] = []

    def transition(result: int, state: int, ctx: Any) -> dict[str, Any]:
        transitions.append((result, state))
        if result >= 3:
            return {"kind": "finish", "result": {"total": result}}
        return {"kind": "next", "state": result}

    parent = define_pipeline(
        id="parent",
        steps=[
            iterate_pipeline(
                "loop",
                _counter_child(calls),
                max_iterations=10,
                initial_state=lambda inputs, ctx: 0,
                map_options=lambda state, inputs, ctx: {"count": state},
                transition=transition,
            )
        ],
    )

    run = await parent.run()

    assert run.status == "completed", run.errors
    assert run.value == {"total": 3}
    assert calls == [{"count": 0}, {"count": 1}, {"count": 2}]
    assert transitions == [(1, 0), (2, 1), (3, 2)]


async def test_iterate_finish_may_publish_none() -> None:
    """A finish result of None is published: dependents still run and receive None."""
    received: list[Any] = []

    async def transition(result: Any, state: Any, ctx: Any) -> dict[str, Any]:
        return {"kind": "finish", "result": None}

    parent = define_pipeline(
        id="parent",
        steps=[
            iterate_pipeline(
                "loop",
                _counter_child([]),
                max_iterations=1,
                initial_state=lambda inputs, ctx: 0,
                map_options=lambda state, inputs, ctx: {"count": state},
                transition=transition,
            ),
            step("after", lambda inputs, ctx: received.append(inputs), depends_on=["loop"]),
        ],
    )

    run = await parent.run()

    assert run.status == "completed", run.errors
    assert received == [{"loop": None}]
    assert run.step("loop").status == "completed"


async def test_iterate_finish_on_the_last_allowed_iteration_succeeds() -> None:
    """finish on iteration max_iterations is not a limit error."""
    calls: list[Any] = []

    def transition(result: int, state: int, ctx: Any) -> dict[str, Any]:
        if result == 3:
            return {"kind": "finish", "result": result}
        return {"kind": "next", "state": result}

    parent = define_pipeline(
        id="parent",
        steps=[
            iterate_pipeline(
                "loop",
                _counter_child(calls),
                max_iterations=3,
                initial_state=lambda inputs, ctx: 0,
                map_options=lambda state, inputs, ctx: {"count": state},
                transition=transition,
            )
        ],
    )

    run = await parent.run()

    assert run.status == "completed", run.errors
    assert run.value == 3
    assert len(calls) == 3


async def test_iterate_next_at_the_bound_fails_with_iteration_limit_reached() -> None:
    """next on the last allowed iteration fails after exactly N child runs, never N + 1."""
    calls: list[Any] = []
    parent = define_pipeline(
        id="parent",
        steps=[
            iterate_pipeline(
                "loop",
                _counter_child(calls),
                max_iterations=3,
                initial_state=lambda inputs, ctx: 0,
                map_options=lambda state, inputs, ctx: {"count": state},
                transition=lambda result, state, ctx: {"kind": "next", "state": result},
            )
        ],
    )

    with capture_trace() as trace:
        run = await parent.run(trace=trace)

    assert run.status == "failed"
    error = run.errors[0]
    assert error.step_id == "loop"
    assert error.source_code == codes.ITERATION_LIMIT_REACHED
    assert "maxIterations=3" in error.message
    assert len(calls) == 3
    assert len(_children_of(trace.records, run.run_id)) == 3


@pytest.mark.parametrize(
    "decision",
    [
        pytest.param({"kind": "finish", "result": 1, "extra": True}, id="extra-key"),
        pytest.param({"kind": "stop", "result": 1}, id="wrong-kind"),
        pytest.param({"kind": "finish"}, id="finish-without-result"),
        pytest.param({"kind": "next"}, id="next-without-state"),
        pytest.param({"kind": "next", "result": 1}, id="next-with-result"),
        pytest.param({"kind": "finish", "state": 1}, id="finish-with-state"),
        pytest.param(None, id="none"),
        pytest.param("finish", id="string"),
        pytest.param([("kind", "finish"), ("result", 1)], id="list-of-pairs"),
    ],
)
async def test_iterate_invalid_transition_is_iteration_invalid_decision(decision: Any) -> None:
    """Anything but exactly {kind: next, state} or {kind: finish, result} is rejected."""
    calls: list[Any] = []
    parent = define_pipeline(
        id="parent",
        steps=[
            iterate_pipeline(
                "loop",
                _counter_child(calls),
                max_iterations=5,
                initial_state=lambda inputs, ctx: 0,
                map_options=lambda state, inputs, ctx: {"count": state},
                transition=lambda result, state, ctx: decision,
            )
        ],
    )

    run = await parent.run()

    assert run.status == "failed"
    assert run.errors[0].step_id == "loop"
    assert run.errors[0].source_code == codes.ITERATION_INVALID_DECISION
    assert len(calls) == 1


async def test_iterate_calls_initial_state_once_per_invocation() -> None:
    """initial_state runs once per step invocation, however many iterations follow."""
    initial_calls: list[Any] = []

    def initial_state(inputs: Any, ctx: Any) -> int:
        initial_calls.append(ctx.run_id)
        return 0

    def transition(result: int, state: int, ctx: Any) -> dict[str, Any]:
        if result >= 4:
            return {"kind": "finish", "result": result}
        return {"kind": "next", "state": result}

    parent = define_pipeline(
        id="parent",
        steps=[
            iterate_pipeline(
                "loop",
                _counter_child([]),
                max_iterations=10,
                initial_state=initial_state,
                map_options=lambda state, inputs, ctx: {"count": state},
                transition=transition,
            )
        ],
    )

    first = await parent.run()
    second = await parent.run()

    assert first.value == second.value == 4
    assert initial_calls == [first.run_id, second.run_id]


async def test_iterate_child_failure_never_reaches_transition() -> None:
    """A failed child fails the step with TUBELESS_CHILD_FAILED; transition is not called."""
    transitions: list[Any] = []

    async def explode(inputs: dict[str, Any], ctx: Any) -> None:
        raise CodedError("CHILD_BAD")

    def transition(result: Any, state: Any, ctx: Any) -> dict[str, Any]:
        transitions.append(result)
        return {"kind": "next", "state": state}

    child = define_pipeline(id="child", steps=[step("explode", explode)])
    parent = _looping(child, transition, first=0)

    run = await parent.run()

    assert run.status == "failed"
    assert run.errors[0].code == codes.CHILD_FAILED
    assert run.errors[0].kind == "child"
    assert run.errors[0].source_code == "CHILD_BAD"
    assert transitions == []


@pytest.mark.parametrize(
    "max_iterations",
    [
        pytest.param(0, id="zero"),
        pytest.param(-1, id="negative"),
        pytest.param(True, id="bool"),
        pytest.param(2.0, id="float"),
        pytest.param(2**53, id="unsafe"),
    ],
)
def test_iterate_max_iterations_must_be_a_positive_safe_integer(max_iterations: Any) -> None:
    """max_iterations outside 1..2**53-1 is a definition error."""
    with pytest.raises(PipelineDefinitionError) as raised:
        _looping(
            _counter_child([]),
            lambda result, state, ctx: {"kind": "finish", "result": 1},
            max_iterations=max_iterations,
            first=0,
        )
    assert all(e.code.startswith("TUBELESS_DEFINITION_") for e in raised.value.errors)
    assert any("max_iterations" in e.message for e in raised.value.errors)


async def test_iteration_children_carry_item_key_and_iteration_relation() -> None:
    """Iteration i has itemKey iteration-<i> and iteration = {runId, stepId, attemptId, index}."""

    async def leaf(inputs: dict[str, Any], ctx: Any) -> str:
        return "leaf"

    grandchild = define_pipeline(id="grandchild", steps=[step("leaf", leaf)])
    child = define_pipeline(id="child", steps=[from_pipeline("inner", grandchild)])

    def transition(result: Any, state: int, ctx: Any) -> dict[str, Any]:
        if state == 2:
            return {"kind": "finish", "result": state}
        return {"kind": "next", "state": state + 1}

    parent = _looping(child, transition)

    with capture_trace() as trace:
        run = await parent.run(trace=trace)

    assert run.status == "completed", run.errors
    wrapper_attempt = _attempt_of(trace.records, run.run_id, "loop")
    children = _children_of(trace.records, run.run_id)
    assert [r["itemKey"] for r in children] == ["iteration-1", "iteration-2"]
    for index, started in enumerate(children, start=1):
        expected = {
            "runId": run.run_id,
            "stepId": "loop",
            "attemptId": wrapper_attempt,
            "index": index,
        }
        for record in trace.for_run(started["runId"]):
            assert record["iteration"] == expected
            assert record["iteration"]["runId"] == record["parentRunId"]
            assert record["itemKey"] == f"iteration-{index}"
        [grand] = _children_of(trace.records, started["runId"])
        for record in trace.for_run(grand["runId"]):
            assert record["parentRunId"] == started["runId"]
            assert "iteration" not in record
            assert "itemKey" not in record
    assert all("iteration" not in r for r in trace.for_run(run.run_id))


# -- cancellation -----------------------------------------------------------------------------


async def _fan_out_run(work: Any, token: CancelToken, items: int = 3) -> tuple[Any, Any]:
    child = define_pipeline(id="child", steps=[step("work", work)])
    parent = define_pipeline(
        id="parent",
        steps=[
            for_each_pipeline(
                "fan",
                child,
                items=lambda inputs, ctx: list(range(items)),
                key=lambda item, index: f"k{index}",
                map_options=lambda item, index, inputs, ctx: item,
                concurrency=3,
            )
        ],
    )
    with capture_trace() as trace:
        run = await parent.run(signal=token, trace=trace)
    return run, trace


async def test_cancelling_a_fan_out_cancels_children_and_the_step() -> None:
    """Cancelling the token mid fan-out cancels each child; the step and run are cancelled."""
    token = CancelToken()
    started = 0
    never_started: list[int] = []
    observed: list[int] = []

    async def work(inputs: dict[str, Any], ctx: Any) -> None:
        nonlocal started
        if ctx.options >= 3:
            never_started.append(ctx.options)
        started += 1
        if started == 3:
            token.cancel("stop now")
        await ctx.signal.wait()
        observed.append(ctx.options)
        ctx.signal.raise_if_cancelled()

    run, trace = await _fan_out_run(work, token, items=5)

    assert sorted(observed) == [0, 1, 2]
    assert never_started == []
    assert run.status == "cancelled"
    report = run.step("fan")
    assert report.status == "cancelled"
    assert report.error is not None
    assert report.error.kind == "cancellation"
    assert report.error.code == codes.RUN_CANCELLED
    children = _children_of(trace.records, run.run_id)
    assert len(children) == 3
    for started_record in children:
        completed = trace.for_run(started_record["runId"])[-1]
        assert completed["name"] == "pipeline.completed"
        assert completed["payload"]["status"] == "cancelled"


async def test_fan_out_with_a_failed_and_cancelled_children_is_failed() -> None:
    """The step is cancelled only when every unsuccessful child was cancelled."""
    token = CancelToken()
    started = 0
    all_started = asyncio.Event()

    async def work(inputs: dict[str, Any], ctx: Any) -> None:
        nonlocal started
        started += 1
        if started == 3:
            all_started.set()
        await all_started.wait()
        if ctx.options == 0:
            token.cancel("stop now")
            raise CodedError("ITEM_BAD", "unrelated failure racing the cancellation")
        await ctx.signal.wait()
        ctx.signal.raise_if_cancelled()

    run, _ = await _fan_out_run(work, token)

    assert run.status == "failed"
    report = run.step("fan")
    assert report.status == "failed"
    assert report.error is not None
    assert report.error.code == codes.CHILD_FAILED
    fan_out = report.error.fan_out
    assert fan_out["failureCount"] == 3
    assert [(f["index"], f["cancelled"]) for f in fan_out["failures"]] == [
        (0, False),
        (1, True),
        (2, True),
    ]


# -- dry runs and skips of composed steps -----------------------------------------------------


async def test_composed_dry_run_skip_skips_the_whole_child_structurally() -> None:
    """dry_run='skip' on a composed step skips it in dry runs without calling any callback."""
    called: list[str] = []

    def initial_state(inputs: Any, ctx: Any) -> int:
        called.append("initial_state")
        return 0

    def items(inputs: Any, ctx: Any) -> list[int]:
        called.append("items")
        return [1]

    child = _double_child()
    parent = define_pipeline(
        id="parent",
        steps=[
            from_pipeline("single", child, dry_run="skip"),
            for_each_pipeline(
                "fan",
                child,
                items=items,
                key=lambda item, index: str(index),
                map_options=lambda item, index, inputs, ctx: {"n": item},
                dry_run="skip",
            ),
            iterate_pipeline(
                "loop",
                child,
                max_iterations=2,
                initial_state=initial_state,
                map_options=lambda state, inputs, ctx: {"n": state},
                transition=lambda result, state, ctx: {"kind": "finish", "result": result},
                dry_run="skip",
            ),
        ],
        targets=[],
        finalize=lambda outputs, ctx: sorted(outputs),
    )

    with capture_trace() as trace:
        run = await parent.run({"n": 1}, dry_run=True, trace=trace)

    assert run.status == "completed", run.errors
    assert [(s.id, s.status, s.reason) for s in run.steps] == [
        ("single", "skipped", "dry-run"),
        ("fan", "skipped", "dry-run"),
        ("loop", "skipped", "dry-run"),
    ]
    assert called == []
    assert _children_of(trace.records, run.run_id) == []


def test_composed_steps_accept_only_dry_run_skip() -> None:
    """A preview handler on a composed step is a definition error (children preview)."""
    with pytest.raises(PipelineDefinitionError) as raised:
        define_pipeline(
            id="parent",
            steps=[from_pipeline("sub", _double_child(), dry_run=lambda inputs, ctx: 1)],
        )
    assert raised.value.errors[0].code == codes.DEFINITION_STEP_INVALID


async def test_for_each_skip_publishes_the_whole_result_without_calling_items() -> None:
    """A fan-out skip value is the whole result list; items and children are not called."""
    called: list[str] = []

    def items(inputs: Any, ctx: Any) -> list[int]:
        called.append("items")
        return [1]

    parent = define_pipeline(
        id="parent",
        steps=[
            for_each_pipeline(
                "fan",
                _double_child(),
                items=items,
                key=lambda item, index: str(index),
                map_options=lambda item, index, inputs, ctx: {"n": item},
                skip=lambda inputs, ctx: {"reason": "cached", "value": ["cached"]},
            )
        ],
    )

    run = await parent.run()

    assert run.status == "completed", run.errors
    assert run.value == ["cached"]
    assert run.step("fan").reason == "policy"
    assert called == []


async def test_for_each_map_result_reshapes_the_ordered_results() -> None:
    """map_result receives the results in item order."""
    parent = define_pipeline(
        id="parent",
        steps=[
            for_each_pipeline(
                "fan",
                _double_child(),
                items=lambda inputs, ctx: [3, 1, 2],
                key=lambda item, index: str(item),
                map_options=lambda item, index, inputs, ctx: {"n": item},
                concurrency=lambda inputs, ctx: 2,
                map_result=lambda results: {"sum": sum(results), "all": results},
            )
        ],
    )

    run = await parent.run()

    assert run.status == "completed", run.errors
    assert run.value == {"sum": 12, "all": [6, 2, 4]}


# -- more failure, cancellation and progress cases ---------------------------------------------


async def test_for_each_items_failure_is_a_setup_error_without_fan_out() -> None:
    """items() raising fails the step with its code as source_code and no fan_out summary."""
    started: list[Any] = []

    def items(inputs: Any, ctx: Any) -> list[int]:
        raise CodedError("ITEMS_BAD")

    child = define_pipeline(
        id="child", steps=[step("w", lambda inputs, ctx: started.append(ctx.options))]
    )
    parent = define_pipeline(
        id="parent",
        steps=[
            for_each_pipeline(
                "fan",
                child,
                items=items,
                key=lambda item, index: str(index),
                map_options=lambda item, index, inputs, ctx: item,
            )
        ],
    )

    run = await parent.run()

    assert run.status == "failed"
    assert run.errors[0].step_id == "fan"
    assert run.errors[0].source_code == "ITEMS_BAD"
    assert run.errors[0].fan_out is None
    assert started == []


async def test_for_each_over_no_items_returns_an_empty_list() -> None:
    """An empty item list completes with [] and starts no child."""
    parent = define_pipeline(
        id="parent",
        steps=[
            for_each_pipeline(
                "fan",
                _double_child(),
                items=lambda inputs, ctx: [],
                key=lambda item, index: str(index),
                map_options=lambda item, index, inputs, ctx: item,
                concurrency=4,
            )
        ],
    )

    with capture_trace() as trace:
        run = await parent.run(trace=trace)

    assert run.status == "completed", run.errors
    assert run.value == []
    assert _children_of(trace.records, run.run_id) == []


async def test_child_concurrency_comes_only_from_controls() -> None:
    """A child run defaults to max_concurrency=1 whatever the parent uses; controls raise it."""
    active = 0
    peaks: list[int] = []

    async def work(inputs: dict[str, Any], ctx: Any) -> None:
        nonlocal active
        active += 1
        peaks.append(active)
        for _ in range(5):
            await asyncio.sleep(0)
        active -= 1

    child = define_pipeline(
        id="child",
        steps=[step(name, work) for name in ("a", "b", "c")],
        targets=[],
        finalize=lambda outputs, ctx: None,
    )
    default = define_pipeline(id="default", steps=[from_pipeline("sub", child)])
    raised = define_pipeline(
        id="raised", steps=[from_pipeline("sub", child, controls={"max_concurrency": 3})]
    )

    first = await default.run(max_concurrency=4)
    default_peak = max(peaks)
    peaks.clear()
    second = await raised.run()

    assert (first.status, second.status) == ("completed", "completed")
    assert default_peak == 1
    assert max(peaks) == 3


async def test_cancelled_single_child_cancels_the_parent_step() -> None:
    """A child cancelled through the shared token makes the parent step cancelled, not failed."""
    token = CancelToken()
    after: list[str] = []

    async def wait(inputs: dict[str, Any], ctx: Any) -> None:
        token.cancel("stop")
        await ctx.sleep(60)

    child = define_pipeline(id="child", steps=[step("wait", wait)])
    parent = define_pipeline(
        id="parent",
        steps=[
            from_pipeline("sub", child),
            step("after", lambda inputs, ctx: after.append("ran")),
        ],
        targets=[],
        finalize=lambda outputs, ctx: None,
    )

    run = await parent.run(signal=token)

    assert run.status == "cancelled"
    assert run.step("sub").status == "cancelled"
    assert run.step("after").status == "cancelled"
    assert all(e.kind == "cancellation" for e in run.errors)
    assert after == []


async def test_cancelling_an_iteration_stops_without_calling_transition() -> None:
    """A cancelled iteration child cancels the wrapper; no further iteration or transition."""
    token = CancelToken()
    calls: list[Any] = []
    transitions: list[Any] = []

    async def work(inputs: dict[str, Any], ctx: Any) -> int:
        calls.append(ctx.options)
        if ctx.options == 2:
            token.cancel("stop")
            await ctx.sleep(60)
        return int(ctx.options)

    def transition(result: int, state: int, ctx: Any) -> dict[str, Any]:
        transitions.append(result)
        return {"kind": "next", "state": state + 1}

    child = define_pipeline(id="child", steps=[step("work", work)])
    parent = _looping(child, transition, max_iterations=10)

    run = await parent.run(signal=token)

    assert run.status == "cancelled"
    assert run.step("loop").status == "cancelled"
    assert calls == [1, 2]
    assert transitions == [1]


async def test_iteration_progress_counts_finished_iterations() -> None:
    """Wrapper progress reads '<child name> <i> of at most <N>' with completed = finished."""

    def transition(result: Any, state: int, ctx: Any) -> dict[str, Any]:
        if state == 2:
            return {"kind": "finish", "result": state}
        return {"kind": "next", "state": state + 1}

    child = define_pipeline(
        id="child", name="Counter", steps=[step("w", lambda inputs, ctx: ctx.options)]
    )
    parent = _looping(child, transition)

    with capture_trace() as trace:
        run = await parent.run(trace=trace)

    assert run.status == "completed", run.errors
    progress = [
        r["payload"]["progress"]
        for r in trace.for_run(run.run_id)
        if r["name"] == "step.running" and "progress" in r["payload"]
    ]
    summaries = [{k: v for k, v in p.items() if k != "details"} for p in progress]
    assert summaries[0] == {"completed": 0, "message": "Counter 1 of at most 5"}
    assert {"completed": 1, "message": "Counter 2 of at most 5"} in summaries
    assert all(p["message"].startswith("Counter ") for p in progress)
    assert [p["completed"] for p in progress] == sorted(p["completed"] for p in progress)
    assert progress[-1]["completed"] == 2
    assert progress[-1]["details"] == [
        {"id": "iteration-2", "name": "Counter 2", "depth": 0, "status": "completed"},
        {"id": "iteration-1", "name": "Counter 1", "depth": 0, "status": "completed"},
    ]


async def test_iteration_progress_keeps_the_current_and_31_recent_groups() -> None:
    """Past 32 iterations the rows are the current one, 31 recent ones, then a count row."""
    child = define_pipeline(id="child", steps=[step("w", lambda inputs, ctx: ctx.options)])
    parent = define_pipeline(
        id="parent",
        steps=[
            iterate_pipeline(
                "loop",
                child,
                max_iterations=50,
                initial_state=lambda inputs, ctx: 1,
                map_options=lambda state, inputs, ctx: state,
                transition=lambda result, state, ctx: (
                    {"kind": "finish", "result": state}
                    if state == 40
                    else {"kind": "next", "state": state + 1}
                ),
            )
        ],
    )
    with capture_trace() as trace:
        run = await parent.run(trace=trace)
    assert run.status == "completed", run.errors
    rows = [
        r["payload"]["progress"]["details"]
        for r in trace.for_run(run.run_id)
        if r["name"] == "step.running" and "progress" in r["payload"]
    ]
    during = rows[-2]  # reported when iteration 40 started
    assert len(during) == 33
    assert during[0] == {
        "id": "iteration-40",
        "name": "Iteration 40",
        "depth": 0,
        "status": "running",
    }
    assert [row["id"] for row in during[1:32]] == [f"iteration-{i}" for i in range(39, 8, -1)]
    assert during[32] == {"id": "earlier", "label": "8 earlier iterations", "depth": 0}
