"""An MCP server, built with the SDK's low-level API, that lists and answers what the npm
reference servers (``@modelcontextprotocol/server-everything``, ``server-git`` ...) do: image,
audio, ``resource_link`` and embedded ``resource`` blocks, ``structuredContent`` that breaks
its ``outputSchema``, draft-07 and draft-04 input schemas, a remote ``$ref``, schema defaults.

``python mcp_wire_server.py`` serves on stdin/stdout. ``MCP_WIRE_LEGACY=1`` makes it a
pre-2026 server (it refuses ``server/discover``, so the client falls back to the 2025-11-25
handshake), which also lists a tool whose ``execution.taskSupport`` is ``required``. The SDK's
own server refuses to send a tool without ``type``, which a Node server sends: the listing's
``no-type`` tool loses it on the way out (the wire tweak below), as it would from such a server.
``MCP_TEST_LOG`` names a file that gets one ``call NAME ARGUMENTS`` line (JSON) per call.
"""

from __future__ import annotations

import base64
import gzip
import json
import os
import sys
from typing import Any

import anyio
import mcp_types as types
from mcp.server import Server
from mcp.server.stdio import stdio_server
from mcp.shared.message import SessionMessage
from mcp_types.jsonrpc import JSONRPCError, JSONRPCRequest, JSONRPCResponse

LEGACY = os.environ.get("MCP_WIRE_LEGACY") == "1"
#: A 1x1 PNG (what server-everything's get-tiny-image sends, only smaller).
PNG = base64.b64encode(
    bytes.fromhex(
        "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
        "1f15c4890000000d4944415478da63f8cfc0f01f0005000201a5f3b1e20000000049454e44ae426082"
    )
).decode()
WAV = base64.b64encode(b"RIFF\x24\x00\x00\x00WAVEfmt ").decode()
GZIP = base64.b64encode(gzip.compress(b"hello world", mtime=0)).decode()

_ANY: dict[str, Any] = {"type": "object", "properties": {}}
TOOLS: dict[str, dict[str, Any]] = {
    "get-tiny-image": {"inputSchema": _ANY},
    "get-resource-links": {"inputSchema": _ANY},
    "gzip-file-as-resource": {"inputSchema": _ANY},
    "get-resource-reference": {"inputSchema": _ANY},
    "audio-sandwich": {"inputSchema": _ANY},
    "structured-and-image": {"inputSchema": _ANY},
    "big-image": {"inputSchema": _ANY},
    "tuple": {
        "inputSchema": {
            "$schema": "http://json-schema.org/draft-07/schema#",
            "type": "object",
            "properties": {
                "pair": {
                    "type": "array",
                    "items": [{"type": "string"}, {"type": "number"}],
                    "additionalItems": False,
                }
            },
            "required": ["pair"],
            "additionalProperties": False,
        }
    },
    "draft4": {
        "inputSchema": {
            "$schema": "http://json-schema.org/draft-04/schema#",
            "type": "object",
            "properties": {"count": {"type": "number", "minimum": 0, "exclusiveMinimum": True}},
            "required": ["count"],
        }
    },
    "dependencies": {
        "inputSchema": {
            "$schema": "http://json-schema.org/draft-07/schema#",
            "type": "object",
            "properties": {"a": {"type": "string"}, "b": {"type": "string"}},
            "dependencies": {"a": ["b"]},
        }
    },
    "git_log": {
        "inputSchema": {
            "type": "object",
            "properties": {
                "repo_path": {"type": "string"},
                "max_count": {"type": "integer", "default": 10},
                "start_timestamp": {
                    "anyOf": [{"type": "string"}, {"type": "null"}],
                    "default": None,
                },
            },
            "required": ["repo_path"],
        }
    },
    "remote-ref": {
        "inputSchema": {
            "type": "object",
            "properties": {"x": {"$ref": "https://schemas.invalid/x.json"}},
        }
    },
    "local-ref": {
        "inputSchema": {
            "type": "object",
            "$defs": {"word": {"type": "string", "minLength": 2}},
            "properties": {"x": {"$ref": "#/$defs/word"}},
        }
    },
    "bad-schema": {"inputSchema": {"type": "object", "properties": {"x": {"type": "strnig"}}}},
    "no-type": {"inputSchema": {"type": "object", "properties": {"x": {"type": "string"}}}},
    "bad-output": {
        "inputSchema": _ANY,
        "outputSchema": {
            "type": "object",
            "properties": {"n": {"type": "integer"}},
            "required": ["n"],
        },
    },
    "no-structured": {
        "inputSchema": _ANY,
        "outputSchema": {"type": "object", "properties": {"n": {"type": "integer"}}},
    },
    "good-output": {
        "inputSchema": _ANY,
        "outputSchema": {"type": "object", "properties": {"n": {"type": "integer"}}},
    },
}
if LEGACY:
    TOOLS["long-task"] = {"inputSchema": _ANY, "execution": {"taskSupport": "required"}}


def log(line: str) -> None:
    path = os.environ.get("MCP_TEST_LOG")
    if path:
        with open(path, "a", encoding="utf-8") as file:
            file.write(line + "\n")


async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
    return types.ListToolsResult(
        tools=[
            types.Tool(
                name=name,
                description=f"The {name} tool.",
                input_schema=spec["inputSchema"],
                output_schema=spec.get("outputSchema"),
                execution=types.ToolExecution(task_support=spec["execution"]["taskSupport"])
                if "execution" in spec
                else None,
            )
            for name, spec in TOOLS.items()
        ]
    )


def _text(text: str) -> types.TextContent:
    return types.TextContent(text=text)


async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
    name, arguments = params.name, params.arguments or {}
    log(f"call {name} {json.dumps(arguments, sort_keys=True)}")
    content: list[Any]
    structured: dict[str, Any] | None = None
    if name == "get-tiny-image":
        content = [
            _text("This is a tiny image:"),
            types.ImageContent(data=PNG, mime_type="image/png"),
            _text("The image above is the MCP tiny image."),
        ]
    elif name == "get-resource-links":
        content = [_text("Here are 2 resource links to resources available in this server:")]
        content += [
            types.ResourceLink(
                uri=f"test://static/resource/{n}",
                name=f"Resource {n}",
                description=f"Resource {n}: plain text",
                mime_type="text/plain",
            )
            for n in (1, 2)
        ]
    elif name == "gzip-file-as-resource":
        blob = types.BlobResourceContents(
            uri="file:///hello.txt.gz", mime_type="application/gzip", blob=GZIP
        )
        content = [types.EmbeddedResource(resource=blob)]
    elif name == "get-resource-reference":
        text = types.TextResourceContents(
            uri="test://static/resource/1", mime_type="text/plain", text="Resource 1 says hi"
        )
        content = [_text("Resource 1:"), types.EmbeddedResource(resource=text)]
    elif name == "audio-sandwich":
        content = [
            _text("before"),
            types.AudioContent(data=WAV, mime_type="audio/wav"),
            _text("after"),
        ]
    elif name == "structured-and-image":
        structured = {"width": 1}
        content = [_text('{"width": 1}'), types.ImageContent(data=PNG, mime_type="image/png")]
    elif name == "big-image":
        data = base64.b64encode(b"\0" * 3000).decode()
        content = [types.ImageContent(data=data, mime_type="image/png")]
    elif name == "bad-output":
        structured = {"n": "secret-value"}
        content = [_text(json.dumps(structured))]
    elif name == "no-structured":
        content = [_text("no structured content")]
    elif name == "good-output":
        structured = {"n": 7}
        content = [_text(json.dumps(structured))]
    else:
        structured = {"received": arguments}
        content = [_text(json.dumps(arguments, sort_keys=True))]
    return types.CallToolResult(content=content, structured_content=structured)


def _tweak(message: Any) -> Any:
    """The ``no-type`` tool loses ``type`` on the way out (the SDK's server would refuse it)."""
    if isinstance(message, JSONRPCResponse) and isinstance(message.result.get("tools"), list):
        for tool in message.result["tools"]:
            if tool.get("name") == "no-type":
                tool["inputSchema"].pop("type", None)
    return message


async def serve() -> None:
    server: Server[Any] = Server("wire-test", on_list_tools=list_tools, on_call_tool=call_tool)
    async with stdio_server() as (read, write):
        inbound_send, inbound = anyio.create_memory_object_stream[Any](0)
        outbound, outbound_receive = anyio.create_memory_object_stream[SessionMessage](0)

        async def pump_in() -> None:
            async with inbound_send:
                async for item in read:
                    message = getattr(item, "message", None)
                    if (
                        LEGACY
                        and isinstance(message, JSONRPCRequest)
                        and message.method == "server/discover"
                    ):
                        error = types.ErrorData(code=-32601, message="Method not found")
                        reply = JSONRPCError(jsonrpc="2.0", id=message.id, error=error)
                        await write.send(SessionMessage(reply))
                        continue
                    await inbound_send.send(item)

        async def pump_out() -> None:
            async for item in outbound_receive:
                await write.send(SessionMessage(_tweak(item.message), metadata=item.metadata))

        async with anyio.create_task_group() as tasks:
            tasks.start_soon(pump_in)
            tasks.start_soon(pump_out)
            async with outbound:
                await server.run(inbound, outbound, server.create_initialization_options())
            tasks.cancel_scope.cancel()


if __name__ == "__main__":
    log(f"pid {os.getpid()}")
    print("wire server starting", file=sys.stderr, flush=True)
    anyio.run(serve)
