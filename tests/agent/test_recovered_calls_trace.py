"""What a resumed turn did with the calls the stop cut short, as the trace, ``trace show`` and
the report say it (issue 28, item 2): reconciled, run again, or done before the stop."""

from __future__ import annotations

import asyncio
import io
import re
from typing import Any

import pytest

from tests.durable.test_resume import KEY, World, copy_of, make_agent
from tubeless import ToolError
from tubeless.reporting import PlainReporter
from tubeless.testing import capture_trace
from tubeless.tracing import format_tree, run_trees

DURATION = re.compile(r"\d+(\.\d)?m?s\b")


def _resumed(agent: Any, store: Any) -> tuple[list[dict[str, Any]], str]:
    report = io.StringIO()
    reporter = PlainReporter(report, unicode=False, color=False)
    with capture_trace() as trace:
        asyncio.run(agent.run("a", checkpoints=store, checkpoint_key=KEY, trace=[trace, reporter]))
    return trace.records, DURATION.sub("<d>", report.getvalue())


def _marks(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        {k: v for k, v in r["payload"]["attributes"].items() if k.startswith("agent.call")}
        for r in records
        if r["name"] == "step.attempted" and "agent.callStatus" in r["payload"]["attributes"]
    ]


def _found(text: str, ctx: Any) -> str:
    return "RECONCILED"


def _lost(text: str, ctx: Any) -> str:
    raise ToolError("NOT_CHARGED", "no such charge")


@pytest.mark.parametrize(
    ("reconcile", "mark", "line", "call"),
    [
        pytest.param(
            _found,
            {"agent.callStatus": "reconciled", "agent.callOk": True},
            "      ok charge [c0] (reconciled: running when the run stopped)",
            "    call c0  charge  completed  reconciled: running when the run stopped",
            id="reconciled",
        ),
        pytest.param(
            _lost,
            {
                "agent.callStatus": "reconciled",
                "agent.callOk": False,
                "agent.callErrorCode": "NOT_CHARGED",
            },
            "      fail charge [c0]: NOT_CHARGED (reconciled: running when the run stopped)",
            "    call c0  charge  failed  NOT_CHARGED  reconciled: running when the run stopped",
            id="reconcile-failed",
        ),
    ],
)
def test_a_reconciled_call_shows_its_outcome(
    reconcile: Any, mark: dict[str, Any], line: str, call: str
) -> None:
    world = World()
    world.crash_in = "charge"
    agent = make_agent(world, reconcile=reconcile)
    asyncio.run(agent.run("a", checkpoints=world.store, checkpoint_key=KEY))
    assert world.crashed is not None

    records, report = _resumed(agent, world.crashed)

    assert _marks(records) == [{"agent.callId": "c0", **mark}]
    assert line in report.splitlines()
    assert call in format_tree(run_trees(records)[0]).splitlines()


def test_a_safe_call_run_again_and_calls_done_before_the_stop_are_shown() -> None:
    world = World()
    agent = make_agent(world, replay="safe", calls=3)

    def third(name: str, value: Any, ctx: Any) -> None:
        world.ran.append((name, value, ctx.execution["idempotency_key"]))
        if value == "a2" and world.crashed is None:
            world.crashed = copy_of(world.store)

    world.effect = third  # type: ignore[method-assign]
    asyncio.run(agent.run("a", checkpoints=world.store, checkpoint_key=KEY))
    assert world.crashed is not None

    records, report = _resumed(agent, world.crashed)

    assert _marks(records) == [
        {"agent.callId": "c0", "agent.callStatus": "restored", "agent.callOk": True},
        {"agent.callId": "c1", "agent.callStatus": "restored", "agent.callOk": True},
        {"agent.callId": "c2", "agent.callStatus": "rerun"},
    ]
    assert report.splitlines()[2:8] == [
        "    resumed at turn 1 of at most 4 (checkpoint task-1)",
        "    turn 1: 3 calls",
        "      ok charge [c0] (done before the run stopped)",
        "      ok charge [c1] (done before the run stopped)",
        "      ok charge [c2] (<d>; run again after the run stopped)",
        "    turn 2: finish",
    ]
    tree = DURATION.sub("<d>", format_tree(run_trees(records)[0])).splitlines()
    assert tree[3:7] == [
        "  turn 1  continue  3 calls  completed  <d>",
        "    call c2  charge  completed  <d>  run again: running when the run stopped",
        "    call c0  charge  completed  done before the run stopped",
        "    call c1  charge  completed  done before the run stopped",
    ]
