"""A budget ledger held by another process: the batch-wide budget of rows run by workers.

The ``process`` and ``ray`` batch engines run rows in other processes, and the batch's budget
must stay one ledger, so that rows on several workers cannot together pass a check meant for
one. The driver (or a Ray actor) owns the real :class:`~tubeless.agent._usage.Ledger`; each
worker puts a :class:`RemoteLedger` first in its rows' chains. Its check *is* the reservation:
it asks the owner, which checks and adds the request's worst case in one step
(:func:`answer`) and grants or refuses it, before the request is sent; a charge or release
sends the difference back. Both are blocking round trips, made only by budgeted batches' rows
(never by an unbudgeted run) and only around model requests.

The transport is the caller's: a ``call(request) -> reply`` function (a worker pipe, a Ray
actor method). Requests and replies are plain tuples, picklable across processes:

- ``("reserve", input_tokens, output_tokens, cost_usd)`` -> ``(refusal | None, state)``
- ``("charge", input_tokens, output_tokens, cost_usd)`` (differences, may be negative)
  -> ``(None, state)``
- ``("state",)`` -> ``(None, state)``

where ``refusal = (limit, bound, consumed, requested)`` and ``state = (input_tokens,
output_tokens, cost_usd, refused)`` are the owner's counts after the request.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from tubeless.agent._limits import LimitReachedError
from tubeless.agent._usage import Ledger

if TYPE_CHECKING:
    from decimal import Decimal

__all__ = ["BudgetCall", "RemoteLedger", "answer", "mirror"]

BudgetCall = Callable[[tuple[Any, ...]], tuple[Any, Any]]
"""Sends a request to the ledger's owner and returns its reply (blocking)."""


class RemoteLedger(Ledger):
    """A worker's view of a ledger another process owns.

    It must stand first (outermost) in a chain: ``Usage.reserve`` checks the chain innermost
    first, so this check, which reserves at the owner, is made only once every local budget
    admitted the request, and the adds that follow it are then already done at the owner. Its
    own counts mirror the owner's as of its last reply (for ``remaining`` and ``fits``).
    """

    __slots__ = ("_call", "_granted")

    def __init__(self, id: str, bounds: Mapping[str, int | Decimal], call: BudgetCall) -> None:
        super().__init__(id, bounds)
        self._call = call
        self._granted = False

    def _refusal(self, requested: dict[str, int | Decimal]) -> LimitReachedError | None:
        refusal, state = self._call(
            (
                "reserve",
                requested["max_input_tokens"],
                requested["max_output_tokens"],
                requested["max_cost_usd"],
            )
        )
        mirror(self, state)
        if refusal is not None:
            limit, bound, consumed, wanted = refusal
            return LimitReachedError(
                limit=limit, bound=bound, consumed=consumed, requested=wanted, scope=self.id
            )
        self._granted = True
        return None

    def _add(self, input_tokens: int, output_tokens: int, cost: Decimal) -> None:
        if self._granted:  # the reservation just granted: the owner added it already
            self._granted = False
            return
        _, state = self._call(("charge", input_tokens, output_tokens, cost))
        mirror(self, state)


def answer(ledger: Ledger, request: tuple[Any, ...]) -> tuple[Any, Any]:
    """The owner's side: apply ``request`` to ``ledger`` (atomically) and say what it did."""
    kind = request[0]
    refusal = None
    if kind == "reserve":
        _, input_tokens, output_tokens, cost = request
        refused = ledger.grant(input_tokens, output_tokens, cost)
        if refused is not None:
            refusal = (refused.limit, refused.bound, refused.consumed, refused.requested)
    elif kind == "charge":
        _, input_tokens, output_tokens, cost = request
        ledger.settle(input_tokens, output_tokens, cost)
    elif kind != "state":
        raise ValueError(f"unknown budget request {kind!r}")
    return refusal, (ledger.input_tokens, ledger.output_tokens, ledger.cost_usd, ledger.refused)


def mirror(ledger: Ledger, state: tuple[Any, ...]) -> None:
    """Copy the owner's counts (a reply's ``state``) onto ``ledger``."""
    ledger.input_tokens, ledger.output_tokens, ledger.cost_usd, refused = state
    ledger.refused = ledger.refused or bool(refused)
