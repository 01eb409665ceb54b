"""``on_limit: wait`` down a delegation tree: a child agent, or a tool reporting through
``ctx.usage``, that exhausts an ancestor's budget stops the checkpointed run ``waiting``
(exit 8) naming the budget and the agent whose bound to raise; a budget declared on a child
agent is raised by its route (``checkpoints raise ... --route ROUTE``). After the raise the
same run command resumes and completes, and no side effect runs twice.

Every decision and the ``ask`` tool "request a model" of 50 tokens through ``ctx.usage``
(reserved, then charged in full); the ``mark`` tool appends its input to a file.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from tests.fixtures.cli import Outcome, tubeless
from tests.fixtures.processes import write_project

KEY = "k1"

_PROJECT = """\
    version: 1
    project: {{id: tree}}
    python_path: [.]
    agents:
      boss:
        input: {{schema: {{type: object}}}}
        result: {{schema: {{}}}}
        initial_state: {{}}
        decide: "helpers:boss"
        reduce: "helpers:keep"
        limits: {{{boss_limits}}}
        tools:
          mark: {{run: "helpers:mark", description: Mark., input: {{schema: {{type: string}}}},
                  output: {{schema: {{type: string}}}}}}
          ask: {{run: "helpers:ask", description: Ask a model., replay: safe,
                 input: {{schema: {{type: string}}}}, output: {{schema: {{type: string}}}}}}
          helper: {{agent: helper, description: Delegates.}}
      helper:
        input: {{schema: {{type: object}}}}
        result: {{schema: {{}}}}
        initial_state: {{}}
        decide: "helpers:helper"
        reduce: "helpers:keep"
        limits: {{{helper_limits}}}
        tools:
          mark: {{run: "helpers:mark", description: Mark., input: {{schema: {{type: string}}}},
                  output: {{schema: {{type: string}}}}}}
    """

_MODULE = """\
    import pathlib

    MARKS = pathlib.Path({marks!r})
    PLAN = {plan!r}


    def _request(ctx):
        held = ctx.usage.reserve(input_tokens=40, output_tokens=10)
        ctx.usage.charge(held, input_tokens=40, output_tokens=10)


    def keep(state, outcomes):
        seen = list(state.get("seen", []))
        seen.extend(o["value"] if o["ok"] else o["error"]["code"] for o in outcomes)
        return {{"seen": seen}}


    def boss(state, ctx):
        _request(ctx)
        steps = PLAN
        if ctx.turn > len(steps):
            return {{"kind": "finish", "result": state.get("seen", [])}}
        tool, value = steps[ctx.turn - 1]
        call = {{"id": f"c{{ctx.turn}}", "tool": tool, "input": value}}
        return {{"kind": "continue", "calls": [call]}}


    def helper(state, ctx):
        _request(ctx)
        if ctx.turn == 1:
            call = {{"id": "h1", "tool": "mark", "input": "helper"}}
            return {{"kind": "continue", "calls": [call]}}
        return {{"kind": "finish", "result": "helped"}}


    def mark(text, ctx):
        with open(MARKS, "a") as f:
            f.write(text + "\\n")
        return text


    def ask(text, ctx):
        _request(ctx)
        return "asked " + text
    """

#: The boss marks, then delegates to the helper (which marks once and finishes).
DELEGATES = [("mark", "boss"), ("helper", {})]
#: The boss marks, then calls a tool that requests a model itself.
ASKS = [("mark", "boss"), ("ask", "q")]


def _project(tmp_path: Path, plan: list[object], boss: str, helper: str = "max_turns: 4") -> Path:
    return write_project(
        tmp_path,
        _PROJECT.format(boss_limits=boss, helper_limits=helper),
        _MODULE.format(marks=str(tmp_path / "marks.txt"), plan=plan),
    )


def _run(capsys: pytest.CaptureFixture[str], path: Path, store: Path) -> Outcome:
    return tubeless(capsys, "run", path, "boss", "--checkpoints", store, "--key", KEY, "-q")


def _marks(tmp_path: Path) -> list[str]:
    return (tmp_path / "marks.txt").read_text().splitlines()


def _usage(store: Path, route: str) -> dict[str, object]:
    with sqlite3.connect(store) as db:
        [(text,)] = db.execute("SELECT document FROM checkpoints WHERE key = ?", (KEY,))
    usage: dict[str, object] = json.loads(text)["agents"][route]["budget"]["usage"]
    return usage


def test_a_child_agent_that_exhausts_its_parents_budget_waits_for_the_parent(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # boss 50, boss 50, helper 50 = 150; the helper's second decision does not fit 175.
    path = _project(tmp_path, DELEGATES, "max_total_tokens: 175, on_limit: wait")
    store = tmp_path / "runs.sqlite"
    first = _run(capsys, path, store)
    assert first.code == 8, first.err
    assert (
        "waiting: TUBELESS_AGENT_LIMIT_REACHED: Agent max_total_tokens=175 exceeded "
        "(consumed=150, requested=50, scope=" in first.err
    )
    assert "the run waits for a higher max_total_tokens of agent boss (checkpoint 'k1')" in (
        first.err
    )
    assert f"  raise:  tubeless checkpoints raise {store} k1 --max-total-tokens N   (" in first.err
    assert _usage(store, "boss")["waiting"] == "max_total_tokens"
    assert _marks(tmp_path) == ["boss", "helper"]

    raised = tubeless(capsys, "checkpoints", "raise", store, KEY, "--max-total-tokens", "300")
    assert raised.code == 0, raised.err
    again = _run(capsys, path, store)
    assert again.code == 0, again.err
    assert json.loads(again.out) == ["boss", "helped"]
    assert _marks(tmp_path) == ["boss", "helper"]  # nothing ran twice
    usage = _usage(store, "boss")
    assert "waiting" not in usage
    # The refused reservation was never added: 150, then helper 50 and boss 50.
    assert usage["input_tokens"] + usage["output_tokens"] == 250  # type: ignore[operator]


def test_a_tool_that_exhausts_the_agents_budget_through_ctx_usage_waits(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # boss 50, boss 50; the tool's own request does not fit 125.
    path = _project(tmp_path, ASKS, "max_total_tokens: 125, on_limit: wait")
    store = tmp_path / "runs.sqlite"
    first = _run(capsys, path, store)
    assert first.code == 8, first.err
    assert "the run waits for a higher max_total_tokens of agent boss (checkpoint 'k1')" in (
        first.err
    )
    assert f"  raise:  tubeless checkpoints raise {store} k1 --max-total-tokens N" in first.err
    assert _marks(tmp_path) == ["boss"]

    raised = tubeless(capsys, "checkpoints", "raise", store, KEY, "--max-total-tokens", "250")
    assert raised.code == 0, raised.err
    again = _run(capsys, path, store)
    assert again.code == 0, again.err
    assert json.loads(again.out) == ["boss", "asked q"]
    assert _marks(tmp_path) == ["boss"]


HELPER_ROUTE = "boss/2/c2/helper"


def test_a_budget_of_a_child_agent_is_raised_by_its_route(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = _project(
        tmp_path,
        DELEGATES,
        "max_turns: 4",
        helper="max_turns: 4, max_total_tokens: 60, on_limit: wait",
    )
    store = tmp_path / "runs.sqlite"
    first = _run(capsys, path, store)
    assert first.code == 8, first.err
    assert (
        f"the run waits for a higher max_total_tokens of agent {HELPER_ROUTE} (checkpoint 'k1')"
        in first.err
    )
    command = (
        f"  raise:  tubeless checkpoints raise {store} k1 --max-total-tokens N "
        f"--route {HELPER_ROUTE}   (then run the same command again)"
    )
    assert command in first.err
    shown = tubeless(capsys, "checkpoints", "show", store, KEY)
    assert f"  agent {HELPER_ROUTE}: " in shown.out
    assert "(waiting for a higher max_total_tokens)" in shown.out

    unrouted = tubeless(capsys, "checkpoints", "raise", store, KEY, "--max-total-tokens", "200")
    assert unrouted.code == 2
    assert f"--route {HELPER_ROUTE}" in unrouted.err
    wrong = tubeless(
        capsys, "checkpoints", "raise", store, KEY, "--max-total-tokens", "200", "--route", "x"
    )
    assert wrong.code == 2
    assert f"no agent at route 'x' with a max_total_tokens budget; {HELPER_ROUTE} has one" in (
        wrong.err
    )
    raised = tubeless(
        capsys,
        "checkpoints",
        "raise",
        store,
        KEY,
        "--max-total-tokens",
        "200",
        "--route",
        HELPER_ROUTE,
    )
    assert raised.code == 0, raised.err
    assert f"raised agent {HELPER_ROUTE}: max_total_tokens 60 -> 200 (consumed 50)" in raised.out
    again = _run(capsys, path, store)
    assert again.code == 0, again.err
    assert json.loads(again.out) == ["boss", "helped"]
    assert _marks(tmp_path) == ["boss", "helper"]
    assert _usage(store, HELPER_ROUTE)["bounds"] == {"max_total_tokens": 200}
