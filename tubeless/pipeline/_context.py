"""What handlers see: ``StepContext`` (signal, sleep, log, progress) and the run environment."""

from __future__ import annotations

import enum
import logging
import time
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from tubeless.pipeline._cancel import CancelToken
from tubeless.tracing.records import Envelope
from tubeless.tracing.sinks import TraceFanout

__all__ = ["HandlerGate", "RunEnvironment", "StepContext", "StepLogger", "now_ms"]


class HandlerGate(Protocol):
    """Held around each leaf handler call below a point of the run tree (agent permits).

    ``try_enter`` takes the gate at once if it can (no coroutine on the common path);
    otherwise ``enter`` waits for it. ``exit`` gives it back after the handler.
    """

    def try_enter(self, signal: CancelToken) -> bool:
        """Take the gate now if nobody waits and it is free; never blocks."""
        ...

    async def enter(self, signal: CancelToken) -> None:
        """Wait for the gate (raises ``RunCancelledError`` once ``signal`` is cancelled)."""
        ...

    def exit(self) -> None:
        """Give the gate back."""
        ...


class _Keep(enum.Enum):
    """Marks an argument that keeps the current value."""

    KEEP = "keep"


_KEEP = _Keep.KEEP

_run_log = logging.getLogger("tubeless.run")

_LEVELS = {"debug": "log", "info": "log", "warning": "warn", "error": "error"}
_STDLIB_LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
}


def now_ms() -> int:
    """Wall-clock milliseconds since the epoch."""
    return time.time_ns() // 1_000_000


class RunEnvironment:
    """What a run hands down to its child runs: the trace fan-out and private slots.

    ``slots`` carry values that upper layers (the agent harness) attach to a run tree; the
    pipeline core only passes them along.
    """

    __slots__ = ("correlation_id", "fanout", "gate", "slots")

    def __init__(
        self,
        fanout: TraceFanout | None,
        slots: Mapping[str, Any] | None = None,
        correlation_id: str | None = None,
        gate: HandlerGate | None = None,
    ) -> None:
        self.fanout = fanout
        self.slots: Mapping[str, Any] = slots if slots is not None else {}
        self.correlation_id = correlation_id
        self.gate = gate
        """Wraps every leaf handler call below this point (the agent harness's permits)."""

    def derive(self, *, gate: HandlerGate | _Keep | None = _KEEP, **slots: Any) -> RunEnvironment:
        """A copy with ``slots`` added and, when given, another ``gate``."""
        return RunEnvironment(
            self.fanout,
            {**self.slots, **slots} if slots else self.slots,
            self.correlation_id,
            self.gate if isinstance(gate, _Keep) else gate,
        )


class StepLogger:
    """``ctx.log``: lines go to the trace (``pipeline.log``) and the ``tubeless.run`` logger.

    Safe to call from worker threads. It keeps what it needs, not the context itself, so a
    context and its logger never form a reference cycle (which would keep a run's options,
    such as an agent's whole state, alive until the garbage collector runs).
    """

    __slots__ = ("_attempt_id", "_envelope", "_fanout", "_pipeline_id", "_run_id", "_step_id")

    def __init__(self, ctx: StepContext) -> None:
        self._pipeline_id = ctx.pipeline_id
        self._run_id = ctx.run_id
        self._step_id = ctx.step_id
        self._attempt_id = ctx.attempt_id
        self._envelope = ctx._envelope
        self._fanout = ctx._env.fanout

    def debug(self, message: str, *args: object) -> None:
        """Log at debug level (recorded as ``log``)."""
        self._emit("debug", message, args)

    def info(self, message: str, *args: object) -> None:
        """Log at info level (recorded as ``log``)."""
        self._emit("info", message, args)

    def warning(self, message: str, *args: object) -> None:
        """Log at warning level (recorded as ``warn``)."""
        self._emit("warning", message, args)

    def error(self, message: str, *args: object) -> None:
        """Log at error level (recorded as ``error``)."""
        self._emit("error", message, args)

    def _emit(self, level: str, message: str, args: Sequence[object]) -> None:
        text = str(message) % tuple(args) if args else str(message)
        _run_log.log(
            _STDLIB_LEVELS[level],
            "%s/%s: %s",
            self._pipeline_id,
            self._step_id,
            text,
            extra={"run_id": self._run_id, "step_id": self._step_id},
        )
        envelope = self._envelope
        fanout = self._fanout
        if envelope is not None and fanout is not None:
            fanout.export(
                envelope.log(
                    now_ms(),
                    level=_LEVELS[level],
                    message=text,
                    step_id=self._step_id,
                    attempt_id=self._attempt_id,
                )
            )


class StepContext:
    """The context every step handler, predicate, mapper and finalizer receives.

    Attributes:
        pipeline_id: The running pipeline's id.
        run_id: The run's id.
        step_id: The step's id (``__finalize__`` for finalizers).
        attempt_id: ``<run_id>:attempt:<n>`` while an attempt is open, else ``None``.
        options: The run's validated options.
        dry_run: Whether this is a dry run.
        signal: The run's cancellation token (shared with child runs).
        log: A logger whose lines are recorded in the trace.
    """

    __slots__ = (
        "_closed",
        "_env",
        "_envelope",
        "_log",
        "attempt_id",
        "dry_run",
        "options",
        "pipeline_id",
        "run_id",
        "signal",
        "step_id",
    )

    def __init__(
        self,
        pipeline_id: str,
        run_id: str,
        step_id: str,
        options: Any,
        dry_run: bool,
        signal: CancelToken,
        env: RunEnvironment,
        envelope: Envelope | None,
        attempt_id: str | None = None,
    ) -> None:
        self.pipeline_id = pipeline_id
        self.run_id = run_id
        self.step_id = step_id
        self.options = options
        self.dry_run = dry_run
        self.signal = signal
        self.attempt_id = attempt_id
        self._env = env
        self._envelope = envelope
        self._log: StepLogger | None = None
        self._closed = False

    @property
    def log(self) -> StepLogger:
        """The step's logger."""
        if self._log is None:
            self._log = StepLogger(self)
        return self._log

    @property
    def slots(self) -> Mapping[str, Any]:
        """Private values attached to this run tree by upper layers."""
        return self._env.slots

    async def sleep(self, seconds: float) -> None:
        """Sleep cooperatively: raises ``RunCancelledError`` as soon as the run is cancelled."""
        await self.signal.sleep(seconds)

    def report_progress(
        self,
        completed: float,
        total: float | None = None,
        message: str | None = None,
        details: Sequence[Mapping[str, Any]] | None = None,
    ) -> None:
        """Publish progress for the running attempt (recorded as ``step.running``).

        Ignored outside a running attempt (also once the step has finished) or when nothing
        records the run. Thread-safe.
        """
        envelope = self._envelope
        fanout = self._env.fanout
        if envelope is None or fanout is None or self.attempt_id is None or self._closed:
            return
        # The record constructor applies every bound (message, rows, bytes, finite numbers).
        progress: dict[str, Any] = {"completed": completed}
        if total is not None:
            progress["total"] = total
        if message is not None:
            progress["message"] = message
        if details is not None:
            progress["details"] = details
        fanout.export(
            envelope.step_running(
                now_ms(), step_id=self.step_id, attempt_id=self.attempt_id, progress=progress
            )
        )

    def report_attempt(
        self,
        attempt: int,
        attributes: Mapping[str, str | int | float | bool | None] | None = None,
        *,
        duration_ms: float | None = None,
    ) -> None:
        """Record work within the current attempt (a ``step.attempted`` record).

        ``None`` attribute values are dropped; ``duration_ms`` is how long the work took.
        Ignored when nothing records the run.
        """
        envelope = self._envelope
        fanout = self._env.fanout
        if envelope is None or fanout is None:
            return
        # ``None`` values are dropped by the record's bounds, with anything else not scalar.
        fanout.export(
            envelope.step_attempted(
                now_ms(),
                step_id=self.step_id,
                attempt=attempt,
                attributes=attributes or {},
                attempt_id=self.attempt_id,
                duration_ms=duration_ms,
            )
        )

    def derive(self, *, gate: HandlerGate | _Keep | None = _KEEP, **slots: Any) -> StepContext:
        """A copy whose child runs see ``slots`` (and ``gate``, when given)."""
        copy = StepContext(
            self.pipeline_id,
            self.run_id,
            self.step_id,
            self.options,
            self.dry_run,
            self.signal,
            self._env.derive(gate=gate, **slots),
            self._envelope,
            self.attempt_id,
        )
        copy._closed = self._closed
        return copy

    def close(self) -> None:
        """Mark the attempt finished: later progress reports are ignored."""
        self._closed = True

    @property
    def tracing(self) -> bool:
        """Whether anything records this run (build expensive summaries only then)."""
        return self._envelope is not None
