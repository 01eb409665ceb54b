"""MCP as the reference servers speak it (tests/mcp/mcp_wire_server.py, an SDK server sending
the same blocks and schemas): every content block kept, input schemas read in their own
dialect, unusable tools refused by name, arguments sent as chosen, output schemas enforced as
outcomes, and failures that say what happened."""

from __future__ import annotations

import asyncio
import base64
import gzip
import http.server
import json
import socket
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.guards import cli
from tests.fixtures.mcp_servers import HANG_GUARD_S, START_GUARD_S, one_turn_agent, source_codes
from tests.fixtures.processes import cli_env
from tests.mcp.mcp_wire_server import PNG, WAV
from tubeless.errors import AGENT_INVALID_DECISION
from tubeless.mcp import MCP_CONNECTION_FAILED, MCP_TOOL_UNUSABLE, McpError, McpServer

ROOT = Path(__file__).resolve().parents[2]
WIRE = Path(__file__).parent / "mcp_wire_server.py"


def _server(log: Path, *, legacy: bool = False, **options: Any) -> McpServer:
    env = {"MCP_TEST_LOG": str(log), **({"MCP_WIRE_LEGACY": "1"} if legacy else {})}
    return McpServer.stdio("w", [sys.executable, str(WIRE)], env=env, **options)


def _calls(log: Path) -> list[str]:
    lines = log.read_text().splitlines() if log.exists() else []
    return [line for line in lines if line.startswith("call ")]


def _run(server: McpServer, include: list[str], calls: list[tuple[str, Any]]) -> Any:
    return asyncio.run(one_turn_agent(server, include, calls, []).run({}))


def _values(run: Any) -> list[Any]:
    assert run.status == "completed", [e.format() for e in run.errors]
    return [o["value"] if o["ok"] else o["error"] for o in run.value]


# -- 1. every content block is kept ------------------------------------------------------------


def test_non_text_blocks_are_kept_in_the_value_in_their_documented_form(tmp_path: Path) -> None:
    tools = [
        "get-tiny-image",
        "get-resource-links",
        "gzip-file-as-resource",
        "get-resource-reference",
        "audio-sandwich",
        "structured-and-image",
    ]
    run = _run(_server(tmp_path / "log"), tools, [(f"w__{t}", {}) for t in tools])

    image = {"type": "image", "mime_type": "image/png", "data": PNG}
    link = [
        {
            "type": "resource_link",
            "uri": f"test://static/resource/{n}",
            "name": f"Resource {n}",
            "description": f"Resource {n}: plain text",
            "mime_type": "text/plain",
        }
        for n in (1, 2)
    ]
    links_text = "Here are 2 resource links to resources available in this server:"
    blob = {
        "type": "resource",
        "uri": "file:///hello.txt.gz",
        "mime_type": "application/gzip",
        "data": base64.b64encode(gzip.compress(b"hello world", mtime=0)).decode(),
    }
    embedded = {
        "type": "resource",
        "uri": "test://static/resource/1",
        "mime_type": "text/plain",
        "text": "Resource 1 says hi",
    }
    assert _values(run) == [
        {
            "text": "This is a tiny image:\nThe image above is the MCP tiny image.",
            "content": [
                {"type": "text", "text": "This is a tiny image:"},
                image,
                {"type": "text", "text": "The image above is the MCP tiny image."},
            ],
        },
        {"text": links_text, "content": [{"type": "text", "text": links_text}, *link]},
        {"text": "", "content": [blob]},
        {"text": "Resource 1:", "content": [{"type": "text", "text": "Resource 1:"}, embedded]},
        {
            "text": "before\nafter",
            "content": [
                {"type": "text", "text": "before"},
                {"type": "audio", "mime_type": "audio/wav", "data": WAV},
                {"type": "text", "text": "after"},
            ],
        },
        {
            "text": '{"width": 1}',
            "structured_content": {"width": 1},
            "content": [{"type": "text", "text": '{"width": 1}'}, image],
        },
    ]


def test_a_result_past_the_byte_bound_is_a_protocol_error_naming_the_bound(
    tmp_path: Path,
) -> None:
    server = _server(tmp_path / "log", max_result_bytes=2000)

    run = _run(server, ["big-image", "get-tiny-image"], [("w__big-image", {})])

    [outcome] = run.value
    assert outcome == {
        "id": "c0",
        "tool": "w__big-image",
        "ok": False,
        "error": {
            "code": "MCP_PROTOCOL_ERROR",
            "message": "The result of tool 'big-image' is 4074 bytes as JSON, over the bound "
            "of 2000 bytes (max_result_bytes).",
        },
    }


def test_max_result_bytes_must_be_a_positive_int() -> None:
    from tubeless.errors import AgentDefinitionError

    with pytest.raises(AgentDefinitionError) as caught:
        McpServer.stdio("w", ["x"], max_result_bytes=0)
    assert caught.value.message == "MCP server 'w': max_result_bytes must be an integer above 0."


# -- 2. input schemas in their own dialect; unusable tools refused by name ---------------------


@pytest.mark.slow
@pytest.mark.parametrize(
    ("tool", "good", "bad"),
    [
        pytest.param("tuple", {"pair": ["a", 1]}, {"pair": ["a", "b"]}, id="draft-07-tuple"),
        pytest.param("draft4", {"count": 1}, {"count": 0}, id="draft-04-exclusive-minimum"),
        pytest.param("dependencies", {"a": "x", "b": "y"}, {"a": "x"}, id="draft-07-deps"),
        pytest.param("local-ref", {"x": "ab"}, {"x": "a"}, id="local-ref"),
    ],
)
def test_input_schemas_are_read_in_the_dialect_their_schema_names(
    tmp_path: Path, tool: str, good: Any, bad: Any
) -> None:
    log = tmp_path / "log"
    ok = _run(_server(log), [tool], [(f"w__{tool}", good)])
    assert _values(ok) == [{"received": good}]

    refused = _run(_server(log), [tool], [(f"w__{tool}", bad)])
    assert refused.status == "failed"
    assert AGENT_INVALID_DECISION in source_codes(refused)
    assert len(_calls(log)) == 1


UNUSABLE = [
    pytest.param(
        "no-type",
        False,
        "MCP server 'w' offers tool 'no-type', which cannot be called: its input schema has no "
        "type 'object' at its root.",
        id="no-type",
    ),
    pytest.param(
        "bad-schema",
        False,
        "MCP server 'w' offers tool 'bad-schema', which cannot be called: its input schema is "
        "not valid under its own dialect (draft 2020-12) at /properties/x/type.",
        id="invalid-schema",
    ),
    pytest.param(
        "remote-ref",
        False,
        "MCP server 'w' offers tool 'remote-ref', which cannot be called: its input schema has "
        "a $ref outside itself ('https://schemas.invalid/x.json'), and remote schemas are never "
        "fetched.",
        id="remote-ref",
    ),
    pytest.param(
        "long-task",
        True,
        "MCP server 'w' offers tool 'long-task', which cannot be called: it requires "
        "task-augmented execution (execution.taskSupport: required), which tubeless does not "
        "use.",
        id="task-required",
    ),
]


@pytest.mark.parametrize(("tool", "legacy", "message"), UNUSABLE)
def test_an_included_unusable_tool_fails_the_run_at_connect_naming_it(
    tmp_path: Path, tool: str, legacy: bool, message: str
) -> None:
    log = tmp_path / "log"
    run = _run(_server(log, legacy=legacy), ["git_log", tool], [("w__git_log", {"repo_path": "x"})])

    assert run.status == "failed"
    assert MCP_TOOL_UNUSABLE in source_codes(run)
    assert message in run.errors[0].format()
    assert _calls(log) == []


@pytest.mark.parametrize("legacy", [False, True], ids=["2026-07-28", "2025-11-25"])
def test_listed_tools_that_are_unusable_but_not_included_never_matter(
    tmp_path: Path, legacy: bool
) -> None:
    """The server lists no-type, bad-schema, remote-ref (and long-task): the included ones work."""
    run = _run(
        _server(tmp_path / "log", legacy=legacy), ["git_log"], [("w__git_log", {"repo_path": "x"})]
    )

    assert _values(run) == [{"received": {"repo_path": "x"}}]


PROJECT = """\
version: 1
project: {{id: mcp-wire, default: wire}}
python_path: [{root}, {here}]
mcp_servers:
  w:
    command: [{python}, {server}]
agents:
  wire:
    input: {{schema: {{type: object}}}}
    result: {{schema: {{}}}}
    initial_state: {module}:initial_state
    decide: {module}:decide
    tools:
      w: {{mcp: w, include: [{include}]}}
"""
DECIDE = """\
def initial_state(value):
    return []


def decide(state, ctx):
    if ctx.turn == 1:
        call = {'id': 'g', 'tool': 'w__git_log', 'input': {'repo_path': 'x'}}
        return {'kind': 'continue', 'calls': [call]}
    return {'kind': 'finish', 'result': 'done'}
"""


def _project(tmp_path: Path, include: str) -> Path:
    module = f"wire_decide_{uuid.uuid4().hex}"  # one module per test: imports are cached
    (tmp_path / f"{module}.py").write_text(DECIDE, encoding="utf-8")
    path = tmp_path / "project.yaml"
    text = PROJECT.format(
        root=ROOT,
        here=tmp_path,
        python=sys.executable,
        server=WIRE,
        include=include,
        module=module,
    )
    path.write_text(text, encoding="utf-8")
    return path


def test_inspect_connect_shows_draft_07_schemas_and_ignores_unusable_tools_not_included(
    tmp_path: Path,
) -> None:
    code, out, err = cli("inspect", _project(tmp_path, "git_log, tuple, draft4"), "--connect")

    assert (code, err) == (0, "")
    assert "w__tuple (mcp w)" in out
    assert '"$schema":"http://json-schema.org/draft-07/schema#"' in out


def test_inspect_connect_refuses_an_included_unusable_tool_as_run_does(tmp_path: Path) -> None:
    path = _project(tmp_path, "git_log, no-type")

    code, out, err = cli("inspect", path, "--connect")

    assert (code, out) == (2, "")
    assert err == (
        "error: TUBELESS_MCP_TOOL_UNUSABLE: MCP server 'w' offers tool 'no-type', which cannot "
        "be called: its input schema has no type 'object' at its root.\n"
    )


# -- 3. the server gets what decide chose ------------------------------------------------------


def test_the_server_receives_the_arguments_decide_chose_without_schema_defaults(
    tmp_path: Path,
) -> None:
    log = tmp_path / "log"

    run = _run(_server(log), ["git_log"], [("w__git_log", {"repo_path": "x"})])

    assert _values(run) == [{"received": {"repo_path": "x"}}]
    assert _calls(log) == ['call git_log {"repo_path": "x"}']


# -- 4. output schemas -------------------------------------------------------------------------


def test_a_result_that_breaks_the_output_schema_is_a_recoverable_protocol_error(
    tmp_path: Path,
) -> None:
    tools = ["bad-output", "no-structured", "good-output"]

    run = _run(_server(tmp_path / "log"), tools, [(f"w__{t}", {}) for t in tools])

    assert _values(run) == [
        {
            "code": "MCP_PROTOCOL_ERROR",
            "message": "The structured content of tool 'bad-output' does not match its output "
            "schema: n: expected type 'integer'",
        },
        {
            "code": "MCP_PROTOCOL_ERROR",
            "message": "Tool 'no-structured' has an output schema but its result has no "
            "structured content.",
        },
        {"n": 7},
    ]
    assert "secret-value" not in json.dumps(run.value)


# -- 8. errors that say what happened ----------------------------------------------------------


@pytest.fixture
def not_found() -> Iterator[str]:
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.send_response(404)
            self.send_header("Content-Type", "text/plain")
            self.end_headers()
            self.wfile.write(b"no such page")

        do_GET = do_POST

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/mcp"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(HANG_GUARD_S)


async def _connect(server: McpServer) -> None:
    async with server.connect():
        pass


def test_an_http_404_says_so_and_names_the_url(not_found: str) -> None:
    with pytest.raises(McpError) as caught:
        asyncio.run(_connect(McpServer.http("h", not_found + "?token=hidden", timeout_s=10)))

    assert caught.value.code == MCP_CONNECTION_FAILED
    assert caught.value.message == (
        f"MCP server 'h' answered HTTP 404 (Not Found) at {not_found} during connect and list "
        "tools: is that its MCP endpoint?"
    )


def test_a_refused_connection_names_the_url() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{sock.getsockname()[1]}/mcp"
    # The port is closed now: nothing listens on it.

    with pytest.raises(McpError) as caught:
        asyncio.run(_connect(McpServer.http("h", url, timeout_s=10)))

    assert caught.value.code == MCP_CONNECTION_FAILED
    assert caught.value.message.startswith(
        f"MCP server 'h' could not be reached at {url} during connect and list tools (ConnectError"
    )


@pytest.mark.slow
@pytest.mark.parametrize(
    ("flags", "shown"), [(["--quiet"], False), ([], False), (["-v"], True)], ids=str
)
def test_a_stdio_servers_stderr_shows_only_with_verbose(
    tmp_path: Path, flags: list[str], shown: bool
) -> None:
    path = _project(tmp_path, "git_log")
    verbose = [flag for flag in flags if flag == "-v"]
    quiet = [flag for flag in flags if flag == "--quiet"]

    done = subprocess.run(
        [sys.executable, "-m", "tubeless", *verbose, "run", str(path), *quiet],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=cli_env(),
        timeout=START_GUARD_S,
    )

    assert done.returncode == 0, done.stderr
    assert ("wire server starting" in done.stderr) is shown
    if shown:
        assert "INFO tubeless.run: MCP server 'w' (stderr): wire server starting" in done.stderr
