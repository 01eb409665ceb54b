"""The executor: one run of one pipeline, from plan to ``pipeline.completed``."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tubeless import errors as codes
from tubeless._callables import is_awaitable, maybe_await
from tubeless.durable import CheckpointStore
from tubeless.durable._spi import SESSION_SLOT, CheckpointSession
from tubeless.errors import TubelessError
from tubeless.pipeline._call import call_step, checked_output
from tubeless.pipeline._cancel import CancelToken
from tubeless.pipeline._checkpoint_keys import checkpoint_keys, validated_or_unvalidated
from tubeless.pipeline._context import RunEnvironment, now_ms
from tubeless.pipeline._failures import OutputInvalidError
from tubeless.pipeline._finalize import finalize
from tubeless.pipeline._ids import new_run_id
from tubeless.pipeline._plan import Plan, PlanStep, skip_reason
from tubeless.pipeline._resources import enter_run, leave_run
from tubeless.pipeline._results import PipelineRun
from tubeless.pipeline._run_state import UNVALIDATED, RunState
from tubeless.schema import SchemaValidationError
from tubeless.tracing.sinks import TraceFanout, TraceSink

if TYPE_CHECKING:
    from collections.abc import Coroutine

    from tubeless.pipeline._pipeline import Pipeline

__all__ = [
    "APPROVER_SLOT",
    "DEFAULT_CONTROLS",
    "TREE_SLOT",
    "UNVALIDATED",
    "Controls",
    "Run",
    "execute",
    "run_root",
]

#: The slot carrying ``run(approver=...)`` down the run tree; only the agent harness reads it.
APPROVER_SLOT = "tubeless.approver"
#: The slot carrying a dict shared by every run of one run tree, where upper layers keep what
#: must be unique across the tree (the agent harness: the route of each agent invocation).
TREE_SLOT = "tubeless.tree"


@dataclass(frozen=True, kw_only=True, slots=True)
class Controls:
    """Executor settings of one run (never part of the validated input)."""

    dry_run: bool = False
    targets: tuple[str, ...] | None = None
    step_ids: tuple[str, ...] | None = None
    max_concurrency: int = 1
    continue_on_error: bool = False


#: The controls of a run that sets none (shared: ``Controls`` is immutable).
DEFAULT_CONTROLS = Controls()


def _check_concurrency(value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise TubelessError(
            codes.RUN_CONCURRENCY_INVALID, "max_concurrency must be an integer >= 1."
        )


async def run_root(
    pipeline: Pipeline,
    raw_input: Any,
    controls: Controls,
    *,
    trace: TraceSink | Sequence[TraceSink] | None,
    signal: CancelToken | None,
    run_id: str | None,
    correlation_id: str | None,
    approver: Any = None,
    checkpoints: CheckpointStore | None = None,
    checkpoint_key: str | None = None,
    restart: bool = False,
    validated: Any = UNVALIDATED,
) -> PipelineRun:
    """Run ``pipeline`` as the root of a run tree; flush (never close) the sinks at the end.

    ``validated``: ``raw_input`` as the options schema already validated it (a batch validates
    each input for its row's key), taken as the run's options instead of validating again.
    """
    _check_concurrency(controls.max_concurrency)
    session = None
    if checkpoints is not None and not controls.dry_run:
        if not isinstance(checkpoints, CheckpointStore):
            raise TypeError("checkpoints= must be a checkpoint store (tubeless.durable)")
        earlier = None
        if checkpoint_key is None:
            # The default key names the validated input, so the input is validated here, once
            # (the run takes it as validated); an input the schema refuses fails the run as
            # always, before any agent could open the session.
            if validated is UNVALIDATED:
                validated = validated_or_unvalidated(pipeline, raw_input)
            checkpoint_key, earlier = checkpoint_keys(pipeline.id, raw_input, validated)
        session = CheckpointSession(
            checkpoints,
            key=checkpoint_key,
            entry=pipeline.id,
            restart=bool(restart),
            earlier=earlier,
        )
    if trace is None:
        sinks: list[TraceSink] = []
    elif isinstance(trace, TraceSink) and not isinstance(trace, (list, tuple)):
        sinks = [trace]
    else:
        sinks = list(trace)
    fanout = TraceFanout(sinks) if sinks else None
    slots: dict[str, Any] = {TREE_SLOT: {}}
    if approver is not None:
        slots[APPROVER_SLOT] = approver
    signal = signal or CancelToken()
    if session is not None:
        slots[SESSION_SLOT] = session
        session.on_lost = signal.cancel  # a lost lease: dispatch nothing more, end cancelled
    env = RunEnvironment(fanout, slots, correlation_id)
    # Run-scoped resources (the model adapters' HTTP clients) close before sinks flush.
    resources, token = enter_run()
    try:
        return await execute(
            pipeline,
            raw_input,
            controls,
            env=env,
            signal=signal,
            run_id=run_id,
            validated=validated,
        )
    finally:
        closing = leave_run(resources, token)
        try:
            if closing is not None:
                await closing
        finally:
            if session is not None:
                session.close()
            if fanout is not None:
                fanout.flush()


def execute(
    pipeline: Pipeline,
    raw_input: Any,
    controls: Controls,
    *,
    env: RunEnvironment,
    signal: CancelToken,
    run_id: str | None = None,
    parent_run_id: str | None = None,
    item_key: str | None = None,
    iteration: Mapping[str, Any] | None = None,
    validated: Any = UNVALIDATED,
) -> Coroutine[Any, Any, PipelineRun]:
    """Run ``pipeline`` once inside a run tree (the root or a child); await the result."""
    _check_concurrency(controls.max_concurrency)
    # Positional constructor calls: a class called with keywords builds a dict for ``__init__``.
    runner = Run(
        RunState(
            pipeline,
            controls,
            env,
            signal,
            run_id or new_run_id(pipeline.id),
            parent_run_id,
            item_key,
            iteration,
        )
    )
    return runner.go(raw_input, validated, now_ms(), time.perf_counter())


class Run:
    """One run's scheduler: applies the skip ladder, starts steps, and drives them to the end.

    What happened is kept by its collaborator ``record`` (:class:`RunState`, ``_run_state.py``):
    the scheduler decides what runs and tells the record each outcome; the record turns them
    into reports, errors and trace records. The lean path's take-over (``_lean._TakeOver``) is a
    subclass: it sets ``options_error`` and overrides ``settled_without_running`` and ``start``
    for what already happened.
    """

    __slots__ = ("record",)

    #: An error the options already failed with, recorded instead of validating them (only the
    #: lean path's take-over sets one; a class attribute here, so a plain run reads no slot).
    options_error: SchemaValidationError | None = None

    def __init__(self, record: RunState) -> None:
        self.record = record

    # -- the run ------------------------------------------------------------------------------
    async def go(self, raw_input: Any, validated: Any, started_ms: int, t0: float) -> PipelineRun:
        """Run to the end; ``t0`` is the ``perf_counter`` reading at the start (traced only)."""
        record = self.record
        pipeline, controls = record.pipeline, record.controls
        plan = pipeline.plan(
            dry_run=controls.dry_run, targets=controls.targets, step_ids=controls.step_ids
        )
        envelope = record.envelope
        if envelope is not None:
            snapshot = record.parent_run_id is None or pipeline.has_agent
            record.emit(
                envelope.pipeline_started_with(
                    started_ms, plan.started_payload(pipeline, snapshot=snapshot)
                )
            )
        if not plan.ok:
            record.run_errors.extend(plan.errors)
            return record.complete(plan, started_ms, t0, steps=False)
        options_error = self.options_error
        if options_error is not None:
            record.options_rejected(options_error)
            return record.complete(plan, started_ms, t0, steps=False)
        if not record.validate_options(raw_input, validated):
            return record.complete(plan, started_ms, t0, steps=False)
        if envelope is not None:
            for ps, payload in zip(plan.steps, plan.planned_payloads(), strict=True):
                record.emit(envelope.step_planned(now_ms(), step_id=ps.id, payload=payload))

        interrupted = False
        try:
            if controls.max_concurrency == 1:
                await self.sequential(plan)
            else:
                await self.concurrent(plan)
            await self.finalize_if_allowed(plan)
        except asyncio.CancelledError:
            # The task awaiting the run was cancelled: cancel the tree cooperatively, record
            # what never ran, finish the trace, and only then let the cancellation continue.
            interrupted = True
            record.signal.cancel("The run was interrupted.")
            record.stop = "cancelled"
            for ps in plan.steps:
                if ps.id not in record.reports:
                    record.record_remaining(ps)
        result = record.complete(plan, started_ms, t0, steps=True)
        if interrupted:
            raise asyncio.CancelledError
        return result

    async def sequential(self, plan: Plan) -> None:
        record = self.record
        for ps in plan.steps:
            if record.stop is not None:
                record.record_remaining(ps)
            elif not self.settled_without_running(ps):
                await self.start(ps, record.inputs(ps))

    async def concurrent(self, plan: Plan) -> None:
        record = self.record
        pending = list(plan.steps)
        active: dict[asyncio.Task[None], PlanStep] = {}
        limit = record.controls.max_concurrency
        try:
            while pending or active:
                waiting: list[PlanStep] = []
                for ps in pending:
                    if record.stop is not None or any(
                        dep not in record.state for dep in ps.step.dependency_ids
                    ):
                        waiting.append(ps)
                        continue
                    if self.settled_without_running(ps):
                        continue
                    if len(active) >= limit:
                        waiting.append(ps)
                        continue
                    task = asyncio.ensure_future(self.start_quietly(ps, record.inputs(ps)))
                    active[task] = ps
                pending = waiting
                if not active:
                    for ps in pending:
                        record.record_remaining(ps)
                    return
                done, _ = await asyncio.wait(active, return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    del active[task]
        except asyncio.CancelledError:
            record.signal.cancel("The run was interrupted.")
            for task in active:
                task.cancel()
            if active:
                await asyncio.wait(active)
            raise

    # -- one step -----------------------------------------------------------------------------
    def settled_without_running(self, ps: PlanStep) -> bool:
        """Apply the skip ladder and the cancel check; record the step if it must not start."""
        record = self.record
        step = ps.step
        dry_run = record.controls.dry_run
        if (
            not ps.selected
            or step.depends_on
            or step.skip_after_failure_of
            or (dry_run and step.dry_run == "skip")
        ):
            disposition = skip_reason(
                step,
                selected=ps.selected,
                dry_run=dry_run,
                is_met=record.is_met,
                gate_failed=record.gate_failed,
            )
        else:
            disposition = None  # nothing on the ladder can apply: skip the call
        if disposition is not None:
            record.skipped(ps, disposition[0], dependency_id=disposition[1])
            return True
        if record.signal._cancelled:
            record.cancelled_unstarted(ps)
            return True
        return False

    async def start_quietly(self, ps: PlanStep, inputs: dict[str, Any]) -> None:
        try:
            await self.start(ps, inputs)
        except asyncio.CancelledError:
            return  # recorded by start(); the scheduler decides what happens next

    async def start(self, ps: PlanStep, inputs: dict[str, Any]) -> None:
        record = self.record
        s = ps.step
        if s.skip is not None and await self.policy_skipped(ps, inputs):
            return
        attempt = record.open_attempt(ps)
        ctx = record.context(ps.id, attempt.id)
        from_handler = not s.orchestration
        try:
            value = call_step(s, inputs, ctx, record.env, dry_run=record.controls.dry_run)
            if is_awaitable(value):
                value = await value
            from_handler = False
            value = checked_output(s, ps.id, value)
        except asyncio.CancelledError as exc:
            ctx.close()
            record.failed(ps, attempt, exc)
            raise
        except BaseException as exc:  # user code may raise SystemExit or its own BaseException
            ctx.close()
            record.failed(ps, attempt, exc, from_handler=from_handler)
            return
        ctx.close()
        record.completed(ps, attempt, value)

    async def policy_skipped(self, ps: PlanStep, inputs: dict[str, Any]) -> bool:
        record = self.record
        step = ps.step
        assert step.skip is not None
        try:
            decision = await maybe_await(step.skip(inputs, record.context(ps.id, None)))
            parsed = _parse_skip(decision)
        except asyncio.CancelledError as exc:
            record.failed(ps, None, exc)
            raise
        except BaseException as exc:
            record.failed(ps, record.open_attempt(ps), exc)
            return True
        if parsed is None:
            return False
        message, value = parsed
        attempt = None
        if step.output_schema is not None:
            attempt = record.open_attempt(ps)
            try:
                value = step.output_schema.validate(value)
            except SchemaValidationError as exc:
                record.failed(ps, attempt, OutputInvalidError(ps.id, exc))
                return True
        record.outputs[ps.id] = value
        record.skipped(ps, "policy", message=message, attempt=attempt, state="policy")
        return True

    async def finalize_if_allowed(self, plan: Plan) -> None:
        record = self.record
        if record.step_errors and (
            not record.controls.continue_on_error
            or any(e.kind == "cancellation" for e in record.step_errors.values())
        ):
            return
        pipeline = record.pipeline
        finalizer = pipeline.finalizer
        if (
            finalizer.kind == "step"
            and record.envelope is None
            and pipeline.result_schema is None
            and not record.signal._cancelled
            and finalizer.required[0] in record.outputs
        ):
            # The common case (agents, turns, tools): the result is one published output.
            record.value = record.outputs[finalizer.required[0]]
            record.finalized = True
            return
        await finalize(record, plan)


def _parse_skip(decision: Any) -> tuple[str | None, Any] | None:
    """``None`` to run, else ``(message, published value)``; raises on an invalid shape."""
    if decision is None or decision is False:
        return None
    if decision is True:
        return None, None
    if isinstance(decision, str):
        text = decision.strip()
        if not text:
            return None
        return text, None
    if isinstance(decision, Mapping) and "reason" in decision:
        extra = set(decision) - {"reason", "value"}
        reason = decision["reason"]
        if not extra and isinstance(reason, str):
            if not reason.strip():
                return None
            return reason.strip(), decision.get("value")
    raise TubelessError(
        codes.SKIP_DECISION_INVALID,
        "A skip predicate must return None/False (run), True or a reason string (skip), "
        "or {'reason': str, 'value': ...} (skip publishing value).",
    )
