"""The state of one run and the recording of what happened to it (reports, errors, records)."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

from tubeless import errors as codes
from tubeless.errors import PipelineError
from tubeless.pipeline._cancel import CancelToken
from tubeless.pipeline._context import RunEnvironment, StepContext, now_ms
from tubeless.pipeline._failures import classify
from tubeless.pipeline._plan import Plan, PlanStep
from tubeless.pipeline._results import (
    PipelineRun,
    RunStatus,
    SkipReason,
    StepReport,
    StepStatus,
    completed_report,
    new_run,
)
from tubeless.schema import SchemaValidationError
from tubeless.tracing.records import Envelope

if TYPE_CHECKING:
    from tubeless.pipeline._execute import Controls
    from tubeless.pipeline._pipeline import Pipeline

__all__ = ["UNVALIDATED", "Attempt", "RunState", "StepState", "attempt_id_of"]

#: Where a step of a run stands once it settled: its report status, or ``policy`` for a step its
#: own ``skip()`` settled (reported as skipped, yet its output is published like a completed one).
StepState = Literal["completed", "skipped", "cancelled", "failed", "policy"]

#: Pass as ``validated`` when the input still needs the options schema.
UNVALIDATED: Any = object()

_PUBLISHED = frozenset({"completed", "policy"})
_GATE_FAILED = frozenset({"failed", "cancelled"})


class Attempt(NamedTuple):
    """One attempt of a step: its id, when it started, and the clock reading for its duration."""

    id: str
    started_ms: int
    clock: float
    """``time.perf_counter()`` at the start; ``0.0`` when nothing traces the run (durations are
    only traced)."""


class RunState:
    """The mutable state of one run, and everything that records what happened to it.

    The scheduler (:class:`tubeless.pipeline._execute.Run`) holds one as its ``record``, decides
    what runs and tells it each outcome; this class turns them into immutable reports, errors
    and trace records, and answers what the scheduler asks of the state so far (``is_met``,
    ``gate_failed``, ``inputs``).
    """

    __slots__ = (
        "attempts",
        "cancel_error_recorded",
        "controls",
        "emit",
        "env",
        "envelope",
        "failed_step",
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
        fanout = env.fanout
        self.envelope: Envelope | None = None
        #: Send one record to the run tree's sinks (only called when ``envelope`` is set): the
        #: fanout's own bound method, so each record costs no extra Python call.
        self.emit: Callable[[Mapping[str, Any]], None]
        if fanout is None:
            self.emit = _untraced
        else:
            self.emit = fanout.export
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
        self.state: dict[str, StepState] = {}
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
            self.options_rejected(exc)
            return False
        return True

    def options_rejected(self, exc: SchemaValidationError) -> None:
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

    def open_attempt(self, ps: PlanStep) -> Attempt:
        self.attempts += 1
        attempt_id = attempt_id_of(self.run_id, self.attempts)
        started = time.time_ns() // 1_000_000
        if self.envelope is not None:
            self.emit(self.envelope.step_running(started, step_id=ps.id, attempt_id=attempt_id))
        return Attempt(attempt_id, started, time.perf_counter())

    def context(self, step_id: str, attempt_id: str | None) -> StepContext:
        return StepContext(
            self.pipeline.id,
            self.run_id,
            step_id,
            self.options,
            self.controls.dry_run,
            self.signal,
            self.env,
            self.envelope,
            attempt_id,
        )

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

    # -- recording ----------------------------------------------------------------------------
    def completed(self, ps: PlanStep, attempt: Attempt, value: Any) -> None:
        """Publish the output of a step whose attempt succeeded."""
        self.outputs[ps.id] = value
        self.state[ps.id] = "completed"
        finished = now_ms()
        self.reports[ps.id] = completed_report(
            ps.id, ps.name, ps.description, attempt.id, attempt.started_ms, finished
        )
        if self.envelope is not None:
            self.emit(
                self.envelope.step_terminal(
                    finished,
                    status="completed",
                    step_id=ps.id,
                    attempt_id=attempt.id,
                    duration_ms=_elapsed(attempt.clock),
                )
            )

    def skipped(
        self,
        ps: PlanStep,
        reason: SkipReason,
        *,
        dependency_id: str | None = None,
        message: str | None = None,
        attempt: Attempt | None = None,
        state: StepState = "skipped",
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
            attempt_id=None if attempt is None else attempt.id,
            started_at_ms=None if attempt is None else attempt.started_ms,
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
                    attempt_id=None if attempt is None else attempt.id,
                    duration_ms=None if attempt is None else _elapsed(attempt.clock),
                )
            )

    def failed(
        self,
        ps: PlanStep,
        attempt: Attempt | None,
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
            if isinstance(exc, KeyboardInterrupt):
                self.signal.cancel(error.message)  # the user's own interrupt stops the whole run
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
            attempt_id=None if attempt is None else attempt.id,
            started_at_ms=None if attempt is None else attempt.started_ms,
            finished_at_ms=None if attempt is None else finished,
            error=error,
        )
        if self.envelope is not None:
            self.emit(
                self.envelope.step_terminal(
                    finished,
                    status=status,
                    step_id=ps.id,
                    attempt_id=None if attempt is None else attempt.id,
                    duration_ms=None if attempt is None else _elapsed(attempt.clock),
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
        run = new_run(
            self.run_id,
            self.pipeline.id,
            status,
            self.controls.dry_run,
            started_ms,
            finished,
            tuple(errors),
            tuple([self.reports[ps.id] for ps in plan.steps]) if steps else (),
            finalized,
            self.value if finalized else None,
            self.pipeline.identity,
            self.parent_run_id,
            self.env.correlation_id,
            self.item_key,
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


def attempt_id_of(run_id: str, n: int) -> str:
    """The id of the ``n``-th attempt opened in run ``run_id``."""
    return f"{run_id}:attempt:{n if n < 10 else _base36(n)}"


def _untraced(record: Mapping[str, Any]) -> None:
    raise AssertionError("a record was emitted by a run that nothing traces")


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
