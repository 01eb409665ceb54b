"""The benchmark workloads: scripted agents with trivial tools, and the bare-loop baseline.

Every workload makes the same decisions as its baseline: turn ``t`` calls ``upper`` (one call,
or ``width`` calls), the reducer appends every outcome to the state, and the last turn
finishes. The baseline does the same work by hand: it validates each tool input and output with
a pydantic ``TypeAdapter``, runs the calls under an ``asyncio.Semaphore(3)``, and appends the
outcomes to a tuple.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from pydantic import TypeAdapter

from tubeless import Pipeline, define_agent, define_tool


async def upper(text: str, ctx: Any = None) -> str:
    """The async tool: uppercase."""
    return text.upper()


async def count(text: str, ctx: Any = None) -> int:
    """A second async tool (advertised, used by W2's last call of each turn)."""
    return len(text)


def upper_sync(text: str, ctx: Any = None) -> str:
    """The sync variant (runs in a worker thread)."""
    return text.upper()


def _decide(turns: int, width: int) -> Any:
    def decide(state: Any, ctx: Any) -> dict[str, Any]:
        if ctx.turn > turns:
            return {"kind": "finish", "result": len(state["history"])}
        calls = [{"id": f"c{i}", "tool": "upper", "input": "abc"} for i in range(width)]
        return {"kind": "continue", "calls": calls}

    return decide


def _reduce(state: Any, outcomes: Sequence[Any]) -> dict[str, Any]:
    return {"history": state["history"] + outcomes}


def _reduce_tuple(state: Any, outcomes: Sequence[Any]) -> dict[str, Any]:
    """The common variant: the outcomes copied into a plain tuple first."""
    return {"history": state["history"] + tuple(outcomes)}


def agent(
    turns: int,
    width: int = 1,
    *,
    concurrency: int = 1,
    sync_tool: bool = False,
    plain_tuple: bool = False,
) -> Pipeline:
    """A scripted agent doing ``turns`` turns of ``width`` ``upper`` calls, then finishing.

    ``plain_tuple`` makes the reducer ``state["history"] + tuple(outcomes)``.
    """
    tools = {
        "upper": define_tool(
            description="Uppercase text.",
            input_schema=str,
            output_schema=str,
            run=upper_sync if sync_tool else upper,
        ),
        "count": define_tool(
            description="Count characters.", input_schema=str, output_schema=int, run=count
        ),
    }
    return define_agent(
        id=f"bench-{turns}x{width}",
        input_schema=dict,
        result_schema=int,
        initial_state=lambda _: {"history": ()},
        decide=_decide(turns, width),
        reduce=_reduce_tuple if plain_tuple else _reduce,
        tools=tools,
        limits={
            "max_turns": turns + 1,
            "max_decisions": turns + 1,
            "max_calls": turns * width,
            "max_concurrency": concurrency,
        },
    )


_TEXT = TypeAdapter(str)


async def baseline(turns: int, width: int = 1, *, sync_tool: bool = False) -> int:
    """The hand-written loop doing the same decisions and validation."""
    history: tuple[Any, ...] = ()
    semaphore = asyncio.Semaphore(3)
    decide = _decide(turns, width)

    class Ctx:
        turn = 0

    ctx = Ctx()

    async def one(call: dict[str, Any]) -> dict[str, Any]:
        argument = _TEXT.validate_python(call["input"])
        async with semaphore:
            if sync_tool:
                value = await asyncio.to_thread(upper_sync, argument)
            else:
                value = await upper(argument)
        return {
            "id": call["id"],
            "tool": call["tool"],
            "ok": True,
            "value": _TEXT.validate_python(value),
        }

    while True:
        ctx.turn += 1
        decision = decide({"history": history}, ctx)
        if decision["kind"] == "finish":
            return len(history)
        calls = decision["calls"]
        if len(calls) == 1:
            outcomes: Sequence[Any] = (await one(calls[0]),)
        else:
            outcomes = await asyncio.gather(*(one(call) for call in calls))
        history = (*history, *outcomes)
