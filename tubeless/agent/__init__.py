"""The agent harness: tools, decisions, limits and the bounded decide → calls → reduce loop."""

from __future__ import annotations

from tubeless.agent._agent import define_agent
from tubeless.agent._decisions import DecisionError
from tubeless.agent._limits import LimitReachedError, Limits
from tubeless.agent._state import StateError
from tubeless.agent._tools import Tool, ToolContext, ToolError, define_tool, pipeline_tool
from tubeless.agent._turn import DecisionContext

__all__ = [
    "DecisionContext",
    "DecisionError",
    "LimitReachedError",
    "Limits",
    "StateError",
    "Tool",
    "ToolContext",
    "ToolError",
    "define_agent",
    "define_tool",
    "pipeline_tool",
]
