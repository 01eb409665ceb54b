"""The executor: one run of one pipeline, from plan to ``pipeline.completed``."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tubeless import errors as codes
from tubeless.errors import PipelineError, TubelessError
from tubeless.pipeline._cancel import CancelToken
from tubeless.pipeline._context import RunEnvironment, StepContext, now_ms
from tubeless.pipeline._failures import (
    OutputInvalidError,
    call_in_thread,
    classify,
    maybe_await,
)
from tubeless.pipeline._finalize import finalize
from tubeless.pipeline._ids import new_run_id
from tubeless.pipeline._plan import Plan, PlanStep, ladder
from tubeless.pipeline._results import (
    PipelineRun,
    RunStatus,
    SkipReason,
    StepReport,
    StepStatus,
)
from tubeless.schema import SchemaValidationError
from tubeless.tracing.records import Envelope
from tubeless.tracing.sinks import TraceFanout, TraceSink

if TYPE_CHECKING:
    from tubeless.pipeline._pipeline import Pipeline
    from tubeless.pipeline._step import Step

__all__ = ["UNVALIDATED", "Controls", "execute", "run_root"]

#: Pass as ``validated`` when the input still needs the options schema.
UNVALIDATED: Any = object()
_PUBLISHED = frozenset({"completed", "policy"})
_GATE_FAILED = frozenset({"failed", "cancelled"})


@dataclass(frozen=True, kw_only=True, slots=True)
class Controls:
    """Executor settings of one run (never part of the validated input)."""

    dry_run: bool = False
    targets: tuple[str, ...] | None = None
    step_ids: tuple[str, ...] | None = None
    max_concurrency: int = 1
    continue_on_error: bool = False


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
) -> PipelineRun:
    """Run ``pipeline`` as the root of a run tree; flush (never close) the sinks at the end."""
    _check_concurrency(controls.max_concurrency)
    if trace is None:
        sinks: list[TraceSink] = []
    elif isinstance(trace, TraceSink) and not isinstance(trace, (list, tuple)):
        sinks = [trace]
    else:
        sinks = list(trace)
    fanout = TraceFanout(sinks) if sinks else None
    env = RunEnvironment(fanout, correlation_id=correlation_id)
    try:
        return await execute(
            pipeline, raw_input, controls, env=env, signal=signal or CancelToken(), run_id=run_id
        )
    finally:
        if fanout is not None:
            fanout.flush()


async def execute(
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
) -> PipelineRun:
    """Run ``pipeline`` once inside a run tree (the root or a child)."""
    _check_concurrency(controls.max_concurrency)
    runner = _Run(
        pipeline,
        controls,
        env=env,
        signal=signal,
        run_id=run_id or new_run_id(pipeline.id),
        parent_run_id=parent_run_id,
        item_key=item_key,
        iteration=iteration,
    )
    return await runner.go(raw_input, validated)


class _Run:
    """The mutable state of one run; everything it records is immutable."""

    __slots__ = (
        "attempts",
        "cancel_error_recorded",
        "controls",
        "env",
        "envelope",
        "failed_step",
        "fanout",
        "final_errors",
        "finalized",
        "item_key",
        "options",
        "outputs",
        "parent_run_id",
        "pipeline",
        "reports",
        "run_errors",
        "run_id",
        "signal",
        "state",
        "step_errors",
        "stop",
        "value",
    )

    def __init__(
        self,
        pipeline: Pipeline,
        controls: Controls,
        *,
        env: RunEnvironment,
        signal: CancelToken,
        run_id: str,
        parent_run_id: str | None,
        item_key: str | None,
        iteration: Mapping[str, Any] | None,
    ) -> None:
        self.pipeline = pipeline
        self.controls = controls
        self.env = env
        self.signal = signal
        self.run_id = run_id
        self.parent_run_id = parent_run_id
        self.item_key = item_key
        self.fanout = env.fanout
        self.envelope: Envelope | None = None
        if env.fanout is not None:
            self.envelope = Envelope(
                run_id=run_id,
                pipeline_id=pipeline.id,
                parent_run_id=parent_run_id,
                correlation_id=env.correlation_id,
                item_key=item_key,
                iteration=iteration,
            )
        self.options: Any = None
        self.outputs: dict[str, Any] = {}
        self.state: dict[str, str] = {}
        self.reports: dict[str, StepReport] = {}
        self.step_errors: dict[str, PipelineError] = {}
        self.run_errors: list[PipelineError] = []
        self.attempts = 0
        self.failed_step: str | None = None
        self.stop: str | None = None
        self.cancel_error_recorded = False
        self.final_errors: list[PipelineError] = []
        self.finalized = False
        self.value: Any = None

    def emit(self, record: Mapping[str, Any]) -> None:
        assert self.fanout is not None
        self.fanout.export(record)

    # -- the run ------------------------------------------------------------------------------
    async def go(self, raw_input: Any, validated: Any) -> PipelineRun:
        pipeline, controls = self.pipeline, self.controls
        started_ms = now_ms()
        t0 = time.perf_counter()
        plan = pipeline.plan(
            dry_run=controls.dry_run, targets=controls.targets, step_ids=controls.step_ids
        )
        identity = pipeline.identity
        envelope = self.envelope
        if envelope is not None:
            self.emit(
                envelope.pipeline_started(
                    started_ms,
                    dry_run=controls.dry_run,
                    plan_ok=plan.ok,
                    step_count=len(plan.steps),
                    target_ids=pipeline.target_ids,
                    definition_identity=identity.to_wire(),
                    definition_snapshot=(
                        pipeline.trace_snapshot()
                        if self.parent_run_id is None or pipeline.has_agent
                        else None
                    ),
                )
            )
        if not plan.ok:
            self.run_errors.extend(plan.errors)
            return self.complete(plan, started_ms, t0, steps=False)
        if not self.validate_options(raw_input, validated):
            return self.complete(plan, started_ms, t0, steps=False)
        if envelope is not None:
            for ps, payload in zip(plan.steps, plan.planned_payloads(), strict=True):
                self.emit(envelope.step_planned(now_ms(), step_id=ps.id, payload=payload))

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
            self.signal.cancel("The run was interrupted.")
            self.stop = "cancelled"
            for ps in plan.steps:
                if ps.id not in self.reports:
                    self.record_remaining(ps)
        result = self.complete(plan, started_ms, t0, steps=True)
        if interrupted:
            raise asyncio.CancelledError
        return result

    def validate_options(self, raw_input: Any, validated: Any) -> bool:
        if validated is not UNVALIDATED:
            self.options = validated
            return True
        schema = self.pipeline.options_schema
        if schema is None:
            self.options = raw_input
            return True
        try:
            self.options = schema.validate(raw_input)
        except SchemaValidationError as exc:
            self.run_errors.append(
                PipelineError(
                    code=codes.OPTIONS_VALIDATION_FAILED,
                    kind="validation",
                    phase="execution",
                    message=f"Pipeline {self.pipeline.id} options validation failed: {exc}",
                    issues=exc.issues,
                    exception=exc,
                )
            )
            return False
        return True

    async def sequential(self, plan: Plan) -> None:
        for ps in plan.steps:
            if self.stop is not None:
                self.record_remaining(ps)
            elif not self.settled_without_running(ps):
                await self.start(ps, self.inputs(ps))

    async def concurrent(self, plan: Plan) -> None:
        pending = list(plan.steps)
        active: dict[asyncio.Task[None], PlanStep] = {}
        limit = self.controls.max_concurrency
        try:
            while pending or active:
                waiting: list[PlanStep] = []
                for ps in pending:
                    if self.stop is not None or any(
                        dep not in self.state for dep in ps.step.dependency_ids
                    ):
                        waiting.append(ps)
                        continue
                    if self.settled_without_running(ps):
                        continue
                    if len(active) >= limit:
                        waiting.append(ps)
                        continue
                    task = asyncio.ensure_future(self.start_quietly(ps, self.inputs(ps)))
                    active[task] = ps
                pending = waiting
                if not active:
                    for ps in pending:
                        self.record_remaining(ps)
                    return
                done, _ = await asyncio.wait(active, return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    del active[task]
        except asyncio.CancelledError:
            self.signal.cancel("The run was interrupted.")
            for task in active:
                task.cancel()
            if active:
                await asyncio.wait(active)
            raise

    # -- one step -----------------------------------------------------------------------------
    def settled_without_running(self, ps: PlanStep) -> bool:
        """Apply the ladder and the cancellation check; record the step if it must not start."""
        s = ps.step
        dry_run = self.controls.dry_run
        if (
            not ps.selected
            or s.depends_on
            or s.skip_after_failure_of
            or (dry_run and s.dry_run == "skip")
        ):
            disposition = ladder(
                s,
                selected=ps.selected,
                dry_run=dry_run,
                is_met=self.is_met,
                gate_failed=self.gate_failed,
            )
        else:
            disposition = None  # nothing on the ladder can apply: skip the call
        if disposition is not None:
            self.skipped(ps, disposition[0], dependency_id=disposition[1])
            return True
        if self.signal.cancelled:
            self.cancelled_unstarted(ps)
            return True
        return False

    def is_met(self, dep: str) -> bool:
        """A required dependency completed or was policy-skipped (it published)."""
        return self.state.get(dep) in _PUBLISHED

    def gate_failed(self, gate: str) -> bool:
        """A failure gate failed or was cancelled."""
        return self.state.get(gate) in _GATE_FAILED

    def inputs(self, ps: PlanStep) -> dict[str, Any]:
        """Required dependency outputs plus the optional ones that were published."""
        s = ps.step
        outputs = self.outputs
        inputs = {dep: outputs[dep] for dep in s.depends_on}
        for dep in s.optional_depends_on:
            if dep in outputs:
                inputs[dep] = outputs[dep]
        return inputs

    async def start_quietly(self, ps: PlanStep, inputs: dict[str, Any]) -> None:
        try:
            await self.start(ps, inputs)
        except asyncio.CancelledError:
            return  # recorded by start(); the scheduler decides what happens next

    async def start(self, ps: PlanStep, inputs: dict[str, Any]) -> None:
        s = ps.step
        if s.skip is not None and await self.policy_skipped(ps, inputs):
            return
        attempt = self.open_attempt(ps)
        ctx = self.context(ps.id, attempt[0])
        in_handler = True
        try:
            gate = None if s.orchestration else self.env.gate
            if gate is None:
                value = await _invoke(s, inputs, ctx, dry_run=self.controls.dry_run)
            else:
                async with gate(self.signal):
                    value = await _invoke(s, inputs, ctx, dry_run=self.controls.dry_run)
            in_handler = False
            if s.output_schema is not None:
                try:
                    value = s.output_schema.validate(value)
                except SchemaValidationError as exc:
                    raise OutputInvalidError(ps.id, exc) from exc
        except asyncio.CancelledError as exc:
            ctx.close()
            self.failed(ps, attempt, exc)
            raise
        except Exception as exc:
            ctx.close()
            self.failed(ps, attempt, exc, from_handler=in_handler and not s.orchestration)
            return
        ctx.close()
        self.outputs[ps.id] = value
        self.state[ps.id] = "completed"
        finished = now_ms()
        self.reports[ps.id] = StepReport(
            id=ps.id,
            status="completed",
            name=ps.name,
            description=ps.description,
            attempt_id=attempt[0],
            started_at_ms=attempt[1],
            finished_at_ms=finished,
        )
        if self.envelope is not None:
            self.emit(
                self.envelope.step_terminal(
                    finished,
                    status="completed",
                    step_id=ps.id,
                    attempt_id=attempt[0],
                    duration_ms=(time.perf_counter() - attempt[2]) * 1000,
                )
            )

    async def policy_skipped(self, ps: PlanStep, inputs: dict[str, Any]) -> bool:
        s = ps.step
        assert s.skip is not None
        try:
            decision = await maybe_await(s.skip(inputs, self.context(ps.id, None)))
            parsed = _parse_skip(decision)
        except asyncio.CancelledError as exc:
            self.failed(ps, None, exc)
            raise
        except Exception as exc:
            self.failed(ps, self.open_attempt(ps), exc)
            return True
        if parsed is None:
            return False
        message, value = parsed
        attempt = None
        if s.output_schema is not None:
            attempt = self.open_attempt(ps)
            try:
                value = s.output_schema.validate(value)
            except SchemaValidationError as exc:
                self.failed(ps, attempt, OutputInvalidError(ps.id, exc))
                return True
        self.outputs[ps.id] = value
        self.skipped(ps, "policy", message=message, attempt=attempt, state="policy")
        return True

    def open_attempt(self, ps: PlanStep) -> tuple[str, int, float]:
        self.attempts += 1
        n = self.attempts
        attempt_id = f"{self.run_id}:attempt:{n if n < 10 else _base36(n)}"
        started = time.time_ns() // 1_000_000
        if self.envelope is not None:
            self.emit(self.envelope.step_running(started, step_id=ps.id, attempt_id=attempt_id))
        return attempt_id, started, time.perf_counter()

    def context(self, step_id: str, attempt_id: str | None) -> StepContext:
        return StepContext(
            pipeline_id=self.pipeline.id,
            run_id=self.run_id,
            step_id=step_id,
            options=self.options,
            dry_run=self.controls.dry_run,
            signal=self.signal,
            env=self.env,
            envelope=self.envelope,
            attempt_id=attempt_id,
        )

    # -- recording ----------------------------------------------------------------------------
    def skipped(
        self,
        ps: PlanStep,
        reason: SkipReason,
        *,
        dependency_id: str | None = None,
        message: str | None = None,
        attempt: tuple[str, int, float] | None = None,
        state: str = "skipped",
    ) -> None:
        self.state[ps.id] = state
        finished = now_ms()
        self.reports[ps.id] = StepReport(
            id=ps.id,
            status="skipped",
            name=ps.name,
            description=ps.description,
            reason=reason,
            message=message,
            dependency_id=dependency_id,
            attempt_id=None if attempt is None else attempt[0],
            started_at_ms=None if attempt is None else attempt[1],
            finished_at_ms=None if attempt is None else finished,
        )
        if self.envelope is not None:
            self.emit(
                self.envelope.step_terminal(
                    finished,
                    status="skipped",
                    step_id=ps.id,
                    reason=reason,
                    message=message,
                    dependency_id=dependency_id,
                    attempt_id=None if attempt is None else attempt[0],
                    duration_ms=None if attempt is None else _elapsed(attempt[2]),
                )
            )

    def failed(
        self,
        ps: PlanStep,
        attempt: tuple[str, int, float] | None,
        exc: BaseException,
        *,
        from_handler: bool = False,
    ) -> None:
        error = classify(exc, ps.id, from_handler=from_handler)
        cancelled = error.kind == "cancellation"
        status: StepStatus = "cancelled" if cancelled else "failed"
        self.state[ps.id] = status
        self.step_errors[ps.id] = error
        if cancelled:
            self.cancel_error_recorded = True
            self.stop = self.stop or "cancelled"
        elif self.failed_step is None:
            self.failed_step = ps.id
            if not self.controls.continue_on_error:
                self.stop = self.stop or "fail-fast"
        finished = now_ms()
        self.reports[ps.id] = StepReport(
            id=ps.id,
            status=status,
            name=ps.name,
            description=ps.description,
            attempt_id=None if attempt is None else attempt[0],
            started_at_ms=None if attempt is None else attempt[1],
            finished_at_ms=None if attempt is None else finished,
            error=error,
        )
        if self.envelope is not None:
            self.emit(
                self.envelope.step_terminal(
                    finished,
                    status=status,
                    step_id=ps.id,
                    attempt_id=None if attempt is None else attempt[0],
                    duration_ms=None if attempt is None else _elapsed(attempt[2]),
                    error=error.to_wire(),
                )
            )

    def cancelled_unstarted(self, ps: PlanStep) -> None:
        """Record a runnable step that cancellation kept from starting (no attempt)."""
        error = PipelineError(
            code=codes.RUN_CANCELLED,
            kind="cancellation",
            phase="execution",
            message=self.signal.reason or f"Step {ps.id} was not started: the run was cancelled.",
            step_id=ps.id,
        )
        self.state[ps.id] = "cancelled"
        self.stop = self.stop or "cancelled"
        if not self.cancel_error_recorded:
            self.step_errors[ps.id] = error
            self.cancel_error_recorded = True
        self.reports[ps.id] = StepReport(
            id=ps.id, status="cancelled", name=ps.name, description=ps.description, error=error
        )
        if self.envelope is not None:
            self.emit(
                self.envelope.step_terminal(
                    now_ms(), status="cancelled", step_id=ps.id, error=error.to_wire()
                )
            )

    def record_remaining(self, ps: PlanStep) -> None:
        """Record a step never reached because the run stopped dispatching."""
        if ps.skip_reason is not None:
            self.skipped(ps, ps.skip_reason, dependency_id=ps.dependency_id)
        elif self.stop == "fail-fast" and not self.signal.cancelled:
            assert self.failed_step is not None
            self.skipped(
                ps,
                "fail-fast",
                dependency_id=self.failed_step,
                message=f"Not run because fail-fast stopped after {self.failed_step} failed.",
            )
        else:
            self.cancelled_unstarted(ps)

    async def finalize_if_allowed(self, plan: Plan) -> None:
        if self.step_errors and (
            not self.controls.continue_on_error
            or any(e.kind == "cancellation" for e in self.step_errors.values())
        ):
            return
        finalizer = self.pipeline.finalizer
        if (
            finalizer.kind == "step"
            and self.envelope is None
            and self.pipeline.result_schema is None
            and not self.signal.cancelled
            and finalizer.required[0] in self.outputs
        ):
            # The common case (agents, turns, tools): the result is one published output.
            self.value = self.outputs[finalizer.required[0]]
            self.finalized = True
            return
        await finalize(self, plan)

    def complete(self, plan: Plan, started_ms: int, t0: float, *, steps: bool) -> PipelineRun:
        errors = list(self.run_errors)
        if steps and self.step_errors:
            step_errors = self.step_errors
            errors.extend([step_errors[ps.id] for ps in plan.steps if ps.id in step_errors])
        if self.final_errors:
            errors.extend(self.final_errors)
        status: RunStatus
        if not errors:
            status = "completed"
        elif all(e.kind == "cancellation" for e in errors):
            status = "cancelled"
        else:
            status = "failed"
        finalized = self.finalized
        finished = now_ms()
        run = PipelineRun(
            run_id=self.run_id,
            pipeline_id=self.pipeline.id,
            parent_run_id=self.parent_run_id,
            correlation_id=self.env.correlation_id,
            item_key=self.item_key,
            status=status,
            dry_run=self.controls.dry_run,
            started_at_ms=started_ms,
            finished_at_ms=finished,
            errors=tuple(errors),
            steps=tuple([self.reports[ps.id] for ps in plan.steps]) if steps else (),
            finalized=finalized,
            value=self.value if finalized else None,
            definition_identity=self.pipeline.identity,
        )
        if self.envelope is not None:
            self.emit(
                self.envelope.pipeline_completed(
                    finished,
                    status=status,
                    dry_run=self.controls.dry_run,
                    error_count=len(errors),
                    finalized=finalized,
                    step_count=len(run.steps),
                    duration_ms=_elapsed(t0),
                    error=errors[0].to_wire() if errors else None,
                )
            )
        return run


async def _invoke(s: Step, inputs: dict[str, Any], ctx: StepContext, *, dry_run: bool) -> Any:
    """Call the step's handler (or its preview in dry runs) the way its colour requires."""
    if dry_run and callable(s.dry_run):
        handler, is_async = s.dry_run, s.dry_run_is_async
    else:
        handler, is_async = s.run, s.run_is_async
    if is_async:
        return await handler(inputs, ctx)
    if s.inline or s.orchestration:
        return await maybe_await(handler(inputs, ctx))
    return await maybe_await(await call_in_thread(handler, inputs, ctx, signal=ctx.signal))


def _elapsed(t0: float) -> float:
    return (time.perf_counter() - t0) * 1000


def _base36(n: int) -> str:
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    out = ""
    while True:
        n, r = divmod(n, 36)
        out = digits[r] + out
        if n == 0:
            return out


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
