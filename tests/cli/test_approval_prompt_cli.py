"""The terminal approval prompt is never drawn over by the report (issue 28, item 9).

A call that needs no approval runs while the prompt waits; its report line used to land on the
prompt's line. The race is made deterministic by files: the free call waits for ``go`` (written
once the prompt is on screen), and the test answers only after the checkpoint says the call
completed, which is after its report line was handed to the reporter (sinks export
synchronously).
"""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path

from tests.fixtures.processes import GATED, HANG_GUARD, write_project
from tests.fixtures.terminal import TerminalRun

MODULE = """\
    import pathlib, time

    HERE = pathlib.Path({here!r})

    def initial(validated):
        return {{"seen": None}}

    def decide(state, ctx):
        if state["seen"] is not None:
            return {{"kind": "finish", "result": state["seen"]}}
        return {{"kind": "continue", "calls": [
            {{"id": "d1", "tool": "draft", "input": "x"}},
            {{"id": "go", "tool": "launch", "input": "rocket"}},
        ]}}

    def reduce(state, outcomes):
        return {{"seen": [o["value"] if o["ok"] else o["error"]["code"] for o in outcomes]}}

    def draft(text, ctx):
        deadline = time.monotonic() + 30  # a hang guard: the test writes the file
        while not (HERE / "go").exists():
            assert time.monotonic() < deadline, "go never appeared"
            time.sleep(0.01)
        return text.upper()

    def launch(text, ctx):
        return "launched " + text
"""
PROMPT = "Run this call? [y/N]: "


def _completed(store: Path, call_id: str) -> bool:
    with sqlite3.connect(store) as db:
        [(text,)] = db.execute("SELECT document FROM checkpoints WHERE key = 'k1'")
    calls = json.loads(text)["agents"]["gate"]["decision"]["calls"]
    return any(c["id"] == call_id and c["status"] == "completed" for c in calls)


def test_a_report_line_due_while_the_prompt_is_open_waits_for_the_answer(
    tmp_path: Path,
) -> None:
    path = write_project(tmp_path, GATED, MODULE.format(here=str(tmp_path)))
    store = tmp_path / "runs.sqlite"
    run = TerminalRun(path, "--checkpoints", store, "--key", "k1", keyboard=True)
    run.read_until(lambda screen: bool(screen.text) and screen.text[-1].startswith(PROMPT.strip()))

    (tmp_path / "go").write_text("go")  # the free call ends while the prompt waits
    deadline = time.monotonic() + HANG_GUARD
    while not _completed(store, "d1"):  # its report line was handed over by now
        assert time.monotonic() < deadline, "the free call never completed"
        time.sleep(0.01)
    run.type("y\n")
    code, out = run.finish()

    assert (code, json.loads(out)) == (0, ["X", "launched rocket"]), run.screen.text
    lines = run.screen.text
    assert PROMPT + "y" in lines, "\n".join(lines)
    answered = lines.index(PROMPT + "y")  # the prompt's line holds the prompt and the answer
    draft = next(i for i, line in enumerate(lines) if line.startswith("      ✓ draft [d1]"))
    assert draft > answered
    assert lines[answered - 2 : answered] == ["  arguments:", '    "rocket"']
