"""Planning: selection (targets / exact steps) with reasons, and the shared skip ladder."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from tubeless import errors as codes
from tubeless.errors import PipelineError
from tubeless.tracing.records import ConstantPayload, started_payload

if TYPE_CHECKING:
    from tubeless.pipeline._pipeline import Pipeline
    from tubeless.pipeline._results import SkipReason
    from tubeless.pipeline._step import Step

__all__ = ["Plan", "PlanStep", "SelectionReason", "build_plan", "skip_reason"]

ReasonKind = Literal[
    "all",
    "exact",
    "not-selected",
    "target",
    "required-dependency",
    "failure-gate",
    "optional-only",
    "outside-target-closure",
]
_NOT_SELECTING = frozenset({"not-selected", "optional-only", "outside-target-closure"})


@dataclass(frozen=True, kw_only=True, slots=True)
class SelectionReason:
    """Why a step is (or is not) part of a selection."""

    kind: ReasonKind
    target_id: str | None = None
    dependent_id: str | None = None

    @property
    def selects(self) -> bool:
        """Whether this reason puts the step in the selection."""
        return self.kind not in _NOT_SELECTING

    def to_dict(self) -> dict[str, Any]:
        """``{kind, target_id?, dependent_id?}``."""
        out: dict[str, Any] = {"kind": self.kind}
        if self.dependent_id is not None:
            out["dependent_id"] = self.dependent_id
        if self.target_id is not None:
            out["target_id"] = self.target_id
        return out

    def to_wire(self) -> dict[str, Any]:
        """The camelCase trace form."""
        out: dict[str, Any] = {"kind": self.kind}
        if self.dependent_id is not None:
            out["dependentId"] = self.dependent_id
        if self.target_id is not None:
            out["targetId"] = self.target_id
        return out


@dataclass(frozen=True, kw_only=True, slots=True)
class PlanStep:
    """One step as planned: selection, dry-run policy and its plan-time disposition."""

    id: str
    step: Step = field(repr=False, compare=False)
    name: str | None
    description: str | None
    dependencies: tuple[str, ...]
    optional_dependencies: tuple[str, ...]
    skip_after_failure_of: tuple[str, ...]
    dry_run: Literal["run", "skip", "custom"]
    runtime_skip_possible: bool
    selected: bool
    selection_reasons: tuple[SelectionReason, ...]
    skip_reason: SkipReason | None = None
    dependency_id: str | None = None
    nested_pipeline: Mapping[str, Any] | None = None
    agent: Mapping[str, Any] | None = None

    @property
    def will_run(self) -> bool:
        """Whether the plan expects this step to run (policy skips are decided at run time)."""
        return self.skip_reason is None

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready snake_case dict (``tubeless plan --json``)."""
        out: dict[str, Any] = {"id": self.id}
        if self.name is not None:
            out["name"] = self.name
        if self.description is not None:
            out["description"] = self.description
        out.update(
            dependencies=list(self.dependencies),
            optional_dependencies=list(self.optional_dependencies),
            skip_after_failure_of=list(self.skip_after_failure_of),
            dry_run=self.dry_run,
            runtime_skip_possible=self.runtime_skip_possible,
            selected=self.selected,
            selection_reasons=[r.to_dict() for r in self.selection_reasons],
            disposition="run" if self.skip_reason is None else "skip",
        )
        if self.skip_reason is not None:
            out["skip_reason"] = self.skip_reason
        if self.dependency_id is not None:
            out["dependency_id"] = self.dependency_id
        if self.nested_pipeline is not None:
            out["nested_pipeline"] = _snake(self.nested_pipeline)
        if self.agent is not None:
            out["agent"] = _snake(self.agent)
        return out

    def planned_payload(self) -> dict[str, Any]:
        """The ``step.planned`` trace payload (camelCase)."""
        payload: dict[str, Any] = {
            "dependencies": list(self.dependencies),
            "optionalDependencies": list(self.optional_dependencies),
            "skipAfterFailureOf": list(self.skip_after_failure_of),
            "dryRun": self.dry_run,
            "runtimeSkipPossible": self.runtime_skip_possible,
            "selected": self.selected,
            "selectionReasons": [r.to_wire() for r in self.selection_reasons][:128],
        }
        if self.name is not None:
            payload["name"] = self.name
        if self.description is not None:
            payload["description"] = self.description
        if self.nested_pipeline is not None:
            nested = self.nested_pipeline
            wire: dict[str, Any] = {
                "mode": nested["mode"],
                "pipelineId": nested["pipelineId"],
                "stepCount": len(nested["stepIds"]),
                "stepIds": list(nested["stepIds"])[:128],
            }
            if nested["mode"] == "iterate":
                wire["maxIterations"] = nested["maxIterations"]
            payload["nestedPipeline"] = wire
        return payload


@dataclass(frozen=True, kw_only=True, slots=True)
class Plan:
    """What a run would do. ``ok=False`` plans carry errors and no steps."""

    pipeline_id: str
    ok: bool
    dry_run: bool
    errors: tuple[PipelineError, ...]
    steps: tuple[PlanStep, ...]
    pipeline: Pipeline = field(repr=False, compare=False)
    _payloads: list[dict[str, Any]] = field(default_factory=list, repr=False, compare=False)
    _started: dict[bool, ConstantPayload] = field(default_factory=dict, repr=False, compare=False)

    def step(self, step_id: str) -> PlanStep:
        """The plan step ``step_id`` (``KeyError`` if absent)."""
        for s in self.steps:
            if s.id == step_id:
                return s
        raise KeyError(step_id)

    @property
    def selected_ids(self) -> tuple[str, ...]:
        """Ids of the selected steps, in execution order."""
        return tuple(s.id for s in self.steps if s.selected)

    def planned_payloads(self) -> list[dict[str, Any]]:
        """``step.planned`` payloads, built once per plan."""
        if not self._payloads and self.steps:
            # Shared by every run of the plan, so their JSON is encoded once.
            self._payloads.extend(ConstantPayload(s.planned_payload()) for s in self.steps)
        return self._payloads

    def started_payload(self, pipeline: Pipeline, *, snapshot: bool) -> ConstantPayload:
        """The ``pipeline.started`` payload of a run of this plan of ``pipeline``, built once
        (with or without the definition snapshot)."""
        payload = self._started.get(snapshot)
        if payload is None:
            payload = self._started[snapshot] = started_payload(
                dry_run=self.dry_run,
                plan_ok=self.ok,
                step_count=len(self.steps),
                target_ids=pipeline.target_ids,
                definition_identity=pipeline.identity.to_wire(),
                definition_snapshot=pipeline.trace_snapshot() if snapshot else None,
            )
        return payload

    def to_dict(self, *, definition: bool = False) -> dict[str, Any]:
        """A JSON-ready snake_case dict (``tubeless plan --json``)."""
        out: dict[str, Any] = {
            "pipeline_id": self.pipeline_id,
            "ok": self.ok,
            "dry_run": self.dry_run,
            "errors": [_error_dict(e) for e in self.errors],
            "steps": [s.to_dict() for s in self.steps],
        }
        if definition:
            out["definition"] = self.pipeline.definition_snapshot()
        return out


def _error_dict(error: PipelineError) -> dict[str, Any]:
    out: dict[str, Any] = {
        "code": error.code,
        "kind": error.kind,
        "phase": error.phase,
        "message": error.message,
    }
    if error.step_id is not None:
        out["step_id"] = error.step_id
    return out


def _snake(value: Any) -> Any:
    """camelCase keys to snake_case, leaving embedded JSON Schemas (``...JsonSchema``) as is."""
    if isinstance(value, Mapping):
        return {
            _snake_key(k): v if k.endswith("JsonSchema") else _snake(v) for k, v in value.items()
        }
    if isinstance(value, (list, tuple)):
        return [_snake(v) for v in value]
    return value


def _snake_key(key: str) -> str:
    return "".join("_" + c.lower() if c.isupper() else c for c in key)


# -- selection --------------------------------------------------------------------------------
def _planning_error(code: str, message: str) -> PipelineError:
    return PipelineError(code=code, kind="selection", phase="planning", message=message)


def _selection_errors(
    pipeline: Pipeline, targets: tuple[str, ...] | None, step_ids: tuple[str, ...] | None
) -> list[PipelineError]:
    if targets is not None and step_ids is not None:
        return [
            _planning_error(
                codes.PLANNING_SELECTION_CONFLICT,
                "Select either targets or exact steps, not both.",
            )
        ]
    found: list[PipelineError] = []
    known = pipeline.declared()
    if step_ids is not None:
        if not step_ids:
            found.append(
                _planning_error(codes.PLANNING_STEP_SELECTION_EMPTY, "The step selection is empty.")
            )
        dupes = sorted({s for s in step_ids if step_ids.count(s) > 1})
        if dupes:
            found.append(
                _planning_error(
                    codes.PLANNING_STEP_SELECTION_DUPLICATE,
                    f"Steps selected more than once: {', '.join(map(repr, dupes))}.",
                )
            )
        unknown = [s for s in step_ids if s not in known]
        if unknown:
            found.append(
                _planning_error(
                    codes.PLANNING_STEP_UNKNOWN,
                    f"Unknown steps: {', '.join(map(repr, unknown))}; "
                    f"choose from {', '.join(map(repr, pipeline.step_ids))}.",
                )
            )
    if targets is not None:
        if not targets:
            found.append(
                _planning_error(
                    codes.PLANNING_TARGET_SELECTION_EMPTY, "The target selection is empty."
                )
            )
        dupes = sorted({t for t in targets if targets.count(t) > 1})
        if dupes:
            found.append(
                _planning_error(
                    codes.PLANNING_TARGET_SELECTION_DUPLICATE,
                    f"Targets selected more than once: {', '.join(map(repr, dupes))}.",
                )
            )
        choices = ", ".join(map(repr, pipeline.target_ids)) or "none declared"
        unknown = [t for t in targets if t not in known]
        if unknown:
            found.append(
                _planning_error(
                    codes.PLANNING_TARGET_UNKNOWN,
                    f"Unknown targets: {', '.join(map(repr, unknown))}; targets: {choices}.",
                )
            )
        undeclared = [t for t in targets if t in known and t not in pipeline.target_ids]
        if undeclared:
            found.append(
                _planning_error(
                    codes.PLANNING_TARGET_UNDECLARED,
                    f"Steps are not declared targets: {', '.join(map(repr, undeclared))}; "
                    f"targets: {choices}.",
                )
            )
    return found


def _target_reasons(
    pipeline: Pipeline, targets: tuple[str, ...]
) -> dict[str, list[SelectionReason]]:
    reasons: dict[str, list[SelectionReason]] = {step.id: [] for step in pipeline.order}

    def add(step_id: str, reason: SelectionReason) -> None:
        bucket = reasons[step_id]
        if reason not in bucket:
            bucket.append(reason)

    for target in targets:
        add(target, SelectionReason(kind="target", target_id=target))
        visited: set[str] = set()
        stack = [target]
        while stack:
            current = stack.pop()
            if current in visited:
                continue
            visited.add(current)
            step = pipeline.get_step(current)
            for dep in step.depends_on:
                add(
                    dep,
                    SelectionReason(
                        kind="required-dependency", dependent_id=current, target_id=target
                    ),
                )
            for gate in step.skip_after_failure_of:
                add(
                    gate,
                    SelectionReason(kind="failure-gate", dependent_id=current, target_id=target),
                )
            for opt in step.optional_depends_on:
                add(
                    opt,
                    SelectionReason(kind="optional-only", dependent_id=current, target_id=target),
                )
            # Visit in declaration order: push in reverse.
            stack.extend(reversed((*step.depends_on, *step.skip_after_failure_of)))
    return reasons


def _selection(
    pipeline: Pipeline, targets: tuple[str, ...] | None, step_ids: tuple[str, ...] | None
) -> dict[str, tuple[bool, tuple[SelectionReason, ...]]]:
    if targets is None and step_ids is None:
        everything = (SelectionReason(kind="all"),)
        return {s.id: (True, everything) for s in pipeline.order}
    if step_ids is not None:
        chosen = set(step_ids)
        exact, not_selected = (
            (SelectionReason(kind="exact"),),
            (SelectionReason(kind="not-selected"),),
        )
        return {
            s.id: (True, exact) if s.id in chosen else (False, not_selected) for s in pipeline.order
        }
    assert targets is not None
    out: dict[str, tuple[bool, tuple[SelectionReason, ...]]] = {}
    for step_id, found in _target_reasons(pipeline, targets).items():
        selecting = tuple(r for r in found if r.selects)
        if selecting:
            out[step_id] = (True, selecting)
        else:
            optional = tuple(r for r in found if r.kind == "optional-only")
            out[step_id] = (False, optional or (SelectionReason(kind="outside-target-closure"),))
    return out


# -- the skip ladder ----------------------------------------------------------------------------
def skip_reason(
    step: Step,
    *,
    selected: bool,
    dry_run: bool,
    is_met: Callable[[str], bool],
    gate_failed: Callable[[str], bool],
) -> tuple[SkipReason, str | None] | None:
    """The structural disposition shared by plans and runs: a skip reason, or ``None`` to run.

    Order: filtered, failed-dependency (gates), unmet-dependency (first unmet), dry-run.
    """
    if not selected:
        return "filtered", None
    for gate in step.skip_after_failure_of:
        if gate_failed(gate):
            return "failed-dependency", gate
    for dep in step.depends_on:
        if not is_met(dep):
            return "unmet-dependency", dep
    if dry_run and step.dry_run == "skip":
        return "dry-run", None
    return None


def build_plan(
    pipeline: Pipeline,
    *,
    dry_run: bool,
    targets: tuple[str, ...] | None,
    step_ids: tuple[str, ...] | None,
) -> Plan:
    """Plan ``pipeline`` for the given controls; pure and deterministic."""
    problems = _selection_errors(pipeline, targets, step_ids)
    if problems:
        return Plan(
            pipeline_id=pipeline.id,
            ok=False,
            dry_run=dry_run,
            errors=tuple(problems),
            steps=(),
            pipeline=pipeline,
        )
    selection = _selection(pipeline, targets, step_ids)
    will_run: set[str] = set()
    steps: list[PlanStep] = []
    for step in pipeline.order:
        selected, reasons = selection[step.id]
        disposition = skip_reason(
            step,
            selected=selected,
            dry_run=dry_run,
            is_met=will_run.__contains__,
            gate_failed=_never,
        )
        if disposition is None:
            will_run.add(step.id)
        steps.append(
            PlanStep(
                id=step.id,
                step=step,
                name=step.name,
                description=step.description,
                dependencies=step.depends_on,
                optional_dependencies=step.optional_depends_on,
                skip_after_failure_of=step.skip_after_failure_of,
                dry_run="run"
                if step.dry_run is None
                else "skip"
                if step.dry_run == "skip"
                else "custom",
                runtime_skip_possible=step.skip is not None,
                selected=selected,
                selection_reasons=reasons,
                skip_reason=None if disposition is None else disposition[0],
                dependency_id=None if disposition is None else disposition[1],
                nested_pipeline=_nested(step),
                agent=step.agent,
            )
        )
    return Plan(
        pipeline_id=pipeline.id,
        ok=True,
        dry_run=dry_run,
        errors=(),
        steps=tuple(steps),
        pipeline=pipeline,
    )


def _never(_: str) -> bool:
    return False


def _nested(s: Step) -> dict[str, Any] | None:
    nested = s.nested
    if nested is None:
        return None
    child = nested.pipeline
    out: dict[str, Any] = {
        "mode": nested.mode,
        "pipelineId": child.id,
        "stepIds": list(child.step_ids),
    }
    if child.name is not None:
        out["pipelineName"] = child.name
    if nested.concurrency is not None:
        out["concurrency"] = nested.concurrency
    if nested.max_iterations is not None:
        out["maxIterations"] = nested.max_iterations
    return out
