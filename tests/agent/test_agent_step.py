"""Issue 31 item 4: ``define_agent``'s entry is one class, :class:`AgentStep`, that carries the
agent's spec, turn pipeline, limits and sourced (MCP) tools as data a reader can look at, rather
than closures and an attribute set on a function."""

from __future__ import annotations

import sys
from typing import Any

from tubeless import Limits, define_agent, define_tool
from tubeless.agent._agent_step import AgentStep, remotes
from tubeless.mcp import McpServer, mcp_tools
from tubeless.pipeline import Pipeline


def _agent(tools: dict[str, Any]) -> Pipeline:
    return define_agent(
        id="helper",
        input_schema=dict,
        result_schema=int,
        initial_state=lambda _: {},
        decide=lambda state, ctx: {"kind": "finish", "result": 1},
        tools=tools,
        limits={"max_turns": 3, "max_calls": 5},
    )


def test_the_agent_step_runs_as_an_agent_step_with_its_spec_turn_pipeline_and_limits() -> None:
    echo = define_tool(description="Echo.", input_schema=str, output_schema=str, run=str)
    pipeline = _agent({"echo": echo})
    (step,) = pipeline.steps
    agent = step.run
    assert isinstance(agent, AgentStep)
    assert (agent.spec.id, agent.turn.id, agent.pipeline) == ("helper", "helper/turn", pipeline)
    assert agent.limits == Limits(max_turns=3, max_calls=5)
    assert sorted(agent.spec.registry) == ["echo"]
    assert dict(agent.remotes) == {} == dict(remotes(step))


def test_sourced_tools_are_the_agent_steps_remotes_not_an_attribute_of_a_function() -> None:
    server = McpServer.stdio("notes", [sys.executable, "-c", "pass"])  # never started here
    pipeline = _agent(mcp_tools(server, ["add_note"]))
    (step,) = pipeline.steps
    assert isinstance(step.run, AgentStep)
    found = remotes(step)
    assert list(found) == ["notes__add_note"]
    assert (found["notes__add_note"].source, found["notes__add_note"].name) == (server, "add_note")
    assert not hasattr(step.run, "tubeless_remotes")


async def test_an_agent_step_runs_its_turns() -> None:
    run = await _agent({}).run({})
    assert (run.status, run.value) == ("completed", 1)
