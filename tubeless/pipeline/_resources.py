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
from contextvars import ContextVar
from typing import Any, TypeVar

__all__ = ["RunResources", "run_resource", "run_resources"]

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


@asynccontextmanager
async def run_resources() -> AsyncIterator[RunResources]:
    """Resources for the run tree started inside the block, closed when it exits."""
    resources = RunResources()
    token = _CURRENT.set(resources)
    try:
        yield resources
    finally:
        _CURRENT.reset(token)
        await resources.aclose()


def run_resource(
    key: Hashable, make: Callable[[], T], close: Callable[[T], Awaitable[None]]
) -> T | None:
    """The current run tree's resource under ``key`` (made on first use), or ``None`` outside
    a run."""
    resources = _CURRENT.get()
    return None if resources is None else resources.get(key, make, close)
