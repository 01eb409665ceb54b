"""Waiting is not failing, and denied calls show (issue 28, items 3 and 4): the report,
``trace show`` and the live view say ``waiting`` and ``denied`` from what the trace records,
while the trace keeps the original release's three statuses and never holds a denial reason."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.fixtures.cli import Outcome, tubeless
from tests.fixtures.processes import write_project
from tubeless.reporting import LiveModel
from tubeless.tracing import read_trace

GATED = """\
    version: 1
    project: {id: gate}
    python_path: [.]
    agents:
      gate:
        input: {schema: {type: object}}
        result: {schema: {}}
        initial_state: "helpers:initial"
        decide: "helpers:decide"
        reduce: "helpers:reduce"
        tools:
          draft: {run: "helpers:draft", description: Draft.,
                  input: {schema: {type: string}}, output: {schema: {type: string}}}
          launch: {run: "helpers:launch", description: Launch., approval: always,
                   input: {schema: {type: string}}, output: {schema: {type: string}}}
      boss:
        input: {schema: {type: object}}
        result: {schema: {}}
        initial_state: "helpers:initial"
        decide: "helpers:decide_boss"
        reduce: "helpers:reduce"
        tools:
          delegate: {agent: gate, description: Delegates., input: {schema: {type: object}},
                     map_options: "helpers:options"}
    """
MODULE = """\
    def initial(validated):
        return {"seen": None}

    def decide(state, ctx):
        if state["seen"] is not None:
            return {"kind": "finish", "result": state["seen"]}
        return {"kind": "continue", "calls": [
            {"id": "d1", "tool": "draft", "input": "x"},
            {"id": "go", "tool": "launch", "input": "rocket"},
        ]}

    def decide_boss(state, ctx):
        if state["seen"] is not None:
            return {"kind": "finish", "result": state["seen"]}
        return {"kind": "continue", "calls": [{"id": "b1", "tool": "delegate", "input": {}}]}

    def options(value):
        return value

    def reduce(state, outcomes):
        return {"seen": [o["value"] if o["ok"] else o["error"] for o in outcomes]}

    def draft(text, ctx):
        return text.upper()

    def launch(text, ctx):
        return "launched " + text
    """
DURATION = re.compile(r"\d+(\.\d)?m?s\b")


def _normal(text: str) -> str:
    text = DURATION.sub("<d>", text)
    return re.sub(r"(?<=un )(gate|boss):[0-9a-f-]+", r"\1:<id>", text)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return write_project(tmp_path, GATED, MODULE)


def _run(capsys: pytest.CaptureFixture[str], project: Path, *extra: str | Path) -> Outcome:
    store, trace = project.parent / "runs.sqlite", project.parent / "trace.ndjson"
    return tubeless(capsys, "run", project, "--checkpoints", store, "--trace", trace, *extra)


def _show(capsys: pytest.CaptureFixture[str], project: Path, *extra: str) -> str:
    shown = tubeless(capsys, "trace", "show", project.parent / "trace.ndjson", *extra)
    assert shown.code == 0, shown.err
    return _normal(shown.out)


def test_a_run_that_stops_for_approval_is_reported_waiting_not_failed(
    capsys: pytest.CaptureFixture[str], project: Path
) -> None:
    outcome = _run(capsys, project, "gate", "--key", "k1")

    assert outcome.code == 8
    store = project.parent / "runs.sqlite"
    assert _normal(outcome.err) == (
        "checkpoint: k1 (new)\n"
        "Pipeline gate: starting (1 step, dryRun=false), run gate:<id>\n"
        "  -> agent\n"
        "    turn 1: 2 calls\n"
        "      waiting launch [go]: approval needed\n"
        "    waiting turn 1: 1 call needs approval\n"
        "  waiting agent (<d>)\n"
        "Pipeline gate: waiting after <d> (status=waiting, steps=1, errors=0)\n"
        "waiting: TUBELESS_APPROVAL_REQUIRED: checkpoint 'k1' is waiting for approval of 1 "
        "call; nothing of its batch ran\n"
        "waiting: call 'go' to tool 'launch' (agent gate, turn 1)\n"
        f"  approve: tubeless approve {store} k1 go\n"
        f"  deny:    tubeless deny {store} k1 go [--reason TEXT]\n"
    )
    assert "fail" not in outcome.err and "error:" not in outcome.err
    assert _show(capsys, project, "--last") == (
        "Run gate:<id>  gate  waiting  <d>\n"
        "  waiting  checkpoint 'k1' is waiting for approval of 1 call; nothing of its batch ran\n"
        "  step agent  waiting  <d>\n"
        "  agent  waiting\n"
        "  turn 1  continue  2 calls  waiting  <d>\n"
        "    call go  launch  waiting\n"
    )
    assert "  gate  waiting  started " in _show(capsys, project)

    # The wire keeps the original release's statuses: readers show waiting from the code.
    records = read_trace(project.parent / "trace.ndjson")
    [root_end] = [
        r for r in records if r["name"] == "pipeline.completed" and "parentRunId" not in r
    ]
    assert root_end["payload"]["status"] == "failed"  # type: ignore[index]
    assert root_end["error"]["sourceCode"] == "TUBELESS_APPROVAL_REQUIRED"  # type: ignore[index]
    model = LiveModel()
    for record in records:
        model.feed(record)
    assert model.status == "waiting"
    assert [(row.label, row.status, row.detail) for row in model.rows()] == [
        ("agent", "waiting", "approval needed"),
        ("turn 1", "waiting", "approval needed"),
        ("launch", "waiting", "approval needed"),
    ]


def test_a_delegated_agent_waiting_leaves_its_callers_waiting_too(
    capsys: pytest.CaptureFixture[str], project: Path
) -> None:
    outcome = _run(capsys, project, "boss", "--key", "k2")

    assert outcome.code == 8
    report = _normal(outcome.err).splitlines()
    assert report[3:9] == [
        "    turn 1: 1 call",
        "      ... delegate [b1] 0/? Turn 1 of at most 20",
        "      waiting delegate [b1]: approval needed",
        "    waiting turn 1: approval needed",
        "  waiting agent (<d>)",
        "Pipeline boss: waiting after <d> (status=waiting, steps=1, errors=0)",
    ]
    shown = _show(capsys, project, "--last").splitlines()
    assert shown[0].endswith("  boss  waiting  <d>")
    assert shown[4:6] == [
        "  turn 1  continue  1 call  waiting  <d>",
        "    call b1  delegate  waiting  <d>",
    ]
    assert shown[6].endswith("  gate  waiting  <d>")
    assert shown[-1] == "          call go  launch  waiting"


def test_without_checkpoints_a_call_needing_approval_still_fails(
    capsys: pytest.CaptureFixture[str], project: Path
) -> None:
    """No checkpoint to resume: ``TUBELESS_APPROVAL_REQUIRED`` is a failure (exit 6)."""
    outcome = tubeless(capsys, "run", project, "gate", "--trace", project.parent / "t.ndjson")

    assert outcome.code == 6
    assert "status=failed" in outcome.err
    assert "waiting" not in outcome.err


def test_deny_all_shows_each_denied_call_in_the_report_and_trace_show(
    capsys: pytest.CaptureFixture[str], project: Path
) -> None:
    outcome = tubeless(
        capsys, "run", project, "gate", "--deny-all", "--trace", project.parent / "trace.ndjson"
    )

    assert outcome.code == 0
    assert json.loads(outcome.out)[1]["code"] == "TUBELESS_TOOL_DENIED"
    assert _normal(outcome.err).splitlines()[2:6] == [
        "    turn 1: 2 calls",
        "      ok draft [d1] (<d>)",
        "      denied launch [go]",
        "    turn 2: finish",
    ]
    assert _show(capsys, project, "--last").splitlines()[3:6] == [
        "  turn 1  continue  2 calls  completed  <d>",
        "    call d1  draft  completed  <d>",
        "    call go  launch  denied  TUBELESS_TOOL_DENIED",
    ]
    model = LiveModel()
    for record in read_trace(project.parent / "trace.ndjson"):
        model.feed(record)
    calls = [(row.label, row.call_id, row.status, row.detail) for row in model.rows()[3:]]
    assert calls == [("draft", "d1", "completed", None), ("launch", "go", "denied", "denied")]


def test_a_denial_reason_shows_in_the_report_and_never_in_the_trace(
    capsys: pytest.CaptureFixture[str], project: Path
) -> None:
    store, trace = project.parent / "runs.sqlite", project.parent / "trace.ndjson"
    assert _run(capsys, project, "gate", "--key", "k1").code == 8
    reason = "not today: the pad is wet"
    assert tubeless(capsys, "deny", store, "k1", "go", "--reason", reason).code == 0

    outcome = _run(capsys, project, "gate", "--key", "k1")

    assert outcome.code == 0
    assert f"      denied launch [go]: {reason}" in outcome.err.splitlines()
    assert "not today" not in trace.read_text(encoding="utf-8")
    shown = _show(capsys, project, "--last").splitlines()
    assert shown[4:6] == [
        "    call d1  draft  completed  <d>",
        "    call go  launch  denied  TUBELESS_TOOL_DENIED  a reason was given (kept in the "
        "checkpoint, not the trace)",
    ]
    [denied] = [
        r["payload"]["attributes"]  # type: ignore[index]
        for r in read_trace(trace)
        if r["name"] == "step.attempted"
        and r["payload"]["attributes"].get("agent.callStatus") == "denied"  # type: ignore[index, union-attr]
    ]
    assert (denied["agent.callErrorCode"], denied["agent.reasonGiven"]) == (
        "TUBELESS_TOOL_DENIED",
        True,
    )
