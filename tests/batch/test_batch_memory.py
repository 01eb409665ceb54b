"""A batch's memory does not grow with its dataset (issue 30, item 8): inputs and the previous
output are streamed, rows wait in a bounded window, and what must be remembered per row (its key
numbering, where the previous output holds it) lives in a temporary file, not in memory."""

from __future__ import annotations

import asyncio
import json
import tracemalloc
from pathlib import Path

import pytest

from tests.fixtures.batch import ECHO_MODULE, ECHO_PROJECT
from tests.fixtures.processes import write_project
from tubeless.batch import run_batch
from tubeless.batch._inputs import row_key
from tubeless.batch._spi import InputRow


def _dataset(folder: Path, rows: int) -> tuple[Path, Path]:
    """``rows`` inputs, every input but each 1,000th already completed in the output file."""
    inputs, output = folder / f"in-{rows}.jsonl", folder / f"out-{rows}.jsonl"
    with inputs.open("w", encoding="utf-8") as ins, output.open("w", encoding="utf-8") as outs:
        for index in range(rows):
            raw = {"n": index}
            ins.write(json.dumps(raw) + "\n")
            if index % 1000 == 0:
                continue  # this row runs
            key = row_key("echo", InputRow(index=index, line=index + 1, raw=raw))
            row = {
                "index": index,
                "key": key,
                "status": "completed",
                "result": index * index,
                "run_id": f"rows:{index}",
                "duration_ms": 1.0,
                "turns": 0,
                "calls": 0,
            }
            outs.write(json.dumps(row) + "\n")
    return inputs, output


def _peak(project: Path, inputs: Path, output: Path) -> tuple[int, int]:
    """The traced peak of one batch, and how many rows it yielded (none of them kept)."""

    async def drain() -> int:
        count = 0
        async for _ in run_batch(project, inputs, output=output, concurrency=4):
            count += 1
        return count

    tracemalloc.start()
    try:
        count = asyncio.run(drain())
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return peak, count


@pytest.mark.slow
@pytest.mark.timeout(600)  # a hang guard only: 110,000 rows take about 40 s on an idle machine
def test_memory_does_not_grow_with_the_number_of_rows(tmp_path: Path) -> None:
    project = write_project(tmp_path, ECHO_PROJECT, ECHO_MODULE)
    asyncio.run(_warm(project))  # imports and caches: not the batch's own memory
    small, small_rows = _peak(project, *_dataset(tmp_path, 10_000))
    large, large_rows = _peak(project, *_dataset(tmp_path, 100_000))
    assert (small_rows, large_rows) == (10_000, 100_000)
    assert large < 2 * small, (small, large)
    with (tmp_path / "out-100000.jsonl").open(encoding="utf-8") as file:
        rows = [json.loads(line) for line in file]
    assert [row["index"] for row in rows] == list(range(100_000))
    assert {row["status"] for row in rows} == {"completed"}
    assert rows[99_000]["result"] == 99_000**2 and rows[99_000]["run_id"] != "rows:99000"


async def _warm(project: Path) -> None:
    async for _ in run_batch(project, [{"n": 1}]):
        pass
