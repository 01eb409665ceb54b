"""Budgets in batches: each row has its own, and ``--max-cost-usd`` / ``--max-total-tokens``
bound the whole batch (rows not started once it is spent are skipped)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from tests.fixtures.cli import Outcome
from tubeless import define_agent, define_tool
from tubeless._cli import main
from tubeless.batch import run_batch
from tubeless.errors import AGENT_LIMIT_REACHED, BUDGET_EXHAUSTED
from tubeless.testing import call, continue_with, finish

_NOOP = define_tool(
    description="Nothing.", input_schema=dict, output_schema=dict, run=lambda value, ctx: {}
)


async def _decide(state: Any, ctx: Any) -> Any:
    """Two 'model requests' of 30 tokens each, one per turn."""
    reservation = ctx.usage.reserve(input_tokens=20, output_tokens=10)
    await asyncio.sleep(0)  # let other rows reserve while this one is held
    ctx.usage.charge(reservation, input_tokens=20, output_tokens=10)
    if ctx.turn >= 2:
        return finish("done")
    return continue_with(call("noop", {}))


def _agent(limits: Any = None) -> Any:
    return define_agent(
        id="rowagent",
        input_schema=dict[str, Any],
        result_schema=str,
        initial_state=lambda validated: {},
        decide=_decide,
        tools={"noop": _NOOP},
        limits=limits,
    )


async def _rows(agent: Any, count: int, **options: Any) -> list[dict[str, Any]]:
    return [row async for row in run_batch(agent, [{"n": i} for i in range(count)], **options)]


def test_rows_after_the_batch_budget_is_spent_are_skipped() -> None:
    rows = asyncio.run(_rows(_agent(), 5, max_total_tokens=100))
    statuses = [row["status"] for row in rows]
    # Row 0 uses 60; row 1's second request (90 + 30) does not fit; nothing starts after.
    assert statuses == ["completed", "failed", "skipped", "skipped", "skipped"]
    assert rows[1]["error"]["code"] == AGENT_LIMIT_REACHED
    assert "scope=batch" in rows[1]["error"]["message"]
    for row in rows[2:]:
        assert row["error"]["code"] == BUDGET_EXHAUSTED
        assert row["run_id"] is None


def test_rows_in_flight_never_together_overrun_the_batch_budget() -> None:
    from tubeless.agent._scope import OUTER_LEDGERS

    seen: list[Any] = []

    async def decide(state: Any, ctx: Any) -> Any:
        seen.append(OUTER_LEDGERS.get()[0])
        return await _decide(state, ctx)

    agent = define_agent(
        id="rowagent",
        input_schema=dict[str, Any],
        result_schema=str,
        initial_state=lambda validated: {},
        decide=decide,
        tools={"noop": _NOOP},
    )
    rows = asyncio.run(_rows(agent, 12, max_total_tokens=250, concurrency=4))
    ledger = seen[0]
    assert all(item is ledger for item in seen)
    assert ledger.input_tokens + ledger.output_tokens <= 250
    completed = [row for row in rows if row["status"] == "completed"]
    assert 60 * len(completed) <= 250
    assert {row["status"] for row in rows} <= {"completed", "failed", "skipped"}
    assert rows[-1]["status"] == "skipped"


def test_each_row_has_its_own_budget() -> None:
    rows = asyncio.run(_rows(_agent({"max_total_tokens": 60}), 3))
    assert [row["status"] for row in rows] == ["completed"] * 3


_PROJECT = """\
version: 1
project: {{id: batchbudget}}
python_path: [{root}]
agents:
  rowagent:
    input: {{schema: {{type: object}}}}
    result: {{schema: {{type: string}}}}
    initial_state: {{}}
    decide: tests.batch.test_batch_budgets:_decide
    tools:
      noop: tests.batch.test_batch_budgets:_NOOP
"""


def test_the_cli_skips_rows_and_exits_6(tmp_path: Path) -> None:
    root = Path(__file__).resolve().parents[2]
    project = tmp_path / "p.yaml"
    project.write_text(_PROJECT.format(root=root))
    inputs = tmp_path / "in.jsonl"
    inputs.write_text("".join(json.dumps({"n": i}) + "\n" for i in range(4)))
    out = tmp_path / "out.jsonl"
    runner = CliRunner()
    with runner.isolation() as streams:
        code = main(
            ["batch", str(project), str(inputs), "--output", str(out), "--max-total-tokens", "70"]
        )
    outcome = Outcome(code, streams[0].getvalue().decode(), streams[1].getvalue().decode())
    assert outcome.code == 6, outcome.err
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [row["status"] for row in rows] == ["completed", "failed", "skipped", "skipped"]
    assert "4 rows: 1 completed, 1 failed (TUBELESS_AGENT_LIMIT_REACHED 1), 2 skipped" in (
        outcome.err
    )
    with runner.isolation() as streams:
        bad = main(["batch", str(project), str(inputs), "--max-cost-usd", "lots"])
    assert bad == 1
    assert "--max-cost-usd must be an amount in US dollars" in streams[1].getvalue().decode()


def test_rows_show_their_metered_usage() -> None:
    budgeted = asyncio.run(_rows(_agent({"max_total_tokens": 1000}), 2))
    assert [row["usage"] for row in budgeted] == [
        {"input_tokens": 40, "output_tokens": 20, "cost_usd": None}
    ] * 2
    in_a_budgeted_batch = asyncio.run(_rows(_agent(), 2, max_total_tokens=1000))
    assert [row["usage"]["input_tokens"] for row in in_a_budgeted_batch] == [40, 40]
    plain = asyncio.run(_rows(_agent(), 1))
    assert "usage" not in plain[0]


_CASES = """\
version: 1
entry: rowagent
cases:
  - {id: one, input: {n: 1}, expect: {status: completed}}
  - {id: two, input: {n: 2}, expect: {status: completed}}
"""


def test_eval_tables_and_junit_show_usage(tmp_path: Path) -> None:
    root = Path(__file__).resolve().parents[2]
    project = tmp_path / "p.yaml"
    text = _PROJECT.format(root=root).replace(
        "    tools:\n", "    limits: {max_total_tokens: 1000}\n    tools:\n"
    )
    project.write_text(text)
    cases = tmp_path / "cases.yaml"
    cases.write_text(_CASES)
    junit = tmp_path / "junit.xml"
    runner = CliRunner()
    with runner.isolation() as streams:
        code = main(["eval", str(project), str(cases), "--junit", str(junit)])
    out = streams[0].getvalue().decode() + streams[1].getvalue().decode()
    assert code == 0, out
    assert "usage" in out
    assert "60 tokens" in out
    xml = junit.read_text()
    assert '<property name="tubeless.usage.input_tokens" value="40" />' in xml
