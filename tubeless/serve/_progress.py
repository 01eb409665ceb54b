"""A served run's ``turns`` and ``calls`` while it runs, not only once it stops.

:class:`Progress` is a ``TurnHooks`` member the run manager installs for each run it executes
(through the agent layer's ``OBSERVER``, wrapping a protocol's feed when one follows the run).
It hears the root agent's commit points and keeps two numbers in memory: the turn it reached
(``reserved``/``decided``) and the calls its budget admitted (``admitted``, ``reduced``). The
worker running the run shows them at once; the registry, which every other worker reads, gets
them at most about once a second (changes are batched on a timer, the first one a second after
the run started), so a run shorter than a second writes nothing more than before and a long run
of many quick turns about one row update a second. When the run stops, :meth:`close` cancels any
pending write and the run's end records the final counts from its checkpoint.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any

from tubeless.agent._spi import CallSite, Proceed, TurnHooks

if TYPE_CHECKING:
    from tubeless.agent._decisions import Continue, Finish
    from tubeless.agent._prepare import PreparedCall
    from tubeless.agent._turn import TurnInput
    from tubeless.frozen import FrozenDict
    from tubeless.pipeline import StepContext

__all__ = ["WRITE_EVERY_S", "Progress"]

log = logging.getLogger("tubeless.serve")

#: The least time between two registry writes of one run's progress.
WRITE_EVERY_S = 1.0

Outcome = Mapping[str, Any]

#: ``write(turns, calls)``: store the run's progress where other workers read it.
Write = Callable[[int, int], None]


class Progress(TurnHooks):
    """Counts one run's root-agent turns and admitted calls (see the module docstring)."""

    __slots__ = (
        "_closed",
        "_handle",
        "_last_write",
        "_loop",
        "_root",
        "_scheduled",
        "_write",
        "_written",
        "calls",
        "inner",
        "turns",
    )

    def __init__(
        self, write: Write, loop: asyncio.AbstractEventLoop, inner: TurnHooks | None = None
    ) -> None:
        self.inner = inner
        self.turns = 0
        self.calls = 0
        self._write = write
        self._loop = loop
        self._root: object | None = None
        self._written = (0, 0)
        # Counted from the start: a run shorter than a second writes nothing before its end.
        self._last_write = time.monotonic()
        self._scheduled = False
        self._handle: asyncio.TimerHandle | asyncio.Handle | None = None
        self._closed = False

    # -- counting ----------------------------------------------------------------------------
    def _is_root(self, t: TurnInput) -> bool:
        """Whether ``t`` is a turn of the run's own agent (the first invocation without a
        parent heard), not of an agent called as a tool."""
        invocation = t.invocation
        if self._root is None and len(invocation.scope.chain) == 1:
            self._root = invocation
        return invocation is self._root

    def _saw(self, t: TurnInput, calls: int) -> None:
        if not self._is_root(t):
            return
        turns = max(self.turns, t.turn)
        calls = max(self.calls, calls)
        if (turns, calls) == (self.turns, self.calls):
            return
        self.turns, self.calls = turns, calls
        if not self._scheduled and not self._closed:
            self._scheduled = True
            # Hook points run in the run's task; a thread-safe hand-over costs little and
            # keeps the registry written from the event loop only.
            self._handle = self._loop.call_soon_threadsafe(self._plan)

    def _plan(self) -> None:
        delay = self._last_write + WRITE_EVERY_S - time.monotonic()
        if delay <= 0:
            self._flush()
        else:
            self._handle = self._loop.call_later(delay, self._flush)

    def _flush(self) -> None:
        self._scheduled = False
        self._handle = None
        if self._closed or (self.turns, self.calls) == self._written:
            return
        self._last_write = time.monotonic()
        self._written = (self.turns, self.calls)
        try:
            self._write(self.turns, self.calls)
        except Exception:  # a busy store: the next change (or the run's end) writes again
            log.exception("serve: writing a run's progress failed")

    def close(self) -> None:
        """The run stopped: write nothing more (its end records the final counts)."""
        self._closed = True
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    # -- hook points (each also passed on to ``inner``) ----------------------------------------
    def connected(self, descriptors: Mapping[str, Mapping[str, Any]]) -> None:
        if self.inner is not None:
            self.inner.connected(descriptors)

    def reserved(self, t: TurnInput) -> None:
        self._saw(t, t.calls)
        if self.inner is not None:
            self.inner.reserved(t)

    def resume_decision(self, t: TurnInput) -> Continue | None:
        return None if self.inner is None else self.inner.resume_decision(t)

    def readmitted(self, t: TurnInput) -> bool:
        return False if self.inner is None else self.inner.readmitted(t)

    def decided(
        self, t: TurnInput, decision: Finish | Continue, prepared: tuple[PreparedCall, ...] | None
    ) -> None:
        self._saw(t, t.calls)
        if self.inner is not None:
            self.inner.decided(t, decision, prepared)

    def admitted(self, ctx: StepContext, t: TurnInput, count: int) -> None:
        self._saw(t, t.calls + count)
        if self.inner is not None:
            self.inner.admitted(ctx, t, count)

    def gated(
        self, t: TurnInput, requests: tuple[FrozenDict, ...], approver: Callable[[Any], Any] | None
    ) -> Callable[[Any], Any] | None:
        return approver if self.inner is None else self.inner.gated(t, requests, approver)

    def around_call(self, site: CallSite, proceed: Proceed) -> Awaitable[Outcome]:
        return proceed(site) if self.inner is None else self.inner.around_call(site, proceed)

    def reduced(self, ctx: StepContext, t: TurnInput, following: TurnInput) -> None:
        self._saw(t, following.calls)
        if self.inner is not None:
            self.inner.reduced(ctx, t, following)

    def ended(self, result: Any, error: BaseException | None) -> None:
        if self.inner is not None:
            self.inner.ended(result, error)
