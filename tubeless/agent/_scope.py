"""Execution scopes: budgets shared down a delegation tree, depth, and concurrency permits.

The root agent invocation creates a permit pool; every agent invocation below it (a pipeline
tool that is an agent, or an agent inside a pipeline tool) adds its own budget to the chain it
inherits. Reservations check every budget of the chain and then charge them all, with no await
in between, so concurrent siblings cannot both pass a check meant for one. Nothing is refunded.
"""

from __future__ import annotations

import asyncio
import threading
from collections import deque
from collections.abc import Mapping
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, Literal

from tubeless.agent._limits import LimitReachedError, Limits
from tubeless.agent._usage import NO_USAGE, Ledger, Usage, ledger_for
from tubeless.pipeline import CancelToken
from tubeless.pipeline._spi import TREE_SLOT, RunCancelledError

if TYPE_CHECKING:
    from tubeless.agent._pricing import Priced

__all__ = [
    "OUTER_LEDGERS",
    "ROOT_BUDGETS",
    "SCOPE_SLOT",
    "Budget",
    "PermitPool",
    "Routes",
    "Scope",
    "invocation_route",
]

#: The run-environment slot that carries the innermost agent scope down a run tree.
SCOPE_SLOT = "tubeless.agent.scope"
#: Set by a caller that wants the budgets of the root agent invocations of the runs it starts
#: (a batch row's turns and calls, without tracing the row); each is appended when created.
ROOT_BUDGETS: ContextVar[list[Budget] | None] = ContextVar(
    "tubeless.agent.root_budgets", default=None
)

_NO_PRICES: Mapping[str, Any] = {}

#: Set by a caller that bounds or meters several runs together (``batch --max-cost-usd``, and
#: a batch row's own meter): the ledgers every root agent invocation it starts charges first.
OUTER_LEDGERS: ContextVar[tuple[Ledger, ...]] = ContextVar(
    "tubeless.agent.outer_ledgers", default=()
)


class Routes:
    """The routes handed out in one run tree: a route seen again gets ``#2``, ``#3``... in
    start order, so every agent invocation of the tree has its own."""

    __slots__ = ("_lock", "_taken")

    def __init__(self) -> None:
        self._taken: set[str] = set()
        self._lock = threading.Lock()  # runs on other threads' loops may share a tree

    def claim(self, base: str) -> str:
        """``base``, or ``base#n`` for the first ``n`` not handed out yet."""
        with self._lock:
            route, n = base, 1
            while route in self._taken:
                n += 1
                route = f"{base}#{n}"
            self._taken.add(route)
        return route


#: Where a run tree keeps its :class:`Routes` (in the tree's shared dict, ``TREE_SLOT``).
_ROUTES = "tubeless.agent.routes"


def invocation_route(
    slots: Mapping[str, Any], parent: Scope | None, agent_id: str, below: Mapping[str, Any]
) -> tuple[str, str]:
    """The route of an agent invocation, computed once and used for its checkpoint entry, its
    approval requests, its cassette tape and its children's routes; and its last segment.

    The root of a delegation tree is named by its agent id; a child started by a call is
    ``<parent route>/<turn>/<call id>/<agent id>`` (``below`` is the call's execution). A route
    the tree handed out already gets ``#n``: a pipeline that runs one agent twice, or a call
    whose pipeline does, has two invocations, each with its own entry and approvals.
    """
    prefix = "" if parent is None else f"{parent.route}/{below.get('turn')}/{below.get('call_id')}/"
    tree = slots.get(TREE_SLOT)
    if tree is None:  # a run started without run_root (no tree to be unique in)
        return prefix + agent_id, agent_id
    routes: Routes = tree.setdefault(_ROUTES, Routes())  # atomic for a dict and a str key
    route = routes.claim(prefix + agent_id)
    return route, route[len(prefix) :]


class Budget:
    """The counters of one agent invocation."""

    __slots__ = ("active", "calls", "decisions", "depth", "id", "ledger", "limits", "max_active")

    def __init__(self, id: str, depth: int, limits: Limits) -> None:
        self.id = id
        self.depth = depth
        self.limits = limits
        self.max_active = limits.max_concurrency
        self.calls = 0
        self.decisions = 0
        self.active = 0
        self.ledger: Ledger | None = None
        """The invocation's token and cost ledger, when it has budgets (set by its scope)."""


class PermitPool:
    """Permits for decision callbacks and leaf handlers, shared by one root invocation.

    A job starts only when every budget of its chain has a free slot; waiting jobs are served
    in arrival order, skipping those that still do not fit.
    """

    __slots__ = ("_waiters",)

    def __init__(self) -> None:
        self._waiters: deque[tuple[tuple[Budget, ...], asyncio.Future[None]]] = deque()

    @staticmethod
    def _fits(chain: tuple[Budget, ...]) -> bool:
        for b in chain:  # noqa: SIM110 -- a plain loop beats all() on chains of one or two
            if b.active >= b.max_active:
                return False
        return True

    @staticmethod
    def _take(chain: tuple[Budget, ...]) -> None:
        for b in chain:
            b.active += 1

    def try_acquire(self, chain: tuple[Budget, ...], signal: CancelToken) -> bool:
        """Take a permit at once when nobody waits and every budget of ``chain`` has room."""
        if signal.cancelled or self._waiters:
            return False
        for b in chain:
            if b.active >= b.max_active:
                return False
        for b in chain:
            b.active += 1
        return True

    async def acquire(self, chain: tuple[Budget, ...], signal: CancelToken) -> None:
        """Wait for a permit on every budget of ``chain``; cancellation rejects the wait."""
        signal.raise_if_cancelled()
        if not self._waiters and self._fits(chain):
            self._take(chain)
            return
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[None] = loop.create_future()
        entry = (chain, waiter)
        self._waiters.append(entry)

        def reject() -> None:
            loop.call_soon_threadsafe(_reject, waiter)

        remove = signal.add_callback(reject)
        try:
            await waiter
        except BaseException:
            if entry in self._waiters:
                self._waiters.remove(entry)
            elif waiter.done() and not waiter.cancelled() and waiter.exception() is None:
                self.release(chain)  # granted while we were being cancelled: hand it back
            raise
        finally:
            remove()

    def release(self, chain: tuple[Budget, ...]) -> None:
        """Return the permits of ``chain`` and wake waiters that now fit."""
        for b in chain:
            b.active -= 1
        if not self._waiters:
            return
        for entry in list(self._waiters):
            waiting_chain, waiter = entry
            if waiter.done():
                self._waiters.remove(entry)
            elif self._fits(waiting_chain):
                self._waiters.remove(entry)
                self._take(waiting_chain)
                waiter.set_result(None)


def _reject(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_exception(RunCancelledError("The run was cancelled while waiting to start."))


class Scope:
    """The budget chain of one agent invocation (root first) and its root's permit pool."""

    __slots__ = ("budget", "chain", "ledger", "ledgers", "pool", "pricing", "route", "usage")

    def __init__(
        self,
        budget: Budget,
        parent: Scope | None,
        route: str = "",
        pricing: Mapping[str, Priced] | None = None,
    ) -> None:
        self.budget = budget
        self.route = route
        """Where this invocation stands in the tree (:func:`invocation_route`): approvals,
        checkpoints and cassettes name it by this."""
        self.chain: tuple[Budget, ...] = (budget,) if parent is None else (*parent.chain, budget)
        self.pool: PermitPool = PermitPool() if parent is None else parent.pool
        # Token and cost budgets: the chain of ledgers (outer first) and this invocation's own.
        # Without any (the common case) nothing is looked up or built (W3: 3,000 instructions
        # a run).
        if (
            not pricing
            and not budget.limits.budgeted
            and (not parent.ledgers if parent is not None else not OUTER_LEDGERS.get())
        ):
            self.ledger: Ledger | None = None
            self.ledgers: tuple[Ledger, ...] = ()
            self.pricing: Mapping[str, Priced] = _NO_PRICES if parent is None else parent.pricing
            self.usage: Usage = NO_USAGE
            return
        self.ledger = budget.ledger = ledger_for(budget.id, budget.limits)
        if self.ledger is not None:
            self.ledger.route = route or None
        if parent is None:
            inherited: tuple[Ledger, ...] = OUTER_LEDGERS.get()
            self.pricing = pricing or _NO_PRICES
        else:
            inherited = parent.ledgers
            self.pricing = {**parent.pricing, **pricing} if pricing else parent.pricing
        self.ledgers = inherited if self.ledger is None else (*inherited, self.ledger)
        self.usage = Usage(self.ledgers, self.pricing) if self.ledgers else NO_USAGE
        """``ctx.usage`` of the invocation's decisions and tools."""

    @property
    def depth(self) -> int:
        """Delegation edges between the root agent and this one."""
        return self.budget.depth

    @property
    def concurrency(self) -> int:
        """The tightest concurrency limit of the chain."""
        return min(b.limits.max_concurrency for b in self.chain)

    def check(self, limit: Literal["max_calls", "max_decisions"], requested: int) -> None:
        """Fail with ``TUBELESS_AGENT_LIMIT_REACHED`` if any budget cannot afford ``requested``."""
        for b in reversed(self.chain):
            bound = getattr(b.limits, limit)
            used = b.calls if limit == "max_calls" else b.decisions
            if requested > bound - used:
                raise LimitReachedError(
                    limit=limit, bound=bound, consumed=used, requested=requested, scope=b.id
                )

    def reserve(self, limit: Literal["max_calls", "max_decisions"], requested: int) -> None:
        """Check, then charge every budget of the chain (atomically: no await in between)."""
        self.check(limit, requested)
        for b in self.chain:
            if limit == "max_calls":
                b.calls += requested
            else:
                b.decisions += requested

    def check_delegation(self) -> None:
        """Fail if one more delegation edge below this agent exceeds any ``max_depth``."""
        for b in reversed(self.chain):
            consumed = self.depth - b.depth
            if consumed + 1 > b.limits.max_depth:
                raise LimitReachedError(
                    limit="max_depth",
                    bound=b.limits.max_depth,
                    consumed=consumed,
                    requested=1,
                    scope=b.id,
                )

    # -- the handler gate (HandlerGate): a permit on every budget of the chain ---------------
    def try_enter(self, signal: CancelToken) -> bool:
        """Take a permit at once when nobody waits and every budget has a free slot."""
        return self.pool.try_acquire(self.chain, signal)

    async def enter(self, signal: CancelToken) -> None:
        """Wait for a permit (in arrival order); cancellation rejects the wait."""
        await self.pool.acquire(self.chain, signal)

    def exit(self) -> None:
        """Give the permit back and wake waiters that now fit."""
        self.pool.release(self.chain)
