"""MCP servers in YAML projects and on the command line: the same agent as in Python, commands
that look (plan, inspect, graph, validate) start and contact nothing, ``inspect --connect``
does and says so, and the shipped example runs with ``tubeless run``."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

import pytest

from tests.fixtures.guards import cli
from tests.fixtures.mcp_servers import SERVER, START_GUARD_S
from tests.fixtures.processes import finish, start_run
from tubeless.errors import AgentDefinitionError
from tubeless.mcp import McpServer, mcp_tools
from tubeless.project import load_project

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "projects" / "mcp-notes.yaml"

PROJECT = """\
version: 1
project: {{id: mcp-look, default: looker}}
python_path: [{root}]
mcp_servers:
  local:
    command: [{python}, {server}, stdio]
    env: {{MCP_TEST_LOG: {log}}}
  remote:
    url: http://127.0.0.1:9/mcp
    headers_env: {{Authorization: MCP_LOOK_TOKEN_NOT_SET}}
agents:
  looker:
    input: {{schema: examples.text:Question}}
    result: {{schema: examples.text:Answer}}
    initial_state: examples.mcp_notes:initial_state
    decide: examples.mcp_notes:decide
    tools:
      t: {{mcp: local, include: [echo, shout]}}
      r: {{mcp: remote, include: [anything]}}
"""


def _project(tmp_path: Path, text: str = PROJECT) -> tuple[Path, Path]:
    log = tmp_path / "server.log"
    path = tmp_path / "project.yaml"
    path.write_text(
        text.format(root=ROOT, python=sys.executable, server=SERVER, log=log), encoding="utf-8"
    )
    return path, log


def test_the_example_project_builds_the_same_agent_as_the_python_example() -> None:
    from examples.mcp_notes import mcp_notes

    assert load_project(EXAMPLE).entry().identity == mcp_notes.identity


def test_tubeless_run_runs_the_example_project_with_its_mcp_server() -> None:
    code, out, err = cli("run", EXAMPLE, "--question", "hello tubeless")

    answer = {"answer": "note 1 of 1; notes with 'hello': hello tubeless"}
    assert (code, json.loads(out)) == (0, answer)
    assert "ok notes__add_note [add]" in err


@pytest.mark.parametrize(
    "command",
    [
        pytest.param(["plan"], id="plan"),
        pytest.param(["inspect"], id="inspect"),
        pytest.param(["inspect", "--json"], id="inspect-json"),
        pytest.param(["graph"], id="graph"),
        pytest.param(["graph", "--format", "json"], id="graph-json"),
        pytest.param(["validate", "--resolve"], id="validate"),
        pytest.param(["list"], id="list"),
    ],
)
def test_commands_that_look_start_no_server_and_contact_none(
    command: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The stdio server would log its pid on start; the HTTP one listens nowhere and its header
    variable is unset, so contacting it would fail. They do not need the SDK either."""
    monkeypatch.setitem(sys.modules, "mcp", None)
    path, log = _project(tmp_path)

    code, out, err = cli(*command, path)

    assert (code, err) == (0, "")
    assert not log.exists()
    if command[0] in ("plan", "inspect", "graph"):
        assert "t__echo" in out and "r__anything" in out


def test_inspect_says_mcp_tools_are_described_when_a_run_connects(tmp_path: Path) -> None:
    path, _ = _project(tmp_path)

    code, out, _ = cli("inspect", path)

    assert code == 0
    assert (
        "MCP: tools of local, remote are described by their server when a run connects "
        "(inspect --connect shows them)"
    ) in out
    assert "  t__echo (mcp local)\n    description: MCP tool 'echo' of server 'local'" in out


def test_inspect_connect_shows_the_live_descriptors_and_says_so(tmp_path: Path) -> None:
    only_local = PROJECT.replace("      r: {{mcp: remote, include: [anything]}}\n", "")
    path, log = _project(tmp_path, only_local)

    code, out, err = cli("inspect", path, "--connect")

    assert (code, err) == (0, "")
    assert "MCP: connected to local for the live descriptions and input schemas below" in out
    assert (
        "  t__echo (mcp local)\n"
        "    description: Echoes the text back as structured content.\n"
        '    input: {"type":"object","properties":{"text":{"type":"string"}},"required":["text"]}'
    ) in out
    assert log.read_text().startswith("pid ")

    code, out, _ = cli("inspect", path, "--connect", "--json")
    capabilities = json.loads(out)["agent"]["capabilities"]
    assert capabilities[0]["mcp"] == {"server": "local", "tool": "echo", "live": True}
    assert capabilities[0]["description"] == "Echoes the text back as structured content."


def test_a_run_needs_the_header_variable_and_names_it(tmp_path: Path) -> None:
    path, _ = _project(tmp_path)

    code, _, err = cli("run", path, "--question", "x")

    assert code == 6
    assert (
        "MCP server 'remote': header 'Authorization' needs the environment variable "
        "MCP_LOOK_TOKEN_NOT_SET, which is not set."
    ) in err
    assert "TUBELESS_MCP_CONNECTION_FAILED" in err


def test_a_tool_naming_an_unknown_server_is_a_document_error(tmp_path: Path) -> None:
    path, _ = _project(tmp_path, PROJECT.replace("{{mcp: remote,", "{{mcp: elsewhere,"))

    code, out, err = cli("validate", path)

    assert code == 4
    assert (
        "/agents/looker/tools/r/mcp: unknown MCP server 'elsewhere'; this project's "
        "mcp_servers: 'local', 'remote'"
    ) in out + err


@pytest.mark.parametrize(
    ("make", "message"),
    [
        pytest.param(
            lambda: McpServer(name="x", command=("a",), url="http://h"),
            "MCP server 'x' needs exactly one of command and url.",
            id="command-and-url",
        ),
        pytest.param(
            lambda: McpServer.http("x", "ftp://h"),
            "MCP server 'x': url must start with http:// or https://.",
            id="url-scheme",
        ),
        pytest.param(
            lambda: McpServer.stdio("x", ["a"], timeout_s=0),
            "MCP server 'x': timeout_s must be a number above 0.",
            id="timeout",
        ),
        pytest.param(
            lambda: mcp_tools(McpServer.stdio("x", ["a"]), []),
            "mcp_tools for server 'x' needs a nonempty list of tool names to include.",
            id="empty-include",
        ),
        pytest.param(
            lambda: mcp_tools(McpServer.stdio("x", ["a"]), ["a.b", "a_b"]),
            "Server 'x': include names tool 'a_b' twice (as 'x__a_b').",
            id="same-registered-name",
        ),
    ],
)
def test_invalid_servers_and_includes_are_definition_errors(make: object, message: str) -> None:
    with pytest.raises(AgentDefinitionError) as caught:
        make()  # type: ignore[operator]
    assert (caught.value.code, caught.value.message) == (
        "TUBELESS_AGENT_INVALID_DEFINITION",
        message,
    )


@pytest.mark.slow
def test_sigint_during_an_mcp_call_cancels_it_at_the_server_and_stops_the_server(
    tmp_path: Path,
) -> None:
    """``tubeless run`` under SIGINT: exit 7, the server saw notifications/cancelled, and its
    process is gone once the command has exited."""
    module = tmp_path / "hang_decide.py"
    module.write_text(
        "def decide(state, ctx):\n"
        "    return {'kind': 'continue', 'calls': [{'id': 'h', 'tool': 't__hang', 'input': {}}]}\n",
        encoding="utf-8",
    )
    text = (
        PROJECT.replace("python_path: [{root}]", f"python_path: [{{root}}, {tmp_path}]")
        .replace("examples.mcp_notes:decide", "hang_decide:decide")
        .replace("include: [echo, shout]", "include: [hang]")
        .replace("      r: {{mcp: remote, include: [anything]}}\n", "")
    )
    path, log = _project(tmp_path, text)
    process = start_run(path, "--question", "x")
    deadline = time.monotonic() + START_GUARD_S  # tubeless and the server start first
    while "call hang" not in (log.read_text() if log.exists() else ""):
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, "the server never got the call"
        time.sleep(0.02)

    process.send_signal(signal.SIGINT)
    _, err = finish(process)

    assert process.returncode == 7, err
    lines = log.read_text().splitlines()
    assert [line for line in lines if line.startswith("cancelled ")]
    pid = int(lines[0].split()[1])
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_inspect_connect_exits_2_naming_a_server_it_cannot_use(tmp_path: Path) -> None:
    missing = PROJECT.replace("command: [{python}, {server}, stdio]", "command: [{server}.absent]")
    missing = missing.replace("      r: {{mcp: remote, include: [anything]}}\n", "")
    path, _ = _project(tmp_path, missing)

    code, out, err = cli("inspect", path, "--connect")

    assert (code, out) == (2, "")
    assert err.startswith(
        "error: TUBELESS_MCP_CONNECTION_FAILED: MCP server 'local' could not be started "
        "(FileNotFoundError"
    )
