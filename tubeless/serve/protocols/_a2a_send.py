"""A2A's ``SendMessage``: returning at once unless asked to wait, on a2a-sdk 1.x's field.

A2A 1.0 and a2a-sdk 1.x name the choice ``configuration.returnImmediately`` and wait by
default; tubeless keeps A2A 0.3's rule (``configuration.blocking``, returning at once by
default). The JSON-RPC endpoint is wrapped so that each ``SendMessage`` request reaches the SDK
with ``returnImmediately`` written out by that rule: it waits when ``configuration.blocking``
is true, when ``configuration.returnImmediately`` is false written out, or when
``metadata.blocking`` is true (what an a2a-sdk 1.x client can send: its request model has no
``blocking`` and never sends a false field).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from starlette.requests import Request
    from starlette.responses import Response

__all__ = ["returns_at_once", "send_message_rule"]


def returns_at_once(endpoint: Callable[[Request], Awaitable[Response]]) -> Any:
    """``endpoint`` with ``SendMessage`` returning at once unless asked to wait (see the module
    docstring): the request's ``configuration.returnImmediately`` is set before the SDK reads
    it."""
    from starlette.requests import Request

    async def rpc(request: Request) -> Response:
        changed = send_message_rule(await request.body())
        if changed is None:
            return await endpoint(request)  # the body stays cached on the request
        sent = False

        async def receive() -> MutableMapping[str, Any]:
            nonlocal sent
            if sent:
                return await request.receive()  # a disconnect, for a streaming answer
            sent = True
            return {"type": "http.request", "body": changed, "more_body": False}

        return await endpoint(Request(request.scope, receive))

    return rpc


def send_message_rule(raw: bytes) -> bytes | None:
    """The JSON-RPC body with ``SendMessage``'s ``configuration.returnImmediately`` made
    explicit by tubeless's rule (at once unless asked to wait), or ``None`` for any other
    request (left for the SDK to answer, errors included)."""
    try:
        body = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    if not isinstance(body, dict) or body.get("method") != "SendMessage":
        return None
    params = body.get("params")
    if not isinstance(params, dict):
        return None
    config = params.get("configuration", {})
    if not isinstance(config, dict):
        return None  # malformed: the SDK refuses it
    config = dict(config)
    metadata = params.get("metadata")
    wait = (
        config.pop("blocking", None) is True
        or config.get("returnImmediately") is False
        or (isinstance(metadata, dict) and metadata.get("blocking") is True)
    )
    config["returnImmediately"] = not wait
    params["configuration"] = config
    return json.dumps(body).encode()
