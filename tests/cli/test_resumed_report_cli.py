"""A resumed run numbers its turns as the agent does and shows the call the crash cut short
(issue 28, item 2): in the report, the live view, ``trace show`` and the trace itself.

The first process is killed (SIGKILL) inside the unsafe call ``s7`` of turn 7, exactly: the
handler writes a ready file and waits, the test kills. The same command then resumes at turn 7.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fixtures.processes import ROOT, cli_env, finish, wait_for_file, write_project
from tubeless.reporting import LiveModel
from tubeless.tracing import read_trace

BODY = """\
    version: 1
    project: {id: steps, default: steps}
    python_path: [.]
    agents:
      steps:
        implementation_version: "1"
        input: {schema: {type: object}}
        result: {schema: {}}
        initial_state: "helpers:initial"
        decide: "helpers:decide"
        reduce: "helpers:reduce"
        limits: {max_turns: 10}
        tools:
          send: {run: "helpers:send", description: Sends.,
                 input: {schema: {type: string}}, output: {schema: {type: string}}}
          read: {run: "helpers:read", description: Reads., replay: safe,
                 input: {schema: {type: string}}, output: {schema: {type: string}}}
    """
MODULE = """\
    import os, time

    def initial(value):
        return {"log": []}

    def decide(state, ctx):
        if ctx.turn >= 9:
            return {"kind": "finish", "result": state["log"]}
        return {"kind": "continue", "calls": [
            {"id": f"s{ctx.turn}", "tool": "send", "input": "x"},
            {"id": f"r{ctx.turn}", "tool": "read", "input": "y"},
        ]}

    def reduce(state, outcomes):
        if os.environ.get("FAIL_REDUCE") == "yes":
            raise RuntimeError("reduce broke")
        return {"log": [*state["log"], *(o["value"] if o["ok"] else o["error"]["code"]
                                         for o in outcomes)]}

    def send(text, ctx):
        if os.environ.get("KILL_AT") == str(ctx.execution["turn"]):
            with open(os.environ["READY"], "w") as ready:
                ready.write("ready")
            time.sleep(60)  # the test kills the process here
        return "sent"

    def read(text, ctx):
        return "read"
    """
DURATION = re.compile(r"\(\d+(\.\d)?m?s\)")


def _run(project: Path, tmp_path: Path, **env: str) -> subprocess.Popen[str]:
    store, trace = tmp_path / "runs.sqlite", tmp_path / "trace.ndjson"
    command = [sys.executable, "-m", "tubeless", "run", str(project), "--checkpoints", str(store)]
    return subprocess.Popen(
        [*command, "--key", "k", "--trace", str(trace)],
        text=True,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=cli_env(
            PYTHONPATH=f"{ROOT}{os.pathsep}{tmp_path}", READY=str(tmp_path / "ready"), **env
        ),
    )


def _killed_at_turn_7(tmp_path: Path) -> Path:
    project = write_project(tmp_path, BODY, MODULE)
    first = _run(project, tmp_path, KILL_AT="7")
    wait_for_file(tmp_path / "ready", first)
    first.send_signal(signal.SIGKILL)
    finish(first)
    return project


def _resumed_records(tmp_path: Path) -> list[dict[str, object]]:
    records = read_trace(tmp_path / "trace.ndjson")
    starts = [i for i, r in enumerate(records) if r["name"] == "pipeline.started"]
    roots = [i for i in starts if "parentRunId" not in records[i]]
    return records[roots[-1] :]


@pytest.mark.slow
def test_the_report_trace_show_and_live_view_count_turns_from_where_the_run_resumed(
    tmp_path: Path,
) -> None:
    project = _killed_at_turn_7(tmp_path)
    again = _run(project, tmp_path)
    out, err = finish(again)
    assert again.returncode == 0, err
    assert json.loads(out)[12:14] == ["TUBELESS_AGENT_CALL_INTERRUPTED", "read"]

    report = DURATION.sub("(<d>)", err).splitlines()
    assert report[0] == "checkpoint: k (resuming at turn 7)"
    assert report[3:13] == [
        "    resumed at turn 7 of at most 10 (checkpoint k)",
        "    turn 7: 2 calls",
        "      interrupted send [s7]: TUBELESS_AGENT_CALL_INTERRUPTED (running when the run "
        "stopped)",
        "      ok read [r7] (<d>)",
        "    turn 8: 2 calls",
        "      ok send [s8] (<d>)",
        "      ok read [r8] (<d>)",
        "    turn 9: finish",
        "  ok agent (<d>)",
        "  -> finalize",
    ]

    shown = subprocess.run(
        [sys.executable, "-m", "tubeless", "trace", "show", tmp_path / "trace.ndjson", "--last"],
        text=True,
        capture_output=True,
        cwd=ROOT,
        env=cli_env(),
        check=True,
    ).stdout
    lines = [re.sub(r"  \d+(\.\d)?m?s$", "  <d>", line) for line in shown.splitlines()]
    assert lines[2:6] == [
        "  agent  finish  resumed at turn 7 of at most 10 (checkpoint k)",
        "  turn 7  continue  2 calls  completed  <d>",
        "    call r7  read  completed  <d>",
        "    call s7  send  interrupted  TUBELESS_AGENT_CALL_INTERRUPTED  running when the run "
        "stopped",
    ]
    assert [line.split("  ")[1] for line in lines if line.startswith("  turn")] == [
        "turn 7",
        "turn 8",
        "turn 9",
    ]

    records = _resumed_records(tmp_path)
    messages = [
        r["payload"]["progress"]["message"]  # type: ignore[index]
        for r in records
        if r["name"] == "step.running" and r.get("stepId") == "agent" and r.get("payload")
    ]
    # One report per turn as it starts, and the last again as the agent step ends.
    assert messages == [f"Turn {n} of at most 10" for n in (7, 8, 9, 9)]
    [marked] = [
        r["payload"]["attributes"]  # type: ignore[index]
        for r in records
        if r["name"] == "step.attempted" and "agent.callStatus" in r["payload"]["attributes"]  # type: ignore[index, operator]
    ]
    assert {k: v for k, v in marked.items() if k != "agent.parentAttemptId"} == {
        "agent.runId": records[0]["runId"],
        "agent.turn": 7,
        "agent.callId": "s7",
        "agent.tool": "send",
        "agent.callStatus": "interrupted",
        "agent.callOk": False,
        "agent.callErrorCode": "TUBELESS_AGENT_CALL_INTERRUPTED",
    }

    model = LiveModel()
    cut = next(i for i, r in enumerate(records) if r.get("itemKey") == "iteration-2")
    for record in records[:cut]:  # the view as turn 8 is about to start
        model.feed(record)
    rows = [(row.depth, row.label, row.status, row.detail) for row in model.rows()]
    assert rows == [
        (0, "agent", "running", "Turn 8 of at most 10"),
        (1, "turn 7", "completed", "2 calls, 1 failed"),
        (2, "send", "interrupted", "TUBELESS_AGENT_CALL_INTERRUPTED: running when the run stopped"),
        (2, "read", "completed", None),
    ]


@pytest.mark.slow
def test_a_failure_after_the_resume_names_the_agents_turn(tmp_path: Path) -> None:
    project = _killed_at_turn_7(tmp_path)
    again = _run(project, tmp_path, FAIL_REDUCE="yes")
    _, err = finish(again)

    assert again.returncode == 6
    assert "    fail turn 7: RuntimeError: reduce broke" in err.splitlines()
    assert err.splitlines()[-1] == (
        "error: TUBELESS_CHILD_FAILED (TUBELESS_STEP_FAILED): agent steps, turn 7, reduce: "
        "RuntimeError: reduce broke"
    )
