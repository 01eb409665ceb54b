"""The live view on a real (pseudo-)terminal, stopped with SIGINT (issue 13 "Stopping").

The process writes its report to a pty; :class:`tests.fixtures.terminal.Screen` replays the bytes
the way a terminal would, so the test reads what a user sees. Waits are hang guards only.
"""

from __future__ import annotations

import signal
from pathlib import Path

from tests.fixtures.processes import one_tool_agent, wait_for_file, write_project
from tests.fixtures.terminal import Screen, TerminalRun

PROJECT = one_tool_agent("live", "nap", "Naps.")
MODULE = """\
    import asyncio, pathlib, time

    HERE = pathlib.Path({here!r})

    def initial(validated):
        return {{"done": False}}

    def decide(state, ctx):
        if state["done"]:
            return {{"kind": "finish", "result": "done"}}
        return {{"kind": "continue", "calls": [{{"id": "c1", "tool": "nap", "input": "x"}}]}}

    def reduce(state, outcomes):
        return {{"done": True}}

    async def nap(text, ctx):
        (HERE / "ready").write_text("ready")
        await ctx.signal.wait()
        deadline = time.monotonic() + 30  # a hang guard: the test releases the handler
        while not (HERE / "release").exists() and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        ctx.signal.raise_if_cancelled()
"""


def _headers(screen: Screen) -> list[str]:
    return [line for line in screen.text if line.startswith("Pipeline live")]


def test_ctrl_c_shows_cancelling_in_the_frame_and_leaves_one_final_frame(tmp_path: Path) -> None:
    path = write_project(tmp_path, PROJECT, MODULE.format(here=str(tmp_path)))
    run = TerminalRun(path)
    run.read_until(lambda screen: any("running" in line for line in _headers(screen)))
    wait_for_file(tmp_path / "ready", run.process)
    run.process.send_signal(signal.SIGINT)

    run.read_until(lambda screen: any("cancelling…" in line for line in _headers(screen)))
    assert len(_headers(run.screen)) == 1, run.screen.text  # drawn in the frame, in place
    (tmp_path / "release").write_text("go")
    code, out = run.finish()

    assert (code, out) == (7, "")
    screen = run.screen.text
    assert len(_headers(run.screen)) == 1, screen  # exactly one frame: the final one
    assert _headers(run.screen)[0].startswith("Pipeline live  cancelled  ")
    assert not any("running" in line or "cancelling" in line for line in screen), screen
    assert screen[-1] == "error: TUBELESS_RUN_CANCELLED: SIGINT received; the run was cancelled"
    assert [line for line in screen if line.startswith("error:")] == [screen[-1]]
    assert "cancelling the run" not in run.raw  # no notice line written beside the display
