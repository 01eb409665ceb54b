"""The turn's hook points: one protocol every feature that hooks into a turn implements.

A turn (``_turn``: decide → calls → reduce) tells its invocation's :class:`TurnHooks` what
happens at each commit point, in this order::

    start   connected(descriptors)         servers described the sourced tools (first turn)
    decide  reserved(t)                    one decision was charged (but for on_limit: finish's
                                           final one); decide is about to be asked
            resume_decision(t)             a saved accepted decision instead of asking again
            readmitted(t)                  ... and whether its batch was charged before the stop
            decided(t, decision, prepared) a finish (``prepared`` None) or a continue decision
                                           and its validated calls were accepted
    calls   admitted(ctx, t, count)        the batch's call budget was charged
            gated(t, requests, approver)   who answers the batch's approval requests
            around_call(site, proceed)     each call: return an outcome, or ``proceed(site)``
    reduce  reduced(ctx, t, following)     the reducer committed ``following.state``
    end     ended(result, error)           the invocation completed (or raised ``error``)

``around_call`` works like DBOS's step wrapper: a member that already knows the call's outcome
(the journal's saved one, the tape's recorded one) returns it; otherwise it calls
``proceed(site)``, which runs the call (or the next member), and may look at the outcome it
returns. A member that only needs to act before the call can return ``proceed(site)`` without
awaiting it, which adds no frame between ``run()`` and the tool's handler.

The features, in the order :class:`Composite` calls them (``around_call``: the first is the
outermost wrapper):

1. the cassette tape (``_tape``): records every outcome, including one the journal restored;
   replaying outcomes, it answers a call without running it;
2. the checkpoint journal (``_durable``): commits each point before the work it guards, and
   answers a call it already settled (resume);
3. the agent trace (``_trace``): records the batch's admission, each call's identity (only for
   a call that runs or is replayed) and the committed state.

A plain run has :data:`NO_HOOKS`, whose methods do nothing; a run with one feature has that
feature's hooks alone, without a composite. A new feature subclasses :class:`TurnHooks`,
overrides the points it needs and is added where the invocation's hooks are chosen
(``_invocation.turn_hooks``): nothing else changes.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tubeless.agent._decisions import Continue, Finish
    from tubeless.agent._prepare import PreparedCall
    from tubeless.agent._turn_types import TurnInput
    from tubeless.frozen import FrozenDict
    from tubeless.pipeline import StepContext

__all__ = ["NO_HOOKS", "CallSite", "Composite", "Proceed", "TurnHooks", "combine"]

Outcome = Mapping[str, Any]


class CallSite:
    """One call of an admitted batch, as the hooks around it see it.

    Attributes:
        index: The call's place in the batch it was dispatched with.
        call: The prepared call.
        execution: ``{agent_run_id, turn, call_id, tool, parent_attempt_id,
            idempotency_key}``.
        ctx: The turn's ``calls`` step context.
        t: The turn.
    """

    __slots__ = ("call", "ctx", "execution", "index", "t")

    def __init__(
        self,
        index: int,
        call: PreparedCall,
        execution: FrozenDict,
        ctx: StepContext,
        t: TurnInput,
    ) -> None:
        self.index = index
        self.call = call
        self.execution = execution
        self.ctx = ctx
        self.t = t


#: What ``around_call`` calls to go on: the next member, and at the end the call itself.
Proceed = Callable[[CallSite], Awaitable[Outcome]]


class TurnHooks:
    """The null hooks: every point does nothing (a plain run's)."""

    __slots__ = ()

    def connected(self, descriptors: Mapping[str, Mapping[str, Any]]) -> None:
        """Before the first turn: the servers described the invocation's sourced tools so."""

    def reserved(self, t: TurnInput) -> None:
        """``decide`` is about to be asked: one decision was charged (none for the final one
        ``on_limit: finish`` asks when a limit is reached)."""

    def resume_decision(self, t: TurnInput) -> Continue | None:
        """The decision this turn accepted before the run stopped, instead of asking again."""
        return None

    def readmitted(self, t: TurnInput) -> bool:
        """Whether this turn's batch was charged to the budgets before the run stopped."""
        return False

    def decided(
        self, t: TurnInput, decision: Finish | Continue, prepared: tuple[PreparedCall, ...] | None
    ) -> None:
        """``decision`` was accepted: a finish (its result validated; ``prepared`` is None) or
        a continue decision whose calls were validated as ``prepared``."""

    def admitted(self, ctx: StepContext, t: TurnInput, count: int) -> None:
        """The batch of ``count`` calls was charged (or had been, before a resume)."""

    def gated(
        self, t: TurnInput, requests: tuple[FrozenDict, ...], approver: Callable[[Any], Any] | None
    ) -> Callable[[Any], Any] | None:
        """Who answers ``requests`` (some calls of the batch need approval): ``approver`` here."""
        return approver

    def around_call(self, site: CallSite, proceed: Proceed) -> Awaitable[Outcome]:
        """The call's outcome: ``proceed(site)``, or one known without running the call."""
        return proceed(site)

    def reduced(self, ctx: StepContext, t: TurnInput, following: TurnInput) -> None:
        """The reducer committed the state of ``following`` (the next turn's input)."""

    def ended(self, result: Any, error: BaseException | None) -> None:
        """The invocation completed with ``result``, or failed with ``error``."""


NO_HOOKS = TurnHooks()


class Composite(TurnHooks):
    """Several features' hooks, called in the order given (the module docstring's)."""

    __slots__ = ("members",)

    def __init__(self, members: tuple[TurnHooks, ...]) -> None:
        self.members = members

    def connected(self, descriptors: Mapping[str, Mapping[str, Any]]) -> None:
        for member in self.members:
            member.connected(descriptors)

    def reserved(self, t: TurnInput) -> None:
        for member in self.members:
            member.reserved(t)

    def resume_decision(self, t: TurnInput) -> Continue | None:
        for member in self.members:
            decision = member.resume_decision(t)
            if decision is not None:
                return decision
        return None

    def readmitted(self, t: TurnInput) -> bool:
        return any(member.readmitted(t) for member in self.members)

    def decided(
        self, t: TurnInput, decision: Finish | Continue, prepared: tuple[PreparedCall, ...] | None
    ) -> None:
        for member in self.members:
            member.decided(t, decision, prepared)

    def admitted(self, ctx: StepContext, t: TurnInput, count: int) -> None:
        for member in self.members:
            member.admitted(ctx, t, count)

    def gated(
        self, t: TurnInput, requests: tuple[FrozenDict, ...], approver: Callable[[Any], Any] | None
    ) -> Callable[[Any], Any] | None:
        for member in self.members:
            approver = member.gated(t, requests, approver)
        return approver

    def around_call(self, site: CallSite, proceed: Proceed) -> Awaitable[Outcome]:
        # The last member wraps the call itself, each earlier one the member after it.
        for member in reversed(self.members[1:]):
            proceed = _wrapped(member, proceed)
        return self.members[0].around_call(site, proceed)

    def reduced(self, ctx: StepContext, t: TurnInput, following: TurnInput) -> None:
        for member in self.members:
            member.reduced(ctx, t, following)

    def ended(self, result: Any, error: BaseException | None) -> None:
        for member in self.members:
            member.ended(result, error)


def _wrapped(member: TurnHooks, proceed: Proceed) -> Proceed:
    def go(site: CallSite) -> Awaitable[Outcome]:
        return member.around_call(site, proceed)

    return go


def combine(*members: TurnHooks | None) -> TurnHooks:
    """The hooks of ``members`` (in the order above), leaving out those that are ``None``."""
    kept = tuple(m for m in members if m is not None)
    if not kept:
        return NO_HOOKS
    return kept[0] if len(kept) == 1 else Composite(kept)
