"""Running an admitted batch: one child run per call, outcomes in decision order.

One path for every batch: :func:`dispatch` awaits a lone call itself; larger batches use as many
workers as the scope's concurrency allows (the permit pool bounds the handlers exactly). Each
call runs as :func:`_run_call`. A fatal failure or a cancellation stops
dispatch; calls already running are drained, never cancelled by the harness.

Each call passes through the invocation's hooks (``hooks.around_call(site, _run_call)``): a
checkpoint journal or a cassette may answer it without running it (``_hooks``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from tubeless.agent._hooks import CallSite
from tubeless.agent._outcomes import failed as failed_outcome
from tubeless.agent._outcomes import ok as ok_outcome
from tubeless.agent._prepare import PreparedCall
from tubeless.agent._scope import SCOPE_SLOT
from tubeless.agent._tape import TAPE_SLOT
from tubeless.agent._tools import ToolError
from tubeless.agent._trace import Progress
from tubeless.errors import CHILD_FAILED, TOOL_ERRORS
from tubeless.frozen import FrozenDict, FrozenTuple
from tubeless.pipeline import PipelineRun, StepContext
from tubeless.pipeline._spi import (
    YIELD_EVERY,
    ChildRunFailedError,
    FanOutFailedError,
    RunCancelledError,
    run_child_value,
)

if TYPE_CHECKING:
    from tubeless.agent._turn_types import TurnInput

__all__ = ["DEPTH_SLOT", "EXECUTION_SLOT", "dispatch", "outcomes_of"]

#: Slot carrying ``{agent_run_id, turn, call_id, tool, parent_attempt_id, idempotency_key}`` to
#: a tool run.
EXECUTION_SLOT = "tubeless.agent.execution"
#: Slot carrying the delegation depth of agents started below a pipeline-tool call.
DEPTH_SLOT = "tubeless.agent.depth"

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


def _error_outcome(errors: list[ToolError]) -> tuple[str, str]:
    """The code and message of a failed outcome, from its handler's tool errors."""
    if len(errors) == 1:
        return errors[0].code, errors[0].message
    text = "; ".join(f"{e.code}: {e.message}" for e in errors[:_MAX_TOOL_ERRORS])
    return TOOL_ERRORS, text[:_MAX_MESSAGE]


def _failed_outcome(
    call: PreparedCall, run: PipelineRun, signal_cancelled: bool, t: TurnInput
) -> Mapping[str, Any]:
    """A recoverable failure as an outcome; raises ``ChildRunFailedError`` for any other,
    or the wait for a raised budget that a request of the call's tool ran into."""
    if run.status == "failed" and not signal_cancelled:
        errors = _handler_tool_errors(run)
        if errors:
            return failed_outcome(call, *_error_outcome(errors))
        from tubeless.agent._budget_wait import tool_wait  # only for a failed call

        waiting = tool_wait(t, run)
        if waiting is not None:
            raise waiting
    raise ChildRunFailedError(run, alias=call.tool)


async def dispatch(
    calls: tuple[PreparedCall, ...], ctx: StepContext, t: TurnInput
) -> tuple[Mapping[str, Any], ...]:
    """Run every call of turn ``t`` as a child run; raise on the first fatal failure after
    draining."""
    total = len(calls)
    invocation = t.invocation
    progress = invocation.trace.progress(calls)
    around = invocation.hooks.around_call
    if total == 1:
        # The lone call awaits its hooks here (no coroutine of its own: one frame fewer).
        site = _site(calls, 0, ctx, t, progress)
        try:
            outcome = await around(site, _run_call)
        except ChildRunFailedError as exc:
            progress.finish(0, "failed" if exc.run.status == "failed" else "cancelled")
            raise
        _settled(progress, 0, outcome, ctx)
        return _outcomes((outcome,))
    outcomes: list[Mapping[str, Any] | None] = [None] * total
    fatal: list[BaseException] = []
    signal = ctx.signal
    cursor = 0

    async def worker() -> None:
        nonlocal cursor
        ran = 0
        while cursor < total and not fatal and not signal.cancelled:
            index = cursor
            cursor += 1
            site = _site(calls, index, ctx, t, progress)
            try:
                outcome = await around(site, _run_call)
            except ChildRunFailedError as exc:
                progress.finish(index, "failed" if exc.run.status == "failed" else "cancelled")
                fatal.append(exc)
            except Exception as exc:
                fatal.append(exc)
            else:
                outcomes[index] = outcome
                _settled(progress, index, outcome, ctx)
            ran += 1
            if ran % YIELD_EVERY == 0:
                # Quick calls may never suspend: let the loop run (signals, timers, I/O).
                await asyncio.sleep(0)

    workers = [
        asyncio.ensure_future(worker()) for _ in range(min(total, invocation.scope.concurrency))
    ]
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
    return _outcomes(outcomes)  # type: ignore[arg-type]  # no None is left


def _site(
    calls: tuple[PreparedCall, ...],
    index: int,
    ctx: StepContext,
    t: TurnInput,
    progress: Progress,
) -> CallSite:
    """Call ``index`` of the batch with its execution, marked running in the progress rows."""
    call = calls[index]
    invocation = t.invocation
    execution = FrozenDict._trusted(
        {
            "agent_run_id": invocation.run_id,
            "turn": t.turn,
            "call_id": call.id,
            "tool": call.tool,
            "parent_attempt_id": ctx.attempt_id,
            "idempotency_key": f"{invocation.idempotency_base}/{t.turn}/{call.id}",
        }
    )
    progress.start(index)
    return CallSite(index, call, execution, ctx, t)


def _settled(progress: Progress, index: int, outcome: Mapping[str, Any], ctx: StepContext) -> None:
    progress.finish(index, "completed" if outcome["ok"] else "failed")
    progress.report(ctx)


async def _run_call(site: CallSite) -> Mapping[str, Any]:
    """Run the call of ``site`` as a child run (what the hooks' ``around_call`` proceeds to):
    its outcome, or ``ChildRunFailedError`` for a fatal failure."""
    call, t, ctx = site.call, site.t, site.ctx
    slots: dict[str, Any] = {EXECUTION_SLOT: site.execution}
    if call.delegates:
        invocation = t.invocation
        slots[DEPTH_SLOT] = invocation.scope.depth + 1
        slots[SCOPE_SLOT] = invocation.scope
        slots[TAPE_SLOT] = invocation.tape.below(t.turn, call.id)
    ok, result = await run_child_value(
        ctx, call.pipeline, None, item_key=call.id, validated=call.value, slots=slots
    )
    if ok:
        return ok_outcome(call, result)
    return _failed_outcome(call, result, ctx.signal.cancelled, t)


def _outcomes(outcomes: Sequence[Mapping[str, Any]]) -> tuple[Mapping[str, Any], ...]:
    """The batch's outcomes: a ``FrozenTuple`` when every one is frozen plain data."""
    for outcome in outcomes:
        if type(outcome) is not FrozenDict:
            return tuple(outcomes)
    return FrozenTuple._trusted(outcomes)


#: The batch's outcomes as ``dispatch`` returns them (for batches merged after approvals).
outcomes_of = _outcomes
