"""The default checkpoint key names the task the user meant (DESIGN.md §11, §24).

The key is made from the *validated* input (defaults filled), so ``--n 3`` and an omitted ``n``
that defaults to 3 are one task; keys written by the round-2 rule (from the raw input) are still
found and resumed; a run that starts a new key says which unfinished key of its entry the file
holds; and any input that validates, lone surrogates included, has a key.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from tests.fixtures.cli import tubeless
from tests.fixtures.processes import HANG_GUARD, ROOT, cli_env, write_project
from tubeless import load_project
from tubeless.durable import MemoryCheckpoints, SqliteCheckpoints

PROJECT = """\
    version: 1
    project: {id: sender}
    python_path: [.]
    agents:
      sender:
        input:
          schema:
            type: object
            properties:
              n: {type: integer, default: 3}
              note: {type: string}
        result: {schema: {}}
        initial_state: "helpers:initial"
        decide: "helpers:decide"
        reduce: "helpers:reduce"
        tools:
          send: {run: "helpers:send", description: Sends.,
                 input: {schema: {type: integer}}, output: {schema: {type: integer}}}
    """

MODULE = """\
    import os

    def initial(validated):
        return {"n": validated["n"], "sent": []}

    def decide(state, ctx):
        if os.environ.get("CRASH") and len(state["sent"]) == 1:
            os._exit(9)  # killed after the first send was committed
        if len(state["sent"]) < 2:
            index = len(state["sent"])
            return {"kind": "continue",
                    "calls": [{"id": f"s{index}", "tool": "send", "input": index}]}
        return {"kind": "finish", "result": {"n": state["n"], "sent": state["sent"]}}

    def reduce(state, outcomes):
        return {"n": state["n"], "sent": [*state["sent"], outcomes[0]["value"]]}

    def send(index, ctx):
        with open(os.environ["MARKS"], "a", encoding="utf-8") as out:
            out.write(f"{index}\\n")
        return index
    """

# sha256 of the canonical JSON of the validated input {"n": 3}, and of the raw input {} (the
# round-2 rule): what a first run and an older release wrote.
KEY = "sender:215ddd5567ca2590"
OLD_KEY = "sender:44136fa355b3678a"
ANSWER = {"n": 3, "sent": [0, 1]}


def _run(project: Path, store: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tubeless", "run", str(project), "--checkpoints", str(store), *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=cli_env(**env),
        timeout=HANG_GUARD,
        check=False,
    )


def _marks(path: Path) -> Counter[str]:
    return Counter(path.read_text(encoding="utf-8").split())


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("MARKS", str(tmp_path / "marks"))
    return write_project(tmp_path, PROJECT, MODULE)


@pytest.mark.slow
def test_a_flag_spelling_the_default_and_no_flag_are_one_task(
    project: Path, tmp_path: Path
) -> None:
    """Killed mid-run with ``--n 3``, the same command without ``--n 3`` resumes the key: the
    unsafe call that completed is not sent again."""
    store, marks = tmp_path / "runs.sqlite", tmp_path / "marks"
    killed = _run(project, store, "--n", "3", "-q", CRASH="1", MARKS=str(marks))
    assert killed.returncode == 9, killed.stderr
    assert killed.stderr == f"checkpoint: {KEY} (new)\n"
    again = _run(project, store, "-q", MARKS=str(marks))
    assert again.returncode == 0, again.stderr
    assert again.stderr == f"checkpoint: {KEY} (resuming at turn 2)\n"
    assert json.loads(again.stdout) == ANSWER
    assert _marks(marks) == {"0": 1, "1": 1}


@pytest.mark.slow
def test_a_key_written_by_the_round_2_rule_is_found_and_resumed(
    project: Path, tmp_path: Path
) -> None:
    """An older release keyed ``{}`` by the raw input; that unfinished key is resumed."""
    store, marks = tmp_path / "runs.sqlite", tmp_path / "marks"
    killed = _run(project, store, "--key", OLD_KEY, "-q", CRASH="1", MARKS=str(marks))
    assert killed.returncode == 9, killed.stderr
    again = _run(project, store, "-q", MARKS=str(marks))
    assert again.returncode == 0, again.stderr
    assert again.stderr == f"checkpoint: {OLD_KEY} (resuming at turn 2)\n"
    assert json.loads(again.stdout) == ANSWER
    assert _marks(marks) == {"0": 1, "1": 1}
    keys = [stored.key for stored in SqliteCheckpoints(store).list()]
    assert keys == [OLD_KEY]  # no second task was started


def test_the_python_api_finds_a_round_2_key_too(project: Path, tmp_path: Path) -> None:
    """``run(checkpoints=store)`` without a key resumes what the old rule saved."""
    marks = tmp_path / "marks"
    agent = load_project(project).entry("sender")
    store = MemoryCheckpoints()
    first = asyncio.run(agent.run({}, checkpoints=store, checkpoint_key=OLD_KEY))
    assert first.value == ANSWER
    again = asyncio.run(agent.run({}, checkpoints=store))
    assert again.value == ANSWER
    assert _marks(marks) == {"0": 1, "1": 1}
    assert [stored.key for stored in store.list()] == [OLD_KEY]
    fresh = MemoryCheckpoints()
    asyncio.run(agent.run({"n": 3}, checkpoints=fresh))
    assert [stored.key for stored in fresh.list()] == [KEY]


@pytest.mark.slow
def test_a_new_key_names_an_unfinished_key_of_the_same_entry(project: Path, tmp_path: Path) -> None:
    store, marks = tmp_path / "runs.sqlite", tmp_path / "marks"
    killed = _run(project, store, "--n", "5", "-q", CRASH="1", MARKS=str(marks))
    assert killed.returncode == 9, killed.stderr
    [unfinished] = [stored.key for stored in SqliteCheckpoints(store).list()]
    other = _run(project, store, "-q", MARKS=str(marks))
    assert other.returncode == 0, other.stderr
    assert other.stderr == (
        f"checkpoint: {KEY} (new)\n"
        f"note: {store} also holds unfinished checkpoint {unfinished} of sender (turn 2); "
        f"to resume it, run with --key {unfinished}\n"
    )
    # Once the new key is saved, running it again names nothing: it is not a new key.
    again = _run(project, store, "-q", MARKS=str(marks))
    assert again.stderr == (
        f"checkpoint: {KEY} (completed: its saved result follows, nothing runs)\n"
    )


def test_an_input_with_a_lone_surrogate_has_a_key(
    project: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = tmp_path / "runs.sqlite"
    text = '{"note": "\\ud800"}'  # JSON for a lone surrogate
    done = tubeless(capsys, "run", project, "--checkpoints", store, "--input", text, "-q")
    assert done.code == 0, done.err
    [key] = [stored.key for stored in SqliteCheckpoints(store).list()]
    # The canonical JSON escapes every non-ASCII character: '{"n":3,"note":"\ud800"}'.
    assert key == "sender:01077a79e46cb888"
    assert done.err == f"checkpoint: {key} (new)\n"
    assert json.loads(done.out) == ANSWER


def test_a_key_given_with_a_lone_surrogate_is_refused_by_its_code(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A ``--key`` whose bytes are not UTF-8 (Python reads them as lone surrogates) cannot be
    stored: the usual key error, never a bare ``UnicodeEncodeError``."""
    scripted = ROOT / "projects" / "scripted-agent.yaml"
    store = tmp_path / "runs.sqlite"
    refused = tubeless(capsys, "run", scripted, "--checkpoints", store, "--key", "k\udcff", "-q")
    assert (refused.code, refused.out) == (6, "")
    assert refused.err == (
        "error: TUBELESS_AGENT_INVALID_CHECKPOINT_KEY: A checkpoint key must be valid Unicode "
        "text (it holds a lone surrogate at position 1)\n"
    )


def test_the_note_names_one_unfinished_key_and_counts_the_others(
    project: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Only unfinished keys of the same entry count; the key is quoted for the shell."""
    store = tmp_path / "runs.sqlite"
    documents = {
        "by hand #1": {"entry": "sender", "status": "running", "agents": {"sender": {"turn": 4}}},
        "by hand #2": {"entry": "sender", "status": "waiting", "agents": {"sender": {"turn": 1}}},
        "done": {"entry": "sender", "status": "completed", "agents": {}},
        "other": {"entry": "other", "status": "running", "agents": {}},
    }
    checkpoints = SqliteCheckpoints(store)
    try:
        for key, document in documents.items():
            with checkpoints.acquire(key) as lease:
                lease.write(json.dumps({"version": 1, "key": key, **document}))
    finally:
        checkpoints.close()
    done = tubeless(capsys, "run", project, "--checkpoints", store, "-q")
    assert done.code == 0, done.err
    first, note = done.err.splitlines()
    assert first == f"checkpoint: {KEY} (new)"
    named = "by hand #1" if "(turn 4)" in note else "by hand #2"
    turn = 4 if named == "by hand #1" else 1
    assert note == (
        f"note: {store} also holds unfinished checkpoint {named} of sender (turn {turn}) and 1 "
        f"more (tubeless checkpoints list); to resume it, run with --key '{named}'"
    )
