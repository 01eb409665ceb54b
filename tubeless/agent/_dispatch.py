"""Running an admitted batch: one child run per call, outcomes in decision order.

A lone call is awaited inline; larger batches use as many workers as the scope's concurrency
allows (the permit pool bounds the handlers exactly). A fatal failure or a cancellation stops
dispatch; calls already running are drained, never cancelled by the harness.
"""

from __future__ import annotations

import asyncio
import bisect
import heapq
from collections.abc import Awaitable, Mapping
from types import MappingProxyType
from typing import Any

from tubeless.agent._prepare import PreparedCall
from tubeless.agent._scope import SCOPE_SLOT, Scope
from tubeless.agent._tools import ToolError
from tubeless.errors import CHILD_FAILED, TOOL_ERRORS
from tubeless.frozen import FreezeError, FrozenDict, FrozenTuple, freeze
from tubeless.pipeline import (
    YIELD_EVERY,
    ChildRunFailedError,
    FanOutFailedError,
    PipelineRun,
    RunCancelledError,
    StepContext,
)
from tubeless.pipeline._child import run_child_value

__all__ = ["DEPTH_SLOT", "EXECUTION_SLOT", "dispatch"]

#: Slot carrying ``{agent_run_id, turn, call_id, tool, parent_attempt_id}`` to a tool run.
EXECUTION_SLOT = "tubeless.agent.execution"
#: Slot carrying the delegation depth of agents started below a pipeline-tool call.
DEPTH_SLOT = "tubeless.agent.depth"

_MAX_SHOWN_CALLS = 32
_MAX_TOOL_ERRORS = 32
_MAX_MESSAGE = 4096


def _handler_tool_errors(run: PipelineRun) -> list[ToolError] | None:
    """Every failure of ``run`` as handler ``ToolError``s, or ``None`` if any is something else."""
    found: list[ToolError] = []
    for error in run.errors:
        exc = error.exception
        if error.from_handler and isinstance(exc, ToolError):
            found.append(exc)
            continue
        nested: tuple[PipelineRun, ...] = ()
        if error.code == CHILD_FAILED and isinstance(exc, ChildRunFailedError):
            nested = (exc.run,)
        elif error.code == CHILD_FAILED and isinstance(exc, FanOutFailedError):
            nested = exc.runs
        if not nested:
            return None
        for child in nested:
            inner = _handler_tool_errors(child)
            if inner is None:
                return None
            found.extend(inner)
    return found


def _error_outcome(errors: list[ToolError]) -> FrozenDict:
    if len(errors) == 1:
        return FrozenDict({"code": errors[0].code, "message": errors[0].message})
    text = "; ".join(f"{e.code}: {e.message}" for e in errors[:_MAX_TOOL_ERRORS])
    return FrozenDict({"code": TOOL_ERRORS, "message": text[:_MAX_MESSAGE]})


def _outcome(call: PreparedCall, value: Any) -> Mapping[str, Any]:
    outcome = {"id": call.id, "tool": call.tool, "ok": True, "value": value}
    try:
        outcome["value"] = freeze(value)
    except FreezeError:
        # Not plain data (e.g. a model instance): the outcome keeps the exact value in a
        # read-only mapping, which state rejects, so it can never hide inside frozen state.
        return MappingProxyType(outcome)
    return FrozenDict._trusted(outcome)


def _failed_outcome(
    call: PreparedCall, run: PipelineRun, signal_cancelled: bool
) -> Mapping[str, Any]:
    """A recoverable failure as an outcome; raises ``ChildRunFailedError`` for any other."""
    if run.status == "failed" and not signal_cancelled:
        errors = _handler_tool_errors(run)
        if errors:
            return FrozenDict(
                {"id": call.id, "tool": call.tool, "ok": False, "error": _error_outcome(errors)}
            )
    raise ChildRunFailedError(run, alias=call.tool)


def dispatch(
    calls: tuple[PreparedCall, ...],
    ctx: StepContext,
    *,
    scope: Scope,
    agent_run_id: str,
    turn: int,
) -> Awaitable[tuple[Mapping[str, Any], ...]]:
    """Run every call as a child run; raise on the first fatal failure after draining."""
    if len(calls) == 1 and not ctx.tracing:
        return _lone(calls[0], ctx, scope, agent_run_id, turn)
    return _batch(calls, ctx, scope, agent_run_id, turn)


async def _call(
    call: PreparedCall, ctx: StepContext, scope: Scope, agent_run_id: str, turn: int
) -> Mapping[str, Any]:
    """Run one call: its outcome, or ``ChildRunFailedError`` for a fatal failure."""
    slots: dict[str, Any] = {
        EXECUTION_SLOT: FrozenDict._trusted(
            {
                "agent_run_id": agent_run_id,
                "turn": turn,
                "call_id": call.id,
                "tool": call.tool,
                "parent_attempt_id": ctx.attempt_id,
            }
        )
    }
    if call.delegates:
        slots[DEPTH_SLOT] = scope.depth + 1
        slots[SCOPE_SLOT] = scope
    if ctx.tracing:
        ctx.report_attempt(
            1,
            {
                "agent.runId": agent_run_id,
                "agent.turn": turn,
                "agent.callId": call.id,
                "agent.tool": call.tool,
                "agent.parentAttemptId": ctx.attempt_id,
            },
        )
    ok, result = await run_child_value(
        ctx, call.pipeline, None, item_key=call.id, validated=call.value, slots=slots
    )
    if ok:
        return _outcome(call, result)
    return _failed_outcome(call, result, ctx.signal.cancelled)


async def _lone(
    call: PreparedCall, ctx: StepContext, scope: Scope, agent_run_id: str, turn: int
) -> tuple[Mapping[str, Any], ...]:
    """A batch of one call, untraced: no workers, no progress rows."""
    outcome = await _call(call, ctx, scope, agent_run_id, turn)
    if type(outcome) is FrozenDict:
        return FrozenTuple._trusted((outcome,))
    return (outcome,)


async def _batch(
    calls: tuple[PreparedCall, ...],
    ctx: StepContext,
    scope: Scope,
    agent_run_id: str,
    turn: int,
) -> tuple[Mapping[str, Any], ...]:
    total = len(calls)
    outcomes: list[Mapping[str, Any] | None] = [None] * total
    fatal: list[BaseException] = []
    progress = _Progress(calls) if ctx.tracing else None
    signal = ctx.signal

    async def one(index: int) -> None:
        if progress is not None:
            progress.start(index)
        try:
            outcome = await _call(calls[index], ctx, scope, agent_run_id, turn)
        except ChildRunFailedError as exc:
            if progress is not None:
                progress.finish(index, "failed" if exc.run.status == "failed" else "cancelled")
            raise
        outcomes[index] = outcome
        if progress is not None:
            progress.finish(index, "completed" if outcome["ok"] else "failed")
            progress.report(ctx)

    if total == 1:
        await one(0)
        return _outcomes(outcomes)

    cursor = 0

    async def worker() -> None:
        nonlocal cursor
        ran = 0
        while cursor < total and not fatal and not signal.cancelled:
            index = cursor
            cursor += 1
            try:
                await one(index)
            except Exception as exc:
                fatal.append(exc)
            ran += 1
            if ran % YIELD_EVERY == 0:
                # Quick calls may never suspend: let the loop run (signals, timers, I/O).
                await asyncio.sleep(0)

    workers = [asyncio.ensure_future(worker()) for _ in range(min(total, scope.concurrency))]
    try:
        await asyncio.gather(*workers)
    except asyncio.CancelledError:
        for task in workers:
            task.cancel()
        await asyncio.wait(workers)
        raise
    if fatal:
        raise fatal[0]
    if any(outcome is None for outcome in outcomes):
        raise RunCancelledError(signal.reason)
    return _outcomes(outcomes)


def _outcomes(outcomes: list[Mapping[str, Any] | None]) -> tuple[Mapping[str, Any], ...]:
    """The batch's outcomes: a ``FrozenTuple`` when every one is frozen plain data."""
    if all(type(outcome) is FrozenDict for outcome in outcomes):
        return FrozenTuple._trusted(outcomes)
    return tuple(outcomes)  # type: ignore[arg-type]


_SHOWN_FIRST = ("running", "failed")


class _Progress:
    """The calls step's progress rows, kept up to date in O(log n) per call.

    At most 32 visible calls: running and failed ones first, then the rest, each group in
    decision order, then an ``N more calls`` row. Running and failed calls are kept in sorted
    lists, so building the rows looks at no more than 64 calls, whatever the batch size.
    """

    __slots__ = ("calls", "done", "failed", "running", "status")

    def __init__(self, calls: tuple[PreparedCall, ...]) -> None:
        self.calls = calls
        self.status = ["pending"] * len(calls)
        self.running: list[int] = []
        self.failed: list[int] = []
        self.done = 0

    def start(self, index: int) -> None:
        self.status[index] = "running"
        bisect.insort(self.running, index)  # calls start in decision order: an append

    def finish(self, index: int, status: str) -> None:
        running = self.running
        at = bisect.bisect_left(running, index)
        if at < len(running) and running[at] == index:
            del running[at]
        self.status[index] = status
        self.done += 1
        if status == "failed":
            bisect.insort(self.failed, index)

    def report(self, ctx: StepContext) -> None:
        calls, status = self.calls, self.status
        total = len(calls)
        first = list(heapq.merge(self.running[:_MAX_SHOWN_CALLS], self.failed[:_MAX_SHOWN_CALLS]))
        shown = first[:_MAX_SHOWN_CALLS]
        if len(shown) < _MAX_SHOWN_CALLS:
            # Fewer than 32 calls are running or failed, so this skips fewer than 32 of them.
            room = _MAX_SHOWN_CALLS - len(shown)
            for i in range(total):
                if status[i] not in _SHOWN_FIRST:
                    shown.append(i)
                    room -= 1
                    if not room:
                        break
        rows: list[Mapping[str, Any]] = [
            {"id": calls[i].id, "name": calls[i].tool, "depth": 0, "status": status[i]}
            for i in shown
        ]
        hidden = total - len(rows)
        if hidden > 0:
            rows.append({"id": "more", "label": f"{hidden} more calls", "depth": 0})
        done = self.done
        ctx.report_progress(done, total, f"{done} of {total} calls", rows)
