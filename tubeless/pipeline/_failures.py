"""Turning exceptions into recorded ``PipelineError``s, and calling handlers of either colour."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import inspect
import types
from collections.abc import Callable
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
from tubeless.pipeline._cancel import CancelToken, RunCancelledError, stopped_waiting
from tubeless.schema import SchemaValidationError

if TYPE_CHECKING:
    from tubeless.pipeline._results import PipelineRun

__all__ = [
    "ChildRunFailedError",
    "OutputInvalidError",
    "RequiredOutputsMissingError",
    "call_in_thread",
    "classify",
    "first_error_cause",
    "is_awaitable",
    "is_cancellation",
    "maybe_await",
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
    # Child and fan-out failures count only when every unsuccessful child was cancelled.
    return _is_child_failure(exc) and getattr(exc, "cancelled", False) is True


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
        if reason:
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


# Types whose instances are never awaitable: plain data, then every class met without an
# ``__await__`` (generators are left out: whether one is awaitable depends on the object).
_NEVER_AWAITABLE: set[type] = {dict, list, tuple, str, int, float, bool, type(None)}
_MAX_REMEMBERED = 1024
_COROUTINE = types.CoroutineType


def is_awaitable(value: Any) -> bool:
    """Whether ``value`` must be awaited (cheap for coroutines, plain data and known types)."""
    kind = type(value)
    if kind is _COROUTINE:
        return True
    if kind in _NEVER_AWAITABLE:
        return False
    if inspect.isawaitable(value):
        return True
    if (
        not hasattr(kind, "__await__")
        and not issubclass(kind, types.GeneratorType)
        and len(_NEVER_AWAITABLE) < _MAX_REMEMBERED
    ):
        _NEVER_AWAITABLE.add(kind)
    return False


async def maybe_await(value: Any) -> Any:
    """Await ``value`` if it is awaitable (sync callables may return coroutines)."""
    if inspect.isawaitable(value):
        return await value
    return value


def _settle(future: asyncio.Future[Any], ok: bool, value: Any) -> None:
    if future.done():
        return
    if ok:
        future.set_result(value)
    else:
        future.set_exception(value)


def _transportable(exc: BaseException) -> BaseException:
    """``exc`` as a future can carry it to the awaiting coroutine.

    A future refuses ``StopIteration`` (it would never settle), and ``GeneratorExit`` thrown
    into a coroutine closes every frame it passes instead of being caught: both travel as a
    ``RuntimeError`` caused by them, as a coroutine's own ``StopIteration`` would.
    """
    if isinstance(exc, (StopIteration, GeneratorExit)):
        wrapped = RuntimeError(f"handler raised {type(exc).__name__}")
        wrapped.__cause__ = exc
        return wrapped
    return exc


async def call_in_thread(
    fn: Callable[..., Any], *args: Any, signal: CancelToken | None = None
) -> Any:
    """Run sync ``fn`` in a worker thread; on cancellation, wait for the thread to finish.

    A thread cannot be interrupted, so a cancelled caller first cancels ``signal`` (the handler
    sees it and should return early) and then waits for the thread; only a second cancellation,
    or :func:`~tubeless.pipeline._cancel.stop_waiting` on ``signal``, stops waiting (the thread
    is then left running).
    """
    loop = asyncio.get_running_loop()
    future: asyncio.Future[Any] = loop.create_future()
    context = contextvars.copy_context()

    def work() -> None:
        try:
            result = context.run(fn, *args)
        except BaseException as exc:
            outcome: tuple[bool, Any] = (False, _transportable(exc))
        else:
            outcome = (True, result)
        # RuntimeError: the loop closed while the thread ran, so nobody is waiting.
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(_settle, future, *outcome)

    loop.run_in_executor(None, work)
    try:
        return await asyncio.shield(future)
    except asyncio.CancelledError:
        if signal is not None:
            signal.cancel("The run was interrupted.")
        if not future.done():
            # The thread's own outcome no longer matters; only that it has finished.
            with contextlib.suppress(BaseException):
                await _thread_or_stop(future, signal)
        raise


async def _thread_or_stop(future: asyncio.Future[Any], signal: CancelToken | None) -> None:
    """Wait for the thread's ``future``, or until the run stops waiting for its threads."""
    if signal is None:
        await future
        return
    loop = asyncio.get_running_loop()
    stopped: asyncio.Future[None] = loop.create_future()

    def wake() -> None:
        loop.call_soon_threadsafe(_settle, stopped, True, None)

    remove = stopped_waiting(signal).add_callback(wake)
    try:
        await asyncio.wait((future, stopped), return_when=asyncio.FIRST_COMPLETED)
    finally:
        remove()
