"""Agent limits and the error raised when one is exhausted."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any, Literal

from tubeless.errors import AGENT_LIMIT_REACHED, AgentDefinitionError, TubelessError

if TYPE_CHECKING:
    from decimal import Decimal

__all__ = [
    "BUDGET_NAMES",
    "BudgetName",
    "BudgetWaiting",
    "LimitName",
    "LimitReachedError",
    "Limits",
    "OnLimit",
    "usd_text",
]

#: The token and cost budgets (absent: unbounded), shared down the delegation tree.
BudgetName = Literal["max_input_tokens", "max_output_tokens", "max_total_tokens", "max_cost_usd"]
BUDGET_NAMES: tuple[BudgetName, ...] = (
    "max_input_tokens",
    "max_output_tokens",
    "max_total_tokens",
    "max_cost_usd",
)
LimitName = Literal[
    "max_turns",
    "max_calls",
    "max_decisions",
    "max_depth",
    "max_concurrency",
    "max_input_tokens",
    "max_output_tokens",
    "max_total_tokens",
    "max_cost_usd",
]
#: What an exhausted limit does: fail the run, ask for a final answer, or (token and cost
#: budgets of a checkpointed run) stop ``waiting`` until a person raises the budget.
OnLimit = Literal["fail", "finish", "wait"]
_TOKEN_BUDGETS = ("max_input_tokens", "max_output_tokens", "max_total_tokens")
_MAX_SAFE_INT = 2**53 - 1
_MINIMUMS = {
    "max_turns": 1,
    "max_calls": 0,
    "max_decisions": 1,
    "max_depth": 0,
    "max_concurrency": 1,
}


@dataclass(frozen=True, kw_only=True, slots=True)
class Limits:
    """Hard bounds on one agent invocation (and, for shared budgets, its whole subtree).

    Raises:
        AgentDefinitionError: When a limit is not an integer (``bool`` included) in range.
    """

    max_turns: int = 20
    """Decisions of this agent, including the finishing one (at least 1)."""
    max_calls: int = 100
    """Tool calls admitted across the subtree, whole batches charged at once (at least 0)."""
    max_decisions: int = 100
    """Decision callbacks across the subtree (at least 1)."""
    max_depth: int = 4
    """Delegation edges below this agent; 0 allows handler tools only."""
    max_concurrency: int = 1
    """Active decision callbacks and leaf tool handlers across the subtree (at least 1)."""
    on_limit: OnLimit = "fail"
    """``fail``: an exhausted limit fails the run. ``finish``: decide is called once more with
    ``ctx.final=True`` and must finish (see docs/agents.md). ``wait``: an exhausted token or
    cost budget stops a checkpointed run ``waiting`` for a raised bound (docs/budgets.md)."""
    max_input_tokens: int | None = None
    """Input tokens of every model request across the subtree (``None``: unbounded)."""
    max_output_tokens: int | None = None
    """Output tokens of every model request across the subtree (``None``: unbounded)."""
    max_total_tokens: int | None = None
    """Input plus output tokens across the subtree (``None``: unbounded)."""
    max_cost_usd: Decimal | None = None
    """US dollars across the subtree, priced per model (``None``: unbounded). Accepts a
    ``Decimal``, an ``int`` or a decimal string; a float is refused as imprecise."""

    def __post_init__(self) -> None:
        if self.on_limit not in ("fail", "finish", "wait"):
            raise AgentDefinitionError(
                f"Agent limit on_limit must be 'fail', 'finish' or 'wait', not {self.on_limit!r}."
            )
        for name, minimum in _MINIMUMS.items():
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise AgentDefinitionError(
                    f"Agent limit {name} must be an integer, not {type(value).__name__}."
                )
            if not minimum <= value <= _MAX_SAFE_INT:
                raise AgentDefinitionError(
                    f"Agent limit {name} must be between {minimum} and {_MAX_SAFE_INT}."
                )
        for name in _TOKEN_BUDGETS:
            value = getattr(self, name)
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int):
                raise AgentDefinitionError(
                    f"Agent limit {name} must be an integer, not {type(value).__name__}."
                )
            if not 0 <= value <= _MAX_SAFE_INT:
                raise AgentDefinitionError(
                    f"Agent limit {name} must be between 0 and {_MAX_SAFE_INT}."
                )
        if self.max_cost_usd is not None:
            object.__setattr__(self, "max_cost_usd", usd(self.max_cost_usd, "max_cost_usd"))

    @property
    def budgeted(self) -> bool:
        """Whether any token or cost budget is set."""
        return (
            self.max_input_tokens is not None
            or self.max_output_tokens is not None
            or self.max_total_tokens is not None
            or self.max_cost_usd is not None
        )

    def budgets(self) -> dict[str, int | Decimal]:
        """The token and cost budgets that are set, by name."""
        out: dict[str, int | Decimal] = {}
        for name in BUDGET_NAMES:
            value = getattr(self, name)
            if value is not None:
                out[name] = value
        return out

    @classmethod
    def coerce(cls, value: Limits | Mapping[str, Any] | None) -> Limits:
        """``Limits`` from itself, a mapping of limit names, or ``None`` (the defaults)."""
        if value is None:
            return cls()
        if isinstance(value, Limits):
            return value
        if not isinstance(value, Mapping):
            raise AgentDefinitionError("Agent limits must be Limits(...) or a mapping.")
        known = {f.name for f in fields(cls)}
        for key in value:
            if key not in known:
                raise AgentDefinitionError(f"Unsupported agent limit: {key}")
        return cls(**value)

    def to_dict(self) -> dict[str, int | str]:
        """The limits as plain JSON data (snake_case); budgets only when set, a cost as its
        decimal string (so a definition without budgets keeps its round-2 form)."""
        out: dict[str, int | str] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if value is None:
                continue
            out[f.name] = usd_text(value) if f.name == "max_cost_usd" else value
        return out


def usd_text(amount: Decimal) -> str:
    """The canonical text of an amount: ``0.5`` for ``0.50``, ``100`` for ``1E+2``, so equal
    amounts give equal identities however they were written."""
    return format(amount.normalize(), "f")


def usd(value: Any, name: str) -> Decimal:
    """An amount of US dollars: a ``Decimal``, an ``int`` or a decimal string, finite and
    ``>= 0``; a float is refused (binary floats cannot hold most cents exactly)."""
    # Imported here: only budgets need decimals, and ``import tubeless`` stays without them.
    from decimal import Decimal, InvalidOperation

    if isinstance(value, bool | float):
        raise AgentDefinitionError(
            f"Agent limit {name} must be a Decimal, an int or a decimal string, not "
            f'{type(value).__name__} (floats are imprecise: write {name}: "{value!r}").'
        )
    if isinstance(value, Decimal):
        amount = value
    elif isinstance(value, int | str):
        try:
            amount = Decimal(value.strip() if isinstance(value, str) else value)
        except InvalidOperation:
            raise AgentDefinitionError(
                f"Agent limit {name} must be a decimal number such as '2.50'."
            ) from None
    else:
        raise AgentDefinitionError(
            f"Agent limit {name} must be a Decimal, an int or a decimal string, not "
            f"{type(value).__name__}."
        )
    if not amount.is_finite() or amount < 0:
        raise AgentDefinitionError(f"Agent limit {name} must be a finite amount >= 0.")
    return amount


class LimitReachedError(TubelessError):
    """An agent limit is exhausted.

    Attributes:
        limit: Which limit, e.g. ``max_calls``.
        bound: Its value.
        consumed: How much was used before this request.
        requested: How much this request needed.
        scope: The run id of the agent whose budget refused.
        calls: For ``max_turns``, how many calls the refused decision asked for.
    """

    code = AGENT_LIMIT_REACHED

    def __init__(
        self,
        *,
        limit: LimitName,
        bound: int | Decimal,
        consumed: int | Decimal,
        requested: int | Decimal,
        scope: str,
        calls: int | None = None,
        note: str | None = None,
    ) -> None:
        message = (
            f"Agent {limit}={bound} exceeded "
            f"(consumed={consumed}, requested={requested}, scope={scope})"
        )
        super().__init__(self.code, message if note is None else f"{message}; {note}")
        self.limit = limit
        self.bound = bound
        self.consumed = consumed
        self.requested = requested
        self.scope = scope
        self.calls = calls


class BudgetWaiting(LimitReachedError):
    """A checkpointed run with ``on_limit: wait`` stopped at an exhausted token or cost budget
    (status ``waiting``, CLI exit 8); ``tubeless checkpoints raise`` then the same run command
    resume it.

    Attributes:
        key: The checkpoint key to raise the budget of.
        route: The route of the agent whose budget ran out (a child agent's bound is raised
            with ``checkpoints raise ... --route ROUTE``), when known.
    """

    def __init__(self, reached: LimitReachedError, key: str, route: str | None = None) -> None:
        whose = "" if route is None else f" of agent {route}"
        super().__init__(
            limit=reached.limit,
            bound=reached.bound,
            consumed=reached.consumed,
            requested=reached.requested,
            scope=reached.scope,
            note=f"the run waits for a higher {reached.limit}{whose} (checkpoint {key!r})",
        )
        self.key = key
        self.route = route
