"""``define_pipeline``: every static check, reported together, and the execution order."""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from tubeless import errors as codes
from tubeless.errors import PipelineDefinitionError, PipelineError
from tubeless.pipeline._finalize import FINALIZE_STEP_ID
from tubeless.pipeline._pipeline import Finalizer, Pipeline
from tubeless.pipeline._step import RequiredOutputs, Step
from tubeless.schema import Schema

__all__ = ["define_pipeline", "target_closure"]
_DEPENDENCY_FIELDS = ("depends_on", "optional_depends_on", "skip_after_failure_of")


def define_pipeline(
    *,
    id: str,
    steps: Sequence[Step],
    options_schema: Any = None,
    result_schema: Any = None,
    targets: Iterable[Any] | None = None,
    finalize: Any = None,
    implementation_version: str | None = None,
    name: str | None = None,
    description: str | None = None,
) -> Pipeline:
    """Check a pipeline definition and compile it.

    Args:
        id: The pipeline id.
        steps: The steps, in declaration order (ties in the execution order keep it).
        options_schema: Validates the run input once, before any step.
        result_schema: Validates the final result once.
        targets: Declared public goals (ids or steps). ``None`` declares the last step in
            execution order; ``[]`` declares none.
        finalize: ``None`` (the last step's output), a step (its output, required), a callable
            ``fn(outputs, ctx)``, or :func:`require_outputs`.
        implementation_version: Bump it when handler behaviour changes; 1 to 256 characters.
        name: Display name.
        description: Display description.

    Raises:
        PipelineDefinitionError: Listing every problem found, each with its
            ``TUBELESS_DEFINITION_*`` code.
    """
    problems: list[PipelineError] = []

    def problem(code: str, message: str, step_id: str | None = None) -> None:
        problems.append(
            PipelineError(
                code=code, kind="definition", phase="definition", message=message, step_id=step_id
            )
        )

    if not isinstance(id, str) or not id.strip():
        problem(codes.DEFINITION_PIPELINE_ID_BLANK, "Pipeline id must be a nonblank string.")
        id = str(id)
    if name is not None and (not isinstance(name, str) or not name.strip()):
        problem(codes.DEFINITION_PIPELINE_NAME_BLANK, "Pipeline name must be nonblank when given.")
    if description is not None and (not isinstance(description, str) or not description.strip()):
        problem(
            codes.DEFINITION_PIPELINE_DESCRIPTION_BLANK,
            "Pipeline description must be nonblank when given.",
        )
    if implementation_version is not None and (
        not isinstance(implementation_version, str)
        or not implementation_version.strip()
        or len(implementation_version) > 256
    ):
        problem(
            codes.DEFINITION_IMPLEMENTATION_VERSION_INVALID,
            "implementation_version must be a nonblank string of at most 256 characters.",
        )

    steps = tuple(steps)
    bad_objects = [step for step in steps if not isinstance(step, Step)]
    if bad_objects:
        problem(
            codes.DEFINITION_STEP_INVALID,
            f"Every step must be made with step(...); got {type(bad_objects[0]).__name__}.",
        )
        steps = tuple(step for step in steps if isinstance(step, Step))
    if not steps and not bad_objects:
        problem(codes.DEFINITION_STEPS_EMPTY, "A pipeline needs at least one step.")

    ids = [step.id for step in steps]
    seen: set[str] = set()
    duplicates = sorted({i for i in ids if i in seen or seen.add(i)})  # type: ignore[func-returns-value]
    if duplicates:
        problem(
            codes.DEFINITION_STEP_IDS_DUPLICATE,
            f"Step ids must be unique; duplicated: {', '.join(map(repr, duplicates))}.",
        )
    for step in steps:
        _check_step(step, problem)

    step_ids = set(ids)
    target_ids, targets_declared = _targets(targets, steps)
    target_dupes = sorted({t for t in target_ids if target_ids.count(t) > 1})
    if target_dupes:
        problem(
            codes.DEFINITION_TARGETS_DUPLICATE,
            f"Targets must be unique; duplicated: {', '.join(map(repr, target_dupes))}.",
        )
    missing_targets = [t for t in target_ids if t not in step_ids]
    if missing_targets:
        problem(
            codes.DEFINITION_TARGET_NOT_IN_STEPS,
            f"Targets are not steps of this pipeline: {', '.join(map(repr, missing_targets))}.",
        )
    missing_deps = [
        f"{step.id} -> {dep}"
        for step in steps
        for dep in step.dependency_ids
        if isinstance(dep, str) and dep not in step_ids
    ]
    if missing_deps:
        problem(
            codes.DEFINITION_DEPENDENCY_NOT_IN_STEPS,
            f"Dependencies are not steps of this pipeline: {', '.join(missing_deps)}.",
        )

    finalizer = _finalizer(finalize, problem)
    missing_required = [r for r in finalizer.required if r not in step_ids]
    if missing_required:
        problem(
            codes.DEFINITION_FINALIZER_STEP_NOT_IN_STEPS,
            "The finalizer requires outputs of unknown steps: "
            f"{', '.join(map(repr, missing_required))}.",
        )

    options = _schema(options_schema, "options_schema", problem)
    result = _schema(result_schema, "result_schema", problem)

    if targets_declared and finalizer.required:
        by_id = {step.id: step for step in steps if isinstance(step.id, str)}
        for target in dict.fromkeys(t for t in target_ids if t in by_id):
            closure = target_closure(by_id, target)
            absent = [r for r in finalizer.required if r in by_id and r not in closure]
            if absent:
                problem(
                    codes.DEFINITION_TARGET_FINALIZER_MISMATCH,
                    f"Target {target!r} cannot produce the finalizer's required outputs: "
                    f"{', '.join(map(repr, absent))}.",
                )

    order: tuple[Step, ...] = ()
    if not problems:
        order, cycle = _execution_order(steps)
        if cycle:
            problem(
                codes.DEFINITION_DEPENDENCY_CYCLE,
                f"Dependencies form a cycle through: {', '.join(map(repr, cycle))}.",
            )
    if problems:
        raise PipelineDefinitionError(id, problems)

    if not targets_declared:
        target_ids = [order[-1].id]
    return Pipeline(
        id=id,
        name=name,
        description=description,
        implementation_version=implementation_version,
        steps=steps,
        order=order,
        target_ids=tuple(target_ids),
        finalizer=finalizer,
        options_schema=options,
        result_schema=result,
    )


def _check_step(step: Step, problem: Callable[..., None]) -> None:
    if not isinstance(step.id, str) or not step.id.strip():
        problem(codes.DEFINITION_STEP_ID_BLANK, "Step ids must be nonblank strings.")
        return
    if step.id == FINALIZE_STEP_ID:
        problem(
            codes.DEFINITION_STEP_ID_RESERVED,
            f"Step id {FINALIZE_STEP_ID!r} is reserved for finalization; rename the step.",
            step.id,
        )
    if step.name is not None and (not isinstance(step.name, str) or not step.name.strip()):
        problem(codes.DEFINITION_STEP_NAME_BLANK, f"Step {step.id!r} has a blank name.", step.id)
    if not callable(step.run):
        problem(codes.DEFINITION_STEP_INVALID, f"Step {step.id!r}: run must be callable.", step.id)
    if step.skip is not None and not callable(step.skip):
        problem(codes.DEFINITION_STEP_INVALID, f"Step {step.id!r}: skip must be callable.", step.id)
    if step.dry_run is not None and step.dry_run != "skip" and not callable(step.dry_run):
        problem(
            codes.DEFINITION_STEP_INVALID,
            f"Step {step.id!r}: dry_run must be 'skip' or a preview handler.",
            step.id,
        )
    for code, message in step.problems:
        problem(code, message, step.id)
    for field_name in _DEPENDENCY_FIELDS:
        values = getattr(step, field_name)
        wrong = [v for v in values if not isinstance(v, str)]
        if wrong:
            problem(
                codes.DEFINITION_STEP_INVALID,
                f"Step {step.id!r}: {field_name} entries must be step ids or steps.",
                step.id,
            )
        if len(set(values)) != len(values):
            problem(
                codes.DEFINITION_DEPENDENCY_DUPLICATE,
                f"Step {step.id!r} lists a dependency twice in {field_name}.",
                step.id,
            )
        if step.id in values:
            problem(
                codes.DEFINITION_DEPENDENCY_SELF_REFERENCE,
                f"Step {step.id!r} depends on itself in {field_name}.",
                step.id,
            )
    both = sorted(set(step.depends_on) & set(step.optional_depends_on), key=str)
    if both:
        problem(
            codes.DEFINITION_DEPENDENCY_CONTRADICTORY,
            f"Step {step.id!r} lists {', '.join(map(repr, both))} as both a required and an "
            "optional dependency.",
            step.id,
        )


def _targets(targets: Iterable[Any] | None, steps: Sequence[Step]) -> tuple[list[Any], bool]:
    if targets is None:
        return [], False
    if isinstance(targets, (str, Step)):
        targets = (targets,)
    return [t.id if isinstance(t, Step) else t for t in targets], True


def _finalizer(finalize: Any, problem: Callable[..., None]) -> Finalizer:
    if finalize is None:
        return Finalizer(kind="last")
    if isinstance(finalize, Step):
        finalize = finalize.id
    if isinstance(finalize, str):
        return Finalizer(kind="step", required=(finalize,))
    if isinstance(finalize, RequiredOutputs):
        if finalize.fn is not None and not callable(finalize.fn):
            problem(codes.DEFINITION_STEP_INVALID, "require_outputs(...) needs a callable.")
        return Finalizer(kind="function", fn=finalize.fn, required=finalize.step_ids)
    if callable(finalize):
        return Finalizer(kind="function", fn=finalize)
    problem(
        codes.DEFINITION_STEP_INVALID,
        "finalize must be a step, a step id, a callable or require_outputs(...).",
    )
    return Finalizer(kind="last")


def _schema(value: Any, label: str, problem: Callable[..., None]) -> Schema | None:
    if value is None:
        return None
    try:
        return Schema.of(value)
    except (TypeError, ValueError) as exc:
        problem(codes.DEFINITION_SCHEMA_INVALID, f"{label} is not a schema: {exc}")
        return None


def target_closure(by_id: Mapping[str, Step], target: str) -> set[str]:
    """The target plus, recursively, its required dependencies and failure gates."""
    closure: set[str] = set()
    stack = [target]
    while stack:
        current = stack.pop()
        if current in closure:
            continue
        closure.add(current)
        s = by_id.get(current)
        if s is not None:  # unknown ids are reported by their own checks
            stack.extend(s.depends_on)
            stack.extend(s.skip_after_failure_of)
    return closure


def _execution_order(steps: Sequence[Step]) -> tuple[tuple[Step, ...], list[str]]:
    """Kahn's algorithm over all dependency kinds; ties go to the earlier declaration."""
    index = {s.id: i for i, s in enumerate(steps)}
    waiting = [len(set(s.dependency_ids)) for s in steps]
    dependents: list[list[int]] = [[] for _ in steps]
    for i, s in enumerate(steps):
        for dep in set(s.dependency_ids):
            dependents[index[dep]].append(i)
    ready = [i for i, n in enumerate(waiting) if n == 0]
    heapq.heapify(ready)
    order: list[Step] = []
    while ready:
        i = heapq.heappop(ready)
        order.append(steps[i])
        for j in dependents[i]:
            waiting[j] -= 1
            if waiting[j] == 0:
                heapq.heappush(ready, j)
    if len(order) == len(steps):
        return tuple(order), []
    done = {s.id for s in order}
    return (), [s.id for s in steps if s.id not in done]
