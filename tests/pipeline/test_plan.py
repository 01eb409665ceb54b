"""``plan()``: selection, reasons, planning errors, the plan-time skip ladder (UPSTREAM §1.3-4)."""

from __future__ import annotations

import inspect
import itertools
import json
import re
from typing import Any

import pydantic
import pytest

from tubeless import Plan, define_pipeline, from_pipeline, require_outputs, step
from tubeless.pipeline import Pipeline


def noop(inputs: Any, ctx: Any) -> None:
    return None


def shape(plan: Plan) -> list[tuple[str, bool, list[dict[str, Any]], str | None]]:
    """``(id, selected, [reason dicts], skip_reason)`` for every plan step, in plan order."""
    return [
        (s.id, s.selected, [r.to_dict() for r in s.selection_reasons], s.skip_reason)
        for s in plan.steps
    ]


def target(t: str) -> dict[str, Any]:
    return {"kind": "target", "target_id": t}


def required(dependent: str, t: str) -> dict[str, Any]:
    return {"kind": "required-dependency", "dependent_id": dependent, "target_id": t}


def gate(dependent: str, t: str) -> dict[str, Any]:
    return {"kind": "failure-gate", "dependent_id": dependent, "target_id": t}


def optional_only(dependent: str, t: str) -> dict[str, Any]:
    return {"kind": "optional-only", "dependent_id": dependent, "target_id": t}


OUTSIDE = [{"kind": "outside-target-closure"}]
EXACT = [{"kind": "exact"}]
NOT_SELECTED = [{"kind": "not-selected"}]
ALL = [{"kind": "all"}]


@pytest.fixture
def graph() -> Pipeline:
    """opt, gate_pre -> gate, base; mid needs base, gated by gate, optionally reads opt."""
    return define_pipeline(
        id="graph",
        steps=[
            step("opt", noop),
            step("gate_pre", noop),
            step("gate", noop, depends_on="gate_pre"),
            step("base", noop),
            step(
                "mid",
                noop,
                depends_on="base",
                optional_depends_on="opt",
                skip_after_failure_of="gate",
            ),
            step("t1", noop, depends_on="mid"),
            step("t2", noop, depends_on="base", optional_depends_on="opt"),
            step("other", noop),
        ],
        targets=["t1", "t2", "other"],
    )


# -- targets ---------------------------------------------------------------------------------------
def test_target_selects_its_required_closure_and_failure_gates_but_not_optional_inputs(
    graph: Pipeline,
) -> None:
    """Gates and gates' own prerequisites join; optional-only inputs stay out with a reason."""
    plan = graph.plan(targets=["t1"])
    assert plan.ok
    assert shape(plan) == [
        ("opt", False, [optional_only("mid", "t1")], "filtered"),
        ("gate_pre", True, [required("gate", "t1")], None),
        ("gate", True, [gate("mid", "t1")], None),
        ("base", True, [required("mid", "t1")], None),
        ("mid", True, [required("t1", "t1")], None),
        ("t1", True, [target("t1")], None),
        ("t2", False, OUTSIDE, "filtered"),
        ("other", False, OUTSIDE, "filtered"),
    ]
    assert plan.selected_ids == ("gate_pre", "gate", "base", "mid", "t1")


def test_reasons_accumulate_across_several_targets(graph: Pipeline) -> None:
    plan = graph.plan(targets=["t1", "t2"])
    assert shape(plan) == [
        ("opt", False, [optional_only("mid", "t1"), optional_only("t2", "t2")], "filtered"),
        ("gate_pre", True, [required("gate", "t1")], None),
        ("gate", True, [gate("mid", "t1")], None),
        ("base", True, [required("mid", "t1"), required("t2", "t2")], None),
        ("mid", True, [required("t1", "t1")], None),
        ("t1", True, [target("t1")], None),
        ("t2", True, [target("t2")], None),
        ("other", False, OUTSIDE, "filtered"),
    ]


def test_a_selected_step_keeps_only_its_selecting_reasons() -> None:
    """``shared`` is optional-only for ``a`` but required by ``b``: selected, reason dropped."""
    pipeline = define_pipeline(
        id="p",
        steps=[
            step("shared", noop),
            step("a", noop, optional_depends_on="shared"),
            step("b", noop, depends_on="shared"),
        ],
        targets=["a", "b"],
    )
    assert shape(pipeline.plan(targets=["a", "b"])) == [
        ("shared", True, [required("b", "b")], None),
        ("a", True, [target("a")], None),
        ("b", True, [target("b")], None),
    ]
    assert shape(pipeline.plan(targets=["a"])) == [
        ("shared", False, [optional_only("a", "a")], "filtered"),
        ("a", True, [target("a")], None),
        ("b", False, OUTSIDE, "filtered"),
    ]


def test_target_that_is_also_a_dependency_of_another_target_gets_both_reasons() -> None:
    pipeline = define_pipeline(
        id="p",
        steps=[
            step("base", noop),
            step("mid", noop, depends_on="base"),
            step("top", noop, depends_on="mid"),
        ],
        targets=["mid", "top"],
    )
    assert shape(pipeline.plan(targets=["mid", "top"])) == [
        ("base", True, [required("mid", "mid"), required("mid", "top")], None),
        ("mid", True, [target("mid"), required("top", "top")], None),
        ("top", True, [target("top")], None),
    ]


def test_diamond_reasons_are_deduplicated_per_dependent_and_target() -> None:
    """``base`` is reached twice but each (kind, dependent, target) reason appears once."""
    pipeline = define_pipeline(
        id="p",
        steps=[
            step("base", noop),
            step("left", noop, depends_on="base"),
            step("right", noop, depends_on="base", skip_after_failure_of="left"),
            step("top", noop, depends_on=["left", "right"]),
        ],
    )
    assert pipeline.target_ids == ("top",)
    assert shape(pipeline.plan(targets=["top"])) == [
        ("base", True, [required("left", "top"), required("right", "top")], None),
        ("left", True, [required("top", "top"), gate("right", "top")], None),
        ("right", True, [required("top", "top")], None),
        ("top", True, [target("top")], None),
    ]


# -- exact steps and no selection ------------------------------------------------------------------
def test_step_ids_select_exactly_and_add_no_prerequisites(graph: Pipeline) -> None:
    """Dependents of unselected steps show ``unmet-dependency`` (first unmet dependency)."""
    plan = graph.plan(step_ids=["mid", "t1", "other"])
    assert shape(plan) == [
        ("opt", False, NOT_SELECTED, "filtered"),
        ("gate_pre", False, NOT_SELECTED, "filtered"),
        ("gate", False, NOT_SELECTED, "filtered"),
        ("base", False, NOT_SELECTED, "filtered"),
        ("mid", True, EXACT, "unmet-dependency"),
        ("t1", True, EXACT, "unmet-dependency"),
        ("t2", False, NOT_SELECTED, "filtered"),
        ("other", True, EXACT, None),
    ]
    assert [(s.id, s.dependency_id) for s in plan.steps if s.selected] == [
        ("mid", "base"),
        ("t1", "mid"),
        ("other", None),
    ]


def test_step_ids_may_name_steps_that_are_not_declared_targets(graph: Pipeline) -> None:
    plan = graph.plan(step_ids=["base", "t2"])
    assert [(s.id, s.skip_reason) for s in plan.steps if s.selected] == [
        ("base", None),
        ("t2", None),
    ]


def test_no_selection_selects_everything_with_reason_all(graph: Pipeline) -> None:
    plan = graph.plan()
    assert shape(plan) == [(s, True, ALL, None) for s in graph.step_ids]


# -- planning errors -------------------------------------------------------------------------------
@pytest.fixture
def small() -> Pipeline:
    return define_pipeline(
        id="small", steps=[step("a", noop), step("b", noop, depends_on="a")], targets=["b"]
    )


@pytest.mark.parametrize(
    ("controls", "expected"),
    [
        pytest.param(
            {"targets": ["b"], "step_ids": ["a"]},
            ["TUBELESS_PLANNING_SELECTION_CONFLICT"],
            id="targets-and-step-ids",
        ),
        pytest.param(
            {"step_ids": []}, ["TUBELESS_PLANNING_STEP_SELECTION_EMPTY"], id="empty-step-ids"
        ),
        pytest.param(
            {"targets": []}, ["TUBELESS_PLANNING_TARGET_SELECTION_EMPTY"], id="empty-targets"
        ),
        pytest.param(
            {"step_ids": ["a", "a"]},
            ["TUBELESS_PLANNING_STEP_SELECTION_DUPLICATE"],
            id="duplicate-step-ids",
        ),
        pytest.param(
            {"targets": ["b", "b"]},
            ["TUBELESS_PLANNING_TARGET_SELECTION_DUPLICATE"],
            id="duplicate-targets",
        ),
        pytest.param(
            {"step_ids": ["a", "ghost"]}, ["TUBELESS_PLANNING_STEP_UNKNOWN"], id="unknown-step"
        ),
        pytest.param(
            {"targets": ["ghost"]}, ["TUBELESS_PLANNING_TARGET_UNKNOWN"], id="unknown-target"
        ),
        pytest.param(
            {"targets": ["a"]},
            ["TUBELESS_PLANNING_TARGET_UNDECLARED"],
            id="real-step-not-a-declared-target",
        ),
        pytest.param(
            {"targets": ["b", "a"], "dry_run": True},
            ["TUBELESS_PLANNING_TARGET_UNDECLARED"],
            id="undeclared-in-dry-plan",
        ),
    ],
)
def test_bad_selection_gives_a_failed_plan_with_no_steps(
    small: Pipeline, controls: dict[str, Any], expected: list[str]
) -> None:
    plan = small.plan(**controls)
    assert isinstance(plan, Plan)
    assert plan.ok is False
    assert plan.steps == ()
    assert [e.code for e in plan.errors] == expected
    assert all(e.kind == "selection" and e.phase == "planning" for e in plan.errors)
    assert plan.to_dict()["steps"] == []
    assert [e["code"] for e in plan.to_dict()["errors"]] == expected


def test_unknown_names_and_choices_appear_in_the_planning_message(small: Pipeline) -> None:
    (error,) = small.plan(targets=["ghost"]).errors
    assert "'ghost'" in error.message
    assert "'b'" in error.message


# -- the plan-time skip ladder ---------------------------------------------------------------------
def test_ladder_order_filtered_then_unmet_dependency_then_dry_run() -> None:
    """Gates cannot fail at plan time, so a filtered gate does not skip its dependent."""
    pipeline = define_pipeline(
        id="p",
        steps=[
            step("x", noop),
            step("y", noop),
            step("g", noop),
            step("both_unmet", noop, depends_on=["x", "y"], dry_run="skip"),
            step("second_unmet", noop, depends_on=["g", "y"]),
            step("gated", noop, skip_after_failure_of="x"),
            step("dry", noop, dry_run="skip"),
            step("filtered_with_unmet", noop, depends_on="x", dry_run="skip"),
        ],
    )
    plan = pipeline.plan(dry_run=True, step_ids=["g", "both_unmet", "second_unmet", "gated", "dry"])
    assert [(s.id, s.skip_reason, s.dependency_id) for s in plan.steps] == [
        ("x", "filtered", None),
        ("y", "filtered", None),
        ("g", None, None),
        ("both_unmet", "unmet-dependency", "x"),
        ("second_unmet", "unmet-dependency", "y"),
        ("gated", None, None),
        ("dry", "dry-run", None),
        ("filtered_with_unmet", "filtered", None),
    ]


@pytest.fixture
def dry_chain() -> Pipeline:
    return define_pipeline(
        id="dry",
        steps=[
            step("fetch", noop, dry_run="skip"),
            step("parse", noop, depends_on="fetch"),
            step("preview", noop, dry_run=lambda inputs, ctx: "preview"),
            step("gated", noop, skip_after_failure_of="fetch"),
            step("reader", noop, optional_depends_on="fetch"),
            step("policy", noop, skip=lambda inputs, ctx: None),
        ],
    )


def test_dry_run_plan_skips_dry_run_skip_steps_and_their_required_dependents(
    dry_chain: Pipeline,
) -> None:
    plan = dry_chain.plan(dry_run=True)
    assert plan.dry_run is True
    assert [
        (s.id, s.dry_run, s.runtime_skip_possible, s.skip_reason, s.dependency_id)
        for s in plan.steps
    ] == [
        ("fetch", "skip", False, "dry-run", None),
        ("parse", "run", False, "unmet-dependency", "fetch"),
        ("preview", "custom", False, None, None),
        ("gated", "run", False, None, None),
        ("reader", "run", False, None, None),
        ("policy", "run", True, None, None),
    ]


def test_wet_plan_runs_dry_run_skip_steps(dry_chain: Pipeline) -> None:
    plan = dry_chain.plan(dry_run=False)
    assert plan.dry_run is False
    assert [(s.id, s.skip_reason) for s in plan.steps] == [(s, None) for s in dry_chain.step_ids]
    assert plan.step("fetch").dry_run == "skip"


def test_dry_run_ladder_applies_within_a_target_closure() -> None:
    pipeline = define_pipeline(
        id="p",
        steps=[step("a", noop, dry_run="skip"), step("b", noop, depends_on="a"), step("c", noop)],
        targets=["b", "c"],
    )
    assert shape(pipeline.plan(dry_run=True, targets=["b"])) == [
        ("a", True, [required("b", "b")], "dry-run"),
        ("b", True, [target("b")], "unmet-dependency"),
        ("c", False, OUTSIDE, "filtered"),
    ]


# -- plan() never runs anything --------------------------------------------------------------------
def test_plan_never_runs_handlers_predicates_previews_or_schemas() -> None:
    calls: list[str] = []

    def recorder(label: str) -> Any:
        def record(*args: Any, **kwargs: Any) -> Any:
            calls.append(label)
            return None

        return record

    class Output(pydantic.BaseModel):
        value: int = 0

        @pydantic.field_validator("value")
        @classmethod
        def _check(cls, v: int) -> int:
            calls.append("output-field-validator")
            return v

        @pydantic.model_validator(mode="before")
        @classmethod
        def _before(cls, data: Any) -> Any:
            calls.append("output-model-validator")
            return data

    class Options(pydantic.BaseModel):
        name: str = "x"

        @pydantic.model_validator(mode="before")
        @classmethod
        def _before(cls, data: Any) -> Any:
            calls.append("options-validator")
            return data

    class Result(pydantic.BaseModel):
        ok: bool = True

        @pydantic.model_validator(mode="before")
        @classmethod
        def _before(cls, data: Any) -> Any:
            calls.append("result-validator")
            return data

    child = define_pipeline(
        id="child",
        steps=[
            step(
                "inner",
                recorder("child-run"),
                skip=recorder("child-skip"),
                dry_run=recorder("child-preview"),
                output_schema=Output,
            )
        ],
        options_schema=Options,
    )
    pipeline = define_pipeline(
        id="p",
        steps=[
            step(
                "a",
                recorder("run-a"),
                skip=recorder("skip-a"),
                dry_run=recorder("preview-a"),
                output_schema=Output,
            ),
            step("b", recorder("run-b"), depends_on="a", dry_run="skip", output_schema=Output),
            step("c", recorder("run-c"), optional_depends_on="a", skip=recorder("skip-c")),
            from_pipeline(
                "nested",
                child,
                map_options=recorder("map-options"),
                map_result=recorder("map-result"),
                controls=recorder("controls"),
                skip=recorder("skip-nested"),
                depends_on="b",
            ),
        ],
        options_schema=Options,
        result_schema=Result,
        targets=["b", "nested"],
        finalize=require_outputs(["a"], recorder("finalize")),
    )
    selections: list[dict[str, Any]] = [
        {},
        {"targets": ["b"]},
        {"targets": ["b", "nested"]},
        {"targets": ["c"]},
        {"targets": ["a"]},
        {"targets": []},
        {"targets": ["ghost"]},
        {"step_ids": ["a"]},
        {"step_ids": ["b", "c", "nested"]},
        {"step_ids": []},
        {"step_ids": ["ghost"]},
        {"targets": ["b"], "step_ids": ["a"]},
    ]
    for dry_run, selection in itertools.product([False, True], selections):
        plan = pipeline.plan(dry_run=dry_run, **selection)
        json.dumps(plan.to_dict())
        json.dumps(plan.to_dict(definition=True))
        child.plan(dry_run=dry_run)
    _ = pipeline.identity
    assert calls == []
    # The recorders do record when something is actually called.
    Output(value=1)
    assert calls == ["output-model-validator", "output-field-validator"]


def test_plan_is_synchronous_and_cached_per_controls(small: Pipeline) -> None:
    assert not inspect.iscoroutinefunction(small.plan)
    plan = small.plan(targets=["b"])
    assert isinstance(plan, Plan)
    assert small.plan(targets=["b"]) is plan
    assert small.plan(targets=("b",)) is plan
    assert small.plan(dry_run=False, targets=["b"]) is plan
    assert small.plan(dry_run=True, targets=["b"]) is not plan
    assert small.plan() is small.plan()
    assert small.plan() is not plan
    assert small.plan(step_ids=["a"]) is small.plan(step_ids=["a"])


# -- serialisation ---------------------------------------------------------------------------------
def _keys(value: Any) -> set[str]:
    if isinstance(value, dict):
        return set(value) | {k for v in value.values() for k in _keys(v)}
    if isinstance(value, list):
        return {k for v in value for k in _keys(v)}
    return set()


def test_plan_to_dict_is_json_serialisable_snake_case() -> None:
    child = define_pipeline(id="child", steps=[step("inner", noop)], name="Child")
    pipeline = define_pipeline(
        id="p",
        steps=[
            step("a", noop, name="Fetch", description="Gets it", dry_run="skip"),
            step("b", noop, depends_on="a", skip=lambda inputs, ctx: None),
            from_pipeline("nested", child, optional_depends_on="a", skip_after_failure_of="b"),
        ],
        targets=["b", "nested"],
    )
    for plan in (
        pipeline.plan(dry_run=True, targets=["b"]),
        pipeline.plan(step_ids=["nested"]),
        pipeline.plan(targets=["a"]),
    ):
        data = plan.to_dict()
        assert json.loads(json.dumps(data)) == data
        assert all(re.fullmatch(r"[a-z][a-z0-9_]*", k) for k in _keys(data)), _keys(data)

    assert pipeline.plan(dry_run=True, targets=["b"]).to_dict()["steps"][:2] == [
        {
            "id": "a",
            "name": "Fetch",
            "description": "Gets it",
            "dependencies": [],
            "optional_dependencies": [],
            "skip_after_failure_of": [],
            "dry_run": "skip",
            "runtime_skip_possible": False,
            "selected": True,
            "selection_reasons": [required("b", "b")],
            "disposition": "skip",
            "skip_reason": "dry-run",
        },
        {
            "id": "b",
            "dependencies": ["a"],
            "optional_dependencies": [],
            "skip_after_failure_of": [],
            "dry_run": "run",
            "runtime_skip_possible": True,
            "selected": True,
            "selection_reasons": [target("b")],
            "disposition": "skip",
            "skip_reason": "unmet-dependency",
            "dependency_id": "a",
        },
    ]
    top = pipeline.plan(targets=["a"]).to_dict()
    assert {k: top[k] for k in ("pipeline_id", "ok", "dry_run", "steps")} == {
        "pipeline_id": "p",
        "ok": False,
        "dry_run": False,
        "steps": [],
    }
    assert [{k: e[k] for k in ("code", "kind", "phase")} for e in top["errors"]] == [
        {"code": "TUBELESS_PLANNING_TARGET_UNDECLARED", "kind": "selection", "phase": "planning"}
    ]
