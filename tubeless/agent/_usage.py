"""Token and cost budgets: ledgers shared down a delegation tree, reserved before each model
request and charged after it.

Every agent invocation with a token or cost budget (``Limits.max_*_tokens``,
``max_cost_usd``) has a :class:`Ledger`; a scope's ledger chain is its ancestors' ledgers
then its own (a whole batch may add one at the root). ``ctx.usage`` (:class:`Usage`) works on
that chain:

- :meth:`Usage.reserve` checks the request's worst case against every ledger of the chain and
  then adds it to all of them, under one lock, so two requests racing (parallel children, a
  tool's handler in a worker thread) cannot together pass a check meant for one. A reservation
  that does not fit raises ``TUBELESS_AGENT_LIMIT_REACHED`` before anything is sent.
- :meth:`Usage.charge` replaces the reservation with what the response says it used. Usage
  above the reservation is charged in full (the ledger then stands above its bound and admits
  nothing more); the unused rest is released.

Consumed amounts include open reservations, so a budget is never exceeded by requests that
reserved honestly. A run without budgets has no ledgers: ``ctx.usage`` is a shared object whose
methods return at once (no lock, no arithmetic).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from tubeless.agent._limits import BUDGET_NAMES, LimitReachedError, Limits
from tubeless.frozen import FrozenDict

if TYPE_CHECKING:
    from decimal import Decimal

    from tubeless.agent._pricing import Priced

__all__ = ["NO_USAGE", "Ledger", "Reservation", "Usage", "ledger_for"]

#: One lock for every ledger: a reservation checks and charges a whole chain (which may cross
#: run trees, for a batch-wide budget) with no other reservation in between.
_LOCK = threading.Lock()
#: Costs start as the int 0 (adding a Decimal gives a Decimal): ``decimal`` is imported only by
#: runs that price something.
_ZERO: Any = 0


class Ledger:
    """What one budgeted scope has consumed (open reservations included) against its bounds.

    Attributes:
        id: The scope's id (the agent run id, or ``batch``), named in limit errors.
        bounds: The budgets that are set, by name.
        input_tokens, output_tokens, cost_usd: Consumed so far.
        requests: Reservations made (the trace's and the checkpoint's count).
    """

    __slots__ = (
        "bounds",
        "cost_usd",
        "id",
        "input_tokens",
        "listeners",
        "output_tokens",
        "refused",
        "route",
        "waiting",
    )

    def __init__(self, id: str, bounds: Mapping[str, int | Decimal]) -> None:
        self.id = id
        self.bounds: dict[str, int | Decimal] = dict(bounds)
        self.input_tokens = 0
        self.output_tokens = 0
        self.cost_usd: int | Decimal = _ZERO
        self.listeners: list[Callable[[Ledger], None]] = []
        """Called (outside the lock) after each reservation and charge: checkpoints commit."""
        self.refused = False
        """Whether a reservation was ever refused (a batch starts no row after that)."""
        self.waiting: str | None = None
        """The exhausted budget a checkpointed run waits to have raised (``on_limit: wait``)."""
        self.route: str | None = None
        """The route of the agent invocation whose budget this is (``None`` for a batch's):
        what ``checkpoints raise --route`` names."""

    def wait(self, name: str) -> None:
        """Record that the run stops waiting for a higher ``name`` (and tell the listeners)."""
        self.waiting = name
        _notify((self,))

    def consumed(self, name: str) -> int | Decimal:
        """The consumed amount a budget is measured by."""
        if name == "max_input_tokens":
            return self.input_tokens
        if name == "max_output_tokens":
            return self.output_tokens
        if name == "max_total_tokens":
            return self.input_tokens + self.output_tokens
        return self.cost_usd

    @property
    def spent(self) -> bool:
        """Whether nothing more fits: a reservation was refused, or a budget is used up."""
        if self.refused:
            return True
        return any(self.consumed(name) >= bound for name, bound in self.bounds.items())

    def remaining(self) -> dict[str, int | Decimal]:
        """What each set budget still admits (0 once spent or overrun)."""
        return {name: max(bound - self.consumed(name), 0) for name, bound in self.bounds.items()}

    def snapshot(self) -> dict[str, Any]:
        """JSON data: the bounds and the consumed counts (a cost as its decimal string)."""
        out: dict[str, Any] = {
            "bounds": {k: str(v) if k == "max_cost_usd" else v for k, v in self.bounds.items()},
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cost_usd": str(self.cost_usd),
        }
        if self.waiting is not None:
            out["waiting"] = self.waiting
        return out

    def restore(self, saved: Mapping[str, Any]) -> None:
        """Take back consumed counts (never fewer than now: a resume never refills) and any
        raised bounds a checkpoint holds."""
        from decimal import Decimal

        self.input_tokens = max(self.input_tokens, int(saved.get("input_tokens", 0)))
        self.output_tokens = max(self.output_tokens, int(saved.get("output_tokens", 0)))
        self.cost_usd = max(self.cost_usd, Decimal(str(saved.get("cost_usd", "0"))))
        for name, bound in (saved.get("bounds") or {}).items():
            if name in self.bounds:
                value = Decimal(str(bound)) if name == "max_cost_usd" else int(bound)
                self.bounds[name] = max(self.bounds[name], value)

    def grant(
        self, input_tokens: int, output_tokens: int, cost: Decimal
    ) -> LimitReachedError | None:
        """Reserve on this ledger alone, atomically: the refusal (and nothing added) when the
        amounts do not fit, else ``None`` (the owner's side of a remote ledger)."""
        requested = _amounts(input_tokens, output_tokens, cost)
        with _LOCK:
            refused = self._refusal(requested)
            if refused is not None:
                self.refused = True
                return refused
            self._add(input_tokens, output_tokens, cost)
        return None

    def settle(self, input_tokens: int, output_tokens: int, cost: Decimal) -> None:
        """Add differences (a charge replacing a reservation; negative releases) atomically."""
        with _LOCK:
            self._add(input_tokens, output_tokens, cost)

    def _refusal(self, requested: dict[str, int | Decimal]) -> LimitReachedError | None:
        for name, bound in self.bounds.items():
            used = self.consumed(name)
            wanted = requested[name]
            if used + wanted > bound:
                return LimitReachedError(
                    limit=name,  # type: ignore[arg-type]
                    bound=bound,
                    consumed=used,
                    requested=wanted,
                    scope=self.id,
                )
        return None

    def _add(self, input_tokens: int, output_tokens: int, cost: Decimal) -> None:
        self.input_tokens += input_tokens
        self.output_tokens += output_tokens
        self.cost_usd += cost


def ledger_for(id: str, limits: Limits) -> Ledger | None:
    """The ledger of a scope with these limits, or ``None`` when it sets no budget."""
    if not limits.budgeted:
        return None
    return Ledger(id, limits.budgets())


class Reservation:
    """A request's worst case, held on every ledger of its chain until it is charged.

    Attributes:
        input_tokens, output_tokens, cost_usd: What was reserved.
        provider, model: Whose prices apply (``None`` without a cost budget).
        charged: Whether :meth:`Usage.charge` settled it.
    """

    __slots__ = (
        "_ledgers",
        "charged",
        "cost_usd",
        "input_tokens",
        "model",
        "output_tokens",
        "provider",
    )

    def __init__(
        self,
        ledgers: tuple[Ledger, ...],
        input_tokens: int,
        output_tokens: int,
        cost_usd: Decimal,
        provider: str | None,
        model: str | None,
    ) -> None:
        self._ledgers = ledgers
        self.input_tokens = input_tokens
        self.output_tokens = output_tokens
        self.cost_usd = cost_usd
        self.provider = provider
        self.model = model
        self.charged = False


class Usage:
    """``ctx.usage``: reserve before a model request, charge after it, see what remains.

    A tool that calls a model reports through its context's ``usage`` the same way, so its
    requests count against the run's budgets.
    """

    __slots__ = ("_ledgers", "_pricing")

    def __init__(self, ledgers: tuple[Ledger, ...], pricing: Mapping[str, Priced]) -> None:
        self._ledgers = ledgers
        self._pricing = pricing

    @property
    def budgeted(self) -> bool:
        """Whether any budget applies (without one, reserve and charge do nothing)."""
        return bool(self._ledgers)

    @property
    def priced(self) -> bool:
        """Whether a cost budget applies (reservations then need a provider and model)."""
        return any("max_cost_usd" in ledger.bounds for ledger in self._ledgers)

    @property
    def remaining(self) -> FrozenDict:
        """``{max_input_tokens, max_output_tokens, max_total_tokens, max_cost_usd}``: the
        tightest remaining amount of the chain, ``None`` where unbounded."""
        out: dict[str, Any] = dict.fromkeys(BUDGET_NAMES)
        for ledger in self._ledgers:
            for name, left in ledger.remaining().items():
                current = out[name]
                out[name] = left if current is None else min(current, left)
        return FrozenDict._trusted(out)

    def price(
        self,
        provider: str,
        model: str,
        *,
        input_tokens: int,
        cached_input_tokens: int = 0,
        output_tokens: int,
    ) -> Decimal:
        """US dollars for the counts at ``provider:model`` (``TUBELESS_BUDGET_PRICE_UNKNOWN``
        when nobody prices it)."""
        from tubeless.agent._pricing import find_price

        return find_price(self._pricing, provider, model).cost(
            input_tokens, cached_input_tokens, output_tokens
        )

    def fits(
        self,
        *,
        input_tokens: int = 0,
        output_tokens: int = 0,
        provider: str | None = None,
        model: str | None = None,
        times: int = 1,
    ) -> bool:
        """Whether ``times`` requests of this worst case would fit what remains now (nothing
        is reserved; an unknown price under a cost budget says no)."""
        if not self._ledgers:
            return True
        cost: Any = _ZERO
        if self.priced:
            if provider is None or model is None:
                return False
            from tubeless.agent._pricing import PriceUnknownError

            try:
                cost = self.price(
                    provider, model, input_tokens=input_tokens, output_tokens=output_tokens
                )
            except PriceUnknownError:
                return False
        requested = _amounts(input_tokens * times, output_tokens * times, cost * times)
        with _LOCK:
            return all(
                ledger.consumed(name) + requested[name] <= bound
                for ledger in self._ledgers
                for name, bound in ledger.bounds.items()
            )

    def reserve(
        self,
        *,
        input_tokens: int = 0,
        output_tokens: int = 0,
        provider: str | None = None,
        model: str | None = None,
        cost_usd: Decimal | None = None,
    ) -> Reservation:
        """Hold a request's worst case on every budget, or raise before it is sent.

        Args:
            input_tokens: The most input tokens the request can use.
            output_tokens: The most output tokens it can produce (its ``max_output_tokens``).
            provider, model: Whose prices a cost budget applies.
            cost_usd: The worst-case cost, when the caller prices it itself.

        Raises:
            LimitReachedError: ``TUBELESS_AGENT_LIMIT_REACHED`` naming the budget that does
                not fit (``limit``, ``bound``, ``consumed``, ``requested``, ``scope``).
            PriceUnknownError: A cost budget applies and the model has no known price.
        """
        _check_count("input_tokens", input_tokens)
        _check_count("output_tokens", output_tokens)
        ledgers = self._ledgers
        if not ledgers:
            return Reservation((), input_tokens, output_tokens, _ZERO, provider, model)
        cost = _ZERO
        if cost_usd is not None:
            cost = cost_usd
        elif self.priced:
            if provider is None or model is None:
                from tubeless.agent._pricing import PriceUnknownError

                raise PriceUnknownError(provider or "unknown", model or "unknown")
            cost = self.price(
                provider, model, input_tokens=input_tokens, output_tokens=output_tokens
            )
        requested = _amounts(input_tokens, output_tokens, cost)
        with _LOCK:
            for ledger in reversed(ledgers):  # the innermost budget is named first
                refused = ledger._refusal(requested)
                if refused is not None:
                    ledger.refused = True
                    raise refused
            for ledger in ledgers:
                ledger._add(input_tokens, output_tokens, cost)
        _notify(ledgers)
        return Reservation(ledgers, input_tokens, output_tokens, cost, provider, model)

    def charge(
        self,
        reservation: Reservation,
        *,
        input_tokens: int | None,
        cached_input_tokens: int = 0,
        output_tokens: int | None,
        model: str | None = None,
        provider: str | None = None,
    ) -> Decimal | None:
        """Replace ``reservation`` with the real usage; returns its cost when a price is known.

        A count of ``None`` (the response had no usage data) charges what was reserved for it.
        Without budgets nothing is counted or priced and ``None`` is returned.
        Usage above the reservation is charged in full; nothing more is admitted then.
        Charging a reservation twice is refused (``ValueError``).
        """
        if reservation.charged:
            raise ValueError("This reservation was charged already.")
        reservation.charged = True
        ledgers = reservation._ledgers
        if not ledgers:  # nothing is budgeted: nothing to count or price
            return None
        used_in = reservation.input_tokens if input_tokens is None else input_tokens
        used_out = reservation.output_tokens if output_tokens is None else output_tokens
        _check_count("input_tokens", used_in)
        _check_count("output_tokens", used_out)
        _check_count("cached_input_tokens", cached_input_tokens)
        provider = provider or reservation.provider
        model = model or reservation.model
        cost: Decimal | None = None
        if provider is not None and model is not None:
            from tubeless.agent._pricing import PriceUnknownError

            try:
                cost = self.price(
                    provider,
                    model,
                    input_tokens=used_in,
                    cached_input_tokens=cached_input_tokens,
                    output_tokens=used_out,
                )
            except PriceUnknownError:
                if self.priced:
                    raise
        spent = reservation.cost_usd if cost is None else cost
        with _LOCK:
            for ledger in ledgers:
                ledger._add(
                    used_in - reservation.input_tokens,
                    used_out - reservation.output_tokens,
                    spent - reservation.cost_usd,
                )
        _notify(ledgers)
        return cost


def _check_count(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"usage {name} must be a non-negative integer")


def _notify(ledgers: tuple[Ledger, ...]) -> None:
    for ledger in ledgers:
        for listener in ledger.listeners:
            listener(ledger)


#: ``ctx.usage`` of a run without budgets.
NO_USAGE = Usage((), {})


def _amounts(input_tokens: int, output_tokens: int, cost: Decimal) -> dict[str, int | Decimal]:
    """A request's amounts by the name of the bound each counts against."""
    return {
        "max_input_tokens": input_tokens,
        "max_output_tokens": output_tokens,
        "max_total_tokens": input_tokens + output_tokens,
        "max_cost_usd": cost,
    }
