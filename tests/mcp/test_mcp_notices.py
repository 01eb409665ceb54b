"""What a server says besides its results: progress (to the call's progress records), log
messages (to the ``tubeless.run`` logger, bounded, never to traces), junk on a stdio server's
stdout (one ``warning:`` line), and the bounds on connecting and on a result's size."""

from __future__ import annotations

import asyncio
import logging
import socket
import subprocess
import sys
import threading
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.mcp_servers import (
    MUTE_SERVER,
    SERVER,
    START_GUARD_S,
    Served,
    one_turn_agent,
    source_codes,
)
from tests.fixtures.processes import cli_env
from tubeless.mcp import MCP_PROTOCOL_ERROR, MCP_TIMEOUT, McpServer
from tubeless.testing import capture_trace

ROOT = Path(__file__).resolve().parents[2]


def _run(server: McpServer, include: list[str], calls: list[tuple[str, Any]]) -> Any:
    return asyncio.run(one_turn_agent(server, include, calls, []).run({}))


# -- progress ----------------------------------------------------------------------------------


def _progress(records: list[dict[str, Any]], step: str) -> list[dict[str, Any]]:
    return [
        r["payload"]["progress"]
        for r in records
        if r.get("name") == "step.running"
        and "progress" in r.get("payload", {})
        and r.get("stepId") == step
    ]


def test_a_servers_progress_becomes_the_calls_progress(served: Served) -> None:
    with capture_trace() as trace:
        run = asyncio.run(
            one_turn_agent(served.make(), ["progress"], [("t__progress", {"count": 3})], []).run(
                {}, trace=trace
            )
        )

    assert run.status == "completed", [e.format() for e in run.errors]
    assert [o["value"] for o in run.value] == ["done"]
    progress = _progress(trace.records, "tool")
    assert progress, "no progress record for the MCP call"
    assert progress[0] == {"completed": 1, "total": 3}
    assert {"completed": 3, "total": 3} in progress  # the last one always gets through
    # The server's own words ("step 1 of 3") stay out of the trace.
    assert "step 1 of 3" not in str(trace.records)


def test_progress_records_per_call_are_bounded(tmp_path: Path) -> None:
    from tubeless.mcp._notices import MAX_PROGRESS_RECORDS

    served = _stdio(tmp_path)
    count = MAX_PROGRESS_RECORDS * 3
    with capture_trace() as trace:
        run = asyncio.run(
            one_turn_agent(
                served.make(), ["progress"], [("t__progress", {"count": count})], []
            ).run({}, trace=trace)
        )

    assert run.status == "completed"
    progress = _progress(trace.records, "tool")
    assert 1 <= len(progress) <= MAX_PROGRESS_RECORDS


def _stdio(tmp_path: Path, **env: str) -> Served:
    log = tmp_path / "server.log"

    def stdio(**options: Any) -> McpServer:
        command = [sys.executable, str(SERVER), "stdio"]
        return McpServer.stdio("t", command, env={"MCP_TEST_LOG": str(log), **env}, **options)

    return Served("stdio", log, stdio)


# -- log messages ------------------------------------------------------------------------------


def test_server_log_messages_reach_the_run_logger_at_their_level_and_never_the_trace(
    served: Served, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="tubeless.run")
    with capture_trace() as trace:
        run = asyncio.run(
            one_turn_agent(served.make(), ["chatty"], [("t__chatty", {})], []).run({}, trace=trace)
        )

    assert run.status == "completed"
    found = [
        (r.levelno, r.getMessage())
        for r in caplog.records
        if r.name == "tubeless.run" and "(log" in r.getMessage()
    ]
    # tubeless asks for info and above (a 2026-07-28 server sends nothing below it).
    assert (logging.DEBUG, "MCP server 't' (log, test): debug message 0") not in found
    assert (logging.INFO, "MCP server 't' (log, test): info message 0") in found
    assert (logging.WARNING, "MCP server 't' (log, test): warning message 0") in found
    assert (logging.ERROR, "MCP server 't' (log, test): error message 0") in found
    [long] = [m for _, m in found if "long" in m]
    assert len(long) <= 2100  # the 10,000-character message is cut
    assert "message 0" not in str(trace.records)


def test_server_log_messages_are_bounded_per_connection(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from tubeless.mcp._notices import MAX_LOG_MESSAGES

    caplog.set_level(logging.DEBUG, logger="tubeless.run")
    count = MAX_LOG_MESSAGES // 3 + 10  # three messages each at info and above: past the bound
    run = _run(_stdio(tmp_path).make(), ["chatty"], [("t__chatty", {"count": count})])

    assert run.status == "completed"
    logged = [r.getMessage() for r in caplog.records if "MCP server 't' (log" in r.getMessage()]
    assert len(logged) == MAX_LOG_MESSAGES + 1
    assert logged[-1].startswith("MCP server 't' (log): ")
    assert logged[-1].endswith("more log messages not shown")


# -- junk on a stdio server's stdout -----------------------------------------------------------


JUNK_PROJECT = """\
version: 1
project: {{id: junk}}
python_path: [{root}]
mcp_servers:
  t:
    command: [python, {server}, stdio]
    env: {{MCP_TEST_JUNK: "{junk}"}}
agents:
  rows:
    input: {{schema: {{type: object}}}}
    result: {{schema: {{}}}}
    initial_state: tests.mcp.mcp_rows:initial
    decide: tests.mcp.mcp_rows:decide
    reduce: tests.mcp.mcp_rows:reduce
    tools:
      t: {{mcp: t, include: [echo]}}
"""


@pytest.mark.parametrize("verbose", [False, True], ids=["plain", "verbose"])
def test_junk_on_a_stdio_servers_stdout_is_one_warning_line_with_a_count(
    tmp_path: Path, verbose: bool
) -> None:
    path = tmp_path / "project.yaml"
    path.write_text(JUNK_PROJECT.format(root=ROOT, server=SERVER, junk=200), encoding="utf-8")

    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "tubeless",
            *(["-v"] if verbose else []),
            "run",
            str(path),
            "--input",
            '{"calls": [["t__echo", {"text": "hi"}]]}',
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=cli_env(),
        timeout=START_GUARD_S,
    )

    assert done.returncode == 0, done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    warnings = [line for line in done.stderr.splitlines() if line.startswith("warning:")]
    assert warnings == [
        "warning: MCP server 't' wrote 200 lines to stdout that are not MCP messages (ignored; "
        "-v shows them)"
    ]
    details = [line for line in done.stderr.splitlines() if "(stdout)" in line]
    if verbose:
        assert details and "junk line 0" in details[0]
        assert len(details) <= 21  # bounded: 20 lines, then how many more
    else:
        assert details == []
    assert len(done.stderr) < 5000


# -- bounds ------------------------------------------------------------------------------------


def test_a_server_that_never_answers_the_handshake_is_refused_within_timeout_s(
    tmp_path: Path,
) -> None:
    """The SDK probes ``server/discover`` for 10 s before it tries ``initialize``: connecting
    is bounded by ``timeout_s`` in all, so that ``initialize`` is never sent."""
    log = tmp_path / "server.log"
    server = McpServer.stdio(
        "t", [sys.executable, str(MUTE_SERVER)], env={"MCP_TEST_LOG": str(log)}, timeout_s=3
    )

    run = _run(server, ["echo"], [("t__echo", {"text": "hi"})])

    assert run.status == "failed"
    assert MCP_TIMEOUT in source_codes(run)
    assert (
        "MCP server 't' did not answer connect and list tools within 3 s" in run.errors[0].format()
    )
    got = [line for line in log.read_text().splitlines() if line.startswith("got ")]
    assert "got server/discover" in got
    assert "got initialize" not in got


@pytest.fixture
def silent_http() -> Iterator[str]:
    """An HTTP endpoint that accepts connections and never answers."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    held: list[socket.socket] = []

    def accept() -> None:
        while True:
            try:
                held.append(listener.accept()[0])
            except OSError:
                return

    threading.Thread(target=accept, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}/mcp"
    finally:
        listener.close()
        for conn in held:
            conn.close()


def test_an_http_server_that_never_answers_is_refused_within_timeout_s(silent_http: str) -> None:
    run = _run(McpServer.http("t", silent_http, timeout_s=3), ["echo"], [("t__echo", {})])

    assert run.status == "failed"
    assert MCP_TIMEOUT in source_codes(run)
    assert "did not answer connect and list tools within 3 s" in run.errors[0].format()


def test_a_result_with_too_many_blocks_is_a_protocol_error_naming_the_bound(
    tmp_path: Path,
) -> None:
    server = _stdio(tmp_path).make(max_result_blocks=100)

    run = _run(server, ["many", "echo"], [("t__many", {"n": 101}), ("t__echo", {"text": "ok"})])

    assert run.status == "completed"
    assert run.value[0]["error"] == {
        "code": MCP_PROTOCOL_ERROR,
        "message": "The result of tool 'many' has 101 content blocks, over the bound of 100 "
        "(max_result_blocks).",
    }
    assert run.value[1]["value"] == {"echo": "ok"}
    assert _run(server, ["many"], [("t__many", {"n": 100})]).value[0]["ok"]


def test_max_result_blocks_must_be_a_positive_int() -> None:
    from tubeless.errors import AgentDefinitionError

    with pytest.raises(AgentDefinitionError, match="max_result_blocks must be an integer above 0"):
        McpServer.http("t", "http://127.0.0.1:9/mcp", max_result_blocks=0)


def test_a_huge_result_is_refused_before_it_is_built(tmp_path: Path) -> None:
    """50,000 blocks against the default bound are refused before the SDK makes objects of
    them: the client's peak stays under half of what it was (67 MiB before; the transport
    still parses the message itself)."""
    from tubeless.mcp import DEFAULT_MAX_RESULT_BLOCKS

    server = _stdio(tmp_path).make()
    n = 50_000
    assert n > DEFAULT_MAX_RESULT_BLOCKS
    tracemalloc.start()
    try:
        run = _run(server, ["many"], [("t__many", {"n": n})])
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()

    assert run.value[0]["error"]["code"] == MCP_PROTOCOL_ERROR
    assert "(max_result_blocks)" in run.value[0]["error"]["message"]
    assert peak < 48 * 1024 * 1024, f"peak {peak / 2**20:.0f} MiB"
