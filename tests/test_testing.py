"""``tubeless.testing``: the test doubles shipped for users' tests."""

from __future__ import annotations

import asyncio
from typing import Any

from tubeless import define_agent, define_tool, pipeline_tool
from tubeless.pipeline import define_pipeline, from_pipeline, step
from tubeless.testing import call, capture_trace, continue_with, finish, scripted


def _record(name: str, run_id: str, **extra: Any) -> dict[str, Any]:
    return {
        "version": 3,
        "name": name,
        "runId": run_id,
        "pipelineId": "p",
        "timestampMs": 1,
        **extra,
    }


def test_capture_trace_keeps_independent_copies() -> None:
    """Mutating a record (even nested parts) after export leaves the captured copy unchanged."""
    original = _record("step.running", "r1", stepId="a", payload={"progress": {"completed": 1}})

    with capture_trace() as trace:
        trace.export(original)
        original["name"] = "changed"
        original["payload"]["progress"]["completed"] = 99
        original["payload"]["extra"] = [1]

    assert trace.records == [
        _record("step.running", "r1", stepId="a", payload={"progress": {"completed": 1}})
    ]
    trace.records[0]["payload"]["progress"]["completed"] = 5
    assert original["payload"]["progress"]["completed"] == 99


def test_capture_trace_exposes_names_and_records_per_run() -> None:
    """names lists record names in export order; for_run keeps one run's records in order."""
    with capture_trace() as trace:
        trace.export(_record("pipeline.started", "r1"))
        trace.export(_record("pipeline.started", "r2", parentRunId="r1"))
        trace.export(_record("pipeline.completed", "r2", parentRunId="r1"))
        trace.export(_record("pipeline.completed", "r1"))

    assert trace.names == [
        "pipeline.started",
        "pipeline.started",
        "pipeline.completed",
        "pipeline.completed",
    ]
    assert trace.for_run("r1") == [
        _record("pipeline.started", "r1"),
        _record("pipeline.completed", "r1"),
    ]
    assert [r["name"] for r in trace.for_run("r2")] == ["pipeline.started", "pipeline.completed"]
    assert trace.for_run("unknown") == []


def test_capture_trace_counts_flushes_and_closes_on_exit() -> None:
    """The sink counts flushes and is closed only when the context manager exits."""
    with capture_trace() as trace:
        assert (trace.records, trace.flushes, trace.closed) == ([], 0, False)
        trace.flush()
        trace.flush()
        assert trace.flushes == 2
        assert trace.closed is False
    assert trace.closed is True


def test_capture_trace_closes_even_when_the_block_raises() -> None:
    """The sink is closed when the with-block fails."""
    captured: list[Any] = []
    try:
        with capture_trace() as trace:
            captured.append(trace)
            raise KeyError("boom")
    except KeyError:
        pass
    assert captured[0].closed is True


def test_each_capture_is_a_fresh_sink() -> None:
    """Two captures share nothing."""
    with capture_trace() as first, capture_trace() as second:
        first.export(_record("pipeline.started", "r1"))
    assert first is not second
    assert second.records == []


async def test_capture_trace_records_a_real_run_tree() -> None:
    """Used as run(trace=...), the capture holds the wire records of the root and its children."""
    child = define_pipeline(id="child", steps=[step("c", lambda inputs, ctx: 1)])
    pipeline = define_pipeline(id="root", steps=[from_pipeline("sub", child)])

    with capture_trace() as trace:
        run = await pipeline.run(trace=trace)

    assert run.status == "completed", run.errors
    root = trace.for_run(run.run_id)
    assert root[0]["name"] == "pipeline.started"
    assert root[-1]["name"] == "pipeline.completed"
    child_ids = {r["runId"] for r in trace.records if r.get("parentRunId") == run.run_id}
    assert len(child_ids) == 1
    assert len(root) + len(trace.for_run(child_ids.pop())) == len(trace.records)
    assert trace.flushes >= 1


# -- scripted decisions restart per agent invocation ---------------------------------------------
def shout_tool() -> Any:
    return define_tool(
        description="Shout.",
        input_schema=str,
        output_schema=str,
        run=lambda text, ctx: text.upper(),
    )


def shouter(decide: Any, **limits: int) -> Any:
    return define_agent(
        id="shouter",
        input_schema=dict,
        result_schema=str,
        initial_state=lambda validated: {"seen": []},
        decide=decide,
        reduce=lambda state, outcomes: {"seen": [*state["seen"], *(o["value"] for o in outcomes)]},
        tools={"shout": shout_tool()},
        limits=limits or None,
    )


#: A module-level script, as users write it next to their agent.
MODULE_SCRIPT = scripted(
    continue_with(call("shout", "hi", id="c1")),
    lambda state, ctx: finish(" ".join(state["seen"])),
)
MODULE_AGENT = shouter(MODULE_SCRIPT)


def test_a_module_level_script_serves_every_run_of_the_process() -> None:
    """Two runs in a row each get the whole script (the second used to exhaust it)."""
    assert MODULE_AGENT.run_sync({}) == "HI"
    assert MODULE_AGENT.run_sync({}) == "HI"
    assert MODULE_SCRIPT.remaining == 0
    MODULE_SCRIPT.assert_done()


async def test_concurrent_invocations_each_get_the_whole_script() -> None:
    """Interleaved runs of one agent keep separate places in the script."""
    results = await asyncio.gather(*(MODULE_AGENT.run({}) for _ in range(5)))

    assert [(run.status, run.value) for run in results] == [("completed", "HI")] * 5
    assert [turn for turn, _, _ in MODULE_SCRIPT.seen[-10:]].count(1) == 5


async def test_an_agent_tool_called_twice_in_one_run_restarts_its_script() -> None:
    """Each call of a scripted child agent is its own invocation with the whole script."""
    child = shouter(
        scripted(
            continue_with(call("shout", "a", id="c1")),
            lambda state, ctx: finish(" ".join(state["seen"])),
        )
    )
    parent = define_agent(
        id="parent",
        input_schema=dict,
        result_schema=list,
        initial_state=lambda validated: {},
        decide=scripted(
            continue_with(call("child", {}, id="first"), call("child", {}, id="second")),
            lambda state, ctx: finish(state["results"]),
        ),
        reduce=lambda state, outcomes: {"results": [o["value"] for o in outcomes]},
        tools={"child": pipeline_tool(child, description="Shout through a child agent.")},
        limits={"max_concurrency": 2},
    )

    run = await parent.run({})

    assert (run.status, run.value) == ("completed", ["A", "A"]), run.errors


async def test_a_script_still_fails_an_invocation_that_asks_for_too_many_decisions() -> None:
    """Within one invocation the script is used in order, and running out fails the turn."""
    decide = scripted(continue_with(call("shout", "x", id="c1")))
    agent = shouter(decide)

    run = await agent.run({})

    assert run.status == "failed"
    assert "The script has 1 decisions, but turn 2 asked for another one." in str(
        run.errors[0].to_wire()
    )
    assert decide.remaining == 0


async def test_a_script_keeps_no_place_for_finished_invocations() -> None:
    """Memory stays bounded: a finished invocation's place is dropped, failed ones are capped."""
    finishing = scripted(continue_with(call("shout", "x", id="c1")), finish("done"))
    failing = scripted(continue_with(call("shout", "x", id="c1")))
    for _ in range(3):
        assert (await shouter(finishing).run({})).status == "completed"
    for _ in range(1100):
        failing(None, _Ctx(f"run-{len(failing.seen)}"))

    assert len(finishing._cursors) == 0
    assert len(failing._cursors) <= 1024


class _Ctx:
    """A decision context stand-in: a turn and the invocation it belongs to."""

    def __init__(self, agent_run_id: str) -> None:
        self.turn = 1
        self.state_version = 0
        self.execution = {"agent_run_id": agent_run_id, "turn": 1}
