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
        "held_by": None,
        "interrupted": False,
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
    assert missing == Outcome(2, "", f"error: no checkpoint 'k1' in {store}; it holds none\n")


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


HELD_MODULE = """\
    import os, time

    def initial(value):
        return {"done": False}

    def decide(state, ctx):
        if state["done"]:
            return {"kind": "finish", "result": "sent"}
        return {"kind": "continue", "calls": [{"id": "s1", "tool": "send", "input": "hi"}]}

    def reduce(state, outcomes):
        return {"done": True}

    def send(text, ctx):
        ready = os.environ.get("READY")
        if ready:
            with open(ready, "w") as out:
                out.write("sending")
            time.sleep(60)  # the test kills the process here
        return text
    """


def _local_time(updated_at_ms: int) -> str:
    from datetime import datetime

    return datetime.fromtimestamp(updated_at_ms / 1000).strftime("%Y-%m-%d %H:%M:%S")


def test_list_and_show_tell_a_live_run_from_a_killed_one(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """While a run holds its key: ``running (held by pid N on HOST)``; once it is killed:
    ``interrupted: the same command resumes it``. Times are local date-times."""
    import signal
    import socket

    from tests.fixtures.processes import (
        cli_env,
        finish,
        one_tool_agent,
        start_run,
        wait_for_file,
        write_project,
    )

    project = write_project(tmp_path, one_tool_agent("mailer", "send", "Sends."), HELD_MODULE)
    store, ready = tmp_path / "runs.sqlite", tmp_path / "ready"
    env = cli_env(READY=str(ready), PYTHONPATH=f"{ROOT}{os.pathsep}{tmp_path}")
    process = start_run(project, "--checkpoints", store, "--key", "task-1", "-q", env=env)
    try:
        wait_for_file(ready, process)
        host = socket.gethostname()
        live = tubeless(capsys, "checkpoints", "list", store)
        [row] = json.loads(tubeless(capsys, "checkpoints", "list", store, "--json").out)[
            "checkpoints"
        ]
        shown = tubeless(capsys, "checkpoints", "show", store, "task")  # a unique prefix
    finally:
        process.send_signal(signal.SIGKILL)
        finish(process)
    when = _local_time(row["updated_at_ms"])
    assert (row["status"], row["held_by"], row["interrupted"]) == (
        "running",
        {"pid": process.pid, "host": host},
        False,
    )
    assert live == Outcome(
        0,
        f"task-1  mailer  running (held by pid {process.pid} on {host})  turn=1  calls=1  "
        f"updated {when}\n",
        "",
    )
    assert shown.code == 0
    assert shown.out.splitlines()[0] == (
        f"task-1  mailer  running (held by pid {process.pid} on {host})  turn=1  calls=1  "
        f"updated {when}"
    )

    dead = tubeless(capsys, "checkpoints", "list", store)
    [row] = json.loads(tubeless(capsys, "checkpoints", "list", store, "--json").out)["checkpoints"]
    assert (row["status"], row["held_by"], row["interrupted"]) == ("running", None, True)
    assert dead == Outcome(
        0,
        f"task-1  mailer  interrupted: the same command resumes it  turn=1  calls=1  "
        f"updated {when}\n",
        "",
    )
    resumed = tubeless(capsys, "run", project, "--checkpoints", store, "--key", "task-1", "-q")
    assert resumed.code == 0 and "resuming at turn 1" in resumed.err
    done = tubeless(capsys, "checkpoints", "list", store).out
    assert done.startswith("task-1  mailer  completed  turn=2  calls=1  updated ")


def test_show_takes_a_unique_prefix_and_an_unknown_key_lists_the_keys(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    store = tmp_path / "runs.sqlite"
    for key in ("alpha-1", "alpha-2", "beta"):
        tubeless(capsys, "run", SCRIPTED, "--checkpoints", store, "--key", key, "-q")
    shown = tubeless(capsys, "checkpoints", "show", store, "be")
    assert shown.code == 0 and shown.out.startswith("beta  scripted-agent  completed  turn=2")
    assert json.loads(tubeless(capsys, "checkpoints", "show", store, "b", "--json").out)["key"] == (
        "beta"
    )
    ambiguous = tubeless(capsys, "checkpoints", "show", store, "alpha")
    assert ambiguous == Outcome(
        2,
        "",
        f"error: checkpoint 'alpha' is ambiguous: 2 keys in {store} begin with it: "
        "alpha-1, alpha-2\n",
    )
    unknown = tubeless(capsys, "checkpoints", "show", store, "gamma")
    assert unknown == Outcome(
        2, "", f"error: no checkpoint 'gamma' in {store}; it holds: alpha-1, alpha-2, beta\n"
    )
    not_deleted = tubeless(capsys, "checkpoints", "delete", store, "alpha")  # never a prefix
    assert not_deleted == Outcome(
        2, "", f"error: no checkpoint 'alpha' in {store}; it holds: alpha-1, alpha-2, beta\n"
    )


def test_a_changed_definition_names_what_changed_and_the_restart_flag(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    store = tmp_path / "runs.sqlite"
    assert tubeless(capsys, "run", SCRIPTED, "--checkpoints", store, "-q").code == 0
    changed = tmp_path / "scripted-agent.yaml"
    text = SCRIPTED.read_text().replace("python_path: [..]", f"python_path: [{ROOT}]")
    changed.write_text(text.replace("max_calls: 100", "max_calls: 12"))

    refused = tubeless(capsys, "run", changed, "--checkpoints", store, "-q")

    assert refused.code == 6 and refused.out == ""
    assert refused.err.endswith(
        f"Checkpoint {KEY!r} was saved by a different definition of agent 'scripted-agent': "
        "limits.max_calls: 100 -> 12; start it over with --restart (restart=True in Python), "
        "or use another key\n"
    )
    restarted = tubeless(capsys, "run", changed, "--checkpoints", store, "--restart", "-q")
    assert restarted == Outcome(0, ANSWER, f"checkpoint: {KEY} (restarting)\n")
