"""The static step graph of each pipeline, checked as ``define_pipeline`` checks it.

Dependencies on the step itself, listed twice, both required and optional, cycles, the reserved
step id, duplicate targets and targets that cannot produce what the finalizer requires are all
visible in the document: they are reported here, before anything is imported, each at the entry
that causes it and with the pipeline core's ``TUBELESS_DEFINITION_*`` code and wording, so that
``validate`` without ``--resolve`` finds what ``run`` would. Unknown and duplicate step ids are
left to :mod:`tubeless.project._semantics` (a graph with unknown ids is not checked for cycles,
one with duplicate ids not at all).
"""

from __future__ import annotations

from collections.abc import Iterator

from tubeless import errors as codes
from tubeless.project._problem import Problem
from tubeless.project.spec import FinalizeSpec, PipelineSpec

__all__ = ["step_graph_problems"]

_FIELDS = ("depends_on", "optional_depends_on", "skip_after_failure_of")
#: The step id the core reserves for finalization (``tubeless.pipeline._finalize``); the
#: project layer may import the pipeline package, but this is one string.
_RESERVED = "__finalize__"


def step_graph_problems(base: str, pipeline: PipelineSpec) -> list[Problem]:
    """Every graph problem of one pipeline whose pointer is ``base``."""
    found: list[Problem] = []
    ids = {step.id for step in pipeline.steps}
    if len(ids) != len(pipeline.steps):
        return found  # which of two steps of one id a dependency means cannot be told
    for index, step in enumerate(pipeline.steps):
        pointer = f"{base}/steps/{index}"
        if step.id == _RESERVED:
            found.append(
                Problem(
                    f"{pointer}/id",
                    f"Step id {_RESERVED!r} is reserved for finalization; rename the step.",
                    codes.DEFINITION_STEP_ID_RESERVED,
                )
            )
        for field in _FIELDS:
            seen: set[str] = set()
            for position, dependency in enumerate(getattr(step, field)):
                where = f"{pointer}/{field}/{position}"
                if dependency == step.id:
                    found.append(
                        Problem(
                            where,
                            f"Step {step.id!r} depends on itself in {field}.",
                            codes.DEFINITION_DEPENDENCY_SELF_REFERENCE,
                        )
                    )
                elif dependency in seen:
                    found.append(
                        Problem(
                            where,
                            f"Step {step.id!r} lists a dependency twice in {field}.",
                            codes.DEFINITION_DEPENDENCY_DUPLICATE,
                        )
                    )
                seen.add(dependency)
        required = set(step.depends_on)
        for position, dependency in enumerate(step.optional_depends_on):
            if dependency in required and dependency != step.id:
                found.append(
                    Problem(
                        f"{pointer}/optional_depends_on/{position}",
                        f"Step {step.id!r} lists {dependency!r} as both a required and an "
                        "optional dependency.",
                        codes.DEFINITION_DEPENDENCY_CONTRADICTORY,
                    )
                )
    found.extend(_targets(base, pipeline, ids))
    if all(
        dep in ids for step in pipeline.steps for field in _FIELDS for dep in getattr(step, field)
    ):
        found.extend(_cycles(base, pipeline))
    return found


def _targets(base: str, pipeline: PipelineSpec, ids: set[str]) -> Iterator[Problem]:
    if pipeline.targets is None:
        return
    seen: set[str] = set()
    for position, target in enumerate(pipeline.targets):
        if target in seen:
            yield Problem(
                f"{base}/targets/{position}",
                f"Targets must be unique; duplicated: {target!r}.",
                codes.DEFINITION_TARGETS_DUPLICATE,
            )
        seen.add(target)
    finalize = pipeline.finalize
    required = (
        [finalize]
        if isinstance(finalize, str)
        else finalize.require_outputs
        if isinstance(finalize, FinalizeSpec)
        else []
    )
    by_id = {step.id: step for step in pipeline.steps}
    reported: set[str] = set()
    for position, target in enumerate(pipeline.targets):
        if target not in by_id or target in reported:
            continue
        reported.add(target)
        closure: set[str] = set()
        stack = [target]
        while stack:  # the target, its required dependencies and its failure gates
            current = stack.pop()
            if current in closure or current not in by_id:
                continue
            closure.add(current)
            stack.extend(by_id[current].depends_on)
            stack.extend(by_id[current].skip_after_failure_of)
        absent = [r for r in dict.fromkeys(required) if r in ids and r not in closure]
        if absent:
            yield Problem(
                f"{base}/targets/{position}",
                f"Target {target!r} cannot produce the finalizer's required outputs: "
                f"{', '.join(map(repr, absent))}.",
                codes.DEFINITION_TARGET_FINALIZER_MISMATCH,
            )


def _cycles(base: str, pipeline: PipelineSpec) -> list[Problem]:
    """Each cycle once, at the dependency that closes it (a self-dependency is not a cycle
    here: it has its own code)."""
    edges: dict[str, list[tuple[str, str]]] = {step.id: [] for step in pipeline.steps}
    for index, step in enumerate(pipeline.steps):
        for field in _FIELDS:
            for position, dependency in enumerate(getattr(step, field)):
                if dependency != step.id:
                    where = f"{base}/steps/{index}/{field}/{position}"
                    edges[step.id].append((dependency, where))
    found: list[Problem] = []
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    reported: set[frozenset[str]] = set()
    for start in edges:
        if start in state:
            continue
        # An explicit stack: a pipeline may have thousands of steps in a chain.
        path = [start]
        state[start] = 1
        stack = [iter(edges[start])]
        while stack:
            edge = next(stack[-1], None)
            if edge is None:
                stack.pop()
                state[path.pop()] = 2
                continue
            target, where = edge
            if state.get(target) == 1:
                # Said from the step whose dependency is located: it waits for the next one.
                cycle = [path[-1], *path[path.index(target) :]]
                if frozenset(cycle) not in reported:
                    reported.add(frozenset(cycle))
                    found.append(
                        Problem(
                            where,
                            "Dependencies form a cycle: "
                            f"{' -> '.join(map(repr, cycle))} (each step waits for the "
                            "next).",
                            codes.DEFINITION_DEPENDENCY_CYCLE,
                        )
                    )
            elif target not in state:
                state[target] = 1
                path.append(target)
                stack.append(iter(edges[target]))
    return found
