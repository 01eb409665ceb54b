"""Running a pipeline: the skip ladder, policy skips, fail-fast, statuses, validation,
finalization, attempts, error records and the entry points (UPSTREAM 1.2, 1.4 to 1.8, 7.5 to 7.11).
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import threading
import uuid
from collections.abc import Callable
from typing import Any

import pydantic
import pytest

from tests.fixtures.runs import error_shape, shape
from tubeless import (
    CancelToken,
    PipelineExecutionError,
    TubelessError,
    define_pipeline,
    from_pipeline,
    require_outputs,
    step,
)
from tubeless.testing import capture_trace

FINALIZE = "__finalize__"


class AppError(Exception):
    """An application error carrying its own ``code`` attribute."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


def returns(value: Any, calls: list[str] | None = None) -> Callable[..., Any]:
    """An async handler returning ``value`` (and recording its step id in ``calls``)."""

    async def run(inputs: dict[str, Any], ctx: Any) -> Any:
        if calls is not None:
            calls.append(ctx.step_id)
        return value

    return run


def raises(exc: BaseException, calls: list[str] | None = None) -> Callable[..., Any]:
    """An async handler raising ``exc``."""

    async def run(inputs: dict[str, Any], ctx: Any) -> Any:
        if calls is not None:
            calls.append(ctx.step_id)
        raise exc

    return run


# -- the skip ladder (item 5) ---------------------------------------------------------------------
def _ladder_pipeline() -> Any:
    return define_pipeline(
        id="ladder",
        steps=[
            step("a", returns("A")),
            step("b", returns("B"), depends_on="a"),
            step("s", returns("S"), dry_run="skip"),
            step("t", returns("T"), depends_on="s", dry_run="skip"),
            step("o", returns("O"), optional_depends_on="s"),
            step("g", returns("G"), skip_after_failure_of="a", dry_run="skip"),
        ],
        targets=["b", "t", "o", "g"],
    )


RUN = "run"
LADDER_CASES = [
    pytest.param(
        {},
        [
            ("a", RUN, None),
            ("b", RUN, None),
            ("s", RUN, None),
            ("t", RUN, None),
            ("o", RUN, None),
            ("g", RUN, None),
        ],
        id="no-controls-everything-runs",
    ),
    pytest.param(
        {"dry_run": True},
        [
            ("a", RUN, None),
            ("b", RUN, None),
            ("s", "dry-run", None),
            ("t", "unmet-dependency", "s"),
            ("o", RUN, None),
            ("g", "dry-run", None),
        ],
        id="dry-run-dependents-of-dry-run-skips-are-unmet",
    ),
    pytest.param(
        {"step_ids": ["b"]},
        [
            ("a", "filtered", None),
            ("b", "unmet-dependency", "a"),
            ("s", "filtered", None),
            ("t", "filtered", None),
            ("o", "filtered", None),
            ("g", "filtered", None),
        ],
        id="exact-step-without-its-prerequisite-is-unmet",
    ),
    pytest.param(
        {"step_ids": ["b", "t"], "dry_run": True},
        [
            ("a", "filtered", None),
            ("b", "unmet-dependency", "a"),
            ("s", "filtered", None),
            ("t", "unmet-dependency", "s"),
            ("o", "filtered", None),
            ("g", "filtered", None),
        ],
        id="unmet-dependency-wins-over-dry-run",
    ),
    pytest.param(
        {"step_ids": ["s", "o"], "dry_run": True},
        [
            ("a", "filtered", None),
            ("b", "filtered", None),
            ("s", "dry-run", None),
            ("t", "filtered", None),
            ("o", RUN, None),
            ("g", "filtered", None),
        ],
        id="filtered-wins-over-dry-run",
    ),
    pytest.param(
        {"targets": ["t"], "dry_run": True},
        [
            ("a", "filtered", None),
            ("b", "filtered", None),
            ("s", "dry-run", None),
            ("t", "unmet-dependency", "s"),
            ("o", "filtered", None),
            ("g", "filtered", None),
        ],
        id="target-closure-in-a-dry-run",
    ),
    pytest.param(
        {"targets": ["g"]},
        [
            ("a", RUN, None),
            ("b", "filtered", None),
            ("s", "filtered", None),
            ("t", "filtered", None),
            ("o", "filtered", None),
            ("g", RUN, None),
        ],
        id="target-pulls-in-its-failure-gate",
    ),
    pytest.param(
        {"targets": ["o"]},
        [
            ("a", "filtered", None),
            ("b", "filtered", None),
            ("s", "filtered", None),
            ("t", "filtered", None),
            ("o", RUN, None),
            ("g", "filtered", None),
        ],
        id="optional-only-input-is-not-pulled-in",
    ),
]


@pytest.mark.parametrize(("controls", "expected"), LADDER_CASES)
async def test_run_applies_the_same_skip_ladder_as_the_plan(
    controls: dict[str, Any], expected: list[tuple[str, str, str | None]]
) -> None:
    pipeline = _ladder_pipeline()
    plan = pipeline.plan(**controls)
    run = await pipeline.run(**controls)

    planned = [(s.id, s.skip_reason or RUN, s.dependency_id) for s in plan.steps]
    ran = [
        (r.id, r.reason if r.status == "skipped" else r.status, r.dependency_id) for r in run.steps
    ]
    assert planned == expected
    assert ran == [(i, "completed" if d == RUN else d, dep) for i, d, dep in expected]
    assert run.status == "completed"


def _failing_ladder_pipeline(calls: list[str]) -> Any:
    return define_pipeline(
        id="failing-ladder",
        steps=[
            step("ok", returns(1, calls)),
            step("bad1", raises(ValueError("bad1"), calls)),
            step("bad2", raises(ValueError("bad2"), calls)),
            step("c", returns(3, calls), depends_on=["ok", "bad1", "bad2"]),
            step("gated", returns(4, calls), depends_on="bad2", skip_after_failure_of="bad1"),
            step("preview", returns(5, calls), depends_on="bad1", dry_run="skip"),
            step("gated_ok", returns(6, calls), skip_after_failure_of="ok"),
        ],
        targets=["c", "gated", "preview", "gated_ok"],
    )


@pytest.mark.parametrize(
    ("controls", "expected"),
    [
        pytest.param(
            {"continue_on_error": True, "dry_run": True},
            [
                ("ok", "completed", None, None),
                ("bad1", "failed", None, None),
                ("bad2", "failed", None, None),
                ("c", "skipped", "unmet-dependency", "bad1"),
                ("gated", "skipped", "failed-dependency", "bad1"),
                ("preview", "skipped", "unmet-dependency", "bad1"),
                ("gated_ok", "completed", None, None),
            ],
            id="gate-then-first-unmet-then-dry-run",
        ),
        pytest.param(
            {"continue_on_error": True, "step_ids": ["ok", "bad1", "bad2"]},
            [
                ("ok", "completed", None, None),
                ("bad1", "failed", None, None),
                ("bad2", "failed", None, None),
                ("c", "skipped", "filtered", None),
                ("gated", "skipped", "filtered", None),
                ("preview", "skipped", "filtered", None),
                ("gated_ok", "skipped", "filtered", None),
            ],
            id="filtered-wins-over-failed-gates",
        ),
    ],
)
async def test_run_ladder_orders_failed_gates_before_unmet_dependencies_before_dry_run(
    controls: dict[str, Any], expected: list[tuple[str, str, str | None, str | None]]
) -> None:
    calls: list[str] = []
    run = await _failing_ladder_pipeline(calls).run(**controls)

    assert shape(run) == expected
    ran = [report.id for report in run.steps if report.status in ("completed", "failed")]
    assert calls == ran
    assert run.status == "failed"


# -- policy skips (item 6) ------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("decision", "message", "published"),
    [
        pytest.param("  cached upstream  ", "cached upstream", None, id="reason-string-trimmed"),
        pytest.param(True, None, None, id="true"),
        pytest.param({"reason": "cached", "value": 42}, "cached", 42, id="reason-and-value"),
        pytest.param({"reason": " cached "}, "cached", None, id="reason-without-value"),
        pytest.param({"reason": "cached", "value": None}, "cached", None, id="explicit-none"),
    ],
)
async def test_policy_skip_publishes_a_value_and_unlocks_required_dependents(
    decision: Any, message: str | None, published: Any
) -> None:
    calls: list[str] = []
    seen: list[dict[str, Any]] = []

    async def dependent(inputs: dict[str, Any], ctx: Any) -> str:
        seen.append(dict(inputs))
        return "dependent ran"

    pipeline = define_pipeline(
        id="policy",
        steps=[
            step("a", returns("handler value", calls), skip=lambda inputs, ctx: decision),
            step("b", dependent, depends_on="a"),
            step("c", returns("gated", calls), skip_after_failure_of="a"),
        ],
        targets=[],
        finalize=require_outputs(["a", "b", "c"]),
    )
    run = await pipeline.run()

    assert shape(run) == [
        ("a", "skipped", "policy", None),
        ("b", "completed", None, None),
        ("c", "completed", None, None),
    ]
    skipped = run.step("a")
    assert (skipped.message, skipped.attempt_id, skipped.started_at_ms) == (message, None, None)
    assert calls == ["c"]
    assert seen == [{"a": published}]
    assert run.status == "completed"
    assert run.value == {"a": published, "b": "dependent ran", "c": "gated"}


@pytest.mark.parametrize(
    "decision",
    [
        pytest.param(None, id="none"),
        pytest.param(False, id="false"),
        pytest.param("", id="empty-string"),
        pytest.param("   ", id="blank-string"),
        pytest.param({"reason": "", "value": 1}, id="empty-reason"),
        pytest.param({"reason": "  ", "value": 1}, id="blank-reason"),
    ],
)
async def test_policy_predicate_saying_run_runs_the_handler(decision: Any) -> None:
    calls: list[str] = []
    pipeline = define_pipeline(
        id="policy-run", steps=[step("a", returns("ran", calls), skip=lambda i, c: decision)]
    )
    run = await pipeline.run()

    assert shape(run) == [("a", "completed", None, None)]
    assert calls == ["a"]
    assert run.value == "ran"


async def test_skip_predicate_receives_the_step_inputs_and_a_context() -> None:
    seen: list[tuple[dict[str, Any], str, Any]] = []

    def predicate(inputs: dict[str, Any], ctx: Any) -> None:
        seen.append((dict(inputs), ctx.step_id, ctx.options))

    pipeline = define_pipeline(
        id="predicate-inputs",
        steps=[
            step("a", returns("A")),
            step("b", returns("B"), depends_on="a", skip=predicate),
        ],
    )
    await pipeline.run({"opt": 1})

    assert seen == [({"a": "A"}, "b", {"opt": 1})]


async def test_policy_skipped_value_goes_through_output_schema() -> None:
    seen: list[dict[str, Any]] = []

    async def dependent(inputs: dict[str, Any], ctx: Any) -> None:
        seen.append(dict(inputs))

    pipeline = define_pipeline(
        id="policy-schema",
        steps=[
            step(
                "a",
                returns(0),
                output_schema=int,
                skip=lambda i, c: {"reason": "cached", "value": "7"},
            ),
            step("b", dependent, depends_on="a"),
        ],
    )
    run = await pipeline.run()

    assert shape(run) == [("a", "skipped", "policy", None), ("b", "completed", None, None)]
    assert seen == [{"a": 7}]
    # Validating the published value opens an attempt.
    assert run.step("a").attempt_id == f"{run.run_id}:attempt:1"


async def test_policy_skipped_value_rejected_by_output_schema_fails_the_step() -> None:
    calls: list[str] = []
    pipeline = define_pipeline(
        id="policy-rejected",
        steps=[
            step(
                "a",
                returns(0, calls),
                output_schema=int,
                skip=lambda i, c: {"reason": "cached", "value": "seven-SECRET"},
            ),
            step("b", returns("B", calls), depends_on="a"),
        ],
    )
    run = await pipeline.run()

    assert shape(run) == [
        ("a", "failed", None, None),
        ("b", "skipped", "fail-fast", "a"),
    ]
    assert error_shape(run) == [
        ("TUBELESS_STEP_OUTPUT_VALIDATION_FAILED", "validation", "execution", "a")
    ]
    error = run.errors[0]
    assert error.issues
    assert "seven-SECRET" not in error.format()
    assert run.step("a").attempt_id is not None
    assert calls == []


async def test_skip_predicate_that_raises_fails_the_step_with_an_attempt() -> None:
    calls: list[str] = []
    original = AppError("APP_PREDICATE", "predicate broke")

    def predicate(inputs: dict[str, Any], ctx: Any) -> bool:
        raise original

    pipeline = define_pipeline(
        id="predicate-raises", steps=[step("a", returns("A", calls), skip=predicate)]
    )
    run = await pipeline.run()

    assert shape(run) == [("a", "failed", None, None)]
    report = run.step("a")
    assert report.attempt_id == f"{run.run_id}:attempt:1"
    assert report.started_at_ms is not None
    assert error_shape(run) == [("TUBELESS_STEP_FAILED", "step", "execution", "a")]
    assert (run.errors[0].message, run.errors[0].source_code) == (
        "predicate broke",
        "APP_PREDICATE",
    )
    assert calls == []
    with pytest.raises(PipelineExecutionError) as caught:
        await pipeline.run_or_raise()
    assert caught.value.__cause__ is original


@pytest.mark.parametrize(
    "decision",
    [
        pytest.param(42, id="number"),
        pytest.param(["skip"], id="list"),
        pytest.param({"why": "x"}, id="mapping-without-reason"),
        pytest.param({"reason": 3}, id="non-string-reason"),
        pytest.param({"reason": "r", "value": 1, "extra": 2}, id="unknown-key"),
    ],
)
async def test_invalid_skip_decision_fails_the_step(decision: Any) -> None:
    calls: list[str] = []
    pipeline = define_pipeline(
        id="bad-decision",
        steps=[step("a", returns("A", calls), skip=lambda i, c: decision)],
    )
    run = await pipeline.run()

    assert shape(run) == [("a", "failed", None, None)]
    assert error_shape(run) == [("TUBELESS_STEP_FAILED", "step", "execution", "a")]
    assert run.errors[0].source_code == "TUBELESS_SKIP_DECISION_INVALID"
    assert calls == []


async def test_structural_skips_and_failures_do_not_unlock_required_dependents() -> None:
    calls: list[str] = []
    seen: dict[str, dict[str, Any]] = {}

    def recording(value: str) -> Callable[..., Any]:
        async def run(inputs: dict[str, Any], ctx: Any) -> str:
            seen[ctx.step_id] = dict(inputs)
            return value

        return run

    pipeline = define_pipeline(
        id="no-unlock",
        steps=[
            step("policy", returns("P", calls), skip=lambda i, c: "not needed"),
            step("preview", returns("S", calls), dry_run="skip"),
            step("broken", raises(ValueError("broken"), calls)),
            step("after_policy", recording("1"), depends_on="policy"),
            step("after_preview", recording("2"), depends_on="preview"),
            step("after_broken", recording("3"), depends_on="broken"),
            step(
                "optional",
                recording("4"),
                optional_depends_on=["policy", "preview", "broken"],
            ),
        ],
        targets=["after_policy", "after_preview", "after_broken", "optional"],
        finalize=lambda outputs, ctx: dict(outputs),
    )
    run = await pipeline.run(dry_run=True, continue_on_error=True)

    assert shape(run) == [
        ("policy", "skipped", "policy", None),
        ("preview", "skipped", "dry-run", None),
        ("broken", "failed", None, None),
        ("after_policy", "completed", None, None),
        ("after_preview", "skipped", "unmet-dependency", "preview"),
        ("after_broken", "skipped", "unmet-dependency", "broken"),
        ("optional", "completed", None, None),
    ]
    assert calls == ["broken"]
    # Optional inputs carry only published slots; a policy skip publishes None.
    assert seen == {"after_policy": {"policy": None}, "optional": {"policy": None}}
    assert run.value == {"policy": None, "after_policy": "1", "optional": "4"}


@pytest.mark.parametrize(
    ("dry_run", "expected", "called"),
    [
        pytest.param(False, {"a": 1, "b": "run saw 1"}, ["run a", "run b"], id="normal-run"),
        pytest.param(True, {"a": 2, "b": "run saw 2"}, ["preview a", "run b"], id="dry-run"),
    ],
)
async def test_dry_run_preview_handler_replaces_run_and_is_validated_like_an_output(
    dry_run: bool, expected: dict[str, Any], called: list[str]
) -> None:
    calls: list[str] = []

    def run_a(inputs: dict[str, Any], ctx: Any) -> str:
        calls.append("run a")
        return "1"

    async def preview_a(inputs: dict[str, Any], ctx: Any) -> str:
        calls.append("preview a")
        assert ctx.dry_run is True
        return "2"

    async def run_b(inputs: dict[str, Any], ctx: Any) -> str:
        calls.append("run b")
        assert ctx.dry_run is dry_run
        return f"run saw {inputs['a']!r}"

    pipeline = define_pipeline(
        id="preview",
        steps=[
            step("a", run_a, dry_run=preview_a, output_schema=int),
            step("b", run_b, depends_on="a"),
        ],
        finalize=lambda outputs, ctx: dict(outputs),
    )
    run = await pipeline.run(dry_run=dry_run)

    assert (run.status, run.dry_run, run.value) == ("completed", dry_run, expected)
    assert calls == called


# -- fail-fast and continue_on_error (item 7) -----------------------------------------------------
async def test_fail_fast_marks_remaining_steps_keeps_planned_skips_and_does_not_finalize() -> None:
    calls: list[str] = []
    finalizer_calls: list[Any] = []
    pipeline = define_pipeline(
        id="fail-fast",
        steps=[
            step("a", returns(1, calls)),
            step("b", raises(ValueError("b broke"), calls)),
            step("c", returns(3, calls)),
            step("d", returns(4, calls), depends_on="b"),
            step("s", returns(5, calls), dry_run="skip"),
            step("t", returns(6, calls), depends_on="s"),
            step("e", returns(7, calls), skip_after_failure_of="b"),
        ],
        targets=["c", "d", "t", "e"],
        finalize=lambda outputs, ctx: finalizer_calls.append(outputs),
    )
    run = await pipeline.run(dry_run=True)

    assert shape(run) == [
        ("a", "completed", None, None),
        ("b", "failed", None, None),
        ("c", "skipped", "fail-fast", "b"),
        ("d", "skipped", "fail-fast", "b"),
        ("s", "skipped", "dry-run", None),
        ("t", "skipped", "unmet-dependency", "s"),
        ("e", "skipped", "fail-fast", "b"),
    ]
    fail_fast = "Not run because fail-fast stopped after b failed."
    assert [r.message for r in run.steps] == [
        None,
        None,
        fail_fast,
        fail_fast,
        None,
        None,
        fail_fast,
    ]
    assert calls == ["a", "b"]
    assert error_shape(run) == [("TUBELESS_STEP_FAILED", "step", "execution", "b")]
    assert (run.status, run.finalized, run.value) == ("failed", False, None)
    assert finalizer_calls == []


async def test_continue_on_error_runs_independent_steps_and_finalizes_partial_outputs() -> None:
    calls: list[str] = []
    seen: list[dict[str, Any]] = []

    async def optional(inputs: dict[str, Any], ctx: Any) -> int:
        seen.append(dict(inputs))
        return 8

    pipeline = define_pipeline(
        id="continue",
        steps=[
            step("a", returns(1, calls)),
            step("b", raises(ValueError("b broke"), calls)),
            step("c", returns(3, calls)),
            step("d", returns(4, calls), depends_on="b"),
            step("e", returns(5, calls), skip_after_failure_of="b"),
            step("h", optional, optional_depends_on="b"),
        ],
        targets=["c", "d", "e", "h"],
        finalize=lambda outputs, ctx: dict(outputs),
    )
    run = await pipeline.run(continue_on_error=True)

    assert shape(run) == [
        ("a", "completed", None, None),
        ("b", "failed", None, None),
        ("c", "completed", None, None),
        ("d", "skipped", "unmet-dependency", "b"),
        ("e", "skipped", "failed-dependency", "b"),
        ("h", "completed", None, None),
    ]
    assert calls == ["a", "b", "c"]
    assert seen == [{}]
    assert error_shape(run) == [("TUBELESS_STEP_FAILED", "step", "execution", "b")]
    assert (run.status, run.finalized) == ("failed", True)
    assert run.value == {"a": 1, "c": 3, "h": 8}

    with pytest.raises(PipelineExecutionError) as caught:
        await pipeline.run_or_raise(continue_on_error=True)
    assert caught.value.run.status == "failed"
    assert caught.value.run.finalized is True


# -- statuses and run_or_raise (item 8) -----------------------------------------------------------
async def _fail_after_cancelling(inputs: dict[str, Any], ctx: Any) -> None:
    ctx.signal.cancel("stop")
    raise ValueError("unrelated failure")


@pytest.mark.parametrize(
    ("handler", "precancel", "status", "codes"),
    [
        pytest.param(returns(1), False, "completed", [], id="no-errors-completed"),
        pytest.param(
            raises(ValueError("x")), False, "failed", ["TUBELESS_STEP_FAILED"], id="failure"
        ),
        pytest.param(
            returns(1), True, "cancelled", ["TUBELESS_RUN_CANCELLED"], id="only-cancellations"
        ),
        pytest.param(
            _fail_after_cancelling,
            False,
            "failed",
            ["TUBELESS_STEP_FAILED", "TUBELESS_RUN_CANCELLED"],
            id="failure-and-cancellation-mixed",
        ),
    ],
)
async def test_run_status_is_derived_from_the_errors(
    handler: Callable[..., Any], precancel: bool, status: str, codes: list[str]
) -> None:
    token = CancelToken()
    if precancel:
        token.cancel("before start")
    # "b" is independent, so with continue_on_error it is runnable whatever "a" does.
    pipeline = define_pipeline(id="status", steps=[step("a", handler), step("b", returns(2))])
    run = await pipeline.run(signal=token, continue_on_error=True)

    assert run.status == status
    assert [e.code for e in run.errors] == codes
    assert run.ok is (status == "completed")


@pytest.mark.parametrize(
    ("handler", "precancel", "status"),
    [
        pytest.param(raises(ValueError("boom")), False, "failed", id="failed"),
        pytest.param(returns(1), True, "cancelled", id="cancelled"),
    ],
)
async def test_run_or_raise_raises_execution_error_with_the_run_record(
    handler: Callable[..., Any], precancel: bool, status: str
) -> None:
    token = CancelToken()
    if precancel:
        token.cancel("before start")
    pipeline = define_pipeline(id="raise", steps=[step("a", handler)])

    with pytest.raises(PipelineExecutionError) as caught:
        await pipeline.run_or_raise(signal=token)

    error = caught.value
    assert error.run.status == status
    assert error.code == error.run.errors[0].code
    assert str(error) == f"Pipeline raise {status}: {error.run.errors[0].format()}"


async def test_run_or_raise_keeps_the_original_exception_and_its_code() -> None:
    original = AppError("APP_DOWN", "service down")
    pipeline = define_pipeline(id="orig", steps=[step("a", raises(original))])

    with pytest.raises(PipelineExecutionError) as caught:
        await pipeline.run_or_raise()

    assert caught.value.code == "TUBELESS_STEP_FAILED"
    assert caught.value.source_code == "APP_DOWN"
    assert caught.value.__cause__ is original
    assert caught.value.run.errors[0].source_code == "APP_DOWN"


async def test_source_code_reaches_through_a_child_pipeline() -> None:
    child = define_pipeline(
        id="child", steps=[step("inner", raises(AppError("APP_DOWN", "service down")))]
    )
    parent = define_pipeline(id="parent", steps=[from_pipeline("call", child)])

    with pytest.raises(PipelineExecutionError) as caught:
        await parent.run_or_raise()

    assert error_shape(caught.value.run) == [
        ("TUBELESS_CHILD_FAILED", "child", "execution", "call")
    ]
    assert caught.value.code == "TUBELESS_CHILD_FAILED"
    assert caught.value.source_code == "APP_DOWN"
    assert caught.value.__cause__ is not None


# -- validation (item 9) --------------------------------------------------------------------------
async def test_options_are_validated_once_before_any_step() -> None:
    events: list[str] = []

    class Options(pydantic.BaseModel):
        count: int
        label: str

        @pydantic.field_validator("label")
        @classmethod
        def _record(cls, value: str) -> str:
            events.append("validate")
            return value.upper()

    seen: list[Any] = []

    def recording(inputs: dict[str, Any], ctx: Any) -> None:
        events.append(ctx.step_id)
        seen.append(ctx.options)

    pipeline = define_pipeline(
        id="options",
        steps=[step("a", recording), step("b", recording), step("c", recording)],
        options_schema=Options,
    )
    run = await pipeline.run({"count": "3", "label": "x"})

    assert run.status == "completed"
    assert events == ["validate", "a", "b", "c"]
    assert seen == [Options.model_construct(count=3, label="X")] * 3
    assert seen[0] is seen[1] is seen[2]


async def test_rejected_options_fail_before_any_step_without_quoting_the_value() -> None:
    secret = "hunter2-SECRET-value"
    calls: list[str] = []

    class Options(pydantic.BaseModel):
        count: int
        label: str

    pipeline = define_pipeline(
        id="options", steps=[step("a", returns("A", calls))], options_schema=Options
    )
    with capture_trace() as trace:
        run = await pipeline.run({"count": secret, "label": "x"}, trace=trace)

    assert error_shape(run) == [
        ("TUBELESS_OPTIONS_VALIDATION_FAILED", "validation", "execution", None)
    ]
    error = run.errors[0]
    assert [issue.path for issue in error.issues] == [("count",)]
    assert error.message.startswith("Pipeline options options validation failed: count: ")
    assert (run.status, run.steps, run.finalized, calls) == ("failed", (), False, [])
    assert secret not in error.format()
    assert all(secret not in issue.message for issue in error.issues)
    assert secret not in json.dumps(trace.records)
    with pytest.raises(PipelineExecutionError) as caught:
        await pipeline.run_or_raise({"count": secret, "label": "x"})
    assert secret not in str(caught.value)


async def test_step_output_is_validated_once_and_transformed_before_dependents_see_it() -> None:
    validations: list[Any] = []

    class Counted(pydantic.BaseModel):
        n: int

        @pydantic.field_validator("n")
        @classmethod
        def _record(cls, value: int) -> int:
            validations.append(value)
            return value

    seen: list[dict[str, Any]] = []

    async def consumer(inputs: dict[str, Any], ctx: Any) -> None:
        seen.append(dict(inputs))

    pipeline = define_pipeline(
        id="outputs",
        steps=[
            step("number", returns("42"), output_schema=int),
            step("model", returns({"n": "5"}), output_schema=Counted),
            step("consumer", consumer, depends_on=["number", "model"]),
        ],
    )
    run = await pipeline.run()

    assert run.status == "completed"
    assert validations == [5]  # before building the expected model below, which validates too
    assert seen == [{"number": 42, "model": Counted(n=5)}]
    assert type(seen[0]["number"]) is int


async def test_step_output_rejected_by_schema_fails_with_output_validation_code() -> None:
    pipeline = define_pipeline(
        id="bad-output",
        steps=[step("a", returns("not a number"), output_schema=int), step("b", returns(2))],
    )
    run = await pipeline.run()

    assert shape(run) == [("a", "failed", None, None), ("b", "skipped", "fail-fast", "a")]
    assert error_shape(run) == [
        ("TUBELESS_STEP_OUTPUT_VALIDATION_FAILED", "validation", "execution", "a")
    ]
    assert run.errors[0].issues


async def test_final_result_is_validated_once_and_value_is_what_the_schema_produced() -> None:
    validations: list[Any] = []

    class Result(pydantic.BaseModel):
        total: int

        @pydantic.field_validator("total")
        @classmethod
        def _record(cls, value: int) -> int:
            validations.append(value)
            return value

    pipeline = define_pipeline(
        id="result",
        steps=[step("a", returns({"total": "3"}))],
        result_schema=Result,
    )
    run = await pipeline.run()

    assert run.status == "completed"
    assert validations == [3]  # before building the expected model below, which validates too
    assert type(run.value) is Result
    assert run.value == Result(total=3)


async def test_final_result_transformed_by_an_adapter_type() -> None:
    pipeline = define_pipeline(id="result", steps=[step("a", returns("5"))], result_schema=int)

    assert await pipeline.run_or_raise() == 5


async def test_final_result_rejected_by_schema_fails_finalization() -> None:
    pipeline = define_pipeline(
        id="result", steps=[step("a", returns("nope-SECRET"))], result_schema=int
    )
    run = await pipeline.run()

    assert shape(run) == [("a", "completed", None, None)]
    assert error_shape(run) == [
        ("TUBELESS_FINAL_RESULT_VALIDATION_FAILED", "validation", "finalization", FINALIZE)
    ]
    assert run.errors[0].issues
    assert "nope-SECRET" not in run.errors[0].format()
    assert (run.status, run.finalized, run.value) == ("failed", False, None)


# -- finalization (item 10) -----------------------------------------------------------------------
def _two_steps(**b_options: Any) -> list[Any]:
    return [step("a", returns("A")), step("b", returns("B"), **b_options)]


@pytest.mark.parametrize(
    ("steps", "finalize", "controls", "missing", "expected_steps"),
    [
        pytest.param(
            _two_steps(dry_run="skip"),
            lambda s: require_outputs(["a", "b"]),
            {"dry_run": True},
            "b",
            [("a", "completed", None, None), ("b", "skipped", "dry-run", None)],
            id="dry-run-skipped-step",
        ),
        pytest.param(
            _two_steps(dry_run="skip"),
            lambda s: s[1],
            {"dry_run": True},
            "b",
            [("a", "completed", None, None), ("b", "skipped", "dry-run", None)],
            id="finalize-step-skipped-in-dry-run",
        ),
        pytest.param(
            _two_steps(),
            lambda s: require_outputs(["a", "b"]),
            {"step_ids": ["a"]},
            "b",
            [("a", "completed", None, None), ("b", "skipped", "filtered", None)],
            id="filtered-step",
        ),
        pytest.param(
            _two_steps(dry_run="skip", depends_on="a"),
            lambda s: require_outputs(["b", "a"]),
            {"dry_run": True, "step_ids": ["b"]},
            "b, a",
            [("a", "skipped", "filtered", None), ("b", "skipped", "unmet-dependency", "a")],
            id="several-missing-in-listed-order",
        ),
    ],
)
async def test_require_outputs_fails_finalization_when_a_listed_step_never_published(
    steps: list[Any],
    finalize: Callable[[list[Any]], Any],
    controls: dict[str, Any],
    missing: str,
    expected_steps: list[Any],
) -> None:
    pipeline = define_pipeline(id="required", steps=steps, targets=[], finalize=finalize(steps))
    run = await pipeline.run(**controls)

    assert shape(run) == expected_steps
    assert error_shape(run) == [
        ("TUBELESS_FINALIZATION_FAILED", "finalization", "finalization", FINALIZE)
    ]
    error = run.errors[0]
    assert error.source_code == "TUBELESS_REQUIRED_OUTPUTS_MISSING"
    assert error.message == f"Required pipeline outputs missing: {missing}"
    assert (run.status, run.finalized, run.value) == ("failed", False, None)


async def test_require_outputs_skips_its_function_when_outputs_are_missing() -> None:
    calls: list[Any] = []
    pipeline = define_pipeline(
        id="required",
        steps=_two_steps(dry_run="skip"),
        finalize=require_outputs(["b"], lambda outputs, ctx: calls.append(outputs)),
    )
    run = await pipeline.run(dry_run=True)

    assert run.errors[0].source_code == "TUBELESS_REQUIRED_OUTPUTS_MISSING"
    assert calls == []


@pytest.mark.parametrize(
    ("fn", "expected"),
    [
        pytest.param(None, {"a": None, "b": None}, id="without-function"),
        pytest.param(
            lambda outputs, ctx: ("called", dict(outputs), ctx.step_id),
            ("called", {"a": None, "b": None, "c": "C"}, FINALIZE),
            id="with-function",
        ),
    ],
)
async def test_require_outputs_counts_a_published_none(fn: Any, expected: Any) -> None:
    pipeline = define_pipeline(
        id="published-none",
        steps=[
            step("a", returns(None)),
            step("b", returns("B"), skip=lambda i, c: True),
            step("c", returns("C")),
        ],
        finalize=require_outputs(["a", "b"], fn),
    )
    run = await pipeline.run()

    assert (run.status, run.finalized, run.errors) == ("completed", True, ())
    assert run.value == expected


async def test_finalize_with_a_step_returns_that_steps_output() -> None:
    first = step("first", returns("FIRST"))
    pipeline = define_pipeline(
        id="by-step", steps=[first, step("second", returns("SECOND"))], finalize=first
    )

    assert await pipeline.run_or_raise() == "FIRST"


@pytest.mark.parametrize(
    ("controls", "expected"),
    [
        pytest.param({}, "LATE", id="last-in-execution-order"),
        pytest.param({"dry_run": True}, None, id="last-step-published-nothing"),
    ],
)
async def test_finalize_omitted_returns_the_last_steps_output(
    controls: dict[str, Any], expected: Any
) -> None:
    # Declared last is "early", but "late" runs last.
    pipeline = define_pipeline(
        id="implicit",
        steps=[
            step("late", returns("LATE"), depends_on="early", dry_run="skip"),
            step("early", returns("EARLY")),
        ],
    )
    run = await pipeline.run(**controls)

    assert (run.status, run.finalized, run.value) == ("completed", True, expected)


async def test_finalizer_that_raises_fails_finalization() -> None:
    original = AppError("APP_NO_RESULT", "no result today")

    def finalizer(outputs: dict[str, Any], ctx: Any) -> None:
        raise original

    pipeline = define_pipeline(id="fin", steps=[step("a", returns(1))], finalize=finalizer)
    run = await pipeline.run()

    assert shape(run) == [("a", "completed", None, None)]
    assert error_shape(run) == [
        ("TUBELESS_FINALIZATION_FAILED", "finalization", "finalization", FINALIZE)
    ]
    assert (run.errors[0].message, run.errors[0].source_code) == (
        "no result today",
        "APP_NO_RESULT",
    )
    assert (run.status, run.finalized, run.value) == ("failed", False, None)
    with pytest.raises(PipelineExecutionError) as caught:
        await pipeline.run_or_raise()
    assert caught.value.__cause__ is original


async def test_async_finalizer_receives_exactly_the_published_outputs() -> None:
    async def finalizer(outputs: dict[str, Any], ctx: Any) -> Any:
        return sorted(outputs.items())

    pipeline = define_pipeline(
        id="fin",
        steps=[
            step("a", returns(1)),
            step("b", returns(2), dry_run="skip"),
            step("c", returns(None)),
        ],
        finalize=finalizer,
    )

    assert await pipeline.run_or_raise(dry_run=True) == [("a", 1), ("c", None)]


# -- attempts and run ids (item 11) ---------------------------------------------------------------
def _base36(n: int) -> str:
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    return digits[n] if n < 36 else _base36(n // 36) + digits[n % 36]


async def test_attempt_ids_count_from_one_per_run_in_base36() -> None:
    seen: list[str | None] = []

    async def record(inputs: dict[str, Any], ctx: Any) -> None:
        seen.append(ctx.attempt_id)

    pipeline = define_pipeline(id="many", steps=[step(f"s{i:02}", record) for i in range(37)])
    run = await pipeline.run(run_id="r")

    ids = [r.attempt_id for r in run.steps]
    assert ids == [f"r:attempt:{_base36(n)}" for n in range(1, 38)]
    assert (ids[0], ids[8], ids[9], ids[10], ids[35], ids[36]) == (
        "r:attempt:1",
        "r:attempt:9",
        "r:attempt:a",
        "r:attempt:b",
        "r:attempt:10",
        "r:attempt:11",
    )
    assert seen == ids
    # A second run counts from 1 again.
    again = await pipeline.run(run_id="r2")
    assert again.steps[0].attempt_id == "r2:attempt:1"


async def test_only_executed_steps_have_attempts_and_start_times() -> None:
    pipeline = define_pipeline(
        id="attempts",
        steps=[
            step("done", returns(1)),
            step("policy", returns(2), skip=lambda i, c: "no"),
            step("policy_checked", returns(3), skip=lambda i, c: True, output_schema=None | int),
            step("broken", raises(ValueError("x"))),
            step("preview", returns(4), dry_run="skip"),
            step("unmet", returns(5), depends_on="broken"),
            step("filtered_out", returns(6)),
        ],
        targets=[],
    )
    run = await pipeline.run(
        run_id="r",
        dry_run=True,
        continue_on_error=True,
        step_ids=["done", "policy", "policy_checked", "broken", "preview", "unmet"],
    )

    assert [(r.id, r.status, r.attempt_id, r.started_at_ms is not None) for r in run.steps] == [
        ("done", "completed", "r:attempt:1", True),
        ("policy", "skipped", None, False),
        ("policy_checked", "skipped", "r:attempt:2", True),
        ("broken", "failed", "r:attempt:3", True),
        ("preview", "skipped", None, False),
        ("unmet", "skipped", None, False),
        ("filtered_out", "skipped", None, False),
    ]
    for report in run.steps:
        if report.started_at_ms is not None:
            assert report.finished_at_ms is not None
            assert report.started_at_ms <= report.finished_at_ms


async def test_cancelled_before_start_reports_have_no_attempt() -> None:
    token = CancelToken()
    token.cancel("not today")
    pipeline = define_pipeline(id="cancelled", steps=[step("a", returns(1)), step("b", returns(2))])
    run = await pipeline.run(signal=token)

    assert [(r.id, r.status, r.attempt_id, r.started_at_ms) for r in run.steps] == [
        ("a", "cancelled", None, None),
        ("b", "cancelled", None, None),
    ]


async def test_run_id_argument_is_honoured() -> None:
    seen: list[tuple[str, str]] = []

    async def record(inputs: dict[str, Any], ctx: Any) -> None:
        seen.append((ctx.run_id, ctx.step_id))

    pipeline = define_pipeline(id="ids", steps=[step("a", record)])
    run = await pipeline.run(run_id="my-run")

    assert run.run_id == "my-run"
    assert run.pipeline_id == "ids"
    assert seen == [("my-run", "a")]
    assert run.steps[0].attempt_id == "my-run:attempt:1"


async def test_default_run_id_is_the_pipeline_id_and_a_uuid4() -> None:
    pipeline = define_pipeline(id="ids", steps=[step("a", returns(1))])
    first, second = await pipeline.run(), await pipeline.run()

    for run in (first, second):
        match = re.fullmatch(r"ids:(?P<uuid>[0-9a-f-]{36})", run.run_id)
        assert match is not None, run.run_id
        assert uuid.UUID(match["uuid"]).version == 4
    assert first.run_id != second.run_id


# -- error records --------------------------------------------------------------------------------
async def test_errors_are_in_plan_order_then_finalization_whatever_the_failure_order() -> None:
    second_failed = asyncio.Event()

    async def fails_last(inputs: dict[str, Any], ctx: Any) -> None:
        async with asyncio.timeout(10):
            await second_failed.wait()
        raise ValueError("first in plan, failed last")

    async def fails_first(inputs: dict[str, Any], ctx: Any) -> None:
        second_failed.set()
        raise ValueError("second in plan, failed first")

    def finalizer(outputs: dict[str, Any], ctx: Any) -> None:
        raise ValueError("finalizer broke")

    pipeline = define_pipeline(
        id="order",
        steps=[step("x", fails_last), step("y", fails_first), step("z", returns(3))],
        finalize=finalizer,
    )
    run = await pipeline.run(max_concurrency=2, continue_on_error=True)

    assert error_shape(run) == [
        ("TUBELESS_STEP_FAILED", "step", "execution", "x"),
        ("TUBELESS_STEP_FAILED", "step", "execution", "y"),
        ("TUBELESS_FINALIZATION_FAILED", "finalization", "finalization", FINALIZE),
    ]
    assert [e.message for e in run.errors] == [
        "first in plan, failed last",
        "second in plan, failed first",
        "finalizer broke",
    ]


async def test_rejected_options_record_one_run_level_error_and_do_not_finalize() -> None:
    pipeline = define_pipeline(
        id="order", steps=[step("a", returns(1))], options_schema=int, finalize=lambda o, c: 1
    )
    run = await pipeline.run("not an int")

    assert error_shape(run) == [
        ("TUBELESS_OPTIONS_VALIDATION_FAILED", "validation", "execution", None)
    ]
    assert (run.steps, run.finalized) == ((), False)


async def _format_of(pipeline: Any, **controls: Any) -> str:
    run = await pipeline.run(**controls)
    return str(run.errors[0].format())


def _chained() -> Callable[..., Any]:
    async def run(inputs: dict[str, Any], ctx: Any) -> None:
        try:
            raise AppError("APP_ROOT", "root cause")
        except AppError as exc:
            raise ValueError("outer") from exc

    return run


@pytest.mark.parametrize(
    ("pipeline", "controls", "expected"),
    [
        pytest.param(
            define_pipeline(id="f", steps=[step("a", raises(ValueError("boom")))]),
            {},
            "execution at step a [TUBELESS_STEP_FAILED]: boom",
            id="plain-step-failure",
        ),
        pytest.param(
            define_pipeline(id="f", steps=[step("a", raises(AppError("APP_DOWN", "down")))]),
            {},
            "execution at step a [TUBELESS_STEP_FAILED] (APP_DOWN): down",
            id="step-failure-with-source-code",
        ),
        pytest.param(
            define_pipeline(id="f", steps=[step("a", _chained())]),
            {},
            "execution at step a [TUBELESS_STEP_FAILED] (APP_ROOT): outer; "
            "caused by APP_ROOT: root cause",
            id="caused-by-the-deepest-cause",
        ),
        pytest.param(
            define_pipeline(id="f", steps=[step("a", returns(1))], options_schema=int),
            {},
            "execution [TUBELESS_OPTIONS_VALIDATION_FAILED]: Pipeline f options validation "
            "failed: Input should be a valid integer",
            id="run-level-without-step",
        ),
        pytest.param(
            define_pipeline(
                id="f",
                steps=[step("a", returns(1), dry_run="skip")],
                finalize=require_outputs(["a"]),
            ),
            {"dry_run": True},
            "finalization at step __finalize__ [TUBELESS_FINALIZATION_FAILED] "
            "(TUBELESS_REQUIRED_OUTPUTS_MISSING): Required pipeline outputs missing: a",
            id="finalization",
        ),
    ],
)
async def test_pipeline_error_format_is_one_line(
    pipeline: Any, controls: dict[str, Any], expected: str
) -> None:
    formatted = await _format_of(pipeline, **controls)

    assert formatted == expected
    assert "\n" not in formatted


# -- entry points and handler colours -------------------------------------------------------------
async def test_sync_handlers_run_in_worker_threads_and_async_ones_on_the_loop() -> None:
    loop_thread = threading.get_ident()
    threads: dict[str, int] = {}

    def sync_handler(inputs: dict[str, Any], ctx: Any) -> str:
        threads["sync"] = threading.get_ident()
        return "sync"

    async def async_handler(inputs: dict[str, Any], ctx: Any) -> str:
        threads["async"] = threading.get_ident()
        return "async"

    def sync_predicate(inputs: dict[str, Any], ctx: Any) -> None:
        threads["predicate"] = threading.get_ident()

    pipeline = define_pipeline(
        id="colours",
        steps=[
            step("s", sync_handler, skip=sync_predicate),
            step("a", async_handler, depends_on="s"),
        ],
    )
    assert await pipeline.run_or_raise() == "async"

    assert threads["sync"] != loop_thread
    assert threads["async"] == loop_thread
    # Sync predicates run inline on the loop (DESIGN §3).
    assert threads["predicate"] == loop_thread


def test_run_sync_returns_the_value_outside_an_event_loop() -> None:
    pipeline = define_pipeline(id="sync", steps=[step("a", returns(41)), step("b", returns(42))])

    assert pipeline.run_sync() == 42


def test_run_sync_raises_execution_error_for_a_failed_run() -> None:
    pipeline = define_pipeline(id="sync", steps=[step("a", raises(ValueError("boom")))])

    with pytest.raises(PipelineExecutionError) as caught:
        pipeline.run_sync()
    assert caught.value.run.status == "failed"


async def test_run_sync_inside_an_event_loop_raises_a_clear_runtime_error() -> None:
    calls: list[str] = []
    pipeline = define_pipeline(id="sync", steps=[step("a", returns(1, calls))])

    with pytest.raises(RuntimeError, match=r"run_sync\(\).*running event loop.*run_or_raise"):
        pipeline.run_sync()
    assert calls == []


@pytest.mark.parametrize(
    "value",
    [
        pytest.param(0, id="zero"),
        pytest.param(-1, id="negative"),
        pytest.param(True, id="bool-true"),
        pytest.param(1.5, id="float"),
        pytest.param("2", id="string"),
    ],
)
async def test_invalid_max_concurrency_raises_before_any_step(value: Any) -> None:
    calls: list[str] = []
    pipeline = define_pipeline(id="conc", steps=[step("a", returns(1, calls))])

    with pytest.raises(TubelessError) as caught:
        await pipeline.run(max_concurrency=value)
    assert caught.value.code == "TUBELESS_RUN_CONCURRENCY_INVALID"
    with pytest.raises(TubelessError) as caught:
        await pipeline.run_or_raise(max_concurrency=value)
    assert caught.value.code == "TUBELESS_RUN_CONCURRENCY_INVALID"
    assert calls == []


@pytest.mark.parametrize(
    "handler_colour", [pytest.param("async", id="async"), pytest.param("sync", id="sync-thread")]
)
async def test_ctx_log_feeds_the_tubeless_run_logger(
    handler_colour: str, caplog: pytest.LogCaptureFixture
) -> None:
    def sync_handler(inputs: dict[str, Any], ctx: Any) -> None:
        ctx.log.info("hello %s", "world")
        ctx.log.warning("careful")
        ctx.log.error("bad")

    async def async_handler(inputs: dict[str, Any], ctx: Any) -> None:
        sync_handler(inputs, ctx)

    handler = async_handler if handler_colour == "async" else sync_handler
    pipeline = define_pipeline(id="logs", steps=[step("a", handler)])
    with caplog.at_level(logging.INFO, logger="tubeless.run"):
        await pipeline.run(run_id="r")

    records = [r for r in caplog.records if r.name == "tubeless.run"]
    assert [(r.levelno, r.getMessage()) for r in records] == [
        (logging.INFO, "logs/a: hello world"),
        (logging.WARNING, "logs/a: careful"),
        (logging.ERROR, "logs/a: bad"),
    ]
    assert {(getattr(r, "run_id", None), getattr(r, "step_id", None)) for r in records} == {
        ("r", "a")
    }
