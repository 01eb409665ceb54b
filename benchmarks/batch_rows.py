"""The rows of the batch benchmark (benchmarks/batch_project.yaml): W3-shaped agents, one turn
of one call then finish, with a CPU-bound sync tool or a 10 ms I/O-bound async tool."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

#: Iterations of the CPU-bound tool: a few ms of pure-Python work (about 2.5 ms here).
BURN = 8_000


def initial(raw: Any) -> dict[str, Any]:
    return {"i": raw["i"], "value": None}


def decide(state: Any, ctx: Any) -> dict[str, Any]:
    if state["value"] is None:
        return {"kind": "continue", "calls": [{"id": "c1", "tool": "work", "input": state["i"]}]}
    return {"kind": "finish", "result": state["value"]}


def reduce(state: Any, outcomes: Sequence[Any]) -> dict[str, Any]:
    return {"i": state["i"], "value": outcomes[0]["value"]}


def burn(i: int, ctx: Any = None) -> int:
    """CPU-bound: holds the GIL for the whole call."""
    total = i
    for k in range(BURN):
        total = (total * 31 + k) % 1_000_003
    return total


async def wait(i: int, ctx: Any = None) -> int:
    """I/O-bound: 10 ms of waiting."""
    await asyncio.sleep(0.01)
    return i


def noop(i: int, ctx: Any = None) -> int:
    """No work: what a row costs is the engine's and the harness's own share."""
    return i
