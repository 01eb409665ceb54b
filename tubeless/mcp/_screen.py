"""The tools a server lists, as it sent them, kept from the SDK's all-or-nothing parsing.

The SDK parses a ``tools/list`` answer as a whole: one tool whose input schema lacks ``type``
(what some Node servers send) fails the listing, and so the whole server. :class:`Screen` sits
between the transport and the SDK: it keeps each listed tool as sent (``listed``) and hands
the SDK a listing it can parse: each tool's name, description, and its input schema when that
is a plain object schema (else ``{"type": "object"}``; tubeless refuses such a tool itself, by
name, only if it is included). Output schemas are kept from the SDK too: tubeless checks
structured content itself, as a recoverable outcome (``tubeless.mcp._schemas``).
"""

from __future__ import annotations

import dataclasses
from typing import Any

__all__ = ["Screen"]

_LIST = "tools/list"


def _parsable(schema: Any) -> bool:
    """Whether the SDK's wire models accept ``schema`` as an input schema."""
    if not isinstance(schema, dict) or schema.get("type") != "object":
        return False
    properties = schema.get("properties")
    if properties is not None and not (
        isinstance(properties, dict)
        and all(isinstance(p, dict | bool) for p in properties.values())
    ):
        return False
    required = schema.get("required")
    return required is None or (
        isinstance(required, list) and all(isinstance(r, str) for r in required)
    )


def _for_sdk(tool: dict[str, Any]) -> dict[str, Any]:
    schema = tool.get("inputSchema")
    kept: dict[str, Any] = {
        "name": tool["name"],
        "inputSchema": schema if _parsable(schema) else {"type": "object"},
    }
    if isinstance(tool.get("description"), str):
        kept["description"] = tool["description"]
    return kept


class Screen:
    """Watches one connection's messages: ``tools/list`` answers are kept and screened."""

    def __init__(self) -> None:
        self.listed: dict[str, dict[str, Any]] = {}
        """Each listed tool as the server sent it, by name (the first of a repeated name)."""
        self._asked: set[Any] = set()

    def wrap(self, transport: Any) -> Any:
        """``transport`` (an async context manager of two streams) with this screen between."""
        return _Screened(transport, self)

    def outbound(self, item: Any) -> None:
        from mcp_types.jsonrpc import JSONRPCRequest

        message = getattr(item, "message", None)
        if isinstance(message, JSONRPCRequest) and message.method == _LIST:
            self._asked.add(message.id)

    def inbound(self, item: Any) -> Any:
        from mcp_types.jsonrpc import JSONRPCResponse

        message = getattr(item, "message", None)
        if not isinstance(message, JSONRPCResponse) or message.id not in self._asked:
            return item
        self._asked.discard(message.id)
        tools = message.result.get("tools")
        if not isinstance(tools, list):
            return item  # the SDK says it is not a listing
        screened: list[dict[str, Any]] = []
        for tool in tools:
            if isinstance(tool, dict) and isinstance(tool.get("name"), str):
                self.listed.setdefault(tool["name"], tool)
                screened.append(_for_sdk(tool))
        result = {**message.result, "tools": screened}
        return dataclasses.replace(item, message=message.model_copy(update={"result": result}))


class _Screened:
    def __init__(self, inner: Any, screen: Screen) -> None:
        self._inner = inner
        self._screen = screen

    async def __aenter__(self) -> tuple[Any, Any]:
        read, write = await self._inner.__aenter__()
        return _Read(read, self._screen), _Write(write, self._screen)

    async def __aexit__(self, *exc: Any) -> bool | None:
        return bool(await self._inner.__aexit__(*exc))


class _Stream:
    """Passes everything through to the stream it wraps (``last_context`` included)."""

    def __init__(self, inner: Any, screen: Screen) -> None:
        self._inner = inner
        self._screen = screen

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def __aenter__(self) -> Any:
        await self._inner.__aenter__()
        return self

    async def __aexit__(self, *exc: Any) -> bool | None:
        return bool(await self._inner.__aexit__(*exc))


class _Read(_Stream):
    async def receive(self) -> Any:
        return self._screen.inbound(await self._inner.receive())

    def __aiter__(self) -> _Read:
        return self

    async def __anext__(self) -> Any:
        return self._screen.inbound(await self._inner.__anext__())


class _Write(_Stream):
    async def send(self, item: Any) -> None:
        self._screen.outbound(item)
        await self._inner.send(item)
