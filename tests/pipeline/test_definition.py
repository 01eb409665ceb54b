"""``define_pipeline`` checks the static graph (UPSTREAM §1.1, §7 items 1-2) and orders steps."""

from __future__ import annotations

from typing import Any

import pytest

from tubeless import PipelineDefinitionError, define_pipeline, require_outputs, step
from tubeless.pipeline import Pipeline, Step


def noop(inputs: Any, ctx: Any) -> None:
    return None


def codes_of(err: PipelineDefinitionError) -> list[str]:
    return [e.code for e in err.errors]


def definition_error(**kwargs: Any) -> PipelineDefinitionError:
    kwargs.setdefault("id", "p")
    with pytest.raises(PipelineDefinitionError) as info:
        define_pipeline(**kwargs)
    err = info.value
    assert all(e.kind == "definition" and e.phase == "definition" for e in err.errors)
    assert err.code == err.errors[0].code
    return err


# -- one error listing every problem ---------------------------------------------------------------
def test_one_error_lists_every_problem_in_check_order() -> None:
    """Every independent problem is reported at once, in UPSTREAM §1.1 check order."""
    err = definition_error(
        id=" ",
        name=" ",
        description="",
        implementation_version="",
        steps=[
            step("a", noop),
            step("a", noop),
            step(" ", noop),
            step("__finalize__", noop),
            step("named", noop, name="  "),
            step("runless", "not callable"),  # type: ignore[arg-type]
            step("schemed", noop, output_schema={"type": "nonsense"}),
            step("dupdep", noop, depends_on=["a", "a"]),
            step("selfie", noop, optional_depends_on="selfie"),
            step("contra", noop, depends_on="a", optional_depends_on="a"),
            step("orphan", noop, depends_on="ghost"),
        ],
        targets=["a", "a", "nowhere"],
        finalize=require_outputs(["phantom"]),
        options_schema={"type": "nonsense"},
    )
    assert [(e.code, e.step_id) for e in err.errors] == [
        ("TUBELESS_DEFINITION_PIPELINE_ID_BLANK", None),
        ("TUBELESS_DEFINITION_PIPELINE_NAME_BLANK", None),
        ("TUBELESS_DEFINITION_PIPELINE_DESCRIPTION_BLANK", None),
        ("TUBELESS_DEFINITION_IMPLEMENTATION_VERSION_INVALID", None),
        ("TUBELESS_DEFINITION_STEP_IDS_DUPLICATE", None),
        ("TUBELESS_DEFINITION_STEP_ID_BLANK", None),
        ("TUBELESS_DEFINITION_STEP_ID_RESERVED", "__finalize__"),
        ("TUBELESS_DEFINITION_STEP_NAME_BLANK", "named"),
        ("TUBELESS_DEFINITION_STEP_INVALID", "runless"),
        ("TUBELESS_DEFINITION_SCHEMA_INVALID", "schemed"),
        ("TUBELESS_DEFINITION_DEPENDENCY_DUPLICATE", "dupdep"),
        ("TUBELESS_DEFINITION_DEPENDENCY_SELF_REFERENCE", "selfie"),
        ("TUBELESS_DEFINITION_DEPENDENCY_CONTRADICTORY", "contra"),
        ("TUBELESS_DEFINITION_TARGETS_DUPLICATE", None),
        ("TUBELESS_DEFINITION_TARGET_NOT_IN_STEPS", None),
        ("TUBELESS_DEFINITION_DEPENDENCY_NOT_IN_STEPS", None),
        ("TUBELESS_DEFINITION_FINALIZER_STEP_NOT_IN_STEPS", None),
        ("TUBELESS_DEFINITION_SCHEMA_INVALID", None),
    ]
    assert err.code == "TUBELESS_DEFINITION_PIPELINE_ID_BLANK"
    assert str(err).startswith("Invalid pipeline ' ': [TUBELESS_DEFINITION_PIPELINE_ID_BLANK] ")
    for e in err.errors:
        assert f"[{e.code}] {e.message}" in str(err)


def test_target_finalizer_mismatch_is_reported_alongside_other_problems() -> None:
    """Only the cycle check waits for a clean graph; the target/finalizer check does not."""
    err = definition_error(
        steps=[step("a", noop, name=" "), step("b", noop, depends_on="a"), step("c", noop)],
        targets=["b", "c"],
        finalize=require_outputs(["b"]),
    )
    assert codes_of(err) == [
        "TUBELESS_DEFINITION_STEP_NAME_BLANK",
        "TUBELESS_DEFINITION_TARGET_FINALIZER_MISMATCH",
    ]


# -- single checks ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        pytest.param({"id": ""}, "TUBELESS_DEFINITION_PIPELINE_ID_BLANK", id="pipeline-id-empty"),
        pytest.param(
            {"id": " \t"}, "TUBELESS_DEFINITION_PIPELINE_ID_BLANK", id="pipeline-id-whitespace"
        ),
        pytest.param(
            {"name": ""}, "TUBELESS_DEFINITION_PIPELINE_NAME_BLANK", id="pipeline-name-empty"
        ),
        pytest.param(
            {"name": "  "}, "TUBELESS_DEFINITION_PIPELINE_NAME_BLANK", id="pipeline-name-blank"
        ),
        pytest.param(
            {"description": ""},
            "TUBELESS_DEFINITION_PIPELINE_DESCRIPTION_BLANK",
            id="pipeline-description-empty",
        ),
        pytest.param(
            {"description": "\n "},
            "TUBELESS_DEFINITION_PIPELINE_DESCRIPTION_BLANK",
            id="pipeline-description-blank",
        ),
        pytest.param(
            {"implementation_version": ""},
            "TUBELESS_DEFINITION_IMPLEMENTATION_VERSION_INVALID",
            id="implementation-version-empty",
        ),
        pytest.param(
            {"implementation_version": "   "},
            "TUBELESS_DEFINITION_IMPLEMENTATION_VERSION_INVALID",
            id="implementation-version-blank",
        ),
        pytest.param(
            {"implementation_version": "x" * 257},
            "TUBELESS_DEFINITION_IMPLEMENTATION_VERSION_INVALID",
            id="implementation-version-257-chars",
        ),
        pytest.param(
            {"implementation_version": 3},
            "TUBELESS_DEFINITION_IMPLEMENTATION_VERSION_INVALID",
            id="implementation-version-int",
        ),
        pytest.param(
            {"options_schema": {"type": "nonsense"}},
            "TUBELESS_DEFINITION_SCHEMA_INVALID",
            id="options-schema-invalid-json-schema",
        ),
        pytest.param(
            {"options_schema": object()},
            "TUBELESS_DEFINITION_SCHEMA_INVALID",
            id="options-schema-not-a-type",
        ),
        pytest.param(
            {"result_schema": {"type": "nonsense"}},
            "TUBELESS_DEFINITION_SCHEMA_INVALID",
            id="result-schema-invalid",
        ),
    ],
)
def test_pipeline_level_field_is_rejected(kwargs: dict[str, Any], expected: str) -> None:
    """A bad pipeline-level field gives exactly its one definition code."""
    err = definition_error(steps=[step("a", noop)], **{"id": "p", **kwargs})
    assert codes_of(err) == [expected]


@pytest.mark.parametrize(
    "version",
    [
        pytest.param("1", id="one-char"),
        pytest.param("x" * 256, id="256-chars"),
        pytest.param(" v2 ", id="padded"),
    ],
)
def test_implementation_version_of_1_to_256_chars_is_accepted(version: str) -> None:
    pipeline = define_pipeline(id="p", steps=[step("a", noop)], implementation_version=version)
    assert pipeline.identity.implementation_version == version


@pytest.mark.parametrize(
    ("steps", "expected"),
    [
        pytest.param(
            [step("a", noop), step("b", noop), step("a", noop)],
            [("TUBELESS_DEFINITION_STEP_IDS_DUPLICATE", None)],
            id="duplicate-step-id",
        ),
        pytest.param(
            [step("", noop)], [("TUBELESS_DEFINITION_STEP_ID_BLANK", None)], id="empty-step-id"
        ),
        pytest.param(
            [step("  ", noop)], [("TUBELESS_DEFINITION_STEP_ID_BLANK", None)], id="blank-step-id"
        ),
        pytest.param(
            [step("__finalize__", noop)],
            [("TUBELESS_DEFINITION_STEP_ID_RESERVED", "__finalize__")],
            id="reserved-step-id",
        ),
        pytest.param(
            [step("a", noop, name="")],
            [("TUBELESS_DEFINITION_STEP_NAME_BLANK", "a")],
            id="empty-step-name",
        ),
        pytest.param(
            [step("a", noop, name=" ")],
            [("TUBELESS_DEFINITION_STEP_NAME_BLANK", "a")],
            id="blank-step-name",
        ),
        pytest.param(
            [step("a", None)],  # type: ignore[arg-type]
            [("TUBELESS_DEFINITION_STEP_INVALID", "a")],
            id="run-none",
        ),
        pytest.param(
            [step("a", "run")],  # type: ignore[arg-type]
            [("TUBELESS_DEFINITION_STEP_INVALID", "a")],
            id="run-string",
        ),
        pytest.param(
            [step("a", noop, output_schema={"type": "nonsense"})],
            [("TUBELESS_DEFINITION_SCHEMA_INVALID", "a")],
            id="output-schema-invalid-json-schema",
        ),
        pytest.param(
            [step("a", noop, output_schema=object())],
            [("TUBELESS_DEFINITION_SCHEMA_INVALID", "a")],
            id="output-schema-not-a-type",
        ),
        pytest.param(
            [step("a", noop), step("b", noop, depends_on=["a", "a"])],
            [("TUBELESS_DEFINITION_DEPENDENCY_DUPLICATE", "b")],
            id="duplicate-required-dependency",
        ),
        pytest.param(
            [step("a", noop), step("b", noop, optional_depends_on=["a", "a"])],
            [("TUBELESS_DEFINITION_DEPENDENCY_DUPLICATE", "b")],
            id="duplicate-optional-dependency",
        ),
        pytest.param(
            [step("a", noop), step("b", noop, skip_after_failure_of=["a", "a"])],
            [("TUBELESS_DEFINITION_DEPENDENCY_DUPLICATE", "b")],
            id="duplicate-failure-gate",
        ),
        pytest.param(
            [step("a", noop, depends_on="a")],
            [("TUBELESS_DEFINITION_DEPENDENCY_SELF_REFERENCE", "a")],
            id="self-reference-required",
        ),
        pytest.param(
            [step("a", noop, optional_depends_on="a")],
            [("TUBELESS_DEFINITION_DEPENDENCY_SELF_REFERENCE", "a")],
            id="self-reference-optional",
        ),
        pytest.param(
            [step("a", noop, skip_after_failure_of="a")],
            [("TUBELESS_DEFINITION_DEPENDENCY_SELF_REFERENCE", "a")],
            id="self-reference-failure-gate",
        ),
        pytest.param(
            [step("a", noop), step("b", noop, depends_on="a", optional_depends_on="a")],
            [("TUBELESS_DEFINITION_DEPENDENCY_CONTRADICTORY", "b")],
            id="required-and-optional",
        ),
        pytest.param([], [("TUBELESS_DEFINITION_STEPS_EMPTY", None)], id="no-steps"),
    ],
)
def test_step_level_problem_is_rejected(steps: list[Step], expected: list[Any]) -> None:
    """Each step-level check gives its own code, naming the step when it has a usable id."""
    err = definition_error(steps=steps)
    assert [(e.code, e.step_id) for e in err.errors] == expected


def test_a_step_may_be_both_a_required_dependency_and_a_failure_gate() -> None:
    """Only required+optional is contradictory; a gate may also be a required input."""
    pipeline = define_pipeline(
        id="p", steps=[step("a", noop), step("b", noop, depends_on="a", skip_after_failure_of="a")]
    )
    assert pipeline.step_ids == ("a", "b")


@pytest.mark.parametrize(
    ("targets", "expected"),
    [
        pytest.param(["a", "a"], "TUBELESS_DEFINITION_TARGETS_DUPLICATE", id="duplicate-targets"),
        pytest.param(
            ["a", "ghost"], "TUBELESS_DEFINITION_TARGET_NOT_IN_STEPS", id="unknown-target"
        ),
        pytest.param(
            [step("ghost", noop)],
            "TUBELESS_DEFINITION_TARGET_NOT_IN_STEPS",
            id="target-step-object-not-in-steps",
        ),
        pytest.param(
            [step("a", noop), "a"], "TUBELESS_DEFINITION_TARGETS_DUPLICATE", id="step-and-id-dupe"
        ),
    ],
)
def test_bad_targets_are_rejected(targets: list[str], expected: str) -> None:
    err = definition_error(steps=[step("a", noop), step("b", noop)], targets=targets)
    assert codes_of(err) == [expected]


def test_unknown_dependencies_are_listed_as_dependent_arrow_dependency_pairs() -> None:
    """``DEPENDENCY_NOT_IN_STEPS`` is one problem naming every ``a -> b`` pair."""
    err = definition_error(
        steps=[
            step("x", noop, depends_on="ghost"),
            step("y", noop, optional_depends_on="phantom"),
            step("z", noop, skip_after_failure_of="spirit"),
        ]
    )
    assert codes_of(err) == ["TUBELESS_DEFINITION_DEPENDENCY_NOT_IN_STEPS"]
    message = err.errors[0].message
    assert "x -> ghost" in message
    assert "y -> phantom" in message
    assert "z -> spirit" in message


@pytest.mark.parametrize(
    "finalize",
    [
        pytest.param("ghost", id="step-id"),
        pytest.param(require_outputs(["a", "ghost"]), id="require-outputs"),
        pytest.param(require_outputs("ghost", lambda outputs, ctx: outputs), id="require-fn"),
    ],
)
def test_finalizer_requiring_an_unknown_step_is_rejected(finalize: Any) -> None:
    err = definition_error(steps=[step("a", noop)], finalize=finalize)
    assert codes_of(err) == ["TUBELESS_DEFINITION_FINALIZER_STEP_NOT_IN_STEPS"]
    assert "ghost" in err.errors[0].message


# -- target / finalizer mismatch -------------------------------------------------------------------
def _mismatch_steps() -> list[Step]:
    a = step("a", noop)
    b = step("b", noop, depends_on=a)
    c = step("c", noop)
    return [a, b, c]


@pytest.mark.parametrize(
    "finalize",
    [
        pytest.param("b", id="step-id"),
        pytest.param(step("b", noop, depends_on="a"), id="step-object"),
        pytest.param(require_outputs(["b"]), id="require-outputs"),
        pytest.param(require_outputs(["a", "b"], lambda outputs, ctx: 1), id="require-outputs-fn"),
    ],
)
def test_declared_target_whose_closure_lacks_a_required_output_is_rejected(finalize: Any) -> None:
    """Target ``c`` cannot produce ``b``, which the finalizer requires."""
    err = definition_error(steps=_mismatch_steps(), targets=["b", "c"], finalize=finalize)
    assert codes_of(err) == ["TUBELESS_DEFINITION_TARGET_FINALIZER_MISMATCH"]
    assert "'c'" in err.errors[0].message
    assert "'b'" in err.errors[0].message


def test_targets_whose_closures_hold_every_required_output_are_accepted() -> None:
    a = step("a", noop)
    b = step("b", noop, depends_on=a)
    c = step("c", noop, skip_after_failure_of=b)  # a failure gate is part of the closure
    pipeline = define_pipeline(id="p", steps=[a, b, c], targets=[b, c], finalize=require_outputs(b))
    assert pipeline.target_ids == ("b", "c")


def test_target_finalizer_mismatch_is_not_checked_when_targets_are_omitted() -> None:
    pipeline = define_pipeline(id="p", steps=_mismatch_steps(), finalize=require_outputs(["b"]))
    assert pipeline.target_ids == ("c",)


# -- cycles ----------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "steps",
    [
        pytest.param(
            [step("a", noop, depends_on="b"), step("b", noop, depends_on="a")], id="required"
        ),
        pytest.param(
            [step("a", noop, optional_depends_on="b"), step("b", noop, depends_on="a")],
            id="optional",
        ),
        pytest.param(
            [
                step("a", noop, skip_after_failure_of="c"),
                step("b", noop, depends_on="a"),
                step("c", noop, optional_depends_on="b"),
            ],
            id="failure-gate-three-steps",
        ),
    ],
)
def test_dependency_cycle_over_any_dependency_kind_is_rejected(steps: list[Step]) -> None:
    err = definition_error(steps=[step("free", noop), *steps])
    assert codes_of(err) == ["TUBELESS_DEFINITION_DEPENDENCY_CYCLE"]
    assert "'a'" in err.errors[0].message
    assert "'b'" in err.errors[0].message


def test_cycle_is_only_reported_when_nothing_else_failed() -> None:
    """A cycle plus a duplicate id reports the duplicate, not the cycle."""
    err = definition_error(
        steps=[
            step("a", noop, depends_on="b"),
            step("b", noop, depends_on="a"),
            step("c", noop),
            step("c", noop),
        ]
    )
    assert codes_of(err) == ["TUBELESS_DEFINITION_STEP_IDS_DUPLICATE"]


# -- dependency references -------------------------------------------------------------------------
def test_dependencies_and_targets_given_as_steps_or_ids_build_the_same_pipeline() -> None:
    a = step("a", noop)
    b = step("b", noop)
    c = step("c", noop, depends_on=[a], optional_depends_on=b, skip_after_failure_of=[a])
    by_object = define_pipeline(id="p", steps=[c, b, a], targets=[c, b])
    by_id = define_pipeline(
        id="p",
        steps=[
            step("c", noop, depends_on=["a"], optional_depends_on="b", skip_after_failure_of="a"),
            step("b", noop),
            step("a", noop),
        ],
        targets=["c", "b"],
    )

    def shape(pipeline: Pipeline) -> list[Any]:
        return [
            (s.id, s.depends_on, s.optional_depends_on, s.skip_after_failure_of)
            for s in pipeline.order
        ]

    assert (
        shape(by_object)
        == shape(by_id)
        == [
            ("b", (), (), ()),
            ("a", (), (), ()),
            ("c", ("a",), ("b",), ("a",)),
        ]
    )
    assert by_object.target_ids == by_id.target_ids == ("c", "b")
    assert by_object.identity == by_id.identity


# -- execution order -------------------------------------------------------------------------------
def _order(*steps: Step) -> tuple[str, ...]:
    return define_pipeline(id="p", steps=list(steps)).step_ids


@pytest.mark.parametrize(
    ("steps", "expected"),
    [
        pytest.param(
            [step("a", noop), step("b", noop, depends_on="a"), step("c", noop, depends_on="b")],
            ("a", "b", "c"),
            id="already-ordered-chain-keeps-order",
        ),
        pytest.param(
            [step("c", noop, depends_on="b"), step("b", noop, depends_on="a"), step("a", noop)],
            ("a", "b", "c"),
            id="reversed-chain-is-reordered",
        ),
        pytest.param(
            [step("x", noop), step("y", noop), step("z", noop)],
            ("x", "y", "z"),
            id="independent-keep-declaration-order",
        ),
        pytest.param(
            [step("z", noop), step("y", noop), step("x", noop)],
            ("z", "y", "x"),
            id="independent-never-sorted-by-id",
        ),
        pytest.param(
            [
                step("d", noop, optional_depends_on="a"),
                step("c", noop, skip_after_failure_of="b"),
                step("b", noop),
                step("a", noop),
            ],
            ("b", "c", "a", "d"),
            id="optional-and-gate-edges-order-ties-by-declaration",
        ),
        pytest.param(
            [
                step("top", noop, depends_on=["left", "right"]),
                step("right", noop, depends_on="base"),
                step("left", noop, depends_on="base"),
                step("base", noop),
                step("loose", noop),
            ],
            ("base", "right", "left", "top", "loose"),
            id="diamond-ready-steps-go-in-declaration-order",
        ),
        pytest.param(
            [
                step("a", noop),
                step("b", noop, depends_on="a"),
                step("c", noop, optional_depends_on="a"),
                step("d", noop, skip_after_failure_of="c", depends_on="b"),
                step("e", noop),
            ],
            ("a", "b", "c", "d", "e"),
            id="already-ordered-mixed-kinds-keep-order",
        ),
    ],
)
def test_execution_order_is_stable_topological_order(
    steps: list[Step], expected: tuple[str, ...]
) -> None:
    """Kahn's order over all three dependency kinds, ties broken by declaration index."""
    assert _order(*steps) == expected


def test_pipeline_keeps_declared_steps_and_execution_order_apart() -> None:
    pipeline = define_pipeline(id="p", steps=[step("b", noop, depends_on="a"), step("a", noop)])
    assert [s.id for s in pipeline.steps] == ["b", "a"]
    assert [s.id for s in pipeline.order] == ["a", "b"]
    assert pipeline.step_ids == ("a", "b")


# -- targets ---------------------------------------------------------------------------------------
def test_omitted_targets_default_to_the_last_step_in_execution_order() -> None:
    pipeline = define_pipeline(
        id="p", steps=[step("late", noop, depends_on="early"), step("early", noop), step("x", noop)]
    )
    assert pipeline.step_ids == ("early", "late", "x")
    assert pipeline.target_ids == ("x",)
    reordered = define_pipeline(
        id="p", steps=[step("x", noop), step("late", noop, depends_on="early"), step("early", noop)]
    )
    assert reordered.step_ids == ("x", "early", "late")
    assert reordered.target_ids == ("late",)


def test_empty_targets_declare_none() -> None:
    pipeline = define_pipeline(id="p", steps=[step("a", noop), step("b", noop)], targets=[])
    assert pipeline.target_ids == ()
    plan = pipeline.plan(targets=["b"])
    assert [e.code for e in plan.errors] == ["TUBELESS_PLANNING_TARGET_UNDECLARED"]


def test_declared_targets_keep_their_declaration_order() -> None:
    pipeline = define_pipeline(
        id="p", steps=[step("a", noop), step("b", noop), step("c", noop)], targets=["c", "a"]
    )
    assert pipeline.target_ids == ("c", "a")
