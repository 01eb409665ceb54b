"""The types a turn hands around: its spec, its input, and a tool's approval policy.

A leaf of the agent package: it imports no other module of it at run time, so the modules the
turn calls (dispatch, approvals, the hooks and their members) and the tool definitions can name
these types without importing the turn (``_turn.py``), which imports them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, TypeAlias

if TYPE_CHECKING:
    from tubeless.agent._invocation import Invocation
    from tubeless.agent._limits import Limits
    from tubeless.agent._prepare import CompiledTool
    from tubeless.agent._tools import ToolContext
    from tubeless.frozen import FrozenDict
    from tubeless.schema import Schema

__all__ = ["ApprovalPolicy", "TurnInput", "TurnSpec"]

#: ``define_tool(approval=...)``: never, always, or ``predicate(input, ctx) -> bool``.
ApprovalPolicy: TypeAlias = 'Literal["never", "always"] | Callable[[Any, ToolContext], Any]'


@dataclass(frozen=True, kw_only=True, slots=True)
class TurnSpec:
    """Everything the turn steps need about their agent (fixed at definition time)."""

    id: str
    decide: Callable[..., Any]
    dry_run: Callable[..., Any] | None
    reduce: Callable[..., Any] | None
    result_schema: Schema
    result_json_schema: FrozenDict
    capabilities: tuple[FrozenDict, ...]
    registry: Mapping[str, CompiledTool]
    limits: Limits
    approvals: bool = False
    """Whether any tool may need approval (otherwise batches skip that check entirely)."""
    pricing: Mapping[str, Any] | None = None
    """Model prices for cost budgets, by ``<provider>:<model>`` (``_pricing.price_table``)."""


@dataclass(slots=True)
class TurnInput:
    """The iteration state handed from one turn to the next (never validated or traced).

    A slotted class rather than a named tuple: a turn reads its fields some forty times, and
    slot reads are the interpreter's fast attribute path (W1: 3.3 % fewer instructions). Nothing
    changes one after it is made (not frozen: a frozen dataclass is slower to build).
    """

    state: Any
    turn: int
    state_version: int
    calls: int
    """Calls this agent invocation admitted before this turn."""
    invocation: Invocation
    """What every turn of the invocation shares (route, scope, approver, tools, hooks)."""

    @property
    def agent_run_id(self) -> str:
        """The agent run's id (its invocation's)."""
        return self.invocation.run_id
