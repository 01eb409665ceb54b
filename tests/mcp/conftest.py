"""The ``served`` fixture: the real MCP test server over stdio, then over streamable HTTP.

Each stdio run starts its own server process; the HTTP server is one process per module (its
log is emptied before each test), since a test that needs a dying server starts its own.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.mcp_servers import HANG_GUARD_S, SERVER, Served, start_http
from tubeless.mcp import McpServer


def stdio_served(log: Path) -> Served:
    def stdio(**options: Any) -> McpServer:
        command = [sys.executable, str(SERVER), "stdio"]
        return McpServer.stdio("t", command, env={"MCP_TEST_LOG": str(log)}, **options)

    return Served("stdio", log, stdio)


def http_served(log: Path, url: str) -> Served:
    def http(**options: Any) -> McpServer:
        return McpServer.http("t", url, **options)

    return Served("http", log, http)


@pytest.fixture(scope="module")
def http_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, str]]:
    folder = tmp_path_factory.mktemp("mcp-http")
    log = folder / "server.log"
    process, url = start_http(log, folder)
    try:
        yield log, url
    finally:
        process.terminate()
        process.wait(timeout=HANG_GUARD_S)


@pytest.fixture(params=["stdio", "http"])
def served(request: pytest.FixtureRequest, tmp_path: Path) -> Served:
    if request.param == "stdio":
        return stdio_served(tmp_path / "server.log")
    log, url = request.getfixturevalue("http_server")
    log.write_text("")
    return http_served(log, url)
