"""Agent limits and the error raised when one is exhausted."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any, Literal

from tubeless.errors import AGENT_LIMIT_REACHED, AgentDefinitionError, TubelessError

__all__ = ["LimitName", "LimitReachedError", "Limits", "OnLimit"]

LimitName = Literal["max_turns", "max_calls", "max_decisions", "max_depth", "max_concurrency"]
#: What an exhausted turn, decision or call budget does: fail the run, or ask for a final answer.
OnLimit = Literal["fail", "finish"]
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
    """``fail``: an exhausted turn, decision or call budget fails the run. ``finish``: decide is
    called once more with ``ctx.final=True`` and must finish (see docs/agents.md)."""

    def __post_init__(self) -> None:
        if self.on_limit not in ("fail", "finish"):
            raise AgentDefinitionError(
                f"Agent limit on_limit must be 'fail' or 'finish', not {self.on_limit!r}."
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
        """The limits as a plain dict (snake_case)."""
        return {f.name: getattr(self, f.name) for f in fields(self)}


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
        bound: int,
        consumed: int,
        requested: int,
        scope: str,
        calls: int | None = None,
    ) -> None:
        super().__init__(
            self.code,
            f"Agent {limit}={bound} exceeded "
            f"(consumed={consumed}, requested={requested}, scope={scope})",
        )
        self.limit = limit
        self.bound = bound
        self.consumed = consumed
        self.requested = requested
        self.scope = scope
        self.calls = calls
