"""The lean path of a child run: the same run, without the records nobody reads.

A caller that needs a child's value only when the child completes (an iteration's next pass, a
fan-out item, an agent's tool call) goes through :func:`run_lean`. When nothing records the run
tree and the child's plan is straight-line (every step selected, no skip predicate, one step at a
time, finalized by one step's output), its steps run here in plan order with the run id, attempt
ids, contexts, handler gate and output validation the executor would use (both call a handler
with :func:`~tubeless.pipeline._call.call_step`), and no run record, step reports or plan walk is
built.

The first thing that is not a plain success (an exception, a task cancellation, a rejected input
or output, a cancelled signal) hands the run over to :class:`_TakeOver`, the executor with three
hooks overridden: it keeps the run id, records what already happened without calling any handler
or validator again, carries on exactly as the executor always does, and returns the record every
failure needs. Records are therefore made in one place only, and the executor itself does not
know this path exists.

:func:`lean_path` is the public switch: tests turn the path off (or count its runs) with it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from time import time_ns
from typing import TYPE_CHECKING, Any, NamedTuple

from tubeless._callables import is_awaitable
from tubeless.pipeline._call import call_step, checked_output
from tubeless.pipeline._context import RunEnvironment, StepContext
from tubeless.pipeline._execute import DEFAULT_CONTROLS, Run
from tubeless.pipeline._ids import new_run_id
from tubeless.pipeline._run_state import UNVALIDATED, Attempt, RunState, attempt_id_of
from tubeless.schema import SchemaValidationError

if TYPE_CHECKING:
    from tubeless.pipeline._cancel import CancelToken
    from tubeless.pipeline._pipeline import Pipeline
    from tubeless.pipeline._plan import PlanStep
    from tubeless.pipeline._results import PipelineRun
    from tubeless.pipeline._step import Step

__all__ = ["LeanPathSwitch", "lean_path", "lean_program", "run_lean", "value_of"]


class LeanPathSwitch:
    """What :func:`lean_path` yields: whether the lean path may run, and how often it did."""

    __slots__ = ("enabled", "runs")

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.runs = 0
        """Child runs that took the lean path inside the ``with`` block."""


_SWITCH: ContextVar[LeanPathSwitch | None] = ContextVar("tubeless_lean_path", default=None)


@contextmanager
def lean_path(enabled: bool = True) -> Iterator[LeanPathSwitch]:
    """Turn the lean path of child runs on or off for the runs started inside the block.

    The lean path never changes an outcome or a record (that is what differential tests
    check with ``lean_path(False)``); the switch's ``runs`` counts the children that took it.
    The setting follows the current context (tasks started inside the block inherit it).
    """
    switch = LeanPathSwitch(enabled)
    token = _SWITCH.set(switch)
    try:
        yield switch
    finally:
        _SWITCH.reset(token)


class _LeanStep(NamedTuple):
    id: str
    step: Step
    inputs: tuple[str, ...]
    """Required, then optional dependencies: all of them published once earlier steps ran."""
    attempt: str
    """What follows the run id in this step's attempt id (the n-th step opens attempt n)."""


class LeanProgram(NamedTuple):
    """A straight-line plan, ready to run without the scheduler."""

    steps: tuple[_LeanStep, ...]
    result_id: str


def lean_program(pipeline: Pipeline) -> LeanProgram | None:
    """The lean program of ``pipeline``'s default plan, or ``None`` if it needs the executor.

    Also ``None`` while :func:`lean_path` switched the path off.
    """
    switch = _SWITCH.get()
    if switch is not None and not switch.enabled:
        return None
    cached: LeanProgram | bool | None = pipeline._lean
    if cached is None:
        cached = _compile(pipeline)
        pipeline._lean = cached
    if cached is False or cached is True:
        return None
    if switch is not None:
        switch.runs += 1
    return cached


def _compile(pipeline: Pipeline) -> LeanProgram | bool:
    plan = pipeline.plan()
    finalizer = pipeline.finalizer
    if not plan.ok or pipeline.result_schema is not None or finalizer.kind != "step":
        return False
    steps: list[_LeanStep] = []
    for number, ps in enumerate(plan.steps, 1):
        s = ps.step
        if not ps.selected or ps.skip_reason is not None or s.skip is not None:
            return False
        inputs = (*s.depends_on, *s.optional_depends_on)
        steps.append(_LeanStep(ps.id, s, inputs, attempt_id_of("", number)))
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
    # When each attempt started (ms); the n-th attempt's id is fixed by n. Durations are only
    # traced, and a traced run never comes here: no clock for them.
    starts: list[int] = []
    failure: _Failure | None = None

    options, options_error = validated, None
    if options is UNVALIDATED:
        schema = pipeline.options_schema
        if schema is None:
            options = raw_input
        else:
            try:
                options = schema.validate(raw_input)
            except SchemaValidationError as exc:
                options_error = exc

    if options_error is None:
        pipeline_id = pipeline.id
        # Per step, only what the step needs: the token's flag and the context's ``_closed``
        # are read and set directly (no property or method call), the attempt id is the run
        # id and the step's precomputed suffix, the inputs dict is filled without a
        # comprehension's frame, and a step without an output schema skips ``checked_output``.
        for step_id, step, deps, attempt in program.steps:
            if signal._cancelled:
                break
            starts.append(time_ns() // 1_000_000)
            ctx = StepContext(
                pipeline_id, run_id, step_id, options, False, signal, env, None, run_id + attempt
            )
            inputs: dict[str, Any] = {}
            for dep in deps:
                inputs[dep] = outputs[dep]
            from_handler = not step.orchestration
            try:
                value = call_step(step, inputs, ctx, env, dry_run=False)
                if is_awaitable(value):
                    value = await value
                from_handler = False
                if step.output_schema is not None:
                    value = checked_output(step, step_id, value)
            except BaseException as exc:  # a task cancellation, or anything user code raised
                ctx._closed = True
                failure = _Failure(step_id, exc, from_handler)
                break
            ctx._closed = True
            outputs[step_id] = value
        else:
            if not signal._cancelled:
                return True, outputs[program.result_id]

    # Every completed step, then the one that failed (if one did): one start each, in order.
    done = {
        step_id: _Done(Attempt(attempt_id_of(run_id, number), started, 0.0), value, None, False)
        for number, ((step_id, value), started) in enumerate(
            zip(outputs.items(), starts, strict=False), 1
        )
    }
    if failure is not None:
        number = len(starts)
        done[failure.step_id] = _Done(
            Attempt(attempt_id_of(run_id, number), starts[-1], 0.0),
            None,
            failure.error,
            failure.from_handler,
        )
    run = _TakeOver(
        RunState(
            pipeline,
            DEFAULT_CONTROLS,
            env=env,
            signal=signal,
            run_id=run_id,
            parent_run_id=parent_run_id,
            item_key=item_key,
            iteration=None,
        ),
        done=done,
        options_error=options_error,
    )
    validated = UNVALIDATED if options_error is not None else options
    return await value_of(run.go(raw_input, validated, started_ms, 0.0))


class _Failure(NamedTuple):
    step_id: str
    error: BaseException
    from_handler: bool


class _Done(NamedTuple):
    """A step the lean path already ran: its attempt and its output or exception."""

    attempt: Attempt
    value: Any
    error: BaseException | None
    from_handler: bool


class _TakeOver(Run):
    """The executor taking over a run the lean path started (same run id, same attempts).

    Steps in ``done`` are recorded with their outcome instead of run again; everything after
    them runs exactly as in any other run.
    """

    __slots__ = ("done", "options_error")

    def __init__(
        self,
        record: RunState,
        *,
        done: dict[str, _Done],
        options_error: SchemaValidationError | None,
    ) -> None:
        super().__init__(record)
        self.done = done
        self.options_error = options_error  # recorded by ``go`` instead of validating

    def settled_without_running(self, ps: PlanStep) -> bool:
        if ps.id in self.done:
            return False  # it already started on the lean path
        return super().settled_without_running(ps)

    async def start(self, ps: PlanStep, inputs: dict[str, Any]) -> None:
        done = self.done.get(ps.id)
        if done is None:
            await super().start(ps, inputs)
            return
        record = self.record
        record.attempts += 1
        error = done.error
        if error is None:
            record.completed(ps, done.attempt, done.value)
        elif isinstance(error, asyncio.CancelledError):
            record.failed(ps, done.attempt, error)
            raise error
        else:
            record.failed(ps, done.attempt, error, from_handler=done.from_handler)


async def value_of(child: Awaitable[PipelineRun]) -> tuple[bool, Any]:
    """``(True, value)`` when the awaited run completed, else ``(False, the run)``."""
    run = await child
    if run.status == "completed":
        return True, run.value
    return False, run
