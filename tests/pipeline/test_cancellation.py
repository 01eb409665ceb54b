"""Cooperative cancellation through ``signal=CancelToken()`` and of the task awaiting ``run()``
(UPSTREAM 1.7 and 1.10; DESIGN 3, "Cancellation"). Every test also checks nothing is left running.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from tests.fixtures.runs import error_shape, shape
from tubeless import CancelToken, define_pipeline, step
from tubeless.testing import capture_trace

#: A hang guard for handlers that poll from worker threads; never part of an assertion.
POLL_LIMIT_S = 10.0


def stray_tasks() -> list[asyncio.Task[Any]]:
    current = asyncio.current_task()
    return [t for t in asyncio.all_tasks() if t is not current]


def returns(value: Any, calls: list[str]) -> Callable[..., Any]:
    async def run(inputs: dict[str, Any], ctx: Any) -> Any:
        calls.append(ctx.step_id)
        return value

    return run


async def wait_for(event: threading.Event) -> None:
    """Wait on the loop for an event set by a handler (polling: no helper thread or task)."""
    async with asyncio.timeout(POLL_LIMIT_S):
        while not event.is_set():
            await asyncio.sleep(0.001)


def poll_signal(ctx: Any) -> bool:
    """Poll ``ctx.signal.cancelled`` from a worker thread; whether cancellation was seen."""
    deadline = time.monotonic() + POLL_LIMIT_S
    while not ctx.signal.cancelled and time.monotonic() < deadline:
        time.sleep(0.002)
    return bool(ctx.signal.cancelled)


async def _cancel_later(token: CancelToken, started: threading.Event) -> None:
    await wait_for(started)
    token.cancel("stop")


async def _run_with_canceller(
    pipeline: Any, token: CancelToken, started: threading.Event, **controls: Any
) -> Any:
    canceller = asyncio.create_task(_cancel_later(token, started))
    try:
        return await pipeline.run(signal=token, **controls)
    finally:
        await canceller


# -- a token cancelled while a step runs ----------------------------------------------------------
def _waits_on_signal(started: threading.Event, finished: threading.Event) -> Callable[..., Any]:
    async def run(inputs: dict[str, Any], ctx: Any) -> None:
        started.set()
        try:
            await ctx.signal.wait()
            ctx.signal.raise_if_cancelled()
        finally:
            finished.set()

    return run


def _sleeps(started: threading.Event, finished: threading.Event) -> Callable[..., Any]:
    async def run(inputs: dict[str, Any], ctx: Any) -> None:
        started.set()
        try:
            await ctx.sleep(3600)
        finally:
            finished.set()

    return run


def _polls_in_thread(started: threading.Event, finished: threading.Event) -> Callable[..., Any]:
    def run(inputs: dict[str, Any], ctx: Any) -> str:
        started.set()
        try:
            poll_signal(ctx)
            ctx.signal.raise_if_cancelled()
            return "never cancelled"
        finally:
            finished.set()

    return run


BLOCKING_HANDLERS = [
    pytest.param(_waits_on_signal, id="async-awaits-signal-wait"),
    pytest.param(_sleeps, id="async-ctx-sleep"),
    pytest.param(_polls_in_thread, id="sync-thread-polls-signal"),
]


@pytest.mark.parametrize("make_handler", BLOCKING_HANDLERS)
async def test_token_cancel_cancels_the_running_step_and_every_remaining_runnable_step(
    make_handler: Callable[[threading.Event, threading.Event], Callable[..., Any]],
) -> None:
    started, finished = threading.Event(), threading.Event()
    calls: list[str] = []
    finalizer_calls: list[Any] = []
    pipeline = define_pipeline(
        id="cancel",
        steps=[
            step("a", make_handler(started, finished)),
            step("b", returns("B", calls), depends_on="a"),
            step("s", returns("S", calls), dry_run="skip"),
            step("t", returns("T", calls), depends_on="s"),
            step("c", returns("C", calls)),
        ],
        targets=["b", "t", "c"],
        finalize=lambda outputs, ctx: finalizer_calls.append(outputs),
    )
    token = CancelToken()
    run = await _run_with_canceller(pipeline, token, started, dry_run=True)

    assert finished.is_set()
    assert stray_tasks() == []
    assert shape(run) == [
        ("a", "cancelled", None, None),
        ("b", "cancelled", None, None),
        ("s", "skipped", "dry-run", None),
        ("t", "skipped", "unmet-dependency", "s"),
        ("c", "cancelled", None, None),
    ]
    assert [(r.id, r.attempt_id is not None, r.started_at_ms is not None) for r in run.steps] == [
        ("a", True, True),
        ("b", False, False),
        ("s", False, False),
        ("t", False, False),
        ("c", False, False),
    ]
    cancelled = run.step("a").error
    assert cancelled is not None
    assert (cancelled.code, cancelled.kind, cancelled.message) == (
        "TUBELESS_RUN_CANCELLED",
        "cancellation",
        "stop",
    )
    for step_id in ("b", "c"):
        error = run.step(step_id).error
        assert error is not None
        assert (error.code, error.kind) == ("TUBELESS_RUN_CANCELLED", "cancellation")
    assert error_shape(run) == [("TUBELESS_RUN_CANCELLED", "cancellation", "execution", "a")]
    assert (run.status, run.finalized, run.value) == ("cancelled", False, None)
    assert calls == []
    assert finalizer_calls == []


def _raises_after_signal_async(
    started: threading.Event, finished: threading.Event
) -> Callable[..., Any]:
    async def run(inputs: dict[str, Any], ctx: Any) -> None:
        started.set()
        try:
            await ctx.signal.wait()
            raise ValueError("gave up")
        finally:
            finished.set()

    return run


def _raises_after_signal_sync(
    started: threading.Event, finished: threading.Event
) -> Callable[..., Any]:
    def run(inputs: dict[str, Any], ctx: Any) -> None:
        started.set()
        try:
            poll_signal(ctx)
            raise ValueError("gave up")
        finally:
            finished.set()

    return run


@pytest.mark.parametrize(
    "make_handler",
    [
        pytest.param(_raises_after_signal_async, id="async"),
        pytest.param(_raises_after_signal_sync, id="sync-thread"),
    ],
)
async def test_error_raised_while_the_token_is_cancelled_is_a_failure(
    make_handler: Callable[[threading.Event, threading.Event], Callable[..., Any]],
) -> None:
    started, finished = threading.Event(), threading.Event()
    calls: list[str] = []
    pipeline = define_pipeline(
        id="cancel",
        steps=[step("a", make_handler(started, finished)), step("b", returns(2, calls))],
    )
    token = CancelToken()
    run = await _run_with_canceller(pipeline, token, started)

    assert finished.is_set()
    assert stray_tasks() == []
    assert run.step("a").status == "failed"
    assert run.errors[0].code == "TUBELESS_STEP_FAILED"
    assert (run.errors[0].kind, run.errors[0].message) == ("step", "gave up")
    assert run.status == "failed"
    assert run.step("b").status != "completed"
    assert calls == []


# -- the task awaiting run() is cancelled ---------------------------------------------------------
def _blocks_forever_async(
    started: threading.Event, finished: threading.Event, saw: list[bool]
) -> Callable[..., Any]:
    async def run(inputs: dict[str, Any], ctx: Any) -> None:
        started.set()
        try:
            await asyncio.Event().wait()
        finally:
            finished.set()

    return run


def _blocks_until_signal_sync(
    started: threading.Event, finished: threading.Event, saw: list[bool]
) -> Callable[..., Any]:
    def run(inputs: dict[str, Any], ctx: Any) -> None:
        started.set()
        try:
            saw.append(poll_signal(ctx))
        finally:
            finished.set()

    return run


@pytest.mark.parametrize(
    ("make_handler", "max_concurrency", "polls"),
    [
        pytest.param(_blocks_forever_async, 1, False, id="async-sequential"),
        pytest.param(_blocks_forever_async, 2, False, id="async-concurrent"),
        pytest.param(_blocks_until_signal_sync, 1, True, id="sync-thread-sequential"),
        pytest.param(_blocks_until_signal_sync, 2, True, id="sync-thread-concurrent"),
    ],
)
async def test_cancelling_the_awaiting_task_records_a_cancelled_run_and_reraises(
    make_handler: Callable[..., Callable[..., Any]], max_concurrency: int, polls: bool
) -> None:
    started, finished = threading.Event(), threading.Event()
    saw: list[bool] = []
    calls: list[str] = []
    token = CancelToken()
    pipeline = define_pipeline(
        id="interrupted",
        steps=[
            step("a", make_handler(started, finished, saw)),
            step("b", returns("B", calls), depends_on="a"),
        ],
    )
    with capture_trace() as trace:
        task = asyncio.create_task(
            pipeline.run(signal=token, trace=trace, max_concurrency=max_concurrency)
        )
        await wait_for(started)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

        assert finished.is_set()
        assert stray_tasks() == []
        # The run cancels its token before waiting for in-flight handlers, so a sync handler
        # polling it in a worker thread sees the cancellation and returns early.
        assert token.cancelled
        assert saw == ([True] if polls else [])
        assert calls == []
        assert trace.names[0] == "pipeline.started"
        last = trace.records[-1]
        assert last["name"] == "pipeline.completed"
        assert last["payload"]["status"] == "cancelled"
        assert last["payload"]["finalized"] is False
        assert trace.flushes >= 1
        terminal = {
            r["stepId"]: r["payload"]["status"]
            for r in trace.records
            if r["name"] in ("step.complete", "step.skipped", "step.failed", "step.cancelled")
        }
        assert terminal == {"a": "cancelled", "b": "cancelled"}
        assert "pipeline.finalize.started" not in trace.names


# -- before start, after the last step, and the happy path ----------------------------------------
async def test_token_cancelled_before_run_cancels_every_runnable_step_without_attempts() -> None:
    calls: list[str] = []
    token = CancelToken()
    token.cancel("too late")
    pipeline = define_pipeline(
        id="precancelled",
        steps=[
            step("a", returns("A", calls)),
            step("b", returns("B", calls), depends_on="a"),
            step("c", returns("C", calls)),
            step("f", returns("F", calls)),
        ],
        targets=[],
        finalize=lambda outputs, ctx: calls.append("finalize"),
    )
    run = await pipeline.run(signal=token, step_ids=["a", "b", "c"])

    assert stray_tasks() == []
    assert shape(run) == [
        ("a", "cancelled", None, None),
        ("b", "cancelled", None, None),
        ("c", "cancelled", None, None),
        ("f", "skipped", "filtered", None),
    ]
    assert [(r.attempt_id, r.started_at_ms) for r in run.steps] == [(None, None)] * 4
    assert run.errors
    assert {(e.code, e.kind) for e in run.errors} == {("TUBELESS_RUN_CANCELLED", "cancellation")}
    assert run.errors[0].step_id == "a"
    assert (run.status, run.finalized) == ("cancelled", False)
    assert calls == []


async def test_token_cancelled_after_the_last_step_cancels_finalization() -> None:
    finalizer_calls: list[Any] = []

    async def cancels_then_returns(inputs: dict[str, Any], ctx: Any) -> str:
        ctx.signal.cancel("stop after the work")
        return "done"

    pipeline = define_pipeline(
        id="late-cancel",
        steps=[step("a", cancels_then_returns)],
        finalize=lambda outputs, ctx: finalizer_calls.append(outputs),
    )
    run = await pipeline.run(signal=CancelToken())

    assert shape(run) == [("a", "completed", None, None)]
    assert error_shape(run) == [
        ("TUBELESS_FINALIZATION_CANCELLED", "cancellation", "finalization", "__finalize__")
    ]
    assert (run.status, run.finalized, run.value) == ("cancelled", False, None)
    assert finalizer_calls == []


@pytest.mark.parametrize(
    "wait",
    [
        pytest.param(lambda ctx: ctx.sleep(0.01), id="ctx-sleep"),
        pytest.param(lambda ctx: ctx.signal.sleep(0.01), id="token-sleep"),
    ],
)
async def test_sleep_returns_normally_when_not_cancelled(
    wait: Callable[[Any], Awaitable[None]],
) -> None:
    async def sleeper(inputs: dict[str, Any], ctx: Any) -> str:
        await wait(ctx)
        return "rested"

    token = CancelToken()
    pipeline = define_pipeline(id="sleep", steps=[step("a", sleeper)])
    run = await pipeline.run(signal=token)

    assert (run.status, run.value) == ("completed", "rested")
    assert not token.cancelled
    assert stray_tasks() == []
