"""The agent harness: tools, decisions, limits and the bounded decide → calls → reduce loop.

An agent is compiled into ordinary pipelines (``_agent.define_agent``)::

    pipeline <id>                 one step "agent", finalized by it              (_agent_step)
      step "agent"                an AgentStep: iterate_pipeline(<id>/turn, max_turns)
    pipeline <id>/turn            decide → calls → reduce, finalized by reduce   (_turn)
    pipeline <id>/tool/<name>     one per handler tool: one step "tool"          (_agent)

A pipeline tool runs its own pipeline (or agent) as the call's child run instead.

One turn, with the module that owns each arrow::

    AgentStep             an Invocation: route, Scope, approver, hooks  _agent_step, _invocation
      iterate → turn      one child run per turn (lean path untraced)        pipeline
        decide
          ask             charge max_decisions; decide() under a permit      _turn
          parse_decision  untrusted data → Finish | Continue                 _decisions
          finish          validate the result: the loop ends                 _turn
          admit           max_turns, max_calls; validate arguments           _turn, _prepare
        calls             charge max_calls; dispatch, one child run a call   _turn, _dispatch
          approvals       predicates, then the approver, before gated calls  _approvals
          tool handler    under a permit of every budget of the chain        _agent, _scope
        reduce            the reducer; commit the state → the next turn      _turn, _state

Traces: every ``agent.*`` attribute and the calls' progress rows go through one recorder
(``_trace.agent_trace``); untraced runs get a null recorder that builds nothing.

Checkpoints (``_durable``), cassettes (``_tape``) and the trace (``_trace``) hear the turn at its
commit points through one ``TurnHooks`` protocol (``_hooks``, which documents the points and
their order); a plain run gets the null hooks, which do nothing.
"""

from __future__ import annotations

from tubeless.agent._agent import define_agent
from tubeless.agent._approvals import (
    ApprovalError,
    ApprovalWaiting,
    RecordedApprovals,
    call_digest,
)
from tubeless.agent._decisions import DecisionError
from tubeless.agent._limits import BudgetWaiting, LimitReachedError, Limits
from tubeless.agent._state import StateError
from tubeless.agent._tools import Tool, ToolContext, ToolError, define_tool, pipeline_tool
from tubeless.agent._turn import DecisionContext
from tubeless.agent._usage import NO_USAGE, Reservation, Usage

__all__ = [
    "NO_USAGE",
    "ApprovalError",
    "ApprovalWaiting",
    "BudgetWaiting",
    "DecisionContext",
    "DecisionError",
    "LimitReachedError",
    "Limits",
    "Price",
    "PriceUnknownError",
    "RecordedApprovals",
    "Reservation",
    "StateError",
    "Tool",
    "ToolContext",
    "ToolError",
    "Usage",
    "call_digest",
    "define_agent",
    "define_tool",
    "pipeline_tool",
]


def __getattr__(name: str) -> object:
    """``Price`` and ``PriceUnknownError``, imported when first named (they need decimals)."""
    if name in ("Price", "PriceUnknownError"):
        from tubeless.agent import _pricing

        return getattr(_pricing, name)
    raise AttributeError(f"module 'tubeless.agent' has no attribute {name!r}")
