"""What an agent records about itself: ``agent.*`` attempt attributes and the calls' progress.

A call that has no run of its own, or whose run alone would not tell its story, is attributed on
the turn's ``calls`` step like a dispatched call (``agent.callId``, ``agent.tool``,
``agent.parentAttemptId``) plus ``agent.callStatus`` (see :data:`CallStatus`):

- ``waiting``: it needs approval and the checkpointed run stopped for it (exit 8), unrun;
- ``denied``: the approver said no; ``agent.callErrorCode`` is ``TUBELESS_TOOL_DENIED`` and
  ``agent.reasonGiven`` says whether a person gave a reason. The reason itself is free text a
  person typed, which the agent reads in its outcome: like every outcome it stays out of the
  trace (the checkpoint keeps it, and the report on the user's terminal shows it);
- after a resume, a call that was ``running`` when the run stopped: ``interrupted`` (the
  ``TUBELESS_AGENT_CALL_INTERRUPTED`` outcome), ``reconciled`` (its tool's ``reconcile`` hook
  settled it: ``agent.callOk``, and ``agent.callErrorCode`` when it raised a ``ToolError``) or
  ``rerun`` (a ``replay="safe"`` tool: its run follows); and ``restored``, a call completed
  before the run stopped whose saved outcome is reused (``agent.callOk``,
  ``agent.callErrorCode``).

Traced runs get :data:`TRACED`, untraced ones :data:`UNTRACED`, a null recorder whose methods do
nothing; :func:`agent_trace` chooses once per agent invocation (and per tool call), so no call
site asks whether the run is traced. Nothing is computed for a record nobody keeps. At the
turn's hook points (the admitted batch, each call that runs, the committed state) a traced
invocation records through :data:`TRACE_HOOKS`, one of its ``TurnHooks`` (``_hooks``); the
decision, limits, approvals and call statuses are recorded where they happen.
"""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Awaitable, Mapping
from typing import TYPE_CHECKING, Any, Literal

from tubeless.agent._hooks import TurnHooks

if TYPE_CHECKING:
    from tubeless.agent._hooks import CallSite, Proceed
    from tubeless.agent._prepare import PreparedCall
    from tubeless.agent._turn_types import TurnInput
    from tubeless.pipeline import StepContext

__all__ = ["TRACED", "TRACE_HOOKS", "UNTRACED", "AgentTrace", "CallStatus", "agent_trace"]

#: How a call's progress row ends.
CallEnd = Literal["completed", "failed", "cancelled"]
#: ``agent.callStatus``: how a call stands besides (or instead of) its own run.
CallStatus = Literal["waiting", "denied", "interrupted", "reconciled", "rerun", "restored"]

_MAX_SHOWN_CALLS = 32


def _record(ctx: StepContext, t: TurnInput, fields: dict[str, Any]) -> None:
    """One ``step.attempted`` record: the turn's identity first, then ``fields``."""
    ctx.report_attempt(1, {"agent.runId": t.agent_run_id, "agent.turn": t.turn, **fields})


class AgentTrace:
    """The recorder of a traced agent: one method per thing the trace says."""

    __slots__ = ()

    def decided(self, ctx: StepContext, t: TurnInput, decision: str, calls: int) -> None:
        """The decide step chose ``finish`` or ``continue`` with ``calls`` calls."""
        _record(
            ctx,
            t,
            {
                "agent.stateVersion": t.state_version,
                "agent.callsAdmitted": t.calls,
                "agent.decision": decision,
                "agent.callCount": calls,
            },
        )

    def usage(self, ctx: StepContext, t: TurnInput, spent: list[Any]) -> None:
        """The decision's model usage: ``[input_tokens, output_tokens, cost_usd | None]``."""
        fields: dict[str, Any] = {
            "agent.usage.inputTokens": spent[0],
            "agent.usage.outputTokens": spent[1],
        }
        if spent[2] is not None:
            fields["agent.usage.costUsd"] = float(spent[2])
        _record(ctx, t, fields)

    def limit_reached(self, ctx: StepContext, t: TurnInput, limit: str) -> None:
        """``on_limit="finish"``: ``limit`` refused the decision; a final one is asked for."""
        _record(ctx, t, {"agent.limitReached": limit})

    def approvals(
        self, ctx: StepContext, agent_run_id: str, turn: int, requested: int, denied: int
    ) -> None:
        """The approver answered ``requested`` requests of the batch, ``denied`` of them no."""
        ctx.report_attempt(
            1,
            {
                "agent.runId": agent_run_id,
                "agent.turn": turn,
                "agent.approvalsRequested": requested,
                "agent.callsDenied": denied,
            },
        )

    def call(self, ctx: StepContext, execution: Mapping[str, Any], tool: str) -> None:
        """A call's identity, recorded by the calls step and again by the tool's own run."""
        ctx.report_attempt(
            1,
            {
                "agent.runId": execution.get("agent_run_id"),
                "agent.turn": execution.get("turn"),
                "agent.callId": execution.get("call_id"),
                "agent.tool": tool,
                "agent.parentAttemptId": execution.get("parent_attempt_id"),
            },
        )

    def call_status(
        self,
        ctx: StepContext,
        agent_run_id: str,
        turn: int,
        call_id: str,
        tool: str,
        status: CallStatus,
        *,
        ok: bool | None = None,
        code: str | None = None,
        reason_given: bool | None = None,
    ) -> None:
        """A call's ``agent.callStatus`` (see the module docstring), on the calls step."""
        ctx.report_attempt(
            1,
            {
                "agent.runId": agent_run_id,
                "agent.turn": turn,
                "agent.callId": call_id,
                "agent.tool": tool,
                "agent.parentAttemptId": ctx.attempt_id,
                "agent.callStatus": status,
                "agent.callOk": ok,
                "agent.callErrorCode": code,
                "agent.reasonGiven": reason_given,
            },
        )

    def progress(self, calls: tuple[PreparedCall, ...]) -> Progress:
        """The progress rows of a batch."""
        return Progress(calls)


class _Untraced(AgentTrace):
    """The null recorder: nothing is recorded, nothing is built."""

    __slots__ = ()

    def decided(self, ctx: StepContext, t: TurnInput, decision: str, calls: int) -> None:
        pass

    def usage(self, ctx: StepContext, t: TurnInput, spent: list[Any]) -> None:
        pass

    def limit_reached(self, ctx: StepContext, t: TurnInput, limit: str) -> None:
        pass

    def approvals(
        self, ctx: StepContext, agent_run_id: str, turn: int, requested: int, denied: int
    ) -> None:
        pass

    def call(self, ctx: StepContext, execution: Mapping[str, Any], tool: str) -> None:
        pass

    def call_status(
        self,
        ctx: StepContext,
        agent_run_id: str,
        turn: int,
        call_id: str,
        tool: str,
        status: CallStatus,
        *,
        ok: bool | None = None,
        code: str | None = None,
        reason_given: bool | None = None,
    ) -> None:
        pass

    def progress(self, calls: tuple[PreparedCall, ...]) -> Progress:
        return _NO_PROGRESS


TRACED = AgentTrace()
UNTRACED: AgentTrace = _Untraced()


def agent_trace(ctx: StepContext) -> AgentTrace:
    """The recorder for the run of ``ctx``: the one place that asks whether it is traced."""
    return TRACED if ctx.tracing else UNTRACED


class TraceHooks(TurnHooks):
    """What a traced agent records at the turn's hook points (``_hooks``)."""

    __slots__ = ()

    def admitted(self, ctx: StepContext, t: TurnInput, count: int) -> None:
        _record(ctx, t, {"agent.callsAdmitted": t.calls + count, "agent.callCount": count})

    def around_call(self, site: CallSite, proceed: Proceed) -> Awaitable[Mapping[str, Any]]:
        # Reached only by a call that runs (one the journal restored is marked by it instead);
        # not awaited here, so a traced call has no extra frame.
        TRACED.call(site.ctx, site.execution, site.call.tool)
        return proceed(site)

    def reduced(self, ctx: StepContext, t: TurnInput, following: TurnInput) -> None:
        _record(
            ctx,
            t,
            {
                "agent.stateVersion": following.state_version,
                "agent.callsAdmitted": following.calls,
            },
        )


#: The trace's hooks, for a traced invocation.
TRACE_HOOKS = TraceHooks()


_SHOWN_FIRST = ("running", "failed")


class Progress:
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

    def finish(self, index: int, status: CallEnd) -> None:
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
        # A batch of one call (the common one) shows that call, whatever its status.
        shown = [0] if total == 1 else self._shown(total)
        rows: list[Mapping[str, Any]] = [
            {"id": calls[i].id, "name": calls[i].tool, "depth": 0, "status": status[i]}
            for i in shown
        ]
        hidden = total - len(rows)
        if hidden > 0:
            rows.append({"id": "more", "label": f"{hidden} more calls", "depth": 0})
        done = self.done
        ctx.report_progress(done, total, f"{done} of {total} calls", rows)

    def _shown(self, total: int) -> list[int]:
        """The indices of the visible calls, in the order they are shown."""
        status = self.status
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
        return shown


class _NoProgress(Progress):
    """Progress of an untraced batch: nothing is kept."""

    __slots__ = ()

    def __init__(self) -> None:
        pass

    def start(self, index: int) -> None:
        pass

    def finish(self, index: int, status: CallEnd) -> None:
        pass

    def report(self, ctx: StepContext) -> None:
        pass


_NO_PROGRESS = _NoProgress()
