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


@pytest.mark.parametrize("entry", ["cpu-row", "io-row"])
async def test_batch_benchmark_rows_complete(entry: str) -> None:
    """W7's rows (benchmarks/batch_project.yaml) run: one turn, one call, the tool's value."""
    from benchmarks.batch import PROJECT
    from benchmarks.batch_rows import burn
    from tubeless.batch import run_batch

    rows = [row async for row in run_batch(PROJECT, [{"i": 3}], entry_id=entry)]
    expected = burn(3) if entry == "cpu-row" else 3
    assert [(r["status"], r["result"], r["turns"], r["calls"]) for r in rows] == [
        ("completed", expected, 2, 1)
    ]


async def test_the_tuple_reducer_workload_agrees_with_the_baseline() -> None:
    """W4's ``state["history"] + tuple(outcomes)`` variant makes the same history."""
    assert await agent(6, plain_tuple=True).run_or_raise({}) == 6
