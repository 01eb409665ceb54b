"""Agents for the protocol tests, defined in Python: one that hangs in a tool until cancelled,
one whose input is a single required string (what AG-UI takes from a user message), and one
that runs into its ``max_turns`` limit."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from tubeless import Schema, define_agent, define_tool
from tubeless.project import Project


async def _hang(text: str, ctx: Any) -> str:
    await asyncio.sleep(3600)  # cancelled by the test long before
    return text


def _decide(state: Any, ctx: Any) -> dict[str, Any]:
    if state["outcomes"] is None:
        return {"kind": "continue", "calls": [{"id": "wait", "tool": "hang", "input": "x"}]}
    return {"kind": "finish", "result": {"echo": state["text"]}}


def _reduce(state: Any, outcomes: Any) -> dict[str, Any]:
    return {**state, "outcomes": list(outcomes)}


def _echo_decide(state: Any, ctx: Any) -> dict[str, Any]:
    return {"kind": "finish", "result": {"echo": state["text"]}}


_TEXT = Schema.json(
    {
        "type": "object",
        "properties": {"text": {"type": "string"}},
        "required": ["text"],
        "additionalProperties": False,
    }
)

hanging = define_agent(
    id="hanging",
    description="Calls a tool that never answers.",
    input_schema=_TEXT,
    result_schema=Schema.json({"type": "object"}),
    initial_state=lambda value: {"text": value["text"], "outcomes": None},
    decide=_decide,
    reduce=_reduce,
    tools={
        "hang": define_tool(
            description="Never answers.",
            input_schema=Schema.json({"type": "string"}),
            output_schema=Schema.json({"type": "string"}),
            run=_hang,
        )
    },
)

echo = define_agent(
    id="echo",
    description="Answers its text.",
    implementation_version="echo-2",
    input_schema=_TEXT,
    result_schema=Schema.json({"type": "object"}),
    initial_state=lambda value: {"text": value["text"]},
    decide=_echo_decide,
)

looping = define_agent(
    id="looping",
    description="Calls its tool turn after turn: its max_turns limit ends it.",
    input_schema=_TEXT,
    result_schema=Schema.json({"type": "object"}),
    initial_state=lambda value: {"text": value["text"], "outcomes": None},
    decide=lambda state, ctx: {
        "kind": "continue",
        "calls": [{"id": f"again-{ctx.turn}", "tool": "echo", "input": state["text"]}],
    },
    reduce=_reduce,
    limits={"max_turns": 2},
    tools={
        "echo": define_tool(
            description="Answers its text.",
            input_schema=Schema.json({"type": "string"}),
            output_schema=Schema.json({"type": "string"}),
            run=lambda text, ctx: text,
        )
    },
)


def agents_project(folder: Path) -> Project:
    """A project of both agents (``echo`` is the default entry)."""
    return Project(
        id="protocol-tests",
        path=folder / "protocol-tests.yaml",
        name="Protocol tests",
        description="Agents for the protocol tests.",
        default="echo",
        agents={"echo": echo, "hanging": hanging, "looping": looping},
    )
