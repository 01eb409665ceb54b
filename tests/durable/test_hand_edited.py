"""A checkpoint document no writer produces is refused, not trusted (issue 30, item 6).

Each test kills a real run with SIGKILL at a chosen point, edits the document it left the way
no run writes it (a budget counter set back, a completed call set back to pending, ...), and
runs the same command again: it exits 2 with ``TUBELESS_CHECKPOINT_INVALID`` naming the key and
the JSON path, and runs nothing (the effects file counts every call).
"""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.durable.test_kill import BODY, MODULE, _attempt, _kill
from tests.fixtures.processes import ROOT, cli_env, finish, write_project
from tubeless.durable._document_parse import check_document
from tubeless.errors import CheckpointError

#: The child agent ``helper`` (started by call d1 in turn 2) is deciding its second turn.
IN_CHILD = "decide task/orders/2/d1/helper/2"
#: Both calls of turn 1 completed (their outcomes saved), the reducer not yet done.
AFTER_CALLS = "reduce 1"
Document = dict[str, Any]


def _killed(tmp_path: Path, kill_at: str) -> tuple[Path, Path, Path, dict[str, str]]:
    project = write_project(tmp_path, BODY, MODULE)
    marker, ready, store = tmp_path / "marker", tmp_path / "ready", tmp_path / "runs.sqlite"
    env = cli_env(MARKER=str(marker), READY=str(ready), PYTHONPATH=f"{ROOT}{os.pathsep}{tmp_path}")
    _kill(_attempt(project, store, env, kill_at, ready), ready)
    return project, store, marker, env


def _edit(store: Path, change: Callable[[Document], None]) -> None:
    db = sqlite3.connect(store)
    (text,) = db.execute("SELECT document FROM checkpoints WHERE key = 'task'").fetchone()
    document = json.loads(text)
    change(document)
    db.execute("UPDATE checkpoints SET document = ? WHERE key = 'task'", (json.dumps(document),))
    db.commit()
    db.close()


def _orders(document: Document) -> Document:
    entry: Document = document["agents"]["orders"]
    return entry


def _helper(document: Document) -> Document:
    entry: Document = document["agents"]["orders/2/d1/helper"]
    return entry


def _set(
    get: Callable[[Document], Document], *path: str | int, to: Any
) -> Callable[[Document], None]:
    def change(document: Document) -> None:
        place: Any = get(document)
        for part in path[:-1]:
            place = place[part]
        place[path[-1]] = to

    return change


EDITS = [
    pytest.param(
        IN_CHILD,
        _set(_orders, "budget", "calls", to=-5),
        "$.agents['orders'].budget.calls is -5, below 0",
        id="negative-counter",
    ),
    pytest.param(
        IN_CHILD,
        _set(_orders, "budget", "calls", to=3),
        "$.agents['orders'].budget.calls is 3, below the 5 its turns, calls and child agents "
        "consumed (a budget is never refilled)",
        id="parent-below-its-child",
    ),
    pytest.param(
        IN_CHILD,
        _set(_helper, "budget", "calls", to=1),
        "$.agents['orders/2/d1/helper'].budget.calls is 1, below the 2",
        id="child-below-its-calls",
    ),
    pytest.param(
        IN_CHILD,
        _set(_orders, "budget", "decisions", to=1),
        "$.agents['orders'].budget.decisions is 1, below the 4",
        id="decisions-set-back",
    ),
    pytest.param(
        IN_CHILD,
        _set(_orders, "decision", "admitted", to=False),
        "$.agents['orders'].decision.calls[0].status is 'running' though the batch was never "
        "admitted (charged)",
        id="admission-undone",
    ),
    pytest.param(
        AFTER_CALLS,
        _set(_orders, "decision", "calls", 1, "status", to="pending"),
        "$.agents['orders'].decision.calls[1].status is 'pending' though the call's outcome is "
        "recorded (it would run again)",
        id="completed-call-set-pending",
    ),
    pytest.param(
        AFTER_CALLS,
        _set(_orders, "turn", to=0),
        "$.agents['orders'].turn is 0, below 1",
        id="turn-zero",
    ),
]


@pytest.mark.parametrize(("kill_at", "change", "said"), EDITS)
def test_an_edited_checkpoint_is_refused_and_nothing_runs(
    tmp_path: Path, kill_at: str, change: Callable[[Document], None], said: str
) -> None:
    project, store, marker, env = _killed(tmp_path, kill_at)
    before = marker.read_text(encoding="utf-8")
    _edit(store, change)
    again = _attempt(project, store, env, None, tmp_path / "ready")
    out, err = finish(again)
    assert (again.returncode, out) == (2, ""), err
    assert err.startswith(f"error: TUBELESS_CHECKPOINT_INVALID: checkpoint 'task': {said}"), err
    assert "no run writes that (was the file edited?)" in err
    assert marker.read_text(encoding="utf-8") == before


@pytest.mark.slow
def test_what_runs_write_is_accepted_and_resumes(tmp_path: Path) -> None:
    """The same killed runs, unedited, pass the check and finish (the check refuses nothing a
    writer produces, at either point)."""
    for kill_at in (IN_CHILD, AFTER_CALLS):
        here = tmp_path / kill_at.replace("/", "_").replace(" ", "_")
        here.mkdir()
        project, store, _, env = _killed(here, kill_at)
        db = sqlite3.connect(store)
        (text,) = db.execute("SELECT document FROM checkpoints WHERE key = 'task'").fetchone()
        db.close()
        check_document(json.loads(text), "task")
        last = _attempt(project, store, env, None, here / "ready")
        out, err = finish(last)
        assert last.returncode == 0, err
        assert json.loads(out)["c1"] == "charge order"


@pytest.mark.parametrize(
    ("document", "said"),
    [
        ({"agents": []}, "$.agents is [], not an object"),
        ({"agents": {}, "status": "done"}, "$.status is 'done', not one of"),
        (
            {"agents": {}, "approvals": {"pending": [{"route": "a", "turn": "1"}]}},
            "$.approvals.pending[0].turn is '1', not a whole number",
        ),
        (
            {"agents": {}, "approvals": {"decisions": [{"route": "a", "turn": 1, "call_id": "c"}]}},
            "$.approvals.decisions[0].approved is None, not true or false",
        ),
    ],
)
def test_the_document_around_the_entries_is_checked_too(document: Document, said: str) -> None:
    with pytest.raises(CheckpointError) as caught:
        check_document({"version": 1, **document}, "k")
    assert caught.value.code == "TUBELESS_CHECKPOINT_INVALID"
    assert caught.value.message.startswith(f"checkpoint 'k': {said}")
