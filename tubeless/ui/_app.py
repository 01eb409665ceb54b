"""The pages as a Starlette app: routes a few lines each over the page-data functions.

Starlette and Jinja2 are imported here only; ``tubeless.ui`` imports this module when an app is
made, so ``import tubeless`` never needs the ``serve`` extra.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

from jinja2 import Environment, FileSystemLoader, select_autoescape
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from tubeless.errors import TubelessError
from tubeless.ui import _security as sec
from tubeless.ui._actions import UiActions
from tubeless.ui._approvals import CheckpointApprovals, waiting_run
from tubeless.ui._compare import compare_page
from tubeless.ui._format import FILTERS
from tubeless.ui._forms import form_fields, form_input
from tubeless.ui._graph_page import GraphSource
from tubeless.ui._json import run_json, runs_json
from tubeless.ui._run_view import attempts, run_page
from tubeless.ui._runs import RunFilter, runs_page
from tubeless.ui._traces import Snapshot, TraceLibrary

__all__ = ["build_app"]

_HERE = Path(__file__).parent
_MAX_FORM_BYTES = 1024 * 1024
Handler = Callable[[Request], Awaitable[Response]]


class _Pages:
    """The state the routes share: stores, token, host actions, templates."""

    def __init__(
        self,
        traces: Sequence[str],
        *,
        checkpoints: str | None,
        token: str | None,
        actions: UiActions | None,
        project: Any,
    ) -> None:
        self.library = TraceLibrary(traces)
        self.approvals = None if checkpoints is None else CheckpointApprovals(checkpoints)
        self.token = token
        self.actions = actions
        self.graphs = GraphSource(project)
        self.env = Environment(
            loader=FileSystemLoader(_HERE / "templates"),
            autoescape=select_autoescape(default=True, default_for_string=True),
            trim_blocks=True,
            lstrip_blocks=True,
        )
        self.env.filters.update(FILTERS)

    # -- plumbing ------------------------------------------------------------------------------
    async def snapshot(self) -> Snapshot:
        """The stores' snapshot, read off the event loop: reading a large trace takes seconds,
        and under serve the loop also drives runs."""
        return await run_in_threadpool(self.library.snapshot)

    def render(self, request: Request, name: str, status: int = 200, **context: Any) -> Response:
        csrf = request.cookies.get(sec.CSRF_COOKIE) or sec.new_csrf()
        base = request.scope.get("root_path", "").rstrip("/")
        html = self.env.get_template(name).render(
            base=base,
            csrf=csrf,
            serve=self.actions is not None,
            path=request.url.path,
            logged_in=self.token is not None,
            **context,
        )
        response = HTMLResponse(html, status_code=status)
        if request.cookies.get(sec.CSRF_COOKIE) != csrf:
            response.set_cookie(
                sec.CSRF_COOKIE, csrf, httponly=True, samesite="strict", path=base or "/"
            )
        return response

    def guarded(self, handler: Handler) -> Handler:
        """``handler`` behind the login (a page redirects there; a POST is refused) and, for a
        POST, the CSRF check."""

        async def guard(request: Request) -> Response:
            if not sec.session_ok(
                self.token,
                request.cookies.get(sec.SESSION_COOKIE),
                request.headers.get("authorization"),
            ):
                if request.method != "GET":
                    return self.render(request, "error.html", 401, message="Log in first.")
                base = request.scope.get("root_path", "").rstrip("/")
                path = request.url.path  # the whole path, the mount's prefix included
                path = path[len(base) :] if base and path.startswith(base) else path
                target = path + (f"?{request.url.query}" if request.url.query else "")
                return RedirectResponse(f"{base}/login?{urlencode({'next': target})}", 303)
            if request.method == "POST":
                form = await _form(request)
                if form is None:
                    return self.render(request, "error.html", 413, message="Form too large.")
                cookie = request.cookies.get(sec.CSRF_COOKIE)
                if not sec.csrf_ok(cookie, form.get(sec.CSRF_FIELD)):
                    return self.render(
                        request, "error.html", 403, message="The form expired; reload the page."
                    )
                request.state.form = form
            return await handler(request)

        return guard

    # -- pages ---------------------------------------------------------------------------------
    async def runs(self, request: Request) -> Response:
        data = runs_page(await self.snapshot(), RunFilter.from_query(request.query_params))
        if request.query_params.get("format") == "json":
            return JSONResponse(runs_json(data))
        return self.render(request, "runs.html", **data)

    async def run(self, request: Request) -> Response:
        run_id = request.path_params["run_id"]
        try:
            turn_page = int(request.query_params.get("turns", "1"))
        except ValueError:
            turn_page = 1
        snapshot = await self.snapshot()
        # A served run that resumed is several root runs (its attempts): the page shows the
        # latest one unless ``?attempt=this`` asks for exactly this run.
        chain = attempts(snapshot, run_id)
        shown = run_id if request.query_params.get("attempt") == "this" else chain[-1]
        data = run_page(snapshot, shown, turn_page=turn_page)
        events = None if self.actions is None else self.actions.events_url(run_id)
        as_json = request.query_params.get("format") == "json"
        if data is None:
            if as_json:
                return JSONResponse({"error": {"message": f"no trace holds run {run_id!r}"}}, 404)
            # A run the host streams events for exists there; its first records are on their
            # way (a run started from the form a moment ago): the page waits for them.
            status = 404 if events is None else 200
            return self.render(request, "missing.html", status, run_id=run_id, events=events)
        if as_json:
            return JSONResponse(run_json(data))
        live = data["root"].status in ("running", "waiting")
        chain = chain if len(chain) > 1 else []
        return self.render(
            request, "run.html", events=events if live else None, attempts=chain, **data
        )

    async def batch(self, request: Request) -> Response:
        snapshot = await self.snapshot()
        number = request.path_params["number"]
        found = next((b for b in snapshot.batches if b.number == number), None)
        if found is None:
            return self.render(request, "error.html", 404, message="No such batch.")
        return self.render(request, "batch.html", batch=found, trees=snapshot.trees)

    async def evaluation(self, request: Request) -> Response:
        number = request.path_params["number"]
        evals = (await self.snapshot()).evals
        found = next((e for e in evals if e.number == number), None)
        if found is None:
            return self.render(request, "error.html", 404, message="No such eval report.")
        return self.render(request, "eval.html", report=found)

    async def compare(self, request: Request) -> Response:
        a = request.query_params.get("a", "").strip()
        b = request.query_params.get("b", "").strip()
        snapshot = await self.snapshot()
        data = compare_page(snapshot, a, b) if a and b else None
        recent = snapshot.rows[:50]
        return self.render(request, "compare.html", data=data, a=a, b=b, recent=recent)

    async def graph(self, request: Request) -> Response:
        data = await run_in_threadpool(self.graphs.page, request.query_params.get("entry"))
        return self.render(request, "graph.html", **data)

    async def approvals_page(self, request: Request, notice: str | None = None) -> Response:
        pending: list[Any] = []
        problem = None
        try:
            if self.actions is not None:
                pending = [_shown(dict(p)) for p in await self.actions.pending_approvals()]
            elif self.approvals is not None:
                pending = await run_in_threadpool(self.approvals.pending)
                snapshot = await self.snapshot()
                for item in pending:
                    item["run_id"] = waiting_run(snapshot, item)
        except (TubelessError, OSError) as exc:
            problem = str(exc)
        return self.render(
            request,
            "approvals.html",
            pending=pending,
            problem=problem,
            notice=notice or request.query_params.get("notice"),
            configured=self.actions is not None or self.approvals is not None,
        )

    async def answer(self, request: Request) -> Response:
        form = request.state.form
        approve = form.get("decision") == "approve"
        reason = form.get("reason", "").strip()[:2000] or None
        call_id = form.get("call_id", "")
        try:
            if self.actions is not None:
                await self.actions.answer_approval(
                    form.get("run_id", ""),
                    call_id,
                    digest=form.get("digest", ""),
                    approve=approve,
                    reason=None if approve else reason,
                )
            elif self.approvals is not None:
                await run_in_threadpool(
                    self.approvals.answer,
                    key=form.get("key", ""),
                    call_id=call_id,
                    route=form.get("route") or None,
                    digest=form.get("digest", ""),
                    approve=approve,
                    reason=None if approve else reason,
                )
            else:
                return self.render(request, "error.html", 404, message="No checkpoint store.")
        except (LookupError, TubelessError, OSError) as exc:
            code = getattr(exc, "code", None)
            text = f"{code}: {exc}" if code and not str(exc).startswith(code) else str(exc)
            return await self.approvals_page(request, notice=f"Not recorded: {text}")
        verb = "approved" if approve else "denied"
        base = request.scope.get("root_path", "").rstrip("/")
        notice = f"Call {call_id} {verb}."
        if self.actions is None:
            notice += " Run the checkpoint key again to resume it."
        return RedirectResponse(f"{base}/approvals?{urlencode({'notice': notice})}", 303)

    async def new_run(self, request: Request) -> Response:
        if self.actions is None:
            return self.render(request, "error.html", 404, message="Starting runs needs serve.")
        entries = list(self.actions.entries())
        chosen = request.query_params.get("entry") or (entries[0].id if entries else "")
        if request.method == "POST":
            chosen = request.state.form.get("entry", "")
        entry = next((e for e in entries if e.id == chosen), None)
        problem = None
        if request.method == "POST" and entry is not None:
            try:
                raw = form_input(entry.input_schema, request.state.form)
                run_id = await self.actions.start_run(entry.id, raw)
            except ValueError as exc:
                problem = str(exc)
            except TubelessError as exc:
                problem = f"{exc.code}: {exc.message}"
            else:
                base = request.scope.get("root_path", "").rstrip("/")
                return RedirectResponse(f"{base}/runs/{quote(run_id, safe='')}", 303)
        fields = [] if entry is None else form_fields(entry.input_schema)
        status = 422 if problem else 200
        return self.render(
            request,
            "new.html",
            status,
            entries=entries,
            entry=entry,
            fields=fields,
            problem=problem,
            posted=request.state.form if request.method == "POST" else {},
        )

    async def login(self, request: Request) -> Response:
        base = request.scope.get("root_path", "").rstrip("/")
        target = sec.safe_next(request.query_params.get("next"))
        if request.method == "GET":
            return self.render(request, "login.html", next=target, problem=None)
        form = await _form(request)
        if form is None or not sec.csrf_ok(
            request.cookies.get(sec.CSRF_COOKIE), form.get(sec.CSRF_FIELD)
        ):
            return self.render(request, "login.html", 403, next=target, problem="expired")
        target = sec.safe_next(form.get("next"))
        if self.token is None:
            return RedirectResponse(base + target, 303)
        if not sec.token_matches(self.token, form.get("token", "").strip()):
            return self.render(request, "login.html", 401, next=target, problem="wrong")
        response = RedirectResponse(base + target, 303)
        # Path "/": under serve, the event stream the run page follows lives outside the mount
        # (/v1/runs/{id}/events) and an EventSource can only authenticate with this cookie.
        response.set_cookie(
            sec.SESSION_COOKIE,
            sec.session_value(self.token),
            httponly=True,
            samesite="strict",
            path="/",
        )
        return response


def _shown(pending: dict[str, Any]) -> dict[str, Any]:
    import json

    from tubeless.ui._approvals import MAX_ARGUMENT_CHARS

    text = json.dumps(pending.get("input"), ensure_ascii=False, indent=2, sort_keys=True)
    if len(text) > MAX_ARGUMENT_CHARS:
        text = text[:MAX_ARGUMENT_CHARS] + "\n…"
    return {**pending, "arguments": text}


async def _form(request: Request) -> dict[str, str] | None:
    """A posted urlencoded or multipart form as strings (``None`` when over 1 MiB)."""
    size = request.headers.get("content-length")
    if size is not None and size.isdigit() and int(size) > _MAX_FORM_BYTES:
        return None
    form = await request.form(max_files=0, max_fields=200)
    return {key: value for key, value in form.items() if isinstance(value, str)}


def _headers(app: Any) -> Any:
    """ASGI middleware adding :data:`~tubeless.ui._security.SECURITY_HEADERS` to responses."""

    async def middleware(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return

        async def send_with_headers(message: Any) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                names = {name.lower() for name, _ in headers}
                for name, value in sec.SECURITY_HEADERS.items():
                    if name.encode() not in names:
                        headers.append((name.encode(), value.encode()))
                message = {**message, "headers": headers}
            await send(message)

        await app(scope, receive, send_with_headers)

    return middleware


def build_app(
    traces: Sequence[str],
    *,
    checkpoints: str | None,
    token: str | None,
    actions: UiActions | None,
    project: Any = None,
) -> Starlette:
    """The Starlette app of :func:`tubeless.ui.create_ui_app`."""
    pages = _Pages(traces, checkpoints=checkpoints, token=token, actions=actions, project=project)
    g = pages.guarded
    routes = [
        Route("/", g(pages.runs)),
        Route("/runs/{run_id:path}", g(pages.run)),
        Route("/batches/{number:int}", g(pages.batch)),
        Route("/evals/{number:int}", g(pages.evaluation)),
        Route("/compare", g(pages.compare)),
        Route("/graph", g(pages.graph)),
        Route("/approvals", g(pages.approvals_page), methods=["GET"]),
        Route("/approvals", g(pages.answer), methods=["POST"]),
        Route("/new", g(pages.new_run), methods=["GET", "POST"]),
        Route("/login", pages.login, methods=["GET", "POST"]),
        Mount("/static", app=StaticFiles(directory=_HERE / "static"), name="static"),
    ]
    app = Starlette(routes=routes)
    app.add_middleware(_HeadersMiddleware)
    return app


class _HeadersMiddleware:
    """Adds the security headers to every response."""

    def __init__(self, app: Any) -> None:
        self.app = _headers(app)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        await self.app(scope, receive, send)
