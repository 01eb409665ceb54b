"""YAML ``replay:`` and ``reconcile:`` on tools compile to define_tool / pipeline_tool's."""

from __future__ import annotations

import asyncio
from pathlib import Path

from tests.fixtures.processes import write_project
from tubeless import load_project
from tubeless.durable import MemoryCheckpoints

BODY = """\
    version: 1
    project: {id: p}
    python_path: [.]
    agents:
      child:
        input: {schema: {type: string}}
        result: {schema: {}}
        initial_state: "helpers:initial"
        decide: "helpers:decide"
        tools:
          safe_one: {run: "helpers:tool", description: Reads., replay: safe,
                     input: {schema: {type: string}}, output: {schema: {type: string}}}
          unsafe_one: {run: "helpers:tool", description: Writes., reconcile: "helpers:reconcile",
                       input: {schema: {type: string}}, output: {schema: {type: string}}}
      parent:
        input: {schema: {type: string}}
        result: {schema: {}}
        initial_state: "helpers:initial"
        decide: "helpers:decide"
        tools:
          sub: {agent: child, description: Delegates.}
          sub_unsafe: {agent: child, description: Delegates., replay: unsafe}
    """
MODULE = """\
    def initial(value):
        return None

    def decide(state, ctx):
        return {"kind": "finish", "result": ctx.execution["idempotency_key"]}

    def tool(text, ctx):
        return text

    def reconcile(text, ctx):
        return "reconciled"
    """


def test_replay_and_reconcile_reach_the_tools(tmp_path: Path) -> None:
    project = load_project(write_project(tmp_path, BODY, MODULE))
    child = project.get("child").steps[0].capabilities
    assert [c.id for c in child] == ["child/tool/safe_one", "child/tool/unsafe_one"]
    metadata = {
        entry: {c["name"]: c["replay"] for c in project.get(entry).steps[0].agent["capabilities"]}
        for entry in ("child", "parent")
    }
    assert metadata == {
        "child": {"safe_one": "safe", "unsafe_one": "unsafe"},
        "parent": {"sub": "safe", "sub_unsafe": "unsafe"},
    }


def test_a_project_agent_runs_with_checkpoints(tmp_path: Path) -> None:
    project = load_project(write_project(tmp_path, BODY, MODULE))
    run = asyncio.run(
        project.get("child").run("x", checkpoints=MemoryCheckpoints(), checkpoint_key="k")
    )
    assert run.value == "k/child/1"
