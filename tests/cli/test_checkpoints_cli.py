"""``run --checkpoints`` and ``tubeless checkpoints list|show|delete`` (DESIGN.md §11)."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from tests.fixtures.cli import ROOT, Outcome, tubeless

SCRIPTED = ROOT / "projects" / "scripted-agent.yaml"
KEY = "scripted-agent:44136fa355b3678a"  # the default key of the default input {}
ANSWER = '{"answer": "14 characters; HELLO; TUBELESS"}\n'


def test_the_same_command_again_prints_the_saved_answer_without_running_a_tool(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    store = tmp_path / "runs.sqlite"
    first = tubeless(capsys, "run", SCRIPTED, "--checkpoints", store, "-q")
    assert first == Outcome(0, ANSWER, f"checkpoint: {KEY} (new)\n")
    assert stat.S_IMODE(os.stat(store).st_mode) == 0o600
    again = tubeless(capsys, "run", SCRIPTED, "--checkpoints", store)
    assert (again.code, again.out) == (0, ANSWER)
    assert again.err.startswith(
        f"checkpoint: {KEY} (completed: its saved result follows, nothing runs)\n"
    )
    assert "turn 1" not in again.err and "uppercase" not in again.err  # no tool ran
    restarted = tubeless(capsys, "run", SCRIPTED, "--checkpoints", store, "--restart", "-q")
    assert restarted == Outcome(0, ANSWER, f"checkpoint: {KEY} (restarting)\n")


def test_list_show_and_delete(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    store = tmp_path / "runs.sqlite"
    tubeless(capsys, "run", SCRIPTED, "--checkpoints", store, "--key", "k1", "-q")
    listed = tubeless(capsys, "checkpoints", "list", store, "--json")
    assert listed.code == 0
    [row] = json.loads(listed.out)["checkpoints"]
    assert isinstance(row.pop("updated_at_ms"), int)
    assert row == {
        "key": "k1",
        "entry": "scripted-agent",
        "status": "completed",
        "turn": 2,
        "calls": 3,
        "pending": [],
    }
    shown = json.loads(tubeless(capsys, "checkpoints", "show", store, "k1", "--json").out)
    [agent] = shown["agents"]
    assert agent == {
        "route": "scripted-agent",
        "agent": "scripted-agent",
        "phase": "completed",
        "turn": 2,
        "state_version": 1,
        "budget": {"calls": 3, "decisions": 2, "depth": 0},
    }
    private = json.loads(
        tubeless(capsys, "checkpoints", "show", store, "k1", "--json", "--state").out
    )
    assert private["agents"][0]["state"]["question"] == "hello tubeless"
    assert private["agents"][0]["result"] == "14 characters; HELLO; TUBELESS"
    text = tubeless(capsys, "checkpoints", "show", store, "k1")
    assert text.out.splitlines()[1] == (
        "  agent scripted-agent: completed, turn 2, calls=3 decisions=2 depth=0"
    )
    assert tubeless(capsys, "checkpoints", "delete", store, "k1") == Outcome(0, "deleted k1\n", "")
    assert tubeless(capsys, "checkpoints", "list", store) == Outcome(0, "no checkpoints\n", "")
    missing = tubeless(capsys, "checkpoints", "delete", store, "k1")
    assert missing == Outcome(2, "", f"error: no checkpoint 'k1' in {store}\n")


def test_a_checkpoint_file_is_never_a_trace_file(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    store = tmp_path / "runs.sqlite"
    same = tubeless(capsys, "run", SCRIPTED, "--checkpoints", store, "--trace", store)
    assert same.code == 1
    assert same.err.startswith(f"error: --checkpoints and --trace name the same file ({store})")
    assert not store.exists()
    trace = tmp_path / "trace.sqlite"
    assert tubeless(capsys, "run", SCRIPTED, "--trace", trace, "-q").code == 0
    trace.chmod(0o600)
    refused = tubeless(capsys, "run", SCRIPTED, "--checkpoints", trace, "-q")
    assert refused == Outcome(
        2,
        "",
        f"error: TUBELESS_CHECKPOINT_INVALID: {trace}: not a checkpoint file (it is a "
        "trace store)\n",
    )


def test_a_corrupted_checkpoint_file_is_a_clear_error_and_is_left_alone(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    store = tmp_path / "runs.sqlite"
    tubeless(capsys, "run", SCRIPTED, "--checkpoints", store, "-q")
    data = store.read_bytes()
    store.write_bytes(data[: len(data) // 3])  # truncated
    truncated = store.read_bytes()
    outcome = tubeless(capsys, "run", SCRIPTED, "--checkpoints", store, "-q")
    assert outcome.code == 2 and outcome.out == ""
    assert outcome.err.startswith("error: TUBELESS_CHECKPOINT_INVALID: ")
    assert store.read_bytes() == truncated
    listed = tubeless(capsys, "checkpoints", "list", store)
    assert listed.code == 2 and listed.err.startswith("error: TUBELESS_CHECKPOINT_INVALID: ")


def test_the_checkpoint_commands_never_create_a_file(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    missing = tmp_path / "none.sqlite"
    outcome = tubeless(capsys, "checkpoints", "list", missing)
    assert outcome.code == 2 and not missing.exists()
