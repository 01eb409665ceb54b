"""The HTTP endpoints of ``tubeless serve`` (DESIGN.md §21): thin over the run manager."""

from __future__ import annotations

import json
import math
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response

from tubeless.errors import SERVE_BAD_REQUEST
from tubeless.serve._config import MAX_JSON_DEPTH
from tubeless.serve._entries import RequestError

if TYPE_CHECKING:
    from tubeless.serve._manager import RunManager

__all__ = ["Endpoints", "depth_ok"]

#: The longest a POST may wait for its run.
MAX_WAIT_S = 300.0
_STATUSES = ("queued", "running", "waiting", "completed", "failed", "cancelled")


def _bad(message: str) -> RequestError:
    return RequestError(400, SERVE_BAD_REQUEST, message)


def depth_ok(value: Any) -> bool:
    """Whether ``value`` nests objects and arrays at most ``MAX_JSON_DEPTH`` deep."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list):
            if depth > MAX_JSON_DEPTH:
                return False
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children)
    return True


async def _json_body(request: Request) -> dict[str, Any]:
    raw = await request.body()
    if not raw.strip():
        return {}
    try:
        data = json.loads(raw)
    except RecursionError:
        raise _bad(f"the JSON body nests deeper than {MAX_JSON_DEPTH} levels") from None
    except ValueError as exc:
        raise _bad(
            f"the body is not JSON ({type(exc).__name__} at char {getattr(exc, 'pos', '?')})"
        ) from None
    if not depth_ok(data):
        raise _bad(f"the JSON body nests deeper than {MAX_JSON_DEPTH} levels")
    if not isinstance(data, dict):
        raise _bad("the body must be a JSON object")
    return data


def _only(data: dict[str, Any], allowed: tuple[str, ...]) -> None:
    unknown = sorted(set(data) - set(allowed))
    if unknown:
        raise _bad(
            f"unknown field(s) {', '.join(map(repr, unknown))}; allowed: {', '.join(allowed)}"
        )


class Endpoints:
    """The route handlers of one app, bound to its run manager."""

    def __init__(self, manager: RunManager, openapi: dict[str, Any]) -> None:
        self.manager = manager
        self.openapi = openapi

    async def healthz(self, request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def openapi_json(self, request: Request) -> Response:
        return JSONResponse(self.openapi)

    async def metrics(self, request: Request) -> Response:
        registry = self.manager.registry
        calls, turns, tokens, cost = registry.consumed()
        text = self.manager.metrics.render(
            registry.counts(), calls, turns, tokens=tokens, cost_usd=cost
        )
        return PlainTextResponse(text, media_type="text/plain; version=0.0.4")

    async def entries(self, request: Request) -> Response:
        return JSONResponse({"entries": self.manager.entries.describe()})

    async def start_run(self, request: Request) -> Response:
        entry_id = request.path_params["entry"]
        self.manager.entries.get(entry_id)  # 404 before the body is judged
        data = await _json_body(request)
        _only(data, ("input", "key", "limits", "wait_s"))
        key = data.get("key")
        if key is not None and not isinstance(key, str):
            raise _bad("key must be a string")
        wait_s = data.get("wait_s", 0)
        if (
            isinstance(wait_s, bool)
            or not isinstance(wait_s, int | float)
            or not math.isfinite(wait_s)
            or not 0 <= wait_s <= MAX_WAIT_S
        ):
            raise _bad(f"wait_s must be a number of seconds from 0 to {MAX_WAIT_S:g}")
        idempotency_key = request.headers.get("idempotency-key")
        if idempotency_key is not None and not 1 <= len(idempotency_key) <= 256:
            raise _bad("an Idempotency-Key has 1 to 256 characters")
        row, _ = self.manager.submit(
            entry_id,
            data.get("input"),
            key=key,
            limits=data.get("limits"),
            idempotency_key=idempotency_key,
        )
        if wait_s > 0:
            row = await self.manager.wait(row.run_id, float(wait_s))
        done = row.status in ("completed", "failed", "cancelled")
        return JSONResponse(
            self.manager.view(row),
            status_code=200 if done else 202,
            headers={"location": f"/v1/runs/{row.run_id}"},
        )

    async def list_runs(self, request: Request) -> Response:
        query = request.query_params
        status = query.get("status")
        if status is not None and status not in _STATUSES:
            raise _bad(f"status must be one of {', '.join(_STATUSES)}")
        limit = _int(query.get("limit"), "limit", default=50, low=1, high=500)
        cursor = _int(query.get("cursor"), "cursor", default=None, low=0, high=2**62)
        rows = self.manager.registry.listing(
            entry=query.get("entry"), status=status, limit=limit, before=cursor
        )
        next_cursor = str(rows[-1].seq) if len(rows) == limit else None
        return JSONResponse(
            {"runs": [self.manager.view(r) for r in rows], "next_cursor": next_cursor}
        )

    async def get_run(self, request: Request) -> Response:
        return JSONResponse(self.manager.view(self.manager.get(request.path_params["run_id"])))

    async def cancel_run(self, request: Request) -> Response:
        await _json_body(request)  # a body, if any, must still be JSON within bounds
        row = self.manager.cancel(request.path_params["run_id"])
        return JSONResponse(self.manager.view(row), status_code=202 if row.live else 200)

    async def approve(self, request: Request) -> Response:
        run_id = request.path_params["run_id"]
        self.manager.get(run_id)
        data = await _json_body(request)
        _only(data, ("approve", "digest", "reason"))
        approve, digest, reason = data.get("approve"), data.get("digest"), data.get("reason")
        if not isinstance(approve, bool):
            raise _bad("approve must be true or false")
        if not isinstance(digest, str):
            raise _bad("digest must be the pending call's digest (a string)")
        if reason is not None and (not isinstance(reason, str) or len(reason) > 4096):
            raise _bad("reason must be a string of at most 4096 characters")
        row = self.manager.answer(
            run_id, request.path_params["call_id"], approve=approve, digest=digest, reason=reason
        )
        return JSONResponse(self.manager.view(row), status_code=202 if row.live else 200)

    async def approvals(self, request: Request) -> Response:
        return JSONResponse({"approvals": self.manager.approvals()})


def _int(text: str | None, name: str, *, default: int | None, low: int, high: int) -> Any:
    if text is None:
        return default
    if not (text.isascii() and text.isdigit()) or not low <= int(text) <= high:
        raise _bad(f"{name} must be an integer from {low} to {high}")
    return int(text)
