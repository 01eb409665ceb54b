"""Calling user callables of either colour: awaiting what must be awaited, sync code in a thread.

Dependency-free (nothing from tubeless): the pipeline, the agent loop and the tools all call
user code through these three helpers.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import inspect
import types
from collections.abc import Callable
from typing import Any, Protocol

__all__ = ["CancelSignal", "call_in_thread", "is_awaitable", "maybe_await"]


class CancelSignal(Protocol):
    """What :func:`call_in_thread` needs of a cancellation token (``pipeline.CancelToken``)."""

    def cancel(self, reason: str | None = None) -> None:
        """Ask the running handler to return early."""

    def on_abandon(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Call ``callback`` once the run stops waiting for its threads; returns a remover."""


# Types whose instances are never awaitable: plain data, then every class met without an
# ``__await__`` (generators are left out: whether one is awaitable depends on the object).
_NEVER_AWAITABLE: set[type] = {dict, list, tuple, str, int, float, bool, type(None)}
_MAX_REMEMBERED = 1024
_COROUTINE = types.CoroutineType


def is_awaitable(value: Any) -> bool:
    """Whether ``value`` must be awaited (cheap for coroutines, plain data and known types)."""
    kind = type(value)
    if kind is _COROUTINE:
        return True
    if kind in _NEVER_AWAITABLE:
        return False
    if inspect.isawaitable(value):
        return True
    if (
        not hasattr(kind, "__await__")
        and not issubclass(kind, types.GeneratorType)
        and len(_NEVER_AWAITABLE) < _MAX_REMEMBERED
    ):
        _NEVER_AWAITABLE.add(kind)
    return False


async def maybe_await(value: Any) -> Any:
    """Await ``value`` if it is awaitable (sync callables may return coroutines)."""
    if inspect.isawaitable(value):
        return await value
    return value


def _settle(future: asyncio.Future[Any], ok: bool, value: Any) -> None:
    if future.done():
        return
    if ok:
        future.set_result(value)
    else:
        future.set_exception(value)


def _transportable(exc: BaseException) -> BaseException:
    """``exc`` as a future can carry it to the awaiting coroutine.

    A future refuses ``StopIteration`` (it would never settle), and ``GeneratorExit`` thrown
    into a coroutine closes every frame it passes instead of being caught: both travel as a
    ``RuntimeError`` caused by them, as a coroutine's own ``StopIteration`` would.
    """
    if isinstance(exc, (StopIteration, GeneratorExit)):
        wrapped = RuntimeError(f"handler raised {type(exc).__name__}")
        wrapped.__cause__ = exc
        return wrapped
    return exc


async def call_in_thread(
    fn: Callable[..., Any], *args: Any, signal: CancelSignal | None = None
) -> Any:
    """Run sync ``fn`` in a worker thread; on cancellation, wait for the thread to finish.

    A thread cannot be interrupted, so a cancelled caller first cancels ``signal`` (the handler
    sees it and should return early) and then waits for the thread; only a second cancellation,
    or ``signal`` giving up on its threads (:meth:`CancelSignal.on_abandon`), stops waiting
    (the thread is then left running).
    """
    loop = asyncio.get_running_loop()
    future: asyncio.Future[Any] = loop.create_future()
    context = contextvars.copy_context()

    def work() -> None:
        try:
            result = context.run(fn, *args)
        except BaseException as exc:
            outcome: tuple[bool, Any] = (False, _transportable(exc))
        else:
            outcome = (True, result)
        # RuntimeError: the loop closed while the thread ran, so nobody is waiting.
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(_settle, future, *outcome)

    loop.run_in_executor(None, work)
    try:
        return await asyncio.shield(future)
    except asyncio.CancelledError:
        if signal is not None:
            signal.cancel("The run was interrupted.")
        if not future.done():
            # The thread's own outcome no longer matters; only that it has finished.
            with contextlib.suppress(BaseException):
                await _thread_or_stop(future, signal)
        raise


async def _thread_or_stop(future: asyncio.Future[Any], signal: CancelSignal | None) -> None:
    """Wait for the thread's ``future``, or until the run stops waiting for its threads."""
    if signal is None:
        await future
        return
    loop = asyncio.get_running_loop()
    stopped: asyncio.Future[None] = loop.create_future()

    def wake() -> None:
        loop.call_soon_threadsafe(_settle, stopped, True, None)

    remove = signal.on_abandon(wake)
    try:
        await asyncio.wait((future, stopped), return_when=asyncio.FIRST_COMPLETED)
    finally:
        remove()
