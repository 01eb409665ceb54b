"""Cooperative cancellation: a token shared by a run, its handlers and its child runs.

Two harder stops sit beside the token, for the CLI's signal handling:

- :func:`stop_waiting` marks a token so that a run cancelled afterwards no longer waits for
  sync handlers in worker threads (they are left running; the process is about to exit).
- :func:`interruptibly` runs CPU-bound work on the main thread that cannot poll the token (a
  template render); :func:`interrupt`, called from a signal handler, stops it with
  :class:`RunCancelledError`.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any, TypeVar

from tubeless.errors import RUN_CANCELLED, TubelessError

__all__ = [
    "YIELD_EVERY",
    "CancelToken",
    "RunCancelledError",
    "clear_interrupt",
    "interrupt",
    "interruptibly",
    "stop_waiting",
    "stopped_waiting",
]

T = TypeVar("T")

#: Loops that start child runs one after another yield to the event loop after this many, so
#: children that never suspend (quick async handlers) cannot starve signals, timers and I/O.
YIELD_EVERY = 32


class RunCancelledError(TubelessError):
    """Raised by ``ctx.sleep`` and ``CancelToken.raise_if_cancelled`` once a run is cancelled.

    Handlers may let it propagate: the step is then recorded as cancelled, not failed.
    """

    code = RUN_CANCELLED

    def __init__(self, reason: str | None = None) -> None:
        super().__init__(self.code, reason or "The run was cancelled.")
        self.reason = reason


class CancelToken:
    """A one-way cancellation flag that handlers poll or await.

    ``cancelled`` may be read from any thread; ``cancel`` may be called from any thread, and
    wakes every coroutine awaiting ``wait()`` on its own event loop.
    """

    __slots__ = ("_callbacks", "_cancelled", "_lock", "_reason", "_stop", "_waiters")

    def __init__(self) -> None:
        self._cancelled = False
        self._reason: str | None = None
        self._lock = threading.Lock()
        self._waiters: list[asyncio.Future[None]] = []
        self._callbacks: list[Callable[[], None]] = []
        # Cancelled by stop_waiting(): the run no longer waits for its worker threads.
        self._stop: CancelToken | None = None

    @property
    def cancelled(self) -> bool:
        """Whether ``cancel`` was called."""
        return self._cancelled

    @property
    def reason(self) -> str | None:
        """The reason given to ``cancel``, if any."""
        return self._reason

    def cancel(self, reason: str | None = None) -> None:
        """Cancel cooperatively; later calls are ignored."""
        with self._lock:
            if self._cancelled:
                return
            self._cancelled = True
            self._reason = reason
            waiters, self._waiters = self._waiters, []
            callbacks, self._callbacks = self._callbacks, []
        for waiter in waiters:
            loop = waiter.get_loop()
            if _running_loop() is loop:
                _wake(waiter)
            else:
                loop.call_soon_threadsafe(_wake, waiter)
        for callback in callbacks:
            callback()

    def raise_if_cancelled(self) -> None:
        """Raise :class:`RunCancelledError` when cancelled."""
        if self._cancelled:
            raise RunCancelledError(self._reason)

    async def wait(self) -> None:
        """Return once the token is cancelled."""
        with self._lock:
            if self._cancelled:
                return
            waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
        try:
            await waiter
        finally:
            with self._lock:
                if waiter in self._waiters:
                    self._waiters.remove(waiter)

    def add_callback(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Call ``callback`` on cancellation (now, if already cancelled); returns a remover."""
        with self._lock:
            if not self._cancelled:
                self._callbacks.append(callback)

                def remove() -> None:
                    with self._lock:
                        if callback in self._callbacks:
                            self._callbacks.remove(callback)

                return remove
        callback()
        return _noop

    async def sleep(self, seconds: float) -> None:
        """Sleep, waking early with :class:`RunCancelledError` if cancelled."""
        self.raise_if_cancelled()
        loop = asyncio.get_running_loop()
        done: asyncio.Future[None] = loop.create_future()
        timer = loop.call_later(max(seconds, 0.0), _wake, done)

        def wake() -> None:
            loop.call_soon_threadsafe(_wake, done)

        remove = self.add_callback(wake)
        try:
            await done
        finally:
            timer.cancel()
            remove()
        self.raise_if_cancelled()

    def on_abandon(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Call ``callback`` when :func:`stop_waiting` gives up on this run's worker threads."""
        return stopped_waiting(self).add_callback(callback)

    def __repr__(self) -> str:
        return f"CancelToken(cancelled={self._cancelled})"


def stop_waiting(token: CancelToken, reason: str | None = None) -> None:
    """Cancel ``token`` and stop waiting for the sync handlers of its run.

    A run whose awaiting task is cancelled normally waits for handlers running in worker threads
    to return. After this call it records them as cancelled at once and leaves their threads
    running: only a process that is about to exit should do this (the CLI's second signal).
    """
    token.cancel(reason)
    stopped_waiting(token).cancel(reason)


def stopped_waiting(token: CancelToken) -> CancelToken:
    """The token :func:`stop_waiting` cancels for ``token`` (created on first use)."""
    with token._lock:
        if token._stop is None:
            token._stop = CancelToken()
        return token._stop


class _Interrupted(KeyboardInterrupt):
    """Raised by :func:`interrupt` inside :func:`interruptibly`.

    A ``BaseException``, so that no ``except Exception`` in the interrupted code catches it;
    :func:`interruptibly` turns it into :class:`RunCancelledError` on its way out.
    """

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def interruptibly(fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
    """Call ``fn``, CPU-bound work that cannot poll a token, so that a signal may stop it.

    While ``fn`` runs, :func:`interrupt` (called from a signal handler on the same thread)
    raises into it; the interruption comes out of here as :class:`RunCancelledError`. Only the
    main thread receives signals, so ``fn`` running elsewhere is simply not interruptible.
    """
    pending = _pending[0]
    if pending is not None:
        raise RunCancelledError(pending)
    try:
        return fn(*args, **kwargs)
    except _Interrupted as exc:
        raise RunCancelledError(exc.reason) from None


_REGION = interruptibly.__code__
#: How many frames a signal handler looks through for a region (jinja nests a few per block).
_MAX_FRAMES = 10_000
#: The reason of an interruption that came outside any region: regions started later stop at once
#: (the work they would do was started after the signal, before the loop could cancel the run).
_pending: list[str | None] = [None]


def interrupt(frame: FrameType | None, reason: str) -> None:
    """From a signal handler given ``frame``: stop the :func:`interruptibly` work it interrupted.

    Raises (into the interrupted code) when ``frame`` runs inside :func:`interruptibly`;
    either way, every region entered from now on stops at once, until :func:`clear_interrupt`.
    The region is found on the call stack, so a signal that lands while a region starts or
    ends can leave nothing behind.
    """
    _pending[0] = reason
    for _ in range(_MAX_FRAMES):
        if frame is None:
            return
        if frame.f_code is _REGION:
            raise _Interrupted(reason)
        frame = frame.f_back


def clear_interrupt() -> None:
    """Forget an :func:`interrupt` (the run it was meant for has ended)."""
    _pending[0] = None


def _noop() -> None:
    return None


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def _wake(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)
