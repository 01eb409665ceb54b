"""A small MCP server for the tests, built with the SDK's low-level server API.

``python mcp_test_server.py stdio`` serves on stdin/stdout; ``python mcp_test_server.py http
PORT_FILE`` serves streamable HTTP on 127.0.0.1 (a free port, written to PORT_FILE once it
listens). When ``MCP_TEST_LOG`` names a file, the server appends one line per event: ``pid N``
at start, ``call NAME`` when a tool starts, ``cancelled ID`` for each notifications/cancelled,
``interrupted hang`` when the hanging call is cancelled, ``inflight N`` when a ``gate`` call
starts with N calls of it in flight. ``MCP_TEST_VARIANT`` (``description``, ``schema``) changes
the tools it lists. ``MCP_TEST_JUNK=N`` makes a stdio server print N lines of junk to stdout
before it serves (what a chatty server does). A server that never answers is
``mcp_mute_server.py`` (no SDK import: it starts reading at once).
"""

from __future__ import annotations

import os
import socket
import sys
from typing import Any

import anyio
import mcp_types as types
from mcp.server import Server
from mcp.server.stdio import stdio_server
from mcp.shared.exceptions import MCPError

_TEXT = {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}
_NONE: dict[str, Any] = {"type": "object", "properties": {}}
TOOLS = {
    "echo": ("Echoes the text back as structured content.", _TEXT),
    "shout": ("Answers the text in capitals, as text content.", _TEXT),
    "fail": ("Always reports a tool error (isError).", _NONE),
    "protocol": ("Always answers with a JSON-RPC error.", _NONE),
    "crash": ("Exits the server process in the middle of the call.", _NONE),
    "hang": ("Never answers.", _NONE),
    "secret": ("A tool the tests never include.", _NONE),
    "picture": ("Answers a caption, an image and a resource link.", _NONE),
    "progress": ("Reports progress `count` times, then answers done.", _NONE),
    "chatty": ("Sends log messages at several levels, then answers done.", _NONE),
    "gate": ("Waits (a little) until three calls of it are in flight.", _NONE),
    "many": ("Answers `n` text blocks.", _NONE),
}
_GATE = {"inflight": 0}


# MCP_TEST_VARIANT changes what the server says of ``echo`` (checkpoint identity tests).
_VARIANT = os.environ.get("MCP_TEST_VARIANT")
if _VARIANT == "description":
    TOOLS["echo"] = ("Echoes the text back, reworded.", _TEXT)
elif _VARIANT == "schema":
    TOOLS["echo"] = (
        TOOLS["echo"][0],
        {**_TEXT, "properties": {"text": {"type": "string"}, "loud": {"type": "boolean"}}},
    )


def log(line: str) -> None:
    path = os.environ.get("MCP_TEST_LOG")
    if path:
        with open(path, "a", encoding="utf-8") as file:
            file.write(line + "\n")


async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
    return types.ListToolsResult(
        tools=[
            types.Tool(name=name, description=text, input_schema=schema)
            for name, (text, schema) in TOOLS.items()
        ]
    )


async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
    name, arguments = params.name, params.arguments or {}
    log(f"call {name}")
    if name == "echo":
        return types.CallToolResult(
            content=[types.TextContent(text=arguments["text"])],
            structured_content={"echo": arguments["text"]},
        )
    if name == "shout":
        return types.CallToolResult(content=[types.TextContent(text=arguments["text"].upper())])
    if name == "picture":
        return types.CallToolResult(
            content=[
                types.TextContent(text="a caption"),
                types.ImageContent(data="iVBORw0KGgo=", mime_type="image/png"),
                types.ResourceLink(uri="test://picture", name="picture", size=8),
            ]
        )
    if name == "progress":
        count = int(arguments.get("count", 3))
        for n in range(1, count + 1):
            await ctx.session.report_progress(n, count, f"step {n} of {count}")
        return types.CallToolResult(content=[types.TextContent(text="done")])
    if name == "chatty":
        count = int(arguments.get("count", 1))
        for n in range(count):
            for level in ("debug", "info", "warning", "error"):
                await _log_message(ctx, level, f"{level} message {n}")
        await _log_message(ctx, "info", {"long": "x" * 10_000})
        return types.CallToolResult(content=[types.TextContent(text="done")])
    if name == "gate":
        _GATE["inflight"] += 1
        log(f"inflight {_GATE['inflight']}")
        try:
            with anyio.move_on_after(1.0):  # the others may never come (max_concurrency)
                while _GATE["inflight"] < 3:
                    await anyio.sleep(0.01)
        finally:
            _GATE["inflight"] -= 1
        return types.CallToolResult(content=[types.TextContent(text="through")])
    if name == "many":
        blocks = [types.TextContent(text="x") for _ in range(int(arguments.get("n", 1)))]
        return types.CallToolResult(content=blocks)
    if name == "fail":
        return types.CallToolResult(content=[types.TextContent(text="it broke")], is_error=True)
    if name == "protocol":
        raise MCPError(code=-32602, message="the server refused the request")
    if name == "crash":
        os._exit(3)
    if name == "hang":
        try:
            await anyio.sleep(3600)
        except anyio.get_cancelled_exc_class():
            log("interrupted hang")
            raise
    raise MCPError(code=-32601, message=f"no tool {name}")


async def _log_message(ctx: Any, level: str, data: Any) -> None:
    """A notifications/message on the request's own stream (at protocol 2026-07-28 only when
    the request opted in at that level)."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # deprecated as of 2026-07-28, still what servers do
        await ctx.session.send_log_message(level, data, "test", ctx.request_id)


async def cancelled(ctx: Any, params: types.CancelledNotificationParams) -> None:
    log(f"cancelled {params.request_id}")


def build() -> Server[Any]:
    server: Server[Any] = Server("tubeless-test", on_list_tools=list_tools, on_call_tool=call_tool)
    server.add_notification_handler(
        "notifications/cancelled", types.CancelledNotificationParams, cancelled
    )
    return server


async def serve_stdio() -> None:
    server = build()
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


async def serve_http(port_file: str) -> None:
    import uvicorn

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    app = build().streamable_http_app(host="127.0.0.1")
    config = uvicorn.Config(app, log_level="warning", lifespan="on")
    server = uvicorn.Server(config)
    with open(port_file + ".tmp", "w") as file:
        file.write(str(sock.getsockname()[1]))
    os.replace(port_file + ".tmp", port_file)
    await server.serve(sockets=[sock])


if __name__ == "__main__":
    log(f"pid {os.getpid()}")
    for n in range(int(os.environ.get("MCP_TEST_JUNK", "0"))):
        print(f"junk line {n}: not JSON-RPC", flush=True)
    if sys.argv[1] == "stdio":
        anyio.run(serve_stdio)
    else:
        anyio.run(serve_http, sys.argv[2])
