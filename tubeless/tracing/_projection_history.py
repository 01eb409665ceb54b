"""The agent history of a projected run: :class:`AgentHistory`, its turns and their calls.

:func:`tubeless.tracing._projection_agents.agent_history` builds them;
:mod:`tubeless.tracing.projection` re-exports the public ones.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from tubeless.tracing.projection import RunStatus

__all__ = ["AgentHistory", "CallNode", "CallStatus", "Decision", "Termination", "TurnNode"]

Termination = Literal["running", "finish", "completed", "limit", "cancelled", "failed", "skipped"]
CallStatus = Literal["completed", "failed", "cancelled", "running", "unknown"]
Decision = Literal["continue", "finish"]


@dataclass(frozen=True, kw_only=True, slots=True)
class CallNode:
    """One dispatched (or recorded) tool call of a turn."""

    call_id: str
    """The decision's call id (the call run's ``itemKey``)."""
    tool: str | None
    """The registry alias from ``agent.tool``; ``None`` when nothing recorded it."""
    run_id: str | None
    """The call's run, ``None`` for a call recorded but never started."""
    pipeline_id: str | None
    """The pipeline the call ran."""
    status: CallStatus
    """The call run's status, ``"unknown"`` without a run."""
    duration_ms: float | None
    """The call run's duration, when it completed."""
    error_code: str | None
    """The call run's first error code (``TUBELESS_STEP_FAILED`` for a handler ``ToolError``)."""
    source_code: str | None
    """The original code behind ``error_code`` (the ``ToolError`` code, e.g. ``NOT_FOUND``)."""
    parent_attempt_id: str | None
    """The turn's ``calls`` attempt that dispatched the call, from ``agent.parentAttemptId``."""
    child_agent_run_ids: tuple[str, ...]
    """Agent runs started by this call (a subagent behind a pipeline tool); their trees hang
    under the call run in ``RunTree.children``."""

    def to_dict(self) -> dict[str, Any]:
        """The call as snake_case JSON-ready data."""
        return {
            "call_id": self.call_id,
            "tool": self.tool,
            "run_id": self.run_id,
            "pipeline_id": self.pipeline_id,
            "status": self.status,
            "duration_ms": self.duration_ms,
            "error_code": self.error_code,
            "source_code": self.source_code,
            "parent_attempt_id": self.parent_attempt_id,
            "child_agent_run_ids": list(self.child_agent_run_ids),
        }


@dataclass(frozen=True, kw_only=True, slots=True)
class TurnNode:
    """One turn (one iteration of the agent step)."""

    run_id: str
    """The turn run."""
    index: int | None
    """The turn number, from 1 (``iteration.index``)."""
    status: RunStatus
    """The turn run's status."""
    decision: Decision | None
    """What ``decide`` returned, from ``agent.decision``."""
    call_count: int | None
    """Calls in the decision (0 for finish)."""
    calls_admitted: int | None
    """Calls the agent had admitted up to and including this turn."""
    state_version: int | None
    """The state version the turn started from."""
    next_state_version: int | None
    """The state version after ``reduce``; ``None`` when the turn did not reduce."""
    error_code: str | None
    """The turn run's first error code."""
    calls: tuple[CallNode, ...]
    """The turn's calls, in start order."""

    def to_dict(self) -> dict[str, Any]:
        """The turn as snake_case JSON-ready data."""
        return {
            "run_id": self.run_id,
            "index": self.index,
            "status": self.status,
            "decision": self.decision,
            "call_count": self.call_count,
            "calls_admitted": self.calls_admitted,
            "state_version": self.state_version,
            "next_state_version": self.next_state_version,
            "error_code": self.error_code,
            "calls": [call.to_dict() for call in self.calls],
        }


@dataclass(frozen=True, kw_only=True, slots=True)
class AgentHistory:
    """How an agent run went, turn by turn."""

    step_id: str
    """The agent step of the run's plan."""
    termination: Termination
    """``running`` (no ``pipeline.completed`` yet), ``finish`` (completed by a finishing turn),
    ``completed`` (completed without a recorded finish), ``limit`` (a limit stopped it),
    ``cancelled``, ``failed``, or ``skipped`` (the agent step did not run)."""
    limits: Mapping[str, int] | None
    """The agent's limits (``max_turns``, ...) from the definition snapshot, when recorded."""
    capabilities: tuple[str, ...] | None
    """The registered tool names from the definition snapshot, when recorded."""
    turns: tuple[TurnNode, ...]
    """The turns, by index."""

    def to_dict(self) -> dict[str, Any]:
        """The history as snake_case JSON-ready data."""
        return {
            "step_id": self.step_id,
            "termination": self.termination,
            "limits": None if self.limits is None else dict(self.limits),
            "capabilities": None if self.capabilities is None else list(self.capabilities),
            "turns": [turn.to_dict() for turn in self.turns],
        }
