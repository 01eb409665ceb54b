"""The lease's background renewal exists only where a store does: a run without checkpoints
starts no renewal task (its turns pay nothing for leases), a checkpointed run starts exactly
one, and it is gone when the run ends."""

from __future__ import annotations

import asyncio
from typing import Any

from tubeless import define_agent, define_tool
from tubeless.durable import MemoryCheckpoints


def _agent(seen: list[int]) -> Any:
    async def probe(text: str, ctx: Any = None) -> str:
        seen.append(len(asyncio.all_tasks()))
        return text

    return define_agent(
        id="probe",
        input_schema=dict,
        result_schema=int,
        initial_state=lambda _: {"n": 0},
        decide=lambda state, ctx: (
            {"kind": "finish", "result": state["n"]}
            if state["n"] >= 2
            else {"kind": "continue", "calls": [{"id": "c", "tool": "probe", "input": "x"}]}
        ),
        reduce=lambda state, outcomes: {"n": state["n"] + 1},
        tools={
            "probe": define_tool(
                description="Count tasks.", input_schema=str, output_schema=str, run=probe
            )
        },
    )


def test_only_a_checkpointed_run_has_a_renewal_task_and_only_while_it_runs() -> None:
    plain: list[int] = []
    durable: list[int] = []
    store = MemoryCheckpoints()

    async def both() -> int:
        assert (await _agent(plain).run({})).status == "completed"
        run = await _agent(durable).run({}, checkpoints=store, checkpoint_key="k")
        assert run.status == "completed"
        await asyncio.sleep(0)  # a cancelled task is gone once the loop turned
        return len(asyncio.all_tasks())

    left = asyncio.run(both())
    assert len(plain) == len(durable) == 2
    assert [d - p for d, p in zip(durable, plain, strict=True)] == [1, 1]  # the renewer
    assert left == 1  # only the test's own task: the renewer ended with its run
