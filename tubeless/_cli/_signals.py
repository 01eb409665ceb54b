"""SIGINT and SIGTERM during ``tubeless run`` (DESIGN.md §6).

- The first signal cancels the run's token (handlers see ``ctx.signal``) and tells the reporter,
  which shows it (the plain report prints one notice line; the live view says ``cancelling…``).
  A template render in progress is stopped at once: it is CPU work that cannot poll the token.
- The second signal stops waiting: the run's task is cancelled and sync handlers still running
  in worker threads are abandoned, so the run records its cancellation, the sinks are flushed
  and closed, and the process exits 7 without waiting for those threads.
- Later signals change nothing; once a signal has cancelled the run, both stay ignored while
  the process exits, so a late one can never kill it half-way.

The handlers are plain ``signal.signal`` handlers, installed before the sinks open and kept
until they are closed. They only schedule work on the event loop (thread-safely), except for
the interruption of a render, which must happen on the interrupted thread itself. This module
is imported only when a run starts (it imports the pipeline package).
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import threading
from concurrent.futures import ThreadPoolExecutor
from types import FrameType
from typing import Any

from tubeless.errors import RUN_CANCELLED
from tubeless.pipeline._spi import clear_interrupt, interrupt, stop_waiting

__all__ = ["RunSignals"]

_SIGNALS = (signal.SIGINT, signal.SIGTERM)
_WORKER_PREFIX = "tubeless-worker"


class _Workers(ThreadPoolExecutor):
    """The run's worker threads; once abandoned, shutting down no longer waits for them."""

    abandoned = False

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        super().shutdown(wait=wait and not self.abandoned, cancel_futures=cancel_futures)


class RunSignals:
    """The signal handling of one run: install, attach to the run's loop, then restore.

    Args:
        token: The run's ``CancelToken``.
        reporter: The run's reporter (its ``cancelling(reason)`` is called), or ``None``.
    """

    def __init__(self, token: Any, reporter: Any) -> None:
        self.token = token
        self.reporter = reporter
        #: The names of the signals received, in order.
        self.names: list[str] = []
        #: The signals that acted on the run: the first (cancel) and the second (stop waiting).
        self.acted: list[str] = []
        self._previous: dict[int, Any] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._ended = False
        self._task: asyncio.Task[Any] | None = None
        self._workers = _Workers(thread_name_prefix=_WORKER_PREFIX)

    # -- lifetime -------------------------------------------------------------------------------
    def install(self) -> None:
        """Take SIGINT and SIGTERM over (only possible on the main thread)."""
        if threading.current_thread() is not threading.main_thread():
            return
        for signum in _SIGNALS:
            self._previous[signum] = signal.signal(signum, self._handle)

    def attach(self) -> None:
        """Called first thing in the run's task: signals now act on this loop and task."""
        loop = asyncio.get_running_loop()
        loop.set_default_executor(self._workers)
        self._task = asyncio.current_task()
        self._loop = loop
        for _ in self.names[:2]:  # signals that came before the loop
            loop.call_soon(self._on_loop)

    def detach(self) -> None:
        """Called last thing in the run's task: the loop is about to close."""
        self._loop = None
        self._ended = True

    def restore(self) -> None:
        """Give the signals back; after a signal-cancelled run, keep ignoring them instead."""
        for signum, previous in self._previous.items():
            signal.signal(signum, signal.SIG_IGN if self.names else previous)
        self._previous.clear()
        clear_interrupt()

    @property
    def abandoned_threads(self) -> bool:
        """Whether worker threads the run stopped waiting for are still running."""
        return self._workers.abandoned and any(
            thread.is_alive() and thread.name.startswith(_WORKER_PREFIX)
            for thread in threading.enumerate()
        )

    def cancelled_line(self) -> str:
        """The one ``error:`` line (without ``error: ``) of a run cancelled by signals."""
        acted = self.acted or self.names[:1]
        first = acted[0]
        if len(acted) == 1:
            return f"{RUN_CANCELLED}: {first} received; the run was cancelled"
        second = acted[1]
        said = f"{first} received twice" if second == first else f"{first} and {second} received"
        return f"{RUN_CANCELLED}: {said}; the run was cancelled without waiting for its handlers"

    # -- handling -------------------------------------------------------------------------------
    def _handle(self, signum: int, frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        self.names.append(name)
        count = len(self.names)
        loop = self._loop
        if loop is None:
            return  # before the run (applied by attach) or after it (nothing left to stop)
        if count <= 2:
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                loop.call_soon_threadsafe(self._on_loop)
        interrupt(frame, f"{name} received")  # raises into a template render, if one is running

    def _on_loop(self) -> None:
        """Act on the next signal received and not acted on yet (each is scheduled at least once;
        extra calls find nothing left to do)."""
        count = len(self.acted) + 1
        if count > min(len(self.names), 2) or (count == 2 and self._ended):
            return  # nothing left to act on; a second signal after the run has nothing to stop
        self.acted.append(self.names[count - 1])
        reason = f"{self.acted[-1]} received"
        if count == 1:
            self.token.cancel(reason)
            cancelling = getattr(self.reporter, "cancelling", None)
            if callable(cancelling) and not self._ended:  # an interrupted render may end it first
                cancelling(reason)
            return
        stop_waiting(self.token, reason)
        self._workers.abandoned = True
        if self._task is not None:
            self._task.cancel()
