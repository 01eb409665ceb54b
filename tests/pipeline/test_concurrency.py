"""``max_concurrency`` bounds the steps of one run (UPSTREAM §1.11). Overlap is proved with
barriers and events, never with durations; every wait has a hang guard that fails the step.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

import pytest

from tests.fixtures.runs import shape
from tubeless import define_pipeline, step

#: A hang guard only: a step that waits longer fails, so a broken scheduler fails the test.
GUARD_S = 10.0


async def test_two_independent_async_steps_overlap_with_max_concurrency_two() -> None:
    barrier = asyncio.Barrier(2)

    async def meet(inputs: dict[str, Any], ctx: Any) -> str:
        # Passes only when both steps are inside their handlers at the same time.
        async with asyncio.timeout(GUARD_S):
            await barrier.wait()
        return ctx.step_id

    pipeline = define_pipeline(
        id="overlap", steps=[step("a", meet), step("b", meet)], finalize=lambda o, c: dict(o)
    )
    run = await pipeline.run(max_concurrency=2)

    assert shape(run) == [("a", "completed", None, None), ("b", "completed", None, None)]
    assert run.value == {"a": "a", "b": "b"}


@pytest.mark.parametrize(
    "controls",
    [pytest.param({}, id="default"), pytest.param({"max_concurrency": 1}, id="explicit-one")],
)
async def test_steps_never_overlap_with_max_concurrency_one(controls: dict[str, Any]) -> None:
    events: list[str] = []

    async def record(inputs: dict[str, Any], ctx: Any) -> None:
        events.append(f"enter {ctx.step_id}")
        for _ in range(5):
            await asyncio.sleep(0)  # give any other started step the chance to interleave
        events.append(f"exit {ctx.step_id}")

    pipeline = define_pipeline(id="serial", steps=[step("a", record), step("b", record)])
    run = await pipeline.run(**controls)

    assert run.status == "completed"
    assert events == ["enter a", "exit a", "enter b", "exit b"]


async def test_dependent_starts_when_its_dependencies_settle_not_after_unrelated_steps() -> None:
    events: list[str] = []
    dependent_started = asyncio.Event()

    async def slow(inputs: dict[str, Any], ctx: Any) -> str:
        events.append("enter slow")
        # Released only by the dependent: if the dependent waited for "slow", this times out.
        async with asyncio.timeout(GUARD_S):
            await dependent_started.wait()
        events.append("exit slow")
        return "slow"

    async def fast(inputs: dict[str, Any], ctx: Any) -> str:
        events.append("enter fast")
        events.append("exit fast")
        return "fast"

    async def dependent(inputs: dict[str, Any], ctx: Any) -> str:
        events.append("enter dependent")
        dependent_started.set()
        events.append("exit dependent")
        return f"after {inputs['fast']}"

    pipeline = define_pipeline(
        id="eager",
        steps=[
            step("slow", slow),
            step("fast", fast),
            step("dependent", dependent, depends_on="fast"),
        ],
        finalize=lambda outputs, ctx: dict(outputs),
    )
    run = await pipeline.run(max_concurrency=2)

    assert shape(run) == [
        ("slow", "completed", None, None),
        ("fast", "completed", None, None),
        ("dependent", "completed", None, None),
    ]
    assert events == [
        "enter slow",
        "enter fast",
        "exit fast",
        "enter dependent",
        "exit dependent",
        "exit slow",
    ]
    assert run.value == {"slow": "slow", "fast": "fast", "dependent": "after fast"}


@pytest.mark.parametrize(
    "with_predicates",
    [pytest.param(False, id="handlers"), pytest.param(True, id="handlers-and-skip-predicates")],
)
async def test_never_more_than_max_concurrency_steps_are_active(with_predicates: bool) -> None:
    active = 0
    most = 0

    async def busy(*_: Any) -> None:
        nonlocal active, most
        active += 1
        most = max(most, active)
        for _ in range(5):
            await asyncio.sleep(0)
        active -= 1

    # Skip predicates count against the limit too (UPSTREAM 1.11): each one is "busy" and then
    # lets its step run, so a step is active across its predicate and its handler.
    pipeline = define_pipeline(
        id="bounded",
        steps=[step(f"s{i}", busy, skip=busy if with_predicates else None) for i in range(10)],
    )
    run = await pipeline.run(max_concurrency=3)

    assert run.status == "completed"
    assert [r.status for r in run.steps] == ["completed"] * 10
    assert most == 3


async def test_fail_fast_drains_active_steps_and_marks_the_rest_fail_fast() -> None:
    failed = asyncio.Event()
    calls: list[str] = []

    async def sibling(inputs: dict[str, Any], ctx: Any) -> str:
        calls.append(ctx.step_id)
        async with asyncio.timeout(GUARD_S):
            await failed.wait()
        for _ in range(3):
            await asyncio.sleep(0)  # still running after the failure was recorded
        return "sibling finished"

    async def broken(inputs: dict[str, Any], ctx: Any) -> None:
        calls.append(ctx.step_id)
        failed.set()
        raise ValueError("broken")

    async def later(inputs: dict[str, Any], ctx: Any) -> None:
        calls.append(ctx.step_id)

    pipeline = define_pipeline(
        id="drain",
        steps=[
            step("sibling", sibling),
            step("broken", broken),
            step("x", later),
            step("y", later, depends_on="sibling"),
            step("z", later, dry_run="skip"),
        ],
        targets=["x", "y", "z"],
        finalize=lambda outputs, ctx: calls.append("finalize"),
    )
    run = await pipeline.run(max_concurrency=2, dry_run=True)

    assert shape(run) == [
        ("sibling", "completed", None, None),
        ("broken", "failed", None, None),
        ("x", "skipped", "fail-fast", "broken"),
        ("y", "skipped", "fail-fast", "broken"),
        ("z", "skipped", "dry-run", None),
    ]
    assert run.step("x").message == "Not run because fail-fast stopped after broken failed."
    assert sorted(calls) == ["broken", "sibling"]
    assert [e.step_id for e in run.errors] == ["broken"]
    assert (run.status, run.finalized) == ("failed", False)


async def test_continue_on_error_with_concurrency_keeps_dispatching_independent_steps() -> None:
    barrier = asyncio.Barrier(2)

    async def meet(inputs: dict[str, Any], ctx: Any) -> str:
        async with asyncio.timeout(GUARD_S):
            await barrier.wait()
        return ctx.step_id

    async def broken(inputs: dict[str, Any], ctx: Any) -> None:
        raise ValueError("broken")

    pipeline = define_pipeline(
        id="continue",
        steps=[
            step("broken", broken),
            step("a", meet),
            step("b", meet),
            step("after", meet, depends_on="broken"),
        ],
        targets=["a", "b", "after"],
        finalize=lambda outputs, ctx: dict(outputs),
    )
    run = await pipeline.run(max_concurrency=2, continue_on_error=True)

    assert shape(run) == [
        ("broken", "failed", None, None),
        ("a", "completed", None, None),
        ("b", "completed", None, None),
        ("after", "skipped", "unmet-dependency", "broken"),
    ]
    assert (run.status, run.finalized, run.value) == ("failed", True, {"a": "a", "b": "b"})


async def test_sync_handlers_overlap_in_worker_threads_with_max_concurrency_two() -> None:
    barrier = threading.Barrier(2, timeout=GUARD_S)
    threads: dict[str, int] = {}

    def meet(inputs: dict[str, Any], ctx: Any) -> str:
        threads[ctx.step_id] = threading.get_ident()
        barrier.wait()  # raises BrokenBarrierError (failing the step) unless both are inside
        return ctx.step_id

    pipeline = define_pipeline(
        id="threads", steps=[step("a", meet), step("b", meet)], finalize=lambda o, c: dict(o)
    )
    run = await pipeline.run(max_concurrency=2)

    assert shape(run) == [("a", "completed", None, None), ("b", "completed", None, None)]
    assert threads["a"] != threads["b"]
    assert threading.get_ident() not in threads.values()


def _count_active() -> tuple[Callable[..., Any], Callable[[], int]]:
    state = {"active": 0, "most": 0}
    lock = threading.Lock()

    def busy(inputs: dict[str, Any], ctx: Any) -> None:
        with lock:
            state["active"] += 1
            state["most"] = max(state["most"], state["active"])
        # Wait until another handler joins or enough polling passed; no duration is asserted.
        for _ in range(200):
            with lock:
                if state["active"] > 1:
                    break
            threading.Event().wait(0.001)
        with lock:
            state["active"] -= 1

    return busy, lambda: state["most"]


async def test_sync_handlers_never_exceed_max_concurrency_one() -> None:
    busy, most = _count_active()
    pipeline = define_pipeline(id="threads", steps=[step(f"s{i}", busy) for i in range(3)])
    run = await pipeline.run()

    assert run.status == "completed"
    assert most() == 1
