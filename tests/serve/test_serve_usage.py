"""The run object's ``usage``: what the entry agent's budget saved in its checkpoint."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from tests.serve.conftest import Served
from tubeless.durable import SqliteCheckpoints
from tubeless.project import load_project
from tubeless.serve._ends import read_document, record_end, run_view
from tubeless.serve._metrics import Metrics
from tubeless.serve._registry import RunRegistry


def _served_run(tmp_path: Path, usage: dict[str, object] | None) -> tuple[dict[str, object], str]:
    """Run the test project's agent once, give its saved budget ``usage`` (as a metered
    agent's budget holds it) and record the run's end: its run object and the metrics."""
    served = Served(tmp_path)
    store = SqliteCheckpoints(tmp_path / "c.sqlite")
    registry = RunRegistry(str(tmp_path / "runs.sqlite"))
    try:
        entry = load_project(served.project).entries["worker"]
        row, _ = registry.create(
            run_id="run_1",
            entry="worker",
            key="k1",
            raw_input={"text": "u", "mode": "safe", "steps": 2},
            limits=None,
            idempotency_key=None,
        )
        run = asyncio.run(
            entry.run(row.input, checkpoints=store, checkpoint_key="k1", run_id="run_1")
        )
        document = read_document(store, "k1")
        assert document is not None
        if usage is not None:
            document["agents"]["worker"]["budget"]["usage"] = usage
        record_end(registry, row, run, json.loads(json.dumps(document)), False)
        ended = registry.get("run_1")
        assert ended is not None
        calls, turns, tokens, cost = registry.consumed()
        metrics = Metrics().render(registry.counts(), calls, turns, tokens=tokens, cost_usd=cost)
        return run_view(registry, ended), metrics
    finally:
        registry.close()
        store.close()


def test_usage_counts_decisions_and_calls_of_an_unmetered_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SERVE_TEST_DIR", str(tmp_path / "marks"))
    view, metrics = _served_run(tmp_path, None)
    assert view["status"] == "completed"
    assert "\ntubeless_serve_budget_tokens_consumed 0\n" in metrics
    assert view["usage"] == {"decisions": 3, "calls": 2}
    assert (view["turns"], view["calls"]) == (3, 2)


def test_usage_of_a_metered_run_has_its_tokens_and_cost_as_saved(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SERVE_TEST_DIR", str(tmp_path / "marks"))
    saved = {
        "bounds": {"max_total_tokens": 1000},
        "input_tokens": 120,
        "output_tokens": 30,
        "cost_usd": "0.000123",
    }
    view, metrics = _served_run(tmp_path, saved)
    assert view["usage"] == {
        "decisions": 3,
        "calls": 2,
        "input_tokens": 120,
        "output_tokens": 30,
        "total_tokens": 150,
        "cost_usd": "0.000123",
    }
    assert "\ntubeless_serve_budget_calls_consumed 2\n" in metrics
    assert "\ntubeless_serve_budget_tokens_consumed 150\n" in metrics
    assert "\ntubeless_serve_budget_cost_usd_consumed 0.000123\n" in metrics
