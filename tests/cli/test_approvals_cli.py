"""``tubeless run`` and approvals (DESIGN §12): ``--approve-all`` / ``--deny-all`` for scripts,
no approver without a terminal, and a person answering on a real (pseudo-)terminal."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest

from tests.fixtures.cli import ROOT, Outcome, tubeless
from tests.fixtures.processes import wait_for_file, write_project
from tests.fixtures.terminal import TerminalRun

PROJECT = ROOT / "projects" / "approvals.yaml"


def _result(outcome: Outcome) -> object:
    return json.loads(outcome.out)


def test_approve_all_runs_the_gated_calls(capsys: pytest.CaptureFixture[str]) -> None:
    outcome = tubeless(capsys, "run", PROJECT, "--to", "ops@elsewhere.org", "--approve-all", "-q")

    assert (outcome.code, outcome.err) == (0, "")
    assert _result(outcome) == {
        "drafted": "RELEASE NOTES",
        "published": True,
        "mailed": True,
        "denied": [],
    }


def test_deny_all_turns_the_gated_calls_into_denied_outcomes(
    capsys: pytest.CaptureFixture[str],
) -> None:
    outcome = tubeless(capsys, "run", PROJECT, "--to", "ops@elsewhere.org", "--deny-all", "-q")

    assert outcome.code == 0
    assert _result(outcome) == {
        "drafted": "RELEASE NOTES",
        "published": False,
        "mailed": False,
        "denied": ["publish", "mail"],
    }


def test_the_predicate_lets_mail_inside_example_com_through_unasked(
    capsys: pytest.CaptureFixture[str],
) -> None:
    outcome = tubeless(capsys, "run", PROJECT, "--deny-all", "-q")

    assert _result(outcome) == {
        "drafted": "RELEASE NOTES",
        "published": False,
        "mailed": True,
        "denied": ["publish"],
    }


def test_without_a_terminal_or_a_flag_the_run_fails_before_the_batch_starts(
    capsys: pytest.CaptureFixture[str],
) -> None:
    outcome = tubeless(capsys, "run", PROJECT, "-q")

    assert (outcome.code, outcome.out) == (6, "")
    assert outcome.err == (
        "error: TUBELESS_CHILD_FAILED (TUBELESS_APPROVAL_REQUIRED): agent approvals, turn 1: "
        "Call 'publish' to tool 'publish' needs approval and the run has no approver; "
        "no call of the batch ran\n"
    )


def test_approve_all_and_deny_all_together_are_a_usage_error(
    capsys: pytest.CaptureFixture[str],
) -> None:
    outcome = tubeless(capsys, "run", PROJECT, "--approve-all", "--deny-all")

    assert outcome.code == 1
    assert "Give --approve-all or --deny-all, not both." in outcome.err


def test_inspect_and_plan_show_which_tools_need_approval(
    capsys: pytest.CaptureFixture[str],
) -> None:
    inspected = tubeless(capsys, "inspect", PROJECT)
    planned = tubeless(capsys, "plan", PROJECT)

    assert "    approval: always" in inspected.out
    assert "    approval: predicate" in inspected.out
    assert "on_limit=finish" in inspected.out
    assert (
        "tool publish (replay unsafe): Publish the note where everyone can read it. "
        "(needs approval: always)"
    ) in planned.out
    assert "tool draft (replay unsafe): Draft a note from its title.\n" in planned.out


# -- a person on a terminal -----------------------------------------------------------------------
def _asked(run: TerminalRun, call_id: str) -> None:
    run.read_until(
        lambda screen: (
            any(f"call {call_id!r}" in line for line in screen.text)
            and any(line.startswith("Run this call? [y/N]") for line in screen.text[-1:])
        )
    )


def test_a_person_approves_one_call_and_denies_the_next_on_the_terminal() -> None:
    run = TerminalRun(PROJECT, "--to", "ops@elsewhere.org", keyboard=True)

    _asked(run, "publish")
    assert "approval needed: tool 'publish', call 'publish' (turn 1, approvals)" in run.screen.text
    assert '    "Release notes"' in run.screen.text
    run.type("y\n")
    _asked(run, "mail")
    assert '      "to": "ops@elsewhere.org"' in run.screen.text
    run.type("n\n")
    code, out = run.finish()

    assert code == 0, run.screen.text
    assert json.loads(out) == {
        "drafted": "RELEASE NOTES",
        "published": True,
        "mailed": False,
        "denied": ["mail"],
    }


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
          launch: {run: "helpers:launch", description: Launch., approval: always,
                   input: {schema: {type: string}}, output: {schema: {type: string}}}
    """
MODULE = """\
    import pathlib

    HERE = pathlib.Path({here!r})

    def initial(validated):
        return {{}}

    def decide(state, ctx):
        if state:
            return {{"kind": "finish", "result": "done"}}
        return {{"kind": "continue", "calls": [{{"id": "c1", "tool": "launch", "input": "x"}}]}}

    def reduce(state, outcomes):
        return {{"done": True}}

    def launch(text, ctx):
        (HERE / "launched").write_text("launched")
        return text
"""


def test_sigint_while_the_prompt_waits_cancels_the_run_and_never_runs_the_call(
    tmp_path: Path,
) -> None:
    path = write_project(tmp_path, GATED, MODULE.format(here=str(tmp_path)))
    run = TerminalRun(path, keyboard=True)
    _asked(run, "c1")
    (tmp_path / "asked").write_text("asked")
    wait_for_file(tmp_path / "asked", run.process)

    run.process.send_signal(signal.SIGINT)
    code, out = run.finish()

    assert (code, out) == (7, "")
    assert not (tmp_path / "launched").exists()
    assert "error: TUBELESS_RUN_CANCELLED: SIGINT received; the run was cancelled" in (
        run.screen.text
    )


def test_approve_and_deny_of_an_unknown_key_list_the_keys_the_file_holds(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A mistyped key names the keys the checkpoint file holds, as `checkpoints show` does."""
    from tubeless.durable import SqliteCheckpoints

    path = tmp_path / "runs.sqlite"
    store = SqliteCheckpoints(path)
    with store.acquire("approvals:abc") as lease:
        lease.write('{"format": 1}')
    store.close()
    for verb in ("approve", "deny"):
        outcome = tubeless(capsys, verb, path, "approvals:ab", "publish")
        assert outcome.code == 2, outcome.err
        assert f"error: no checkpoint 'approvals:ab' in {path}; it holds: approvals:abc" in (
            outcome.err
        )
