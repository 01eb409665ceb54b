"""``tubeless mcp-serve`` over stdio, driven by the official MCP SDK client: the entries are
tools, a call runs its entry and reports progress, bad input and approvals are tool errors.

Each test starts one server process (a few seconds of imports) and asks it several things.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from mcp import Client, StdioServerParameters

from tests.fixtures.cli import tubeless

ROOT = Path(__file__).parents[3]
SCRIPTED = ROOT / "projects" / "scripted-agent.yaml"
APPROVALS = ROOT / "projects" / "approvals.yaml"


def _server(project: Path, *extra: str) -> StdioServerParameters:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    args = ["-m", "tubeless", "mcp-serve", str(project), *extra]
    return StdioServerParameters(command=sys.executable, args=args, env=env, cwd=str(ROOT))


@pytest.mark.slow  # starts a server process (imports take seconds on a busy machine)
async def test_tools_are_the_entries_a_call_runs_one_and_bad_input_is_a_tool_error(
    tmp_path: Path,
) -> None:
    progress: list[tuple[float, str | None]] = []

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append((value, message))

    checkpoints = tmp_path / "runs.sqlite"
    async with Client(_server(SCRIPTED, "--checkpoints", str(checkpoints))) as client:
        listed = await client.list_tools()
        result = await client.call_tool(
            "scripted-agent", {"question": "hi there"}, progress_callback=on_progress
        )
        refused = await client.call_tool("scripted-agent", {"question": ["not", "text"]})
        unknown = await client.call_tool("no-such-entry", {})
        after = await client.call_tool("scripted-agent", {"question": "still here"})

    (tool,) = listed.tools
    assert tool.name == "scripted-agent"
    assert tool.description == "Counts characters and uppercases words with scripted decisions."
    assert tool.input_schema["type"] == "object"
    assert set(tool.input_schema["properties"]) == {"question"}

    assert not result.is_error
    assert result.structured_content == {"answer": "8 characters; HI; THERE"}
    messages = [message for _, message in progress]
    assert messages[0] == "run running"
    assert "turn 1: decide started" in messages
    assert "turn 1: call 'length' to tool 'count'" in messages
    assert messages[-1] == "run completed"
    assert [value for value, _ in progress] == list(range(1, len(progress) + 1))
    assert checkpoints.exists()  # the runs were checkpointed there

    assert refused.is_error
    assert refused.structured_content is not None
    assert refused.structured_content["error"]["code"] == "TUBELESS_OPTIONS_VALIDATION_FAILED"
    assert refused.content[0].text.startswith("TUBELESS_OPTIONS_VALIDATION_FAILED: ")
    assert unknown.is_error
    assert unknown.content[0].text.startswith("TUBELESS_SERVE_NOT_FOUND: ")
    assert not after.is_error  # the server lives on


@pytest.mark.slow
async def test_a_call_needing_approval_fails_with_the_approval_code_without_elicitation() -> None:
    async with Client(_server(APPROVALS)) as client:
        listed = await client.list_tools()
        result = await client.call_tool("approvals", {"to": "ops@elsewhere.org"})
    assert set(listed.tools[0].input_schema["properties"]) == {"title", "to"}
    assert result.is_error
    assert result.structured_content is not None
    assert result.structured_content["error"]["code"] == "TUBELESS_APPROVAL_REQUIRED"
    assert "'publish'" in result.content[0].text


def test_a_missing_project_is_one_error_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    outcome = tubeless(capsys, "mcp-serve", tmp_path / "missing.yaml")
    assert outcome.code == 2
    assert outcome.out == ""  # stdout is the protocol's
    assert outcome.err.startswith("error: ")
    assert len(outcome.err.splitlines()) == 1
