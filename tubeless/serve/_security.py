"""The guards every request passes before a route sees it (outermost first).

1. Host allowlist: a Host header naming no allowed host is 403 ``TUBELESS_SERVE_FORBIDDEN_HOST``
   (a page on another site that rebinds its DNS name to 127.0.0.1 sends its own name).
2. CORS: closed unless ``--cors-origin``; a preflight from another origin is 403, one from an
   allowed origin is answered here; answers to allowed origins carry
   ``Access-Control-Allow-Origin``.
3. Bearer token on everything except ``/healthz``, ``/openapi.json`` and the agent card,
   compared in constant time; 401 ``TUBELESS_SERVE_UNAUTHORIZED`` otherwise. Mounts that
   authenticate by themselves (``/ui``, whose pages exchange the token for a cookie) are
   passed through; the Host, CORS and size guards still apply to them. A run's event stream
   (``GET /v1/runs/{id}/events``) also takes the pages' session cookie, checked with
   :func:`tubeless.ui.session_ok`: a live run page follows it with a browser ``EventSource``,
   which cannot send a bearer header (the cookie is ``SameSite=Strict``, so another site's
   page cannot use it).
4. Bodies over ``MAX_BODY_BYTES``: 413 ``TUBELESS_SERVE_TOO_LARGE``, from ``Content-Length``
   before anything is read, or as soon as a streamed body passes the limit.
5. Anything a route raises that it did not mean: 500 with a code and a message, never a trace.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from tubeless._serve_token import token_matches
from tubeless.errors import (
    SERVE_FORBIDDEN_HOST,
    SERVE_INTERNAL,
    SERVE_TOO_LARGE,
    SERVE_UNAUTHORIZED,
)
from tubeless.serve._config import MAX_BODY_BYTES

__all__ = ["EVENTS_PATH", "OPEN_PATHS", "BodyTooLarge", "Guard", "error_body"]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]

log = logging.getLogger("tubeless.serve")

#: Paths answered without a token.
OPEN_PATHS = frozenset({"/healthz", "/openapi.json", "/.well-known/agent-card.json"})
#: Paths a GET may also authenticate with the web pages' session cookie: the event streams.
EVENTS_PATH = re.compile(r"/v1/runs/[^/]+/events")


class BodyTooLarge(Exception):
    """A streamed body passed the limit (a route reading it stops at once)."""


def error_body(code: str, message: str, **extra: Any) -> bytes:
    return json.dumps({"error": {"code": code, "message": message, **extra}}).encode()


async def _answer(
    send: Send, status: int, code: str, message: str, headers: tuple[tuple[bytes, bytes], ...] = ()
) -> None:
    body = error_body(code, message)
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                *headers,
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", ()):
        if key == name:
            return bytes(value).decode("latin-1")
    return None


def _host_name(value: str) -> str:
    value = value.strip().lower()
    if value.startswith("["):
        return value[: value.find("]") + 1] if "]" in value else value
    return value.rsplit(":", 1)[0] if value.count(":") == 1 else value


class Guard:
    """The ASGI middleware that applies the guards above around ``app``."""

    def __init__(
        self,
        app: App,
        *,
        token: str | None,
        hosts: frozenset[str],
        cors_origins: tuple[str, ...],
        max_body: int = MAX_BODY_BYTES,
        self_authenticated: tuple[str, ...] = (),
        session_paths: re.Pattern[str] | None = None,
    ) -> None:
        self.app = app
        self.session_paths = session_paths
        self.self_authenticated = self_authenticated
        self.token = token
        self.hosts = hosts
        self.origins = frozenset(cors_origins)
        self.max_body = max_body

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "websocket":  # none is served; a mount's must pass the same checks
            host = _header(scope, b"host")
            token_ok = self.token is None or self._open(scope.get("path", ""))
            token_ok = token_ok or token_matches(
                self.token or "", _bearer(_header(scope, b"authorization"))
            )
            if host is None or _host_name(host) not in self.hosts or not token_ok:
                await send({"type": "websocket.close", "code": 1008})
                return
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        host = _header(scope, b"host")
        if host is None or _host_name(host) not in self.hosts:
            await _answer(
                send,
                403,
                SERVE_FORBIDDEN_HOST,
                "this server does not answer to that Host; start it with --allow-host NAME",
            )
            return
        origin = _header(scope, b"origin")
        allowed_origin = origin is not None and origin in self.origins
        if scope["method"] == "OPTIONS" and origin is not None:
            if not allowed_origin:
                await _answer(send, 403, SERVE_FORBIDDEN_HOST, "cross-origin requests are off")
                return
            await self._preflight(send, origin)
            return
        path = scope.get("path", "")
        if self.token is not None and not self._open(path):
            presented = _bearer(_header(scope, b"authorization"))
            if not token_matches(self.token, presented) and not self._session(scope, path):
                await _answer(
                    send,
                    401,
                    SERVE_UNAUTHORIZED,
                    "a bearer token is required: Authorization: Bearer <token>",
                    ((b"www-authenticate", b'Bearer realm="tubeless"'),),
                )
                return
        length = _header(scope, b"content-length")
        if length is not None and (
            not (length.isascii() and length.isdigit()) or int(length) > self.max_body
        ):
            await _answer(
                send, 413, SERVE_TOO_LARGE, f"request bodies are limited to {self.max_body} bytes"
            )
            return
        await self._inner(scope, receive, send, origin if allowed_origin else None)

    def _open(self, path: str) -> bool:
        """Whether ``path`` needs no bearer token here: the open paths, and the mounts that
        authenticate by themselves (the web pages: the token exchanged for a cookie)."""
        if path in OPEN_PATHS:
            return True
        return any(path == p or path.startswith(p + "/") for p in self.self_authenticated)

    def _session(self, scope: Scope, path: str) -> bool:
        """Whether a GET of a session path carries the web pages' session cookie for this
        server's token."""
        if self.session_paths is None or scope["method"] != "GET":
            return False
        if self.session_paths.fullmatch(path) is None:
            return False
        cookies = _header(scope, b"cookie")
        if not cookies:
            return False
        from starlette.requests import cookie_parser

        from tubeless.ui import SESSION_COOKIE, session_ok

        value = cookie_parser(cookies).get(SESSION_COOKIE)
        return value is not None and session_ok(self.token, value, None)

    async def _preflight(self, send: Send, origin: str) -> None:
        await send(
            {
                "type": "http.response.start",
                "status": 204,
                "headers": [
                    (b"access-control-allow-origin", origin.encode("latin-1")),
                    (b"access-control-allow-methods", b"GET, POST"),
                    (
                        b"access-control-allow-headers",
                        b"authorization, content-type, idempotency-key, last-event-id",
                    ),
                    (b"access-control-max-age", b"600"),
                    (b"vary", b"origin"),
                ],
            }
        )
        await send({"type": "http.response.body", "body": b""})

    async def _inner(self, scope: Scope, receive: Receive, send: Send, origin: str | None) -> None:
        seen = 0
        started = False

        async def counted() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_body:
                    raise BodyTooLarge
            return message

        async def sending(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                if origin is not None:
                    headers = list(message.get("headers", ()))
                    headers.append((b"access-control-allow-origin", origin.encode("latin-1")))
                    headers.append((b"vary", b"origin"))
                    message = {**message, "headers": headers}
            await send(message)

        try:
            await self.app(scope, counted, sending)
        except BodyTooLarge:
            if not started:
                await _answer(
                    send,
                    413,
                    SERVE_TOO_LARGE,
                    f"request bodies are limited to {self.max_body} bytes",
                )
        except Exception:
            log.exception(
                "serve: unexpected error on %s %s", scope.get("method"), scope.get("path")
            )
            if not started:
                await _answer(send, 500, SERVE_INTERNAL, "the server failed to answer; see its log")


def _bearer(value: str | None) -> str | None:
    if value is None:
        return None
    scheme, _, rest = value.partition(" ")
    if scheme.lower() != "bearer":
        return None
    return rest.strip()
