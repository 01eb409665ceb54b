"""The tools a server lists, as it sent them, kept from the SDK's all-or-nothing parsing.

The SDK parses a ``tools/list`` answer as a whole: one tool whose input schema lacks ``type``
(what some Node servers send) fails the listing, and so the whole server. :class:`Screen` sits
between the transport and the SDK: it keeps each listed tool as sent (``listed``) and hands
the SDK a listing it can parse: each tool's name, description, and its input schema when that
is a plain object schema (else ``{"type": "object"}``; tubeless refuses such a tool itself, by
name, only if it is included). Output schemas are kept from the SDK too: tubeless checks
structured content itself, as a recoverable outcome (``tubeless.mcp._schemas``).

It also bounds ``tools/call`` answers before the SDK turns them into objects (500,000 small
blocks once took 1.5 GB that way): a result with more content blocks than ``max_blocks``, or
whose strings alone hold several times ``max_bytes``, reaches the SDK as a JSON-RPC error that
:func:`refused` recognizes, whose message names the bound. (The transport still reads the
message itself whole.)
"""

from __future__ import annotations

import dataclasses
from typing import Any

__all__ = ["Screen", "refused"]

_LIST = "tools/list"
_CALL = "tools/call"
#: What marks the screen's own refusal (in the error's data: a server cannot send it by chance).
_REFUSED = {"tubeless": "result past a bound"}
_REFUSED_CODE = -32603
#: The strings of a result may hold its value twice (structured content and its text): the
#: early byte check refuses only what is surely past the bound; the value's exact size is
#: checked once it is made (``tubeless.mcp._content``).
_SLACK = 4


def refused(exc: Any) -> bool:
    """Whether SDK error ``exc`` is the screen's refusal of a result past a bound."""
    error = getattr(exc, "error", None)
    return getattr(error, "data", None) == _REFUSED


def _over(value: Any, limit: int) -> bool:
    """Whether the strings in ``value`` (a parsed JSON value) hold more than ``limit``
    characters, counting 8 for each other item; stops as soon as they do."""
    total = 0
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            total += len(item)
        elif isinstance(item, dict):
            total += 8
            stack.extend(item.values())
            stack.extend(item.keys())
        elif isinstance(item, list):
            total += 8
            stack.extend(item)
        else:
            total += 8
        if total > limit:
            return True
    return False


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

    def __init__(self, max_blocks: int | None = None, max_bytes: int | None = None) -> None:
        self.listed: dict[str, dict[str, Any]] = {}
        """Each listed tool as the server sent it, by name (the first of a repeated name)."""
        self._asked: set[Any] = set()
        self._calls: dict[Any, str] = {}
        self._max_blocks = max_blocks
        self._max_bytes = max_bytes

    def wrap(self, transport: Any) -> Any:
        """``transport`` (an async context manager of two streams) with this screen between."""
        return _Screened(transport, self)

    def outbound(self, item: Any) -> None:
        from mcp_types.jsonrpc import JSONRPCRequest

        message = getattr(item, "message", None)
        if isinstance(message, JSONRPCRequest) and message.method == _LIST:
            self._asked.add(message.id)
        elif isinstance(message, JSONRPCRequest) and message.method == _CALL:
            name = (message.params or {}).get("name")
            self._calls[message.id] = name if isinstance(name, str) else "?"

    def inbound(self, item: Any) -> Any:
        from mcp_types.jsonrpc import JSONRPCError, JSONRPCResponse

        message = getattr(item, "message", None)
        if isinstance(message, JSONRPCResponse | JSONRPCError) and message.id in self._calls:
            name = self._calls.pop(message.id)
            if isinstance(message, JSONRPCResponse):
                return self._bounded(item, message, name)
            return item
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

    def _bounded(self, item: Any, message: Any, name: str) -> Any:
        """``item``, or a refusal in its place when its result is past a bound."""
        import mcp_types as types
        from mcp_types.jsonrpc import JSONRPCError

        content = message.result.get("content")
        problem: str | None = None
        if (
            self._max_blocks is not None
            and isinstance(content, list)
            and len(content) > self._max_blocks
        ):
            problem = (
                f"The result of tool {name!r} has {len(content)} content blocks, over the bound "
                f"of {self._max_blocks} (max_result_blocks)."
            )
        elif self._max_bytes is not None and _over(message.result, _SLACK * self._max_bytes):
            problem = (
                f"The result of tool {name!r} is over the bound of {self._max_bytes} bytes "
                "(max_result_bytes)."
            )
        if problem is None:
            return item
        error = types.ErrorData(code=_REFUSED_CODE, message=problem, data=_REFUSED)
        refusal = JSONRPCError(jsonrpc="2.0", id=message.id, error=error)
        return dataclasses.replace(item, message=refusal)


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
