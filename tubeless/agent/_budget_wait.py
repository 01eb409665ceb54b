"""``on_limit: wait`` for token and cost budgets, wherever the exhausting request is made.

A request that does not fit is refused by the budget of some agent of the delegation chain
(the *owner*, named by the refusal's ``scope``): the deciding agent's own, an ancestor's, or a
batch's. The run waits when the owner is an agent and its ``on_limit`` is ``wait``, or the
agent that made the request says ``wait`` (a batch's budget never waits: no checkpoint holds
its bound); a checkpointed run then stops ``waiting`` with the owner's budget marked
as waited for (committed before the run stops) and its route named, so that
``tubeless checkpoints raise ... [--route ROUTE]`` raises exactly that bound.

Requests come from a decision (:func:`waits` in the decide step) or from a tool reporting
through ``ctx.usage``; a tool's refusal fails its call's run, and :func:`tool_wait` turns that
failure into the wait (only on the failure path: a run that never fails pays nothing).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tubeless.agent._limits import BUDGET_NAMES, BudgetWaiting, LimitReachedError

if TYPE_CHECKING:
    from tubeless.agent._scope import Scope
    from tubeless.agent._turn_types import TurnInput
    from tubeless.pipeline import PipelineRun

__all__ = ["tool_wait", "wait", "waits"]


def waits(scope: Scope, reached: LimitReachedError) -> bool:
    """Whether ``reached`` (a refusal met by ``scope``'s invocation) stops the run waiting."""
    if reached.limit not in BUDGET_NAMES or isinstance(reached, BudgetWaiting):
        return False
    for budget in scope.chain:
        if budget.id == reached.scope:
            return budget.limits.on_limit == "wait" or scope.budget.limits.on_limit == "wait"
    # Not an agent's budget (a batch's): no checkpoint holds its bound, so nothing to wait
    # for; a rerun of the batch with a higher bound runs the row again.
    return False


def wait(t: TurnInput, reached: LimitReachedError) -> LimitReachedError:
    """The error that stops turn ``t``'s run waiting for a higher bound of the budget that
    refused; without checkpoints the run fails as under ``fail``, and the message says why."""
    key = t.invocation.checkpoint_key
    if key is None:
        return LimitReachedError(
            limit=reached.limit,
            bound=reached.bound,
            consumed=reached.consumed,
            requested=reached.requested,
            scope=reached.scope,
            note="on_limit: wait needs checkpoints (--checkpoints PATH), so the run failed as "
            "on_limit: fail would",
        )
    route = None
    for ledger in t.invocation.scope.ledgers:
        if ledger.id == reached.scope:
            route = ledger.route
            ledger.wait(reached.limit)  # committed before the run stops
    return BudgetWaiting(reached, key, route)


def tool_wait(t: TurnInput, run: PipelineRun) -> LimitReachedError | None:
    """For a call of turn ``t`` whose run failed: the wait, when a budget refused a request
    its tool reported through ``ctx.usage`` and that refusal waits (:func:`waits`)."""
    from tubeless.pipeline._spi import original_exception

    scope = t.invocation.scope
    for error in run.errors:
        exc = original_exception(error.exception)
        if isinstance(exc, LimitReachedError) and waits(scope, exc):
            return wait(t, exc)
    return None
