"""The batch-wide budget (``batch --max-cost-usd`` / ``--max-total-tokens``) on the ``process``
and ``ray`` engines: one ledger, owned in one place, that workers reserve against.

The driver owns the batch's ledger. A worker's rows charge it through a
:class:`~tubeless.agent._spi.RemoteLedger` standing first in their chains: before a model
request is sent, its worst case is granted or refused by the owner, which checks and adds it
in one step, so rows on several workers can never together pass a check meant for one; the
charge (or release) after the response goes back the same way. What carries the requests:

- ``process``: the worker's own pipe. The worker sends ``("budget", request)`` and blocks on
  the answer, which its pipe reader hands over (:class:`PipeBudget`); the driver answers from
  the loop that reads that worker's row messages (:func:`answer`), one request at a time.
- ``ray``: a small actor holding the ledger (:class:`BudgetActor`; an actor runs one method at
  a time). The driver's copy of the ledger mirrors it after each row, which is what the runner
  looks at to skip rows once the budget is spent.

Each row also gets an unbounded meter of its own (``usage`` in the output row), as on the
``local`` engine. Without a batch-wide budget none of this exists: workers get no ledger, and
rows run as they always did.
"""

from __future__ import annotations

import contextlib
import os
import queue
import threading
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from tubeless.errors import BATCH_WORKER_DIED, BatchError

if TYPE_CHECKING:
    from decimal import Decimal

    from tubeless.agent._spi import Ledger, RemoteLedger

__all__ = [
    "BATCH_SCOPE",
    "ROW_METER",
    "BudgetActor",
    "PipeBudget",
    "answer",
    "bounds_from_wire",
    "bounds_to_wire",
    "metered",
    "ray_budget",
    "refresh",
]

#: The scope a batch-wide budget's refusals name (``scope=batch``).
BATCH_SCOPE = "batch"
#: The id of the unbounded ledger that meters one row of a budgeted batch.
ROW_METER = "row"


def bounds_to_wire(ledger: Ledger | None) -> dict[str, int | str] | None:
    """The batch budget's bounds as JSON data (a cost as its decimal string)."""
    if ledger is None:
        return None
    return {k: str(v) if k == "max_cost_usd" else int(v) for k, v in ledger.bounds.items()}


def bounds_from_wire(wire: Mapping[str, Any]) -> dict[str, int | Decimal]:
    """:func:`bounds_to_wire` read back."""
    from decimal import Decimal

    return {k: Decimal(str(v)) if k == "max_cost_usd" else int(v) for k, v in wire.items()}


def answer(ledger: Ledger, request: tuple[Any, ...]) -> tuple[Any, Any]:
    """The driver's answer to a worker's budget request (granted or refused atomically)."""
    from tubeless.agent._spi import answer as owner_answer

    return owner_answer(ledger, request)


@contextlib.contextmanager
def metered(remote: RemoteLedger | None) -> Iterator[None]:
    """Within: the rows this task runs charge the batch's budget (``remote``) and a meter of
    their own. A no-op without a batch-wide budget."""
    if remote is None:
        yield
        return
    from tubeless.agent._spi import OUTER_LEDGERS
    from tubeless.agent._spi import Ledger as BudgetLedger

    token = OUTER_LEDGERS.set((remote, BudgetLedger(ROW_METER, {})))
    try:
        yield
    finally:
        OUTER_LEDGERS.reset(token)


class PipeBudget:
    """A process worker's end of the batch budget: requests go out on the worker's pipe, and
    the pipe's reader thread hands each answer to :meth:`deliver`.

    The caller blocks until the answer comes (a reservation must be granted before its request
    is sent); one request is outstanding at a time (reservations and charges of a process are
    made under one lock, and this one too).
    """

    def __init__(self, bounds: Mapping[str, Any], send: Callable[[tuple[Any, ...]], None]) -> None:
        from tubeless.agent._spi import RemoteLedger

        self._send = send
        self._answers: queue.SimpleQueue[tuple[Any, Any] | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self.ledger: RemoteLedger = RemoteLedger(BATCH_SCOPE, bounds_from_wire(bounds), self._call)

    def deliver(self, reply: tuple[Any, Any] | None) -> None:
        """An answer from the driver; ``None``: the driver is gone (no answer will come)."""
        self._answers.put(reply)

    def _call(self, request: tuple[Any, ...]) -> tuple[Any, Any]:
        with self._lock:
            self._send(("budget", request))
            reply = self._answers.get()
        if reply is None:
            self._answers.put(None)  # for whoever asks next
            raise BatchError(
                BATCH_WORKER_DIED, "the batch driver went away: no model request is admitted"
            )
        return reply


class BudgetActor:
    """The Ray actor that holds a batch's budget (made with ``ray.remote`` by the engine)."""

    def __init__(self, bounds: Mapping[str, Any]) -> None:
        from tubeless.agent._spi import Ledger as BudgetLedger

        self.ledger = BudgetLedger(BATCH_SCOPE, bounds_from_wire(bounds))

    def answer(self, request: tuple[Any, ...]) -> tuple[Any, Any]:
        """Grant, refuse or settle a request of a row's actor (one at a time)."""
        return answer(self.ledger, request)


def ray_budget(wire: tuple[Any, Mapping[str, Any]] | None) -> RemoteLedger | None:
    """A Ray row actor's end of the batch budget: ``wire`` is ``(BudgetActor handle, bounds)``.

    The row actor is an async actor and a reservation is a plain call made on its event loop:
    the answer is awaited with a blocking ``ray.get`` (the loop waits, as the request must).
    """
    if wire is None:
        return None
    import ray

    from tubeless.agent._spi import RemoteLedger

    # Ray would warn once that the blocking get holds the event loop: here that is the point.
    os.environ.setdefault("RAY_WARN_BLOCKING_GET_INSIDE_ASYNC", "0")
    handle, bounds = wire

    def call(request: tuple[Any, ...]) -> tuple[Any, Any]:
        reply: tuple[Any, Any] = ray.get(handle.answer.remote(request))
        return reply

    return RemoteLedger(BATCH_SCOPE, bounds_from_wire(bounds), call)


async def refresh(ledger: Ledger, handle: Any) -> None:
    """Copy the Ray budget actor's counts onto the driver's ledger (after a row)."""
    from tubeless.agent._spi import mirror

    _, state = await handle.answer.remote(("state",))
    mirror(ledger, state)
