"""Finalization: compute the run's result from the published outputs and validate it once."""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any

from tubeless import errors as codes
from tubeless._callables import maybe_await
from tubeless.errors import PipelineError, cause_chain, deepest_source_code
from tubeless.pipeline._context import now_ms
from tubeless.pipeline._failures import RequiredOutputsMissingError, is_cancellation
from tubeless.pipeline._plan import Plan
from tubeless.schema import SchemaValidationError

if TYPE_CHECKING:
    from tubeless.pipeline._run_state import RunState

__all__ = ["FINALIZE_STEP_ID", "finalize"]

FINALIZE_STEP_ID = "__finalize__"


async def finalize(run: RunState, plan: Plan) -> None:
    """Run the finalizer of ``run``'s pipeline; records the value or a finalization error."""
    envelope = run.envelope
    if envelope is not None:
        run.emit(envelope.finalize_started(now_ms()))
    t0 = time.perf_counter()
    try:
        value = await _result(run, plan)
    except asyncio.CancelledError:
        _record(run, _error(run, asyncio.CancelledError(), cancelled=True), t0)
        raise
    except BaseException as exc:  # user code may raise SystemExit or its own BaseException
        _record(run, _error(run, exc, cancelled=is_cancellation(exc)), t0)
        return
    schema = run.pipeline.result_schema
    if schema is not None:
        try:
            value = schema.validate(value)
        except SchemaValidationError as exc:
            _record(
                run,
                PipelineError(
                    code=codes.FINAL_RESULT_VALIDATION_FAILED,
                    kind="validation",
                    phase="finalization",
                    message=f"Pipeline {run.pipeline.id} result validation failed: {exc}",
                    step_id=FINALIZE_STEP_ID,
                    issues=exc.issues,
                    exception=exc,
                ),
                t0,
            )
            return
    run.value = value
    run.finalized = True
    if envelope is not None:
        run.emit(envelope.finalize_completed(now_ms(), duration_ms=_ms(t0)))


async def _result(run: RunState, plan: Plan) -> Any:
    finalizer = run.pipeline.finalizer
    outputs = run.outputs
    if run.signal.cancelled:
        run.signal.raise_if_cancelled()
    missing = [step_id for step_id in finalizer.required if step_id not in outputs]
    if missing:
        raise RequiredOutputsMissingError(missing)
    if finalizer.kind == "last":
        last = run.pipeline.order[-1].id
        return outputs.get(last)
    if finalizer.kind == "step":
        return outputs[finalizer.required[0]]
    if finalizer.fn is None:
        return {step_id: outputs[step_id] for step_id in finalizer.required}
    ctx = run.context(FINALIZE_STEP_ID, None)
    return await maybe_await(finalizer.fn(dict(outputs), ctx))


def _error(run: RunState, exc: BaseException, *, cancelled: bool) -> PipelineError:
    cause = None if isinstance(exc, asyncio.CancelledError) else cause_chain(exc)
    if cancelled:
        # Say which run lost its result (a tool call's run is keyed by its call id), and why.
        what = f"Run of {run.pipeline.id!r}"
        if run.item_key is not None:
            what += f" for item {run.item_key!r}"
        reason = getattr(exc, "reason", None) or run.signal.reason
        return PipelineError(
            code=codes.FINALIZATION_CANCELLED,
            kind="cancellation",
            phase="finalization",
            message=f"{what} was cancelled before its result was finalized"
            + (f": {reason}" if reason else "."),
            step_id=FINALIZE_STEP_ID,
            cause=cause,
            exception=exc,
        )
    return PipelineError(
        code=codes.FINALIZATION_FAILED,
        kind="finalization",
        phase="finalization",
        message=str(exc) or type(exc).__name__,
        step_id=FINALIZE_STEP_ID,
        source_code=deepest_source_code(cause),
        cause=cause,
        exception=exc,
    )


def _record(run: RunState, error: PipelineError, t0: float) -> None:
    run.final_errors.append(error)
    if run.envelope is not None:
        run.emit(run.envelope.finalize_failed(now_ms(), duration_ms=_ms(t0), error=error.to_wire()))


def _ms(t0: float) -> float:
    return (time.perf_counter() - t0) * 1000
