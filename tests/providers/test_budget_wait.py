"""``on_limit: wait``: a checkpointed run whose budget runs out stops ``waiting`` (exit 8),
``tubeless checkpoints raise`` records a higher bound for that key, and the same run command
resumes it; the fake server sees exactly the requests the budgets allowed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from tests.fixtures.cli import Outcome
from tests.providers.fixtures.adapters import ADAPTERS, Adapter
from tests.providers.test_budget_requests import (
    MAX_OUT,
    QUESTION,
    _project,
    _replies,
    _sizes,
    route_through,
)
from tubeless._cli import main
from tubeless.tracing.meters import tokens


def tubeless(*args: str | Path) -> Outcome:
    runner = CliRunner()
    with runner.isolation() as streams:
        code = main([str(arg) for arg in args])
    return Outcome(code, streams[0].getvalue().decode(), streams[1].getvalue().decode())


def _listed(store: Path) -> list[dict[str, Any]]:
    listed = tubeless("checkpoints", "list", store, "--json")
    assert listed.code == 0, listed.err
    rows: list[dict[str, Any]] = json.loads(listed.out)["checkpoints"]
    return rows


@pytest.mark.parametrize("adapter", ADAPTERS, ids=lambda a: a.id)
def test_wait_then_raise_then_resume(
    adapter: Adapter, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sizes = _sizes(tmp_path, adapter, monkeypatch)
    bound = sizes[0] + sizes[1] + sizes[2] + 3 * MAX_OUT - 1
    replies = _replies(adapter, usage=False)
    server = adapter.server(*replies)
    route_through(monkeypatch, server.transport)
    path = _project(tmp_path, adapter, f"max_total_tokens: {bound}, on_limit: wait")
    store = tmp_path / "checkpoints.sqlite"
    command = ("run", path, "--question", QUESTION, "--checkpoints", store)

    first = tubeless(*command)
    assert first.code == 8, first.err
    assert len(server.requests) == 2
    assert "waiting: TUBELESS_AGENT_LIMIT_REACHED: Agent max_total_tokens=" in first.err
    assert "the run waits for a higher max_total_tokens" in first.err
    assert "tubeless checkpoints raise" in first.err
    [row] = _listed(store)
    assert row["status"] == "waiting"
    key = row["key"]

    below = tubeless("checkpoints", "raise", store, key, "--max-total-tokens", "10")
    assert below.code == 2
    assert "a new bound must be at least that" in below.err
    nothing = tubeless("checkpoints", "raise", store, key, "--max-cost-usd", "5")
    assert nothing.code == 2
    assert "has no agent with a max_cost_usd budget" in nothing.err

    raised_to = bound + sizes[2] + sizes[3] + sizes[4] + 3 * MAX_OUT
    raised = tubeless("checkpoints", "raise", store, key, "--max-total-tokens", str(raised_to))
    assert raised.code == 0, raised.err
    assert f"max_total_tokens {bound} -> {raised_to}" in raised.out
    assert _listed(store)[0]["status"] == "running"
    shown = tubeless("checkpoints", "show", store, key)
    assert shown.code == 0, shown.err
    assert f"budgets: max_total_tokens {tokens(bound - sizes[2] - MAX_OUT + 1)} of " in shown.out

    again = tubeless(*command)
    assert again.code == 0, again.err
    assert json.loads(again.out) == {"answer": "done"}
    # Two requests, then the three the raised budget allowed: none was sent twice.
    assert len(server.requests) == 5
    assert _listed(store)[0]["status"] == "completed"


def test_wait_without_checkpoints_fails_as_fail_and_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    adapter = ADAPTERS[0]
    sizes = _sizes(tmp_path, adapter, monkeypatch)
    bound = sizes[0] + MAX_OUT
    server = adapter.server(*_replies(adapter, usage=False))
    route_through(monkeypatch, server.transport)
    path = _project(tmp_path, adapter, f"max_total_tokens: {bound}, on_limit: wait")
    outcome = tubeless("run", path, "--question", QUESTION)
    assert outcome.code == 6
    assert len(server.requests) == 1
    assert "on_limit: wait needs checkpoints (--checkpoints PATH)" in outcome.err
