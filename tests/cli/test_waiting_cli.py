"""``run --checkpoints`` with a call waiting for approval (DESIGN.md §12, §17): exit 8, then
``tubeless approve|deny PATH KEY CALL_ID`` and a rerun of the same key."""

from __future__ import annotations

import json
import signal
import sqlite3
import time
from pathlib import Path

import pytest

from tests.fixtures.cli import Outcome, tubeless, tubeless_process
from tests.fixtures.processes import GATED, HANG_GUARD, write_project
from tests.fixtures.terminal import TerminalRun

MODULE = """\
    import pathlib

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
        return {{"seen": [o["value"] if o["ok"] else o["error"] for o in outcomes]}}

    def _mark(name):
        with open(HERE / name, "a") as f:
            f.write("ran\\n")

    def draft(text, ctx):
        _mark("drafted")
        return text.upper()

    def launch(text, ctx):
        _mark("launched")
        return "launched " + text
"""
KEY = "k1"


def _project(tmp_path: Path) -> Path:
    return write_project(tmp_path, GATED, MODULE.format(here=str(tmp_path)))


def _run(capsys: pytest.CaptureFixture[str], path: Path, store: Path, *extra: str) -> Outcome:
    return tubeless(capsys, "run", path, "--checkpoints", store, "--key", KEY, "-q", *extra)


def _document(store: Path) -> dict[str, object]:
    with sqlite3.connect(store) as db:
        [(text,)] = db.execute("SELECT document FROM checkpoints WHERE key = ?", (KEY,))
    document: dict[str, object] = json.loads(text)
    return document


WAITING_ERR = (
    f"checkpoint: {KEY} (new)\n"
    "waiting: TUBELESS_APPROVAL_REQUIRED: checkpoint 'k1' is waiting for approval of 1 call; "
    "nothing of its batch ran\n"
    "waiting: call 'go' to tool 'launch' (agent gate, turn 1)\n"
    "  approve: tubeless approve {store} k1 go\n"
    "  deny:    tubeless deny {store} k1 go [--reason TEXT]\n"
)


def test_without_an_approver_the_run_waits_with_exit_8_and_lists_the_commands(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path, store = _project(tmp_path), tmp_path / "runs.sqlite"

    outcome = _run(capsys, path, store)

    assert outcome == Outcome(8, "", WAITING_ERR.format(store=store))
    again = _run(capsys, path, store)
    assert again.code == 8
    assert again.err.startswith(
        "checkpoint: k1 (resuming at turn 1; 1 call still waiting for approval)\n"
    )
    assert not (tmp_path / "drafted").exists() and not (tmp_path / "launched").exists()
    document = _document(store)
    assert document["status"] == "waiting"
    agent = document["agents"]["gate"]  # type: ignore[index]
    assert agent["phase"] == "calls" and agent["decision"]["admitted"] is True
    assert [c["status"] for c in agent["decision"]["calls"]] == ["pending", "pending"]
    [request] = document["approvals"]["pending"]  # type: ignore[index]
    assert request.pop("digest").startswith("sha256:")
    assert request == {
        "key": KEY,
        "route": "gate",
        "turn": 1,
        "call_id": "go",
        "tool": "launch",
        "input": "rocket",
    }


def test_list_and_show_say_waiting_and_name_the_pending_calls(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path, store = _project(tmp_path), tmp_path / "runs.sqlite"
    _run(capsys, path, store)

    listed = tubeless(capsys, "checkpoints", "list", store, "--json")
    [row] = json.loads(listed.out)["checkpoints"]
    assert (row["status"], row["pending"]) == ("waiting", ["go"])
    text = tubeless(capsys, "checkpoints", "list", store).out
    assert "  waiting  turn=1  calls=2  pending=go  " in text
    shown = tubeless(capsys, "checkpoints", "show", store, KEY)
    assert "  waiting: call go (launch, agent gate, turn 1)" in shown.out.splitlines()
    as_json = json.loads(tubeless(capsys, "checkpoints", "show", store, KEY, "--json").out)
    [pending] = as_json["pending"]
    assert set(pending) == {"route", "turn", "call_id", "tool", "digest"}  # no input
    private = json.loads(
        tubeless(capsys, "checkpoints", "show", store, KEY, "--json", "--state").out
    )
    assert private["pending"][0]["input"] == "rocket"


def test_approve_then_rerun_runs_the_approved_call_once_and_completes(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path, store = _project(tmp_path), tmp_path / "runs.sqlite"
    _run(capsys, path, store)

    approved = tubeless(capsys, "approve", store, KEY, "go")
    assert approved == Outcome(
        0, "approved call 'go' of checkpoint 'k1'; rerun the key to resume it\n", ""
    )
    assert _document(store)["status"] == "running"
    again = _run(capsys, path, store)

    assert (again.code, json.loads(again.out)) == (0, ["X", "launched rocket"])
    assert (tmp_path / "launched").read_text() == "ran\n"
    assert (tmp_path / "drafted").read_text() == "ran\n"


def test_deny_with_a_reason_gives_reduce_a_denied_outcome_in_decision_order(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path, store = _project(tmp_path), tmp_path / "runs.sqlite"
    _run(capsys, path, store)

    denied = tubeless(capsys, "deny", store, KEY, "go", "--reason", "not today")
    assert denied.code == 0
    again = _run(capsys, path, store)

    assert again.code == 0
    assert json.loads(again.out) == [
        "X",
        {
            "code": "TUBELESS_TOOL_DENIED",
            "message": "Call 'go' to tool 'launch' was denied: not today",
        },
    ]
    assert not (tmp_path / "launched").exists()


def test_an_unknown_call_id_is_refused_listing_the_pending_ones(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path, store = _project(tmp_path), tmp_path / "runs.sqlite"
    _run(capsys, path, store)

    outcome = tubeless(capsys, "approve", store, KEY, "d1")

    assert outcome == Outcome(
        2, "", "error: checkpoint 'k1' has no call 'd1' waiting for approval (waiting: 'go')\n"
    )
    assert tubeless(capsys, "approve", store, "nope", "go").code == 2
    assert tubeless(capsys, "approve", tmp_path / "missing.sqlite", KEY, "go").code == 2


def test_approve_refuses_a_document_no_run_writes_and_leaves_it_as_it_is(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """``approve`` reads the document as a run does (issue 31, item 2): an edited one is
    refused before a decision is written into it, not at the next run."""
    path, store = _project(tmp_path), tmp_path / "runs.sqlite"
    _run(capsys, path, store)
    edited = _document(store)
    edited["agents"]["gate"]["budget"]["calls"] = -1  # type: ignore[index]
    text = json.dumps(edited)
    with sqlite3.connect(store) as db:
        db.execute("UPDATE checkpoints SET document = ? WHERE key = ?", (text, KEY))

    outcome = tubeless(capsys, "approve", store, KEY, "go")

    assert (outcome.code, outcome.out) == (2, "")
    assert outcome.err.startswith(
        "error: TUBELESS_CHECKPOINT_INVALID: checkpoint 'k1': $.agents['gate'].budget.calls is "
        "-1, below 0; no run writes that (was the file edited?)"
    ), outcome.err
    with sqlite3.connect(store) as db:
        [(kept,)] = db.execute("SELECT document FROM checkpoints WHERE key = ?", (KEY,))
    assert kept == text


def test_approve_is_refused_while_a_run_holds_the_key(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    from tubeless.durable import SqliteCheckpoints

    path, store = _project(tmp_path), tmp_path / "runs.sqlite"
    _run(capsys, path, store)
    holder = SqliteCheckpoints(store)
    try:
        with holder.acquire(KEY):
            outcome = tubeless_process("approve", store, KEY, "go")
    finally:
        holder.close()

    assert outcome.code == 6
    assert outcome.err.startswith("error: TUBELESS_CHECKPOINT_LOCKED: ")
    assert _document(store)["status"] == "waiting"


@pytest.mark.slow
def test_the_exit_8_round_trip_in_real_processes_runs_the_tool_exactly_once(
    tmp_path: Path,
) -> None:
    path, store = _project(tmp_path), tmp_path / "runs.sqlite"
    common = ("run", path, "--checkpoints", store, "--key", KEY, "-q")

    first = tubeless_process(*common)
    assert (first.code, first.out) == (8, "")
    assert f"  approve: tubeless approve {store} k1 go\n" in first.err
    assert tubeless_process("approve", store, KEY, "go").code == 0
    second = tubeless_process(*common)

    assert (second.code, json.loads(second.out)) == (0, ["X", "launched rocket"])
    assert (tmp_path / "launched").read_text() == "ran\n"


def _until_completed(store: Path, call_id: str) -> None:
    deadline = time.monotonic() + HANG_GUARD
    while True:
        calls = _document(store)["agents"]["gate"]["decision"]["calls"]  # type: ignore[index]
        if any(c["id"] == call_id and c["status"] == "completed" for c in calls):
            return
        assert time.monotonic() < deadline, calls
        time.sleep(0.05)


def test_kill_9_while_the_prompt_is_open_keeps_the_request_pending(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path, store = _project(tmp_path), tmp_path / "runs.sqlite"
    run = TerminalRun(path, "--checkpoints", store, "--key", KEY, keyboard=True)
    run.read_until(
        lambda screen: any(line.startswith("Run this call? [y/N]") for line in screen.text[-1:])
    )
    assert _document(store)["status"] == "waiting"  # committed before the prompt was shown
    _until_completed(store, "d1")  # the call needing no approval runs while the prompt waits

    run.process.send_signal(signal.SIGKILL)
    run.finish()

    listed = json.loads(tubeless(capsys, "checkpoints", "list", store, "--json").out)
    assert listed["checkpoints"][0]["pending"] == ["go"]
    assert tubeless(capsys, "approve", store, KEY, "go").code == 0
    again = _run(capsys, path, store)
    assert (again.code, json.loads(again.out)) == (0, ["X", "launched rocket"])
    assert (tmp_path / "launched").read_text() == "ran\n"
    assert (tmp_path / "drafted").read_text() == "ran\n"


def test_an_answer_on_the_prompt_is_committed_and_a_rerun_does_not_ask_again(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path, store = _project(tmp_path), tmp_path / "runs.sqlite"
    run = TerminalRun(path, "--checkpoints", store, "--key", KEY, keyboard=True)
    run.read_until(
        lambda screen: any(line.startswith("Run this call? [y/N]") for line in screen.text[-1:])
    )
    run.type("n\n")
    code, out = run.finish()

    assert code == 0, run.screen.text
    assert json.loads(out)[1]["code"] == "TUBELESS_TOOL_DENIED"
    decisions = _document(store)["approvals"]["decisions"]  # type: ignore[index]
    assert [(d["call_id"], d["approved"]) for d in decisions] == [("go", False)]


def test_calls_of_two_agents_sharing_an_id_are_told_apart_by_route(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    from tubeless.durable import SqliteCheckpoints

    store = tmp_path / "runs.sqlite"
    pending = [
        {
            "key": KEY,
            "route": route,
            "turn": 1,
            "call_id": "c1",
            "tool": "launch",
            "input": "x",
            "digest": f"sha256:{n}",
        }
        for n, route in enumerate(["boss/1/a/gate", "boss/1/b/gate"])
    ]
    document = {
        "version": 1,
        "key": KEY,
        "entry": "boss",
        "status": "waiting",
        "agents": {},
        "approvals": {"pending": pending, "decisions": []},
    }
    checkpoints = SqliteCheckpoints(store)
    with checkpoints.acquire(KEY) as lease:
        lease.write(json.dumps(document))
    checkpoints.close()

    ambiguous = tubeless(capsys, "approve", store, KEY, "c1")
    chosen = tubeless(capsys, "deny", store, KEY, "c1", "--route", "boss/1/b/gate")

    assert ambiguous == Outcome(
        2,
        "",
        "error: checkpoint 'k1' has 2 calls 'c1' waiting; give --route: 'c1' (--route "
        "boss/1/a/gate), 'c1' (--route boss/1/b/gate)\n",
    )
    assert chosen.code == 0
    saved = _document(store)
    assert [p["route"] for p in saved["approvals"]["pending"]] == ["boss/1/a/gate"]  # type: ignore[index]
    [decision] = saved["approvals"]["decisions"]  # type: ignore[index]
    assert decision == {
        "route": "boss/1/b/gate",
        "turn": 1,
        "call_id": "c1",
        "digest": "sha256:1",
        "approved": False,
    }
    assert saved["status"] == "waiting"
