"""kill -9 at many points of a checkpointed run; rerunning the same command finishes the task.

The project's callbacks append one line per effect to a marker file (with ``fsync``) and, at
the point named by ``KILL_AT``, write a ready file and wait: the test then sends SIGKILL. So
every kill point is chosen exactly, and no test waits on a timer (DESIGN.md §9).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.postgres import postgres_dsn, postgres_server  # noqa: F401 (fixtures)
from tests.fixtures.processes import ROOT, cli_env, finish, wait_for_file, write_project
from tubeless import load_project
from tubeless.durable import MemoryCheckpoints

LIMITS = {"max_turns": 5, "max_calls": 6, "max_decisions": 10, "max_depth": 1}

BODY = f"""\
    version: 1
    project: {{id: orders, default: orders}}
    python_path: [.]
    agents:
      helper:
        implementation_version: "1"
        input: {{schema: {{type: string}}}}
        result: {{schema: {{}}}}
        initial_state: "helpers:initial"
        decide: "helpers:decide_helper"
        reduce: "helpers:reduce"
        tools:
          read: {{run: "helpers:read", description: Reads., replay: safe,
                  input: {{schema: {{type: string}}}}, output: {{schema: {{type: string}}}}}}
          charge: {{run: "helpers:charge", description: Charges., reconcile: "helpers:reconcile",
                    input: {{schema: {{type: string}}}}, output: {{schema: {{type: string}}}}}}
      orders:
        implementation_version: "1"
        input: {{schema: {{type: object}}}}
        result: {{schema: {{}}}}
        initial_state: "helpers:initial"
        decide: "helpers:decide_orders"
        reduce: "helpers:reduce"
        limits: {json.dumps(LIMITS)}
        tools:
          read: {{run: "helpers:read", description: Reads., replay: safe,
                  input: {{schema: {{type: string}}}}, output: {{schema: {{type: string}}}}}}
          charge: {{run: "helpers:charge", description: Charges., reconcile: "helpers:reconcile",
                    input: {{schema: {{type: string}}}}, output: {{schema: {{type: string}}}}}}
          send: {{run: "helpers:send", description: Sends.,
                  input: {{schema: {{type: string}}}}, output: {{schema: {{type: string}}}}}}
          delegate: {{agent: helper, description: Delegates.}}
    """

MODULE = """\
    import os, time

    def _mark(*words):
        path = os.environ.get("MARKER")
        if path:
            with open(path, "a", encoding="utf-8") as out:
                out.write(" ".join(map(str, words)) + "\\n")
                out.flush()
                os.fsync(out.fileno())

    def _point(label):
        if os.environ.get("KILL_AT") == label:
            with open(os.environ["READY"], "w") as ready:
                ready.write(label)
            time.sleep(60)  # the test kills the process here

    def initial(value):
        _point("initial")
        return {"log": {}, "reduced": 0}

    def _calls(*calls):
        return {"kind": "continue",
                "calls": [{"id": i, "tool": t, "input": v} for i, t, v in calls]}

    def decide_orders(state, ctx):
        key = ctx.execution["idempotency_key"]
        _mark("decide", key)
        _point(f"decide {key}")
        script = {1: [("r1", "read", "stock"), ("c1", "charge", "order")],
                  2: [("d1", "delegate", "gift")],
                  3: [("s1", "send", "receipt")]}
        if ctx.turn in script:
            return _calls(*script[ctx.turn])
        return {"kind": "finish", "result": state["log"]}

    def decide_helper(state, ctx):
        key = ctx.execution["idempotency_key"]
        _mark("decide", key)
        _point(f"decide {key}")
        if ctx.turn == 1:
            return _calls(("cr1", "read", "wrap"), ("cc1", "charge", "wrapping"))
        return {"kind": "finish", "result": " / ".join(sorted(state["log"].values()))}

    def reduce(state, outcomes):
        number = state["reduced"] + 1
        _point(f"reduce {number}")
        log = dict(state["log"])
        for o in outcomes:
            log[o["id"]] = (o["value"] if isinstance(o["value"], str) else str(o["value"])) \\
                if o["ok"] else o["error"]["code"]
        return {"log": log, "reduced": number}

    def _effect(tool, text, ctx):
        key = ctx.execution["idempotency_key"]
        _mark(tool, key)
        _point(f"tool {key}")
        return f"{tool} {text}"

    def read(text, ctx):
        return _effect("read", text, ctx)

    def charge(text, ctx):
        return _effect("charge", text, ctx)

    def send(text, ctx):
        return _effect("send", text, ctx)

    def reconcile(text, ctx):
        key = ctx.execution["idempotency_key"]
        with open(os.environ["MARKER"], encoding="utf-8") as lines:
            if f"charge {key}" in lines.read().splitlines():
                _mark("reconciled", key)
                return f"charge {text}"
        from tubeless import ToolError
        raise ToolError("NOT_CHARGED", "the charge never happened")
    """

#: Where each attempt is killed, in order (the last attempt runs to the end).
KILL_POINTS = [
    "initial",  # before the first decision
    "decide task/orders/1",  # a decision reserved, not yet made
    "tool task/orders/1/c1",  # unsafe call: between intent and outcome
    "reduce 1",  # between the outcomes and the reduced state
    "tool task/orders/2/d1/helper/1/cr1",  # a safe call in the nested child agent
    "decide task/orders/2/d1/helper/2",  # the child's second decision
    "tool task/orders/3/s1",  # unsafe call without reconcile
    "decide task/orders/4",  # the finishing decision
]


def _command(project: Path, store: Path | str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "tubeless",
        "run",
        str(project),
        "--checkpoints",
        str(store),
        "--key",
        "task",
        "-q",
    ]


def _attempt(
    project: Path, store: Path | str, env: dict[str, str], kill_at: str | None, ready: Path
) -> subprocess.Popen[str]:
    extra = {} if kill_at is None else {"KILL_AT": kill_at}
    return subprocess.Popen(
        _command(project, store),
        text=True,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**env, **extra},
    )


def _kill(process: subprocess.Popen[str], ready: Path) -> str:
    wait_for_file(ready, process)
    process.send_signal(signal.SIGKILL)
    _, err = finish(process)
    assert process.returncode == -signal.SIGKILL
    ready.unlink()
    return err


def _uninterrupted(project: Path, tmp_path: Path, monkeypatch: Any) -> Any:
    monkeypatch.setenv("MARKER", str(tmp_path / "reference-marker"))
    entry = load_project(project).get("orders")
    run = asyncio.run(entry.run({}, checkpoints=MemoryCheckpoints(), checkpoint_key="task"))
    assert run.status == "completed", run.errors
    return run.value


def _expire_leases(dsn: str) -> None:
    """What waiting out the killed run's lease would do (its ttl passed), without the wait."""
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("UPDATE tubeless_checkpoint_leases SET expires_at = 0")


@pytest.mark.slow
def test_kill_9_anywhere_then_rerun_finishes_with_the_uninterrupted_result(
    tmp_path: Path, monkeypatch: Any
) -> None:
    _kill_anywhere(tmp_path, monkeypatch, tmp_path / "runs.sqlite")


@pytest.mark.slow
def test_kill_9_anywhere_on_postgres_then_rerun_finishes_the_same(
    tmp_path: Path,
    monkeypatch: Any,
    postgres_dsn: str,  # noqa: F811
) -> None:
    """The same invariants with PostgreSQL checkpoints: a killed run's lease outlives it (no
    OS lock dies with the process), so the next attempt runs once it expired."""
    _kill_anywhere(tmp_path, monkeypatch, postgres_dsn, after_kill=_expire_leases)


def _kill_anywhere(
    tmp_path: Path,
    monkeypatch: Any,
    store: Path | str,
    after_kill: Callable[[str], None] | None = None,
) -> None:
    project = write_project(tmp_path, BODY, MODULE)
    expected = _uninterrupted(project, tmp_path, monkeypatch)
    marker, ready = tmp_path / "marker", tmp_path / "ready"
    env = cli_env(MARKER=str(marker), READY=str(ready), PYTHONPATH=f"{ROOT}{os.pathsep}{tmp_path}")
    said: list[str] = []
    for point in KILL_POINTS:
        said.append(_kill(_attempt(project, store, env, point, ready), ready))
        if after_kill is not None:
            after_kill(str(store))
    last = _attempt(project, store, env, None, ready)
    out, err = finish(last)
    assert last.returncode == 0, err
    result = json.loads(out)

    # The same answer, but for the unsafe call without reconcile cut short while running.
    assert result == {**expected, "s1": "TUBELESS_AGENT_CALL_INTERRUPTED"}
    assert expected["s1"] == "send receipt"
    lines = marker.read_text(encoding="utf-8").splitlines()
    effects = Counter(line for line in lines if not line.startswith(("decide", "reconciled")))
    reference = (tmp_path / "reference-marker").read_text(encoding="utf-8").splitlines()
    assert set(effects) == {line for line in reference if not line.startswith("decide")}
    for line, count in effects.items():  # every call ran at least once, the unsafe ones once
        if line.split()[0] in ("charge", "send"):
            assert count == 1, f"an unsafe call ran {count} times: {line}"
    assert effects["read task/orders/2/d1/helper/1/cr1"] == 2  # safe: ran again on resume
    assert "reconciled task/orders/1/c1" in lines  # the interrupted charge was reconciled
    assert said[0].splitlines()[0] == "checkpoint: task (new)"
    assert "checkpoint: task (resuming at turn 1)" in said[3]
    assert "checkpoint: task (resuming at turn 4)" in err

    # Budgets across every attempt together: each decision asked was charged once, never
    # refilled, and the six calls were admitted once each (max_calls=6 leaves no room).
    shown = subprocess.run(
        [sys.executable, "-m", "tubeless", "checkpoints", "show", str(store), "task", "--json"],
        text=True,
        capture_output=True,
        cwd=ROOT,
        env=env,
        check=True,
    )
    agents = {a["route"]: a for a in json.loads(shown.stdout)["agents"]}
    decisions = sum(1 for line in lines if line.startswith("decide"))
    assert agents["orders"]["budget"] == {"calls": 6, "decisions": decisions, "depth": 0}
    assert decisions <= LIMITS["max_decisions"]

    # Done: the same command prints the saved answer and runs nothing.
    again = _attempt(project, store, env, None, ready)
    out_again, err_again = finish(again)
    assert (again.returncode, json.loads(out_again)) == (0, result)
    assert "completed: its saved result follows" in err_again
    assert marker.read_text(encoding="utf-8").splitlines() == lines


@pytest.mark.slow
def test_two_processes_on_one_key_one_runs_the_other_fails_fast(
    tmp_path: Path,
) -> None:
    """The second fails with TUBELESS_CHECKPOINT_LOCKED; once the first is killed, the key
    resumes at once."""
    project = write_project(tmp_path, BODY, MODULE)
    marker, ready, store = tmp_path / "marker", tmp_path / "ready", tmp_path / "runs.sqlite"
    env = cli_env(MARKER=str(marker), READY=str(ready), PYTHONPATH=f"{ROOT}{os.pathsep}{tmp_path}")
    first = _attempt(project, store, env, "tool task/orders/1/c1", ready)
    wait_for_file(ready, first)
    second = _attempt(project, store, env, None, ready)
    _, err = finish(second)
    assert second.returncode == 6
    assert err.startswith("error: TUBELESS_CHECKPOINT_LOCKED: Checkpoint key 'task' is in use")
    first.send_signal(signal.SIGKILL)
    finish(first)
    third = _attempt(project, store, env, None, ready)
    out, err = finish(third)
    assert third.returncode == 0, err
    assert "checkpoint: task (resuming at turn 1)" in err
    assert json.loads(out)["c1"] == "charge order"
