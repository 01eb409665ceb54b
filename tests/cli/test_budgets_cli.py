"""Budgets on the command line: ``inspect`` and ``plan`` show them."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from tests.fixtures.cli import Outcome
from tubeless._cli import main

_PROJECT = """\
version: 1
project: {id: budgets}
agents:
  a:
    input: {schema: {type: object}}
    result: {schema: {type: string}}
    initial_state: {}
    decide: {use: tubeless.providers.openai:responses, with: {model: gpt-4.1-mini}}
    limits: {max_turns: 5, max_cost_usd: 0.5, max_total_tokens: 100000, on_limit: wait}
"""
_LIMITS = (
    "max_turns=5 max_calls=100 max_decisions=100 max_depth=4 max_concurrency=1 "
    "max_total_tokens=100000 max_cost_usd=0.5 on_limit=wait"
)


def tubeless(*args: str | Path) -> Outcome:
    runner = CliRunner()
    with runner.isolation() as streams:
        code = main([str(arg) for arg in args])
    return Outcome(code, streams[0].getvalue().decode(), streams[1].getvalue().decode())


def test_inspect_and_plan_show_the_budgets(tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    path.write_text(_PROJECT)
    inspected = tubeless("inspect", path)
    assert inspected.code == 0, inspected.err
    assert f"Limits: {_LIMITS}\n" in inspected.out
    planned = tubeless("plan", path)
    assert planned.code == 0, planned.err
    assert f"      limits: {_LIMITS}\n" in planned.out
