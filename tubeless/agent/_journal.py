"""The journal seam: what the turn and dispatch code tell a journal at each commit point.

One :class:`Journal` per agent invocation, carried on :class:`~tubeless.agent._turn.TurnInput`.
Runs without checkpoints get :data:`NO_JOURNAL`, whose methods do nothing (like the null trace
recorder of ``_trace``), so no call site asks whether the run is durable (they cost a plain
one-call turn about 3 % of its instructions: below the 5 % that would justify a check at every
call site). A checkpointed run gets
``_durable.CheckpointJournal``, which commits each point before the work it guards
(DESIGN.md §11)::

    ask     reserved(t)                      decision budget charged   (commit)
            resume_decision(t)               a saved accepted decision instead of decide
    finish  finished(t, raw_result)          the final result          (commit)
    admit   accepted(t, decision, prepared)  state + validated call inputs
            readmitted(t)                    batch already charged before a crash?
    calls   admitted(t, count)               the batch's call budget charged
    gate    approver(requests, approver)     saved decisions first, pending (commit)
    each    start_call(index, call, execution, ctx)
                                             running intent (commit) -> None: run it;
                                             or the call's outcome without running it
            settled(index, call, outcome)    the validated outcome     (commit)
    reduce  reduced(t_next)                  the reduced state (written with the next commit)

Other features hook the same points (approvals wait in ``start_call``; cassettes record at
``accepted``/``settled`` and replay through ``resume_decision``/``start_call``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tubeless.agent._decisions import Continue
    from tubeless.agent._prepare import PreparedCall
    from tubeless.agent._turn import TurnInput
    from tubeless.frozen import FrozenDict
    from tubeless.pipeline import StepContext

__all__ = ["JOURNAL_SLOT", "NO_JOURNAL", "Journal", "Resumed"]

#: The run-environment slot carrying the innermost agent's journal down its run tree.
JOURNAL_SLOT = "tubeless.agent.journal"

#: ``(state, turn, state_version, calls)`` a resumed agent starts its loop from.
Resumed = tuple[Any, int, int, int]


class Journal:
    """The null journal: every commit point is a no-op (runs without checkpoints)."""

    __slots__ = ()

    def idempotency_base(self, agent_run_id: str) -> str:
        """The prefix of ``idempotency_key``: without checkpoints, the agent run's own id."""
        return agent_run_id

    def resumed_turn(self) -> Resumed | None:
        """Where a resumed agent's loop starts (``None``: from ``initial_state``)."""
        return None

    def servers(self, descriptors: Mapping[str, Mapping[str, Any]]) -> None:
        """The agent's servers described its sourced tools so (before its first turn)."""

    def reserved(self, t: TurnInput) -> None:
        """One decision was charged; ``decide`` is about to be asked."""

    def resume_decision(self, t: TurnInput) -> Continue | None:
        """The decision this turn accepted before the run stopped, instead of asking again."""
        return None

    def finished(self, t: TurnInput, result: Any) -> None:
        """The finish decision's result (before the result schema) was accepted."""

    def accepted(
        self, t: TurnInput, decision: Continue, prepared: tuple[PreparedCall, ...]
    ) -> None:
        """A continue decision and its validated calls were accepted."""

    def readmitted(self, t: TurnInput) -> bool:
        """Whether this turn's batch was charged to the budgets before the run stopped."""
        return False

    def admitted(self, t: TurnInput, count: int) -> None:
        """The batch's ``count`` calls were charged."""

    def approval_key(self, fallback: str) -> str:
        """The ``key`` of approval requests: the checkpoint key, else ``fallback``."""
        return fallback

    def approver(
        self, requests: tuple[FrozenDict, ...], approver: Callable[[Any], Any] | None
    ) -> Callable[[Any], Any] | None:
        """Who answers ``requests``: without checkpoints, the run's own approver."""
        return approver

    def start_call(
        self,
        index: int,
        call: PreparedCall,
        execution: Mapping[str, Any],
        ctx: StepContext,
    ) -> Mapping[str, Any] | Awaitable[Mapping[str, Any]] | None:
        """``None`` to run the call now, or its outcome (or an awaitable of it) instead."""
        return None

    def settled(self, index: int, call: PreparedCall, outcome: Mapping[str, Any]) -> None:
        """The call's validated outcome."""

    def reduced(self, t: TurnInput) -> None:
        """The reducer committed the state ``t`` (the next turn's input)."""


NO_JOURNAL = Journal()
