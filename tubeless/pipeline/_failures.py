"""Turning exceptions into recorded ``PipelineError``s, and calling handlers of either colour."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from tubeless import errors as codes
from tubeless.errors import (
    ErrorCause,
    ErrorPhase,
    PipelineError,
    TubelessError,
    cause_chain,
    deepest_source_code,
)
from tubeless.pipeline._cancel import RunCancelledError
from tubeless.schema import SchemaValidationError

if TYPE_CHECKING:
    from tubeless.pipeline._results import PipelineRun

__all__ = [
    "ChildRunFailedError",
    "OutputInvalidError",
    "RequiredOutputsMissingError",
    "classify",
    "first_error_cause",
    "is_cancellation",
]


class OutputInvalidError(TubelessError):
    """A step's output was rejected by its ``output_schema``."""

    code = codes.STEP_OUTPUT_VALIDATION_FAILED

    def __init__(self, step_id: str, error: SchemaValidationError) -> None:
        super().__init__(self.code, f"Step {step_id} output validation failed: {error}")
        self.issues = error.issues


class RequiredOutputsMissingError(TubelessError):
    """The finalizer needs outputs that were never published."""

    code = codes.REQUIRED_OUTPUTS_MISSING

    def __init__(self, missing: list[str]) -> None:
        super().__init__(self.code, f"Required pipeline outputs missing: {', '.join(missing)}")
        self.missing = tuple(missing)


class ChildRunFailedError(TubelessError):
    """A child run did not complete; ``run`` is its record.

    ``alias`` is the name the caller knows the child by, when that is not its pipeline id (the
    agent harness passes the tool name of the call that ran it). ``recorded_cause`` is the
    child's first error, so that the parent's cause chain goes on into the child.
    """

    code = codes.CHILD_FAILED

    def __init__(self, run: PipelineRun, *, alias: str | None = None) -> None:
        first = run.errors[0] if run.errors else None
        where = f" at step {first.step_id}" if first is not None and first.step_id else ""
        detail = f": {first.message}" if first is not None else ""
        super().__init__(self.code, f"Child pipeline {run.pipeline_id} {run.status}{where}{detail}")
        self.run = run
        self.alias = alias
        self.cancelled = run.status == "cancelled"
        self.recorded_cause = first_error_cause(run)


def first_error_cause(run: PipelineRun) -> ErrorCause | None:
    """A run's first recorded error as the head of a cause chain (``None`` without errors)."""
    if not run.errors:
        return None
    first = run.errors[0]
    return ErrorCause(
        message=first.message, name=first.code, source_code=first.code, cause=first.cause
    )


def is_cancellation(exc: BaseException) -> bool:
    """Whether ``exc`` is a real cancellation (not merely an error raised after one).

    A ``KeyboardInterrupt`` raised by user code counts: the user asked to stop.
    """
    if isinstance(exc, (asyncio.CancelledError, RunCancelledError, KeyboardInterrupt)):
        return True
    if _is_lease_lost(exc):
        return True  # another owner took the run's checkpoint key over: it stops, resumable
    # Child and fan-out failures count only when every unsuccessful child was cancelled.
    return _is_child_failure(exc) and getattr(exc, "cancelled", False) is True


def _is_lease_lost(exc: BaseException) -> bool:
    return isinstance(exc, TubelessError) and exc.code == codes.CHECKPOINT_LEASE_LOST


def _is_child_failure(exc: BaseException) -> bool:
    return isinstance(exc, TubelessError) and exc.code == codes.CHILD_FAILED


def classify(
    exc: BaseException,
    step_id: str | None,
    *,
    phase: ErrorPhase = "execution",
    from_handler: bool = False,
) -> PipelineError:
    """The recorded form of an exception raised while running ``step_id``.

    ``from_handler`` marks an exception raised by the step's own handler (not by a predicate,
    a validator, a mapper or a finalizer).
    """
    issues: tuple[Any, ...] = ()
    if is_cancellation(exc):
        code, kind = codes.RUN_CANCELLED, "cancellation"
        reason = getattr(exc, "reason", None)
        if isinstance(exc, TubelessError) and _is_lease_lost(exc):
            code, message = codes.CHECKPOINT_LEASE_LOST, exc.message
        elif reason:
            message = reason
        elif isinstance(exc, KeyboardInterrupt):
            message = f"Step {step_id} raised KeyboardInterrupt." if step_id else "Interrupted."
        else:
            message = f"Step {step_id} was cancelled." if step_id else "Cancelled."
    elif isinstance(exc, OutputInvalidError):
        code, kind, message, issues = (
            codes.STEP_OUTPUT_VALIDATION_FAILED,
            "validation",
            exc.message,
            exc.issues,
        )
    elif _is_child_failure(exc):
        assert isinstance(exc, TubelessError)
        code, kind, message = codes.CHILD_FAILED, "child", exc.message
    elif not isinstance(exc, Exception):  # SystemExit, GeneratorExit, a user's BaseException
        text = str(exc)
        name = type(exc).__name__
        code, kind, message = codes.STEP_FAILED, "step", f"{name}: {text}" if text else name
    else:
        code, kind, message = codes.STEP_FAILED, "step", str(exc) or type(exc).__name__
    cause = None if isinstance(exc, asyncio.CancelledError) else cause_chain(exc)
    return PipelineError(
        code=code,
        kind=kind,  # type: ignore[arg-type]
        phase=phase,
        message=message,
        step_id=step_id,
        source_code=deepest_source_code(cause),
        cause=cause,
        issues=issues,
        fan_out=getattr(exc, "fan_out", None),
        exception=exc,
        from_handler=from_handler,
    )
