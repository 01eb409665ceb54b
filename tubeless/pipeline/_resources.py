"""Resources that live as long as one run tree: made on first use, closed when the root ends.

:func:`run_resources` is entered by the root run of a tree (``run_root``); while it runs, the
context variable it sets is inherited by every task of the tree, so code deep inside (a model
adapter's ``decide``) can keep one object per run, an HTTP client with its connection pool,
through :func:`run_resource`, and know that it is closed when the run ends, however it ends.
Outside a run (a ``decide`` called by hand) :func:`run_resource` returns ``None`` and the
caller makes and closes its own.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Hashable
from contextlib import asynccontextmanager
from contextvars import ContextVar, Token
from typing import Any, TypeVar

__all__ = ["RunResources", "enter_run", "leave_run", "run_resource", "run_resources"]

T = TypeVar("T")

_log = logging.getLogger("tubeless.run")


class RunResources:
    """The resources of one run tree, by key, with their closers (run last made, first)."""

    __slots__ = ("_closers", "_values")

    def __init__(self) -> None:
        self._values: dict[Hashable, Any] = {}
        self._closers: list[Callable[[], Awaitable[None]]] = []

    def get(self, key: Hashable, make: Callable[[], T], close: Callable[[T], Awaitable[None]]) -> T:
        """The resource under ``key``, made by ``make()`` on first use."""
        if key in self._values:
            value: T = self._values[key]
            return value
        made = self._values[key] = make()
        self._closers.append(lambda: close(made))
        return made

    async def aclose(self) -> None:
        """Close every resource; a failing closer is logged, the others still run."""
        closers, self._closers = self._closers, []
        self._values.clear()
        for closer in reversed(closers):
            try:
                await closer()
            except Exception as exc:  # a resource's failure to close never fails the run
                _log.warning("closing a run resource failed: %s", type(exc).__name__)


_CURRENT: ContextVar[RunResources | None] = ContextVar("tubeless.run_resources", default=None)


def enter_run() -> tuple[RunResources, Token[RunResources | None]]:
    """Start the resources of a run tree (the root run's code; :func:`leave_run` ends them)."""
    resources = RunResources()
    return resources, _CURRENT.set(resources)


def leave_run(resources: RunResources, token: Token[RunResources | None]) -> Awaitable[None] | None:
    """End what :func:`enter_run` started: the closing to await, or ``None`` when the run made
    no resource (the common case, which so costs no coroutine: W3 counts it per run)."""
    _CURRENT.reset(token)
    return resources.aclose() if resources._closers else None


@asynccontextmanager
async def run_resources() -> AsyncIterator[RunResources]:
    """Resources for the run tree started inside the block, closed when it exits."""
    resources, token = enter_run()
    try:
        yield resources
    finally:
        closing = leave_run(resources, token)
        if closing is not None:
            await closing


def run_resource(
    key: Hashable, make: Callable[[], T], close: Callable[[T], Awaitable[None]]
) -> T | None:
    """The current run tree's resource under ``key`` (made on first use), or ``None`` outside
    a run."""
    resources = _CURRENT.get()
    return None if resources is None else resources.get(key, make, close)
