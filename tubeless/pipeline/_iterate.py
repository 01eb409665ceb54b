"""Bounded iteration: run a child pipeline again and again until a transition finishes."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Literal

from tubeless import errors as codes
from tubeless._callables import is_awaitable
from tubeless.errors import TubelessError
from tubeless.pipeline._cancel import YIELD_EVERY
from tubeless.pipeline._child import _controls, run_child_value
from tubeless.pipeline._compose import _composed
from tubeless.pipeline._context import StepContext
from tubeless.pipeline._failures import ChildRunFailedError
from tubeless.pipeline._pipeline import Pipeline
from tubeless.pipeline._results import RunStatus
from tubeless.pipeline._step import NestedPipeline, Step
from tubeless.tracing.records import ConstantPayload, ShownRows

__all__ = ["ITERATION_START_SLOT", "iterate_pipeline"]

#: ``(run id, step id, n)``: the iterate step ``step id`` of run ``run id`` continues an earlier
#: iteration, so its progress calls its first iteration ``n`` (a resumed agent's turn number).
#: Relations keep counting from 1: ``iteration.index`` and ``itemKey`` are the wire's own.
ITERATION_START_SLOT = "tubeless.iteration_start"

_MAX_SAFE_INT = 2**53 - 1
_RECENT_ITERATIONS = 31
#: The child runs' item keys ``iteration-<index>`` of the first iterations, made once.
_KEPT_KEYS = 64
_ITEM_KEYS = tuple(f"iteration-{index}" for index in range(_KEPT_KEYS))


def iterate_pipeline(
    id: str,
    pipeline: Pipeline,
    *,
    max_iterations: int,
    initial_state: Callable[..., Any],
    map_options: Callable[..., Any],
    transition: Callable[..., Any],
    controls: Any = None,
    depends_on: Iterable[Any] | str | Step = (),
    optional_depends_on: Iterable[Any] | str | Step = (),
    skip_after_failure_of: Iterable[Any] | str | Step = (),
    skip: Callable[..., Any] | None = None,
    dry_run: Any = None,
    name: str | None = None,
    description: str | None = None,
) -> Step:
    """A step that runs ``pipeline`` repeatedly, at most ``max_iterations`` times.

    Args:
        id: The step id.
        pipeline: The child pipeline run once per iteration.
        max_iterations: The bound (a positive integer).
        initial_state: ``initial_state(inputs, ctx)``, called once per invocation.
        map_options: ``map_options(state, inputs, ctx)`` returns the child's raw input.
        transition: ``transition(result, state, ctx)`` returns ``{"kind": "next", "state": s}``
            or ``{"kind": "finish", "result": r}``; ``r`` is the step's output.
        controls: Child controls, or ``controls(state, inputs, ctx)``.
        depends_on: As for :func:`step`.
        optional_depends_on: As for :func:`step`.
        skip_after_failure_of: As for :func:`step`.
        skip: As for :func:`step`.
        dry_run: ``"skip"`` to skip the whole iteration in dry runs.
        name: Display name.
        description: Display description.
    """
    problems: tuple[tuple[str, str], ...] = ()
    if (
        isinstance(max_iterations, bool)
        or not isinstance(max_iterations, int)
        or not 1 <= max_iterations <= _MAX_SAFE_INT
    ):
        problems = (
            (
                codes.DEFINITION_STEP_INVALID,
                f"Step {id!r}: max_iterations must be a positive integer.",
            ),
        )
    label = pipeline.name or "Iteration"

    async def run(inputs: dict[str, Any], ctx: StepContext) -> Any:
        state = initial_state(inputs, ctx)
        if is_awaitable(state):  # no coroutine of maybe_await's for a sync initializer
            state = await state
        # Progress rows only when traced: an untraced iteration calls nothing for them.
        groups = _IterationGroups(label, _first_number(ctx)) if ctx.tracing else None
        for index in range(1, max_iterations + 1):
            if groups is not None:
                groups.report(ctx, index, max_iterations)
            raw = map_options(state, inputs, ctx)
            if is_awaitable(raw):
                raw = await raw
            if index % YIELD_EVERY == 0:
                await asyncio.sleep(0)  # quick iterations may never suspend: let the loop run
            ok, result = await run_child_value(
                ctx,
                pipeline,
                raw,
                item_key=_ITEM_KEYS[index] if index < _KEPT_KEYS else f"iteration-{index}",
                iteration=None if groups is None else groups.iteration(ctx, index),
                controls=None if controls is None else _controls(controls, state, inputs, ctx),
            )
            if groups is not None:
                groups.finished(index, "completed" if ok else result.status)
            if not ok:
                if groups is not None:
                    groups.report(ctx, None, max_iterations)
                raise ChildRunFailedError(result)
            decision = transition(result, state, ctx)
            if is_awaitable(decision):
                decision = await decision
            kind = _transition_kind(decision)
            if kind == "finish":
                if groups is not None:
                    groups.report(ctx, None, max_iterations)
                return decision["result"]
            state = decision["state"]
        raise TubelessError(
            codes.ITERATION_LIMIT_REACHED,
            f"Iteration did not finish within maxIterations={max_iterations} "
            f"({max_iterations} child runs).",
        )

    return _composed(
        id,
        run,
        NestedPipeline(mode="iterate", pipeline=pipeline, max_iterations=max_iterations),
        depends_on=depends_on,
        optional_depends_on=optional_depends_on,
        skip_after_failure_of=skip_after_failure_of,
        skip=skip,
        dry_run=dry_run,
        name=name,
        description=description,
        problems=problems,
    )


def _first_number(ctx: StepContext) -> int:
    start = ctx.slots.get(ITERATION_START_SLOT)
    if isinstance(start, tuple) and start[:2] == (ctx.run_id, ctx.step_id):
        return int(start[2])
    return 1


class _IterationGroups:
    """Progress rows of an iteration: the current one, at most 31 recent ones, then a count.

    Only traced iterations have one.
    """

    __slots__ = ("done", "label", "offset", "recent", "recent_json", "recent_texts")

    def iteration(self, ctx: StepContext, index: int) -> dict[str, Any]:
        """The child run's ``iteration`` relation (traced runs only)."""
        return {
            "runId": ctx.run_id,
            "stepId": ctx.step_id,
            "attemptId": ctx.attempt_id,
            "index": index,
        }

    def __init__(self, label: str, first: int = 1) -> None:
        self.label = label
        self.offset = first - 1  # shown numbers; ids stay iteration-<index>
        self.done = 0
        self.recent: deque[dict[str, Any]] = deque(maxlen=_RECENT_ITERATIONS)
        # Their JSON, and joined: every report shows them again (see ``ShownRows``).
        self.recent_texts: deque[str] = deque(maxlen=_RECENT_ITERATIONS)
        self.recent_json = ""

    def finished(self, index: int, status: RunStatus) -> None:
        self.done = index
        # Shown again by every later report: a constant row, encoded once for all of them.
        row = ConstantPayload(
            id=f"iteration-{index}",
            name=f"{self.label} {index + self.offset}",
            depth=0,
            status=status,
        )
        self.recent.appendleft(row)
        self.recent_texts.appendleft(row.json())
        self.recent_json = ",".join(self.recent_texts)

    def report(self, ctx: StepContext, current: int | None, bound: int) -> None:
        rows = ShownRows()
        if current is not None:
            rows.append(
                {
                    "id": f"iteration-{current}",
                    "name": f"{self.label} {current + self.offset}",
                    "depth": 0,
                    "status": "running",
                }
            )
        start = len(rows)
        rows.extend(self.recent)
        rows.known = (start, len(rows), self.recent_json)
        earlier = self.done - len(self.recent)
        if earlier > 0:
            rows.append({"id": "earlier", "label": f"{earlier} earlier iterations", "depth": 0})
        shown = (current if current is not None else self.done) + self.offset
        ctx.report_progress(self.done, None, f"{self.label} {shown} of at most {bound}", rows)


def _transition_kind(decision: Any) -> Literal["next", "finish"]:
    if (type(decision) is dict or isinstance(decision, Mapping)) and len(decision) == 2:
        kind = decision.get("kind")
        if kind == "next" and "state" in decision:
            return "next"
        if kind == "finish" and "result" in decision:
            return "finish"
    raise TubelessError(
        codes.ITERATION_INVALID_DECISION,
        "An iteration transition must return exactly {'kind': 'next', 'state': ...} or "
        "{'kind': 'finish', 'result': ...}.",
    )
