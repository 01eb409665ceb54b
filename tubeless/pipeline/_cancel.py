"""Cooperative cancellation: a token shared by a run, its handlers and its child runs."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable

from tubeless.errors import RUN_CANCELLED, TubelessError

__all__ = ["CancelToken", "RunCancelledError"]


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

    __slots__ = ("_callbacks", "_cancelled", "_lock", "_reason", "_waiters")

    def __init__(self) -> None:
        self._cancelled = False
        self._reason: str | None = None
        self._lock = threading.Lock()
        self._waiters: list[asyncio.Future[None]] = []
        self._callbacks: list[Callable[[], None]] = []

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

    def __repr__(self) -> str:
        return f"CancelToken(cancelled={self._cancelled})"


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
