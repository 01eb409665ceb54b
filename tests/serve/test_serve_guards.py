"""Properties of the request guards, called in process as ASGI (no server needed)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from tubeless.serve._routes import depth_ok
from tubeless.serve._security import Guard

TOKEN = "guard-token-0123456789abcdef"
HOSTS = frozenset({"127.0.0.1", "localhost", "::1", "[::1]", "api.example.com"})


async def _inner(scope: Any, receive: Any, send: Any) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"{}"})


def _call(headers: dict[str, str], path: str = "/v1/runs", method: str = "GET") -> tuple[int, Any]:
    guard = Guard(_inner, token=TOKEN, hosts=HOSTS, cors_origins=())
    sent: list[dict[str, Any]] = []
    scope = {
        "type": "http",
        "method": method,
        "path": path,
        "headers": [(k.encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()],
    }

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    asyncio.run(guard(scope, receive, send))
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return sent[0]["status"], json.loads(body)


_latin = st.text(st.characters(min_codepoint=0x21, max_codepoint=0xFF), min_size=1, max_size=40)


@settings(max_examples=200)
@given(host=_latin | st.sampled_from(["[::1]:8421", "LOCALHOST:1", "api.example.com.", "::1"]))
def test_a_host_outside_the_allowlist_is_403_whatever_else_the_request_holds(host: str) -> None:
    lowered = host.lower()
    if lowered.startswith("[") and "]" in lowered:  # [v6 address] with an optional :port
        name = lowered[: lowered.index("]") + 1]
    else:  # a name or v4 address with an optional :port; a bare v6 address as it is
        name = lowered.rsplit(":", 1)[0] if lowered.count(":") == 1 else lowered
    status, body = _call({"host": host, "authorization": f"Bearer {TOKEN}"})
    if name in HOSTS:
        assert status == 200
    else:
        assert (status, body["error"]["code"]) == (403, "TUBELESS_SERVE_FORBIDDEN_HOST")


@given(port=st.integers(0, 65535), name=st.sampled_from(sorted(HOSTS - {"::1"})))
def test_an_allowed_host_passes_with_any_port(port: int, name: str) -> None:
    assert _call({"host": f"{name}:{port}", "authorization": f"Bearer {TOKEN}"})[0] == 200


@settings(max_examples=200)
@given(presented=_latin)
def test_only_the_token_itself_opens_the_api(presented: str) -> None:
    status, body = _call({"host": "localhost", "authorization": f"Bearer {presented}"})
    if presented == TOKEN:
        assert status == 200
    else:
        assert (status, body["error"]["code"]) == (401, "TUBELESS_SERVE_UNAUTHORIZED")
    assert _call({"host": "localhost"}, path="/healthz")[0] == 200


@given(length=st.integers(0, 4 * 1024 * 1024))
def test_a_declared_length_over_1_mib_is_refused_before_the_body(length: int) -> None:
    status, _ = _call(
        {"host": "localhost", "authorization": f"Bearer {TOKEN}", "content-length": str(length)},
        method="POST",
    )
    assert status == (413 if length > 1024 * 1024 else 200)


def _depth(value: Any) -> int:
    if isinstance(value, dict):
        return 1 + max((_depth(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((_depth(v) for v in value), default=0)
    return 0


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=3),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=2), inner, max_size=3)
    ),
    max_leaves=200,
)


@given(value=_json, wrap=st.integers(0, 70))
def test_the_depth_bound_matches_the_nesting(value: Any, wrap: int) -> None:
    for _ in range(wrap):
        value = [value]
    assert depth_ok(value) == (_depth(value) <= 64)


def test_a_self_authenticating_mount_is_passed_through_and_nothing_beside_it() -> None:
    guard = Guard(_inner, token=TOKEN, hosts=HOSTS, cors_origins=(), self_authenticated=("/ui",))
    assert [guard._open(p) for p in ("/ui", "/ui/runs/x", "/uix", "/v1/runs", "/healthz")] == [
        True, True, False, False, True
    ]  # fmt: skip
    plain = Guard(_inner, token=TOKEN, hosts=HOSTS, cors_origins=())
    assert not plain._open("/ui/runs")


def test_a_websocket_from_a_foreign_host_or_without_the_token_is_closed() -> None:
    reached: list[str] = []

    async def inner(scope: Any, receive: Any, send: Any) -> None:
        reached.append(scope["path"])

    guard = Guard(inner, token=TOKEN, hosts=HOSTS, cors_origins=())

    def connect(headers: dict[str, str]) -> list[dict[str, Any]]:
        sent: list[dict[str, Any]] = []
        scope = {
            "type": "websocket",
            "path": "/ws",
            "headers": [(k.encode(), v.encode()) for k, v in headers.items()],
        }

        async def receive() -> dict[str, Any]:
            return {"type": "websocket.connect"}

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)

        asyncio.run(guard(scope, receive, send))
        return sent

    closed = {"type": "websocket.close", "code": 1008}
    assert connect({"host": "evil.example", "authorization": f"Bearer {TOKEN}"}) == [closed]
    assert connect({"host": "localhost"}) == [closed]
    assert connect({"host": "localhost", "authorization": f"Bearer {TOKEN}"}) == []
    assert reached == ["/ws"]
