"""The lean path of a child run: the same run, without the records nobody reads.

A caller that needs a child's value only when the child completes (an iteration's next pass, a
fan-out item, an agent's tool call) goes through :func:`run_lean`. When nothing records the run
tree and the child's plan is straight-line (every step selected, no skip predicate, one step at a
time, finalized by one step's output), its steps run here in plan order with the run id, attempt
ids, contexts, handler gate and output validation the executor would use, and no run record,
step reports or plan walk is built.

The first thing that is not a plain success (an exception, a task cancellation, a rejected input
or output, a cancelled signal) hands the run over to the executor with the same run id and a
:class:`~tubeless.pipeline._run_state.Replay` of what already happened. The executor records those
outcomes without calling any handler or validator again, carries on exactly as it always does,
and returns the record every failure needs. Records are therefore made in one place only.
"""

from __future__ import annotations

from collections.abc import Awaitable
from time import time_ns
from typing import TYPE_CHECKING, Any, NamedTuple

from tubeless.pipeline._context import RunEnvironment, StepContext
from tubeless.pipeline._execute import DEFAULT_CONTROLS, _invoke, checked_output, execute
from tubeless.pipeline._failures import not_awaitable
from tubeless.pipeline._ids import new_run_id
from tubeless.pipeline._run_state import UNVALIDATED, Replay, ReplayedStep, attempt_id_of
from tubeless.schema import SchemaValidationError

if TYPE_CHECKING:
    from tubeless.pipeline._cancel import CancelToken
    from tubeless.pipeline._pipeline import Pipeline
    from tubeless.pipeline._results import PipelineRun
    from tubeless.pipeline._step import Step

__all__ = ["lean_program", "run_lean"]

class _LeanStep(NamedTuple):
    id: str
    step: Step
    inputs: tuple[str, ...]
    """Required, then optional dependencies: all of them published once earlier steps ran."""


class LeanProgram(NamedTuple):
    """A straight-line plan, ready to run without the scheduler."""

    steps: tuple[_LeanStep, ...]
    result_id: str


def lean_program(pipeline: Pipeline) -> LeanProgram | None:
    """The lean program of ``pipeline``'s default plan, or ``None`` if it needs the executor."""
    cached = pipeline._lean
    if cached is None:
        cached = _compile(pipeline)
        pipeline._lean = cached
    return cached or None


def _compile(pipeline: Pipeline) -> LeanProgram | bool:
    plan = pipeline.plan()
    finalizer = pipeline.finalizer
    if not plan.ok or pipeline.result_schema is not None or finalizer.kind != "step":
        return False
    steps: list[_LeanStep] = []
    for ps in plan.steps:
        s = ps.step
        if not ps.selected or ps.skip_reason is not None or s.skip is not None:
            return False
        steps.append(_LeanStep(ps.id, s, (*s.depends_on, *s.optional_depends_on)))
    return LeanProgram(tuple(steps), finalizer.required[0])


async def run_lean(
    pipeline: Pipeline,
    program: LeanProgram,
    raw_input: Any,
    *,
    env: RunEnvironment,
    signal: CancelToken,
    parent_run_id: str,
    item_key: str | None,
    validated: Any,
) -> tuple[bool, Any]:
    """Run a child; ``(True, value)`` when it completed, else ``(False, its PipelineRun)``."""
    run_id = new_run_id(pipeline.id)
    started_ms = time_ns() // 1_000_000
    outputs: dict[str, Any] = {}
    attempts: list[tuple[str, int, float]] = []
    # Everything the executor needs to take the run over (a plain tuple: the cheapest to make).
    where = (pipeline, raw_input, env, signal, run_id, parent_run_id, item_key, started_ms)

    options = validated
    if options is UNVALIDATED:
        schema = pipeline.options_schema
        if schema is None:
            options = raw_input
        else:
            try:
                options = schema.validate(raw_input)
            except SchemaValidationError as exc:
                return await _hand_over(where, UNVALIDATED, outputs, attempts, options_error=exc)

    pipeline_id = pipeline.id
    for step_id, s, deps in program.steps:
        if signal.cancelled:
            return await _hand_over(where, options, outputs, attempts)
        n = len(attempts) + 1
        # Durations are only traced, and a traced run never comes here: no clock for them.
        attempt = (
            run_id + _ATTEMPT[n] if n < 10 else attempt_id_of(run_id, n),
            time_ns() // 1_000_000,
            0.0,
        )
        attempts.append(attempt)
        ctx = StepContext(
            pipeline_id, run_id, step_id, options, False, signal, env, None, attempt[0]
        )
        inputs = {dep: outputs[dep] for dep in deps} if deps else {}
        from_handler = not s.orchestration
        try:
            gate = None if s.orchestration else env.gate
            if gate is not None and not gate.try_enter(signal):
                await gate.enter(signal)
            try:
                if s.run_is_async:
                    value = await s.run(inputs, ctx)
                elif s.inline or s.orchestration:
                    value = s.run(inputs, ctx)
                    if not not_awaitable(value):
                        value = await value
                else:
                    value = await _invoke(s, inputs, ctx, dry_run=False)
            finally:
                if gate is not None:
                    gate.exit()
            from_handler = False
            value = checked_output(s, step_id, value)
        except BaseException as exc:  # a task cancellation, or anything user code raised
            ctx.close()
            failed = (step_id, ReplayedStep(attempt, None, exc, from_handler))
            return await _hand_over(where, options, outputs, attempts, failed)
        ctx.close()
        outputs[step_id] = value
    if signal.cancelled:
        return await _hand_over(where, options, outputs, attempts)
    return True, outputs[program.result_id]


def _hand_over(
    where: tuple[Pipeline, Any, RunEnvironment, CancelToken, str, str, str | None, int],
    options: Any,
    outputs: dict[str, Any],
    attempts: list[tuple[str, int, float]],
    failed: tuple[str, ReplayedStep] | None = None,
    options_error: SchemaValidationError | None = None,
) -> Awaitable[tuple[bool, Any]]:
    """Let the executor record what happened so far and carry on from there."""
    done = {
        step_id: ReplayedStep(attempt, value, None, False)
        for (step_id, value), attempt in zip(outputs.items(), attempts, strict=False)
    }
    if failed is not None:
        done[failed[0]] = failed[1]
    pipeline, raw_input, env, signal, run_id, parent_run_id, item_key, started_ms = where
    return _value_of(
        execute(
            pipeline,
            raw_input,
            DEFAULT_CONTROLS,
            env=env,
            signal=signal,
            run_id=run_id,
            parent_run_id=parent_run_id,
            item_key=item_key,
            validated=options,
            replay=Replay(started_ms, options_error, done),
        )
    )


_ATTEMPT = tuple(f":attempt:{n}" for n in range(10))


async def _value_of(child: Awaitable[PipelineRun]) -> tuple[bool, Any]:
    run = await child
    if run.status == "completed":
        return True, run.value
    return False, run
