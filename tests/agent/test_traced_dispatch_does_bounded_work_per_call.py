"""Progress in traced dispatch costs O(1) per call (issue 14 item 7); bounds are counts, never
timings.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

from tubeless import Pipeline, PipelineRun, define_agent, define_tool
from tubeless.testing import capture_trace


def _python_calls_in_tubeless(calls: int) -> int:
    """Python-level calls made inside ``tubeless/`` by a traced run with one batch of ``calls``."""
    import tubeless

    package = str(Path(tubeless.__file__).parent)
    target = _agent_with_batch(calls)
    count = 0

    def profile(frame: Any, event: str, arg: Any) -> None:
        nonlocal count
        if event == "call" and frame.f_code.co_filename.startswith(package):
            count += 1

    async def go() -> PipelineRun:
        with capture_trace() as trace:
            sys.setprofile(profile)
            try:
                return await target.run({}, trace=trace)
            finally:
                sys.setprofile(None)

    run = asyncio.run(go())
    assert run.status == "completed"
    return count


def _agent_with_batch(calls: int) -> Pipeline:
    def decide(state: Any, ctx: Any) -> Any:
        if state["done"]:
            return {"kind": "finish", "result": "done"}
        batch = [{"id": f"c{i}", "tool": "echo", "input": "x"} for i in range(calls)]
        return {"kind": "continue", "calls": batch}

    async def echo(text: str, ctx: Any) -> str:
        return text

    return define_agent(
        id="batch",
        input_schema=Any,
        result_schema=Any,
        initial_state=lambda validated: {"done": False},
        decide=decide,
        reduce=lambda state, outcomes: {"done": True},
        tools={
            "echo": define_tool(description="Echo.", input_schema=str, output_schema=str, run=echo)
        },
        limits={"max_calls": calls, "max_concurrency": 4},
    )


def test_traced_dispatch_does_bounded_work_per_call() -> None:
    """Issue 14 item 7: progress in a traced batch is O(1) per call: four times the calls make
    about four times the Python calls (the old full scan and sort made about sixteen)."""
    small, large = _python_calls_in_tubeless(100), _python_calls_in_tubeless(400)
    assert large < 5 * small, (small, large)
