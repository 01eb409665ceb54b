"""Running an admitted batch: one child run per call, outcomes in decision order.

A lone call is awaited inline; larger batches use as many workers as the scope's concurrency
allows (the permit pool bounds the handlers exactly). A fatal failure or a cancellation stops
dispatch; calls already running are drained, never cancelled by the harness.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Mapping
from types import MappingProxyType
from typing import Any

from tubeless.agent._prepare import PreparedCall
from tubeless.agent._scope import SCOPE_SLOT, Scope
from tubeless.agent._tools import ToolError
from tubeless.errors import CHILD_FAILED, TOOL_ERRORS
from tubeless.frozen import FreezeError, FrozenDict, FrozenTuple, freeze
from tubeless.pipeline import (
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
    status = ["pending"] * total
    signal = ctx.signal

    async def one(index: int) -> None:
        status[index] = "running"
        try:
            outcome = await _call(calls[index], ctx, scope, agent_run_id, turn)
        except ChildRunFailedError as exc:
            status[index] = "failed" if exc.run.status == "failed" else "cancelled"
            raise
        outcomes[index] = outcome
        status[index] = "completed" if outcome["ok"] else "failed"
        if ctx.tracing:
            _progress(ctx, calls, status)

    if total == 1:
        await one(0)
        return _outcomes(outcomes)

    cursor = 0

    async def worker() -> None:
        nonlocal cursor
        while cursor < total and not fatal and not signal.cancelled:
            index = cursor
            cursor += 1
            try:
                await one(index)
            except Exception as exc:
                fatal.append(exc)

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


def _progress(ctx: StepContext, calls: tuple[PreparedCall, ...], status: list[str]) -> None:
    """At most 32 visible call groups: running and failed first, then decision order."""
    done = sum(1 for s in status if s in ("completed", "failed", "cancelled"))
    order = sorted(
        range(len(calls)), key=lambda i: (status[i] not in ("running", "failed"), i)
    )
    rows: list[Mapping[str, Any]] = [
        {"id": calls[i].id, "name": calls[i].tool, "depth": 0, "status": status[i]}
        for i in order[:_MAX_SHOWN_CALLS]
    ]
    hidden = len(calls) - len(rows)
    if hidden > 0:
        rows.append({"id": "more", "label": f"{hidden} more calls", "depth": 0})
    ctx.report_progress(done, len(calls), f"{done} of {len(calls)} calls", rows)
