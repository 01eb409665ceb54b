"""Web pages over trace stores and checkpoint stores (``tubeless ui``; mounted by serve at /ui).

The pages are runs (filtered, newest first), a run (ids, limits and budget meters, the turn
timeline with calls and nested agents), approvals (answered through the checkpoint store, or
through the host's :class:`UiActions`), batch results, a project's graph and two runs compared.
They are rendered on the server from Jinja2 templates (autoescape on) with one CSS and one
JavaScript file, work without JavaScript except live updates, and sit behind the serve token.

Example:
    >>> app = create_ui_app(["runs.sqlite"], checkpoints="checkpoints.sqlite", token=None)
    ... # doctest: +SKIP

``starlette`` (the ``serve`` extra) is imported only when an app is made. A host that streams
events to the pages accepts the pages' login on that stream: ``session_ok(token,
request.cookies.get(SESSION_COOKIE), None)`` (an ``EventSource`` cannot send a bearer header).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from tubeless.ui._actions import UiActions, UiEntry
from tubeless.ui._security import SESSION_COOKIE, session_ok

if TYPE_CHECKING:
    from starlette.applications import Starlette

__all__ = ["SESSION_COOKIE", "UiActions", "UiEntry", "create_ui_app", "session_ok"]


def create_ui_app(
    traces: Sequence[str],
    *,
    checkpoints: str | None,
    token: str | None,
    actions: UiActions | None = None,
    project: Any = None,
) -> Starlette:
    """The pages as an ASGI (Starlette) app.

    Args:
        traces: Trace stores (NDJSON or SQLite paths, or URLs ``read_trace`` accepts) and batch
            output files; read again when they change.
        checkpoints: A checkpoint store (path or ``postgresql://`` URL) whose waiting calls the
            approvals page lists and answers; ``None`` for none.
        token: The serve token a visitor logs in with; ``None`` turns the login off (only for a
            loopback-bound server, as ``serve --no-auth``).
        actions: What a host that mounts the pages offers (starting runs, answering approvals
            through its run manager, live events); ``None`` for ``tubeless ui``.
        project: A project path or a loaded project for the graph page; ``None`` for none.

    Raises:
        ImportError: Starlette is missing (install ``tubeless[serve]``).
    """
    try:
        from tubeless.ui._app import build_app
    except ModuleNotFoundError as exc:
        if exc.name and exc.name.split(".")[0] in ("starlette", "anyio"):
            raise ImportError(
                "tubeless ui needs Starlette: pip install 'tubeless[serve]'", name=exc.name
            ) from exc
        raise
    return build_app(
        list(traces), checkpoints=checkpoints, token=token, actions=actions, project=project
    )
