"""The benchmark workloads do what their baseline does (correctness only; speed is benched)."""

from __future__ import annotations

import pytest

from benchmarks.workloads import agent, baseline


@pytest.mark.parametrize(
    ("turns", "width", "concurrency", "sync_tool"),
    [
        pytest.param(5, 1, 1, False, id="long"),
        pytest.param(3, 5, 3, False, id="wide"),
        pytest.param(1, 1, 1, False, id="single"),
        pytest.param(4, 1, 1, True, id="sync-tool"),
    ],
)
async def test_workloads_agree_with_the_baseline(
    turns: int, width: int, concurrency: int, sync_tool: bool
) -> None:
    pipeline = agent(turns, width, concurrency=concurrency, sync_tool=sync_tool)
    assert await pipeline.run_or_raise({}) == turns * width
    assert await baseline(turns, width, sync_tool=sync_tool) == turns * width


async def test_the_tuple_reducer_workload_agrees_with_the_baseline() -> None:
    """W4's ``state["history"] + tuple(outcomes)`` variant makes the same history."""
    assert await agent(6, plain_tuple=True).run_or_raise({}) == 6
