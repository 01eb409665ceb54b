"""Repeated inputs are numbered the same whether the batch's ledger holds their counts in memory
or has written them to its temporary file (more keys than it holds at once)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.fixtures.batch import ECHO_MODULE, ECHO_PROJECT
from tests.fixtures.processes import write_project
from tubeless.batch import _ledger, run_batch

INPUTS = [{"n": n} for n in (1, 2, 3, 1, 4, 5, 1, 2, 6, 7, 8, 1)]


def _keys(project: Path, output: Path | None) -> list[str]:
    async def go() -> list[str]:
        return [row["key"] async for row in run_batch(project, INPUTS, output=output)]

    return asyncio.run(go())


@pytest.mark.parametrize("with_output", [False, True])
def test_repeats_are_numbered_alike_past_the_keys_held_in_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, with_output: bool
) -> None:
    project = write_project(tmp_path, ECHO_PROJECT, ECHO_MODULE)
    output = tmp_path / "out.jsonl" if with_output else None
    held = _keys(project, output)
    if output is not None:
        output.unlink()
    monkeypatch.setattr(_ledger, "RECENT_KEYS", 2)
    written = _keys(project, output)
    assert written == held
    ones = [key for key, raw in zip(held, INPUTS, strict=True) if raw == {"n": 1}]
    assert [key.rpartition("#")[2] for key in ones[1:]] == ["2", "3", "4"]
    assert "#" not in ones[0]
    twos = [key for key, raw in zip(held, INPUTS, strict=True) if raw == {"n": 2}]
    assert twos[1] == f"{twos[0]}#2"
