"""Issue 16: following one tool call from ``run()`` to its handler crosses few frames, so a
traceback from a handler stays readable (13 untraced and 26 traced before the core was made
readable; 12 and 18 after)."""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

from tubeless import define_agent, define_tool
from tubeless.tracing.reader import open_sink

PACKAGE = str(Path(__import__("tubeless").__file__).parent)


def _agent(depths: list[int]) -> Any:
    async def upper(text: str, ctx: Any = None) -> str:
        frames = inspect.stack(0)
        # Frames between the handler and the outermost frame of tubeless (Pipeline.run).
        depths.append(max(i for i, f in enumerate(frames) if f.filename.startswith(PACKAGE)))
        return text.upper()

    def decide(state: Any, ctx: Any) -> dict[str, Any]:
        if ctx.turn > 1:
            return {"kind": "finish", "result": 1}
        return {"kind": "continue", "calls": [{"id": "c0", "tool": "upper", "input": "abc"}]}

    return define_agent(
        id="depth",
        input_schema=dict,
        result_schema=int,
        initial_state=lambda _: {"history": ()},
        decide=decide,
        reduce=lambda state, outcomes: {"history": state["history"] + outcomes},
        tools={
            "upper": define_tool(
                description="Uppercase.", input_schema=str, output_schema=str, run=upper
            )
        },
    )


async def test_an_untraced_call_reaches_its_handler_within_12_frames_of_run() -> None:
    depths: list[int] = []
    run = await _agent(depths).run({})
    assert (run.status, depths) == ("completed", [12])


async def test_a_traced_call_reaches_its_handler_within_18_frames_of_run(tmp_path: Path) -> None:
    depths: list[int] = []
    sink = open_sink(str(tmp_path / "trace.ndjson"))
    try:
        run = await _agent(depths).run({}, trace=sink)
    finally:
        sink.close()
    assert (run.status, depths) == ("completed", [18])
