"""Definition identity (UPSTREAM §1.12): stable fingerprints that change exactly with the graph."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pydantic
import pytest

from tubeless import (
    DefinitionIdentity,
    Schema,
    define_pipeline,
    from_pipeline,
    require_outputs,
    step,
)
from tubeless.pipeline import Pipeline

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
FINGERPRINT = re.compile(r"^sha256:[0-9a-f]{64}$")


def noop(inputs: Any, ctx: Any) -> None:
    return None


def other(inputs: Any, ctx: Any) -> int:
    return 42 * len(inputs)


async def async_other(inputs: Any, ctx: Any) -> str:
    return "different body"


def load_fixture() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "tubeless_tests_identity_fixture", HERE / "_identity_fixture.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# -- shape -----------------------------------------------------------------------------------------
def test_fingerprints_are_sha256_hex() -> None:
    identity = load_fixture().build().identity
    assert isinstance(identity, DefinitionIdentity)
    assert FINGERPRINT.match(identity.structural_fingerprint)
    assert FINGERPRINT.match(identity.definition_id)
    assert identity.structural_fingerprint != identity.definition_id


def test_plain_graph_has_identity_version_1() -> None:
    assert define_pipeline(id="p", steps=[step("a", noop)]).identity.version == 1


def test_to_wire_keys_are_camel_case() -> None:
    identity = load_fixture().build().identity
    assert identity.to_wire() == {
        "version": identity.version,
        "structuralFingerprint": identity.structural_fingerprint,
        "definitionId": identity.definition_id,
        "implementationVersion": "2024.1",
    }
    bare = define_pipeline(id="p", steps=[step("a", noop)]).identity.to_wire()
    assert sorted(bare) == ["definitionId", "structuralFingerprint", "version"]


def test_definition_snapshot_is_json_and_contains_the_identity() -> None:
    pipeline = load_fixture().build()
    snapshot = pipeline.definition_snapshot()
    assert json.loads(json.dumps(snapshot)) == snapshot
    assert snapshot["identity"] == pipeline.identity.to_wire()
    assert [s["id"] for s in snapshot["steps"]] == list(pipeline.step_ids)
    assert snapshot["targetIds"] == ["publish", "summarize"]
    assert snapshot["requiredFinalizerStepIds"] == ["summarize"]
    assert snapshot["optionsValidated"] is True
    assert snapshot["resultValidated"] is True
    publish = snapshot["steps"][-1]
    assert {
        k: publish[k]
        for k in (
            "id",
            "dependencies",
            "optionalDependencies",
            "skipAfterFailureOf",
            "dryRun",
            "runtimeSkipPossible",
            "outputValidated",
        )
    } == {
        "id": "publish",
        "dependencies": ["nested", "summarize"],
        "optionalDependencies": [],
        "skipAfterFailureOf": ["gate", "tags"],
        "dryRun": "run",
        "runtimeSkipPossible": False,
        "outputValidated": False,
    }


# -- stability -------------------------------------------------------------------------------------
def test_same_definition_built_twice_has_equal_identity() -> None:
    fixture = load_fixture()
    first, second = fixture.build(), fixture.build()
    assert first is not second
    assert first.identity == second.identity
    assert first.definition_snapshot() == second.definition_snapshot()


def test_same_definition_from_a_fresh_module_import_has_equal_identity() -> None:
    assert load_fixture().build().identity == load_fixture().build().identity


_SUBPROCESS_CODE = """
import json, sys
sys.path.insert(0, sys.argv[1])
import _identity_fixture
pipeline = _identity_fixture.build()
print(json.dumps({"identity": pipeline.identity.to_wire(),
                  "snapshot": pipeline.definition_snapshot()}))
"""


def _identity_in_subprocess(hash_seed: str) -> dict[str, Any]:
    env = dict(os.environ)
    env["PYTHONHASHSEED"] = hash_seed
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    completed = subprocess.run(
        [sys.executable, "-c", _SUBPROCESS_CODE, str(HERE)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert completed.returncode == 0, completed.stderr
    result: dict[str, Any] = json.loads(completed.stdout)
    return result


def test_identity_is_the_same_in_other_processes_whatever_the_hash_seed() -> None:
    pipeline = load_fixture().build()
    expected = {"identity": pipeline.identity.to_wire(), "snapshot": pipeline.definition_snapshot()}
    for seed in ("0", "1", "4242"):
        assert _identity_in_subprocess(seed) == expected, f"PYTHONHASHSEED={seed}"


# -- what changes the definition id ---------------------------------------------------------------
class Out(pydantic.BaseModel):
    text: str


def _out_with_extra_field() -> type[pydantic.BaseModel]:
    class Out(pydantic.BaseModel):  # same name, one more field
        text: str
        words: int

    return Out


def base(**overrides: Any) -> Pipeline:
    """a -> b -> c; each variant changes one thing."""
    a = overrides.pop("a", step("a", noop))
    b = overrides.pop("b", step("b", noop, depends_on="a"))
    c = overrides.pop("c", step("c", noop, depends_on="b"))
    extra = overrides.pop("extra", [])
    kwargs: dict[str, Any] = {"id": "p", "steps": [s for s in (a, b, c) if s is not None] + extra}
    kwargs.update(overrides)
    return define_pipeline(**kwargs)


def child_pipeline(
    *, extra_step: bool = False, version: str | None = None, name: str | None = None
) -> Pipeline:
    steps = [step("x", noop)] + ([step("y", noop, depends_on="x")] if extra_step else [])
    return define_pipeline(id="child", steps=steps, implementation_version=version, name=name)


def with_child(child: Pipeline) -> Pipeline:
    return define_pipeline(
        id="parent", steps=[step("a", noop), from_pipeline("run_child", child, depends_on="a")]
    )


CHANGES: list[Any] = [
    pytest.param(lambda: base(extra=[step("d", noop)], targets=["c"]), id="add-step"),
    pytest.param(lambda: base(c=None, targets=["b"]), id="remove-step"),
    pytest.param(lambda: base(c=step("c", noop, depends_on="a")), id="change-dependency"),
    pytest.param(lambda: base(c=step("c", noop, depends_on=["a", "b"])), id="add-dependency"),
    pytest.param(
        lambda: base(c=step("c", noop, skip_after_failure_of="b")), id="required-to-failure-gate"
    ),
    pytest.param(
        lambda: base(c=step("c", noop, optional_depends_on="b")), id="required-to-optional"
    ),
    pytest.param(
        lambda: base(b=step("b", noop, depends_on="a", dry_run="skip")), id="dry-run-skip"
    ),
    pytest.param(
        lambda: base(b=step("b", noop, depends_on="a", dry_run=noop)), id="dry-run-preview"
    ),
    pytest.param(
        lambda: base(b=step("b", noop, depends_on="a", skip=noop)), id="add-skip-predicate"
    ),
    pytest.param(lambda: base(targets=["b", "c"]), id="add-target"),
    pytest.param(lambda: base(targets=[]), id="no-targets"),
    pytest.param(lambda: base(targets=["b"]), id="other-target"),
    pytest.param(
        lambda: base(c=step("c", noop, depends_on="b", output_schema=Out)), id="add-output-schema"
    ),
    pytest.param(lambda: base(options_schema=Out), id="add-options-schema"),
    pytest.param(lambda: base(result_schema=Out), id="add-result-schema"),
    pytest.param(lambda: base(finalize=require_outputs(["b", "c"])), id="require-outputs"),
    pytest.param(
        lambda: base(a=step("a0", noop), b=step("b", noop, depends_on="a0")), id="rename-step-id"
    ),
]


@pytest.mark.parametrize("variant", CHANGES)
def test_structural_change_gives_a_new_definition_id(variant: Callable[[], Pipeline]) -> None:
    original, changed = base().identity, variant().identity
    assert changed.structural_fingerprint != original.structural_fingerprint
    assert changed.definition_id != original.definition_id


@pytest.mark.parametrize(
    ("before", "after"),
    [
        pytest.param(Out, _out_with_extra_field(), id="model-extra-field"),
        pytest.param(
            Schema.json({"type": "object", "properties": {"a": {"type": "string"}}}),
            Schema.json({"type": "object", "properties": {"a": {"type": "integer"}}}),
            id="json-schema-property-type",
        ),
        pytest.param(list[int], list[str], id="adapter-item-type"),
    ],
)
@pytest.mark.parametrize("where", ["output", "options", "result"])
def test_schema_shape_change_gives_a_new_definition_id(before: Any, after: Any, where: str) -> None:
    def build(schema: Any) -> Pipeline:
        if where == "output":
            return base(c=step("c", noop, depends_on="b", output_schema=schema))
        return base(**{f"{where}_schema": schema})

    first, second = build(before).identity, build(after).identity
    assert first.definition_id != second.definition_id
    # The schemas' fingerprints are the definition's metadata, inside the structure.
    assert first.structural_fingerprint != second.structural_fingerprint
    assert first.version == second.version == 3
    assert build(before).identity == first


def test_identity_version_3_comes_with_metadata_or_a_version_3_child() -> None:
    assert base().identity.version == 1
    assert base(options_schema=Out).identity.version == 3
    assert base(finalize=require_outputs(["c"])).identity.version == 3  # a finalizer kind
    assert with_child(child_pipeline()).identity.version == 1
    shaped = define_pipeline(id="child", options_schema=Out, steps=[step("x", noop)])
    assert with_child(shaped).identity.version == 3
    assert "metadata" not in with_child(shaped).definition_snapshot()


def test_implementation_version_changes_definition_id_but_not_structure() -> None:
    plain, v1, v2 = (
        base().identity,
        base(implementation_version="1").identity,
        base(implementation_version="2").identity,
    )
    assert plain.structural_fingerprint == v1.structural_fingerprint == v2.structural_fingerprint
    assert len({plain.definition_id, v1.definition_id, v2.definition_id}) == 3
    assert (v1.implementation_version, v2.implementation_version) == ("1", "2")


def test_changing_a_child_graph_changes_the_parent() -> None:
    original = with_child(child_pipeline()).identity
    changed = with_child(child_pipeline(extra_step=True)).identity
    assert changed.structural_fingerprint != original.structural_fingerprint
    assert changed.definition_id != original.definition_id


def test_changing_a_child_implementation_version_changes_only_the_parent_definition_id() -> None:
    original = with_child(child_pipeline(version="1")).identity
    changed = with_child(child_pipeline(version="2")).identity
    assert changed.structural_fingerprint == original.structural_fingerprint
    assert changed.definition_id != original.definition_id


# -- what does not change it -----------------------------------------------------------------------
UNCHANGED: list[Any] = [
    pytest.param(lambda: base(name="Pretty"), id="pipeline-name"),
    pytest.param(lambda: base(description="What it does"), id="pipeline-description"),
    pytest.param(lambda: base(b=step("b", noop, depends_on="a", name="Bee")), id="step-name"),
    pytest.param(
        lambda: base(b=step("b", noop, depends_on="a", description="Does b")), id="step-description"
    ),
    pytest.param(lambda: base(b=step("b", other, depends_on="a")), id="handler-body"),
    pytest.param(lambda: base(b=step("b", async_other, depends_on="a")), id="async-handler"),
    pytest.param(
        lambda: base(b=step("b", lambda inputs, ctx: 1, depends_on="a")), id="lambda-handler"
    ),
    pytest.param(
        lambda: base(c=step("c", noop, depends_on=step("b", other))), id="dependency-as-step-object"
    ),
    pytest.param(lambda: base(targets=["c"]), id="explicit-default-target"),
]


@pytest.mark.parametrize("variant", UNCHANGED)
def test_presentation_and_handler_code_do_not_change_the_identity(
    variant: Callable[[], Pipeline],
) -> None:
    assert variant().identity == base().identity


def test_other_skip_predicate_or_preview_function_keeps_the_identity() -> None:
    def build(predicate: Any, preview: Any) -> Pipeline:
        return base(b=step("b", noop, depends_on="a", skip=predicate, dry_run=preview))

    assert build(noop, noop).identity == build(other, async_other).identity


def test_dependency_list_order_within_a_field_does_not_change_the_identity() -> None:
    """Snapshot dependency lists are sorted (UPSTREAM §1.12)."""
    first = base(c=step("c", noop, depends_on=["a", "b"]))
    second = base(c=step("c", noop, depends_on=["b", "a"]))
    assert first.identity == second.identity


def test_child_name_and_handlers_do_not_change_the_parent() -> None:
    original = with_child(child_pipeline()).identity
    renamed = with_child(child_pipeline(name="Renamed child")).identity
    assert renamed == original
