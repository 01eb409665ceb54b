"""``tubeless serve``: a project as a durable HTTP service (DESIGN.md §21).

``create_app(project, ...)`` is an ASGI application on Starlette (extra ``tubeless[serve]``):
runs are checkpointed runs in background tasks, their traces are resumable event streams, and
every request passes a Host allowlist, a bearer token, CORS and body-size guards first.
Starlette is imported when ``create_app`` is first used, never with ``import tubeless``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tubeless.serve._config import ServeConfig

if TYPE_CHECKING:
    from tubeless.serve._app import create_app

__all__ = ["ServeConfig", "create_app", "missing_extra"]

#: What to install when the extra is missing.
INSTALL_HINT = "pip install 'tubeless[serve]'"


def missing_extra() -> str | None:
    """A message naming the install command when starlette, uvicorn or sse-starlette is
    missing; ``None`` when all are importable."""
    import importlib.util

    for module in ("starlette", "uvicorn", "sse_starlette"):
        if importlib.util.find_spec(module) is None:
            return f"tubeless serve needs {module}, which is not installed: {INSTALL_HINT}"
    return None


def __getattr__(name: str) -> Any:
    if name == "create_app":
        problem = missing_extra()
        if problem is not None:
            raise ImportError(problem)
        from tubeless.serve._app import create_app

        globals()[name] = create_app
        return create_app
    raise AttributeError(f"module 'tubeless.serve' has no attribute {name!r}")
