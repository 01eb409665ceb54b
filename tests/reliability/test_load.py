"""Load: many concurrent runs keep apart and leak nothing; one very long run completes and its
trace can be read back (issue 9, "Load"; DESIGN.md §9: leaks are checked with weakrefs, object
counts and ``tracemalloc``, never with timings or RSS).
"""

from __future__ import annotations

import asyncio
import gc
import tracemalloc
import weakref
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tubeless import define_agent, define_tool
from tubeless._cli import main
from tubeless.agent import _tools as agent_tools
from tubeless.agent import _turn as agent_turn
from tubeless.errors import AGENT_LIMIT_REACHED
from tubeless.frozen import FrozenDict
from tubeless.pipeline import StepContext
from tubeless.testing import call, continue_with, finish
from tubeless.tracing import NdjsonSink, run_trees
from tubeless.tracing.ndjson import read_ndjson

RUNS = 1_000
TURNS = 5
CALLS = 3
#: Seconds, for a whole batch of 1,000 runs; a hang guard only. A batch takes about a minute on
#: a loaded 2-core machine (several times that under ``tracemalloc`` and CI load): the guard and
#: the tests' own ``timeout`` marks leave it room, since they must never decide a result.
HANG_GUARD = 600
#: pytest-timeout for the long tests (the suite's default of 120 s cuts them off under load).
LONG_TEST_GUARD = 1200
MiB = 1024 * 1024


class RunSink:
    """One trace sink per run: counts records and remembers the run ids it saw."""

    def __init__(self) -> None:
        self.records = 0
        self.runs: set[str] = set()
        self.parents: set[str] = set()
        self.tool_runs = 0
        self.closed = False

    def export(self, record: Any) -> None:
        self.records += 1
        self.runs.add(record["runId"])
        if "parentRunId" in record:
            self.parents.add(record["parentRunId"])
        if record["name"] == "pipeline.started" and record["pipelineId"] == "many/tool/echo":
            self.tool_runs += 1

    def flush(self) -> None:
        pass

    def close(self) -> None:
        self.closed = True


class Seen:
    """What decide and the tools saw, as counts only: nothing of a run is kept."""

    def __init__(self) -> None:
        self.decisions: Counter[str] = Counter()
        self.calls: Counter[str] = Counter()

    def clear(self) -> None:
        self.decisions.clear()
        self.calls.clear()


SEEN = Seen()


async def echo(value: str, ctx: Any) -> str:
    SEEN.calls[value.split("-")[0]] += 1
    await asyncio.sleep(0)  # let the other runs interleave
    return value


def decide(state: Any, ctx: Any) -> Any:
    owner = ctx.input
    SEEN.decisions[owner] += 1
    assert state["owner"] == owner, "a run saw another run's state"
    if ctx.turn <= TURNS:
        return continue_with(
            *(call("echo", f"{owner}-{ctx.turn}-{i}", f"c{i}") for i in range(CALLS))
        )
    return finish({"owner": owner, "values": list(state["values"])})


def reduce(state: Any, outcomes: Any) -> Any:
    values = state["values"] + tuple(outcome["value"] for outcome in outcomes)
    return {"owner": state["owner"], "values": values}


# The decision and tool contexts, turn inputs (which hold the states) and step contexts are
# slotted objects without ``__weakref__``: their survival is checked by a census of live objects.
# Each run may use exactly what it needs: a budget shared between runs would refuse at once.
AGENT = define_agent(
    id="many",
    input_schema=str,
    result_schema=Any,
    initial_state=lambda owner: {"owner": owner, "values": ()},
    decide=decide,
    reduce=reduce,
    tools={"echo": define_tool(description="Echo.", input_schema=str, output_schema=str, run=echo)},
    limits={
        "max_turns": TURNS + 1,
        "max_calls": TURNS * CALLS,
        "max_decisions": TURNS + 1,
        "max_concurrency": CALLS,
    },
)
TRACKED_TYPES = (
    agent_turn.DecisionContext,
    agent_turn.TurnInput,
    agent_tools.ToolContext,
    StepContext,
)


def _of_this_agent(value: Any) -> bool:
    """Whether a tracked object belongs to a run of ``AGENT`` (other tests may keep theirs)."""
    if isinstance(value, StepContext):
        return value.pipeline_id == "many" or value.pipeline_id.startswith("many/")
    if isinstance(value, agent_turn.TurnInput):
        return value.agent_run_id.startswith("many:")
    execution = getattr(value, "execution", None) or {}
    return str(execution.get("agent_run_id", "")).startswith("many:")


def _live(kinds: tuple[type, ...]) -> Counter[str]:
    """Live objects of ``kinds`` that belong to runs of ``AGENT``, by type name."""
    gc.collect()
    return Counter(
        type(o).__name__ for o in gc.get_objects() if type(o) in kinds and _of_this_agent(o)
    )


def _expected(owner: str) -> dict[str, Any]:
    values = [f"{owner}-{turn}-{i}" for turn in range(1, TURNS + 1) for i in range(CALLS)]
    return {"owner": owner, "values": values}


async def _batch(prefix: str) -> list[weakref.ref[Any]]:
    owners = [f"{prefix}{i}" for i in range(RUNS)]
    sinks = [RunSink() for _ in owners]
    runs = await asyncio.wait_for(
        asyncio.gather(
            *(AGENT.run(owner, trace=sink) for owner, sink in zip(owners, sinks, strict=True))
        ),
        HANG_GUARD,
    )
    for owner, sink, run in zip(owners, sinks, runs, strict=True):
        assert (run.status, run.errors) == ("completed", ()), owner
        assert run.value == _expected(owner)
        assert SEEN.decisions[owner] == TURNS + 1
        assert SEEN.calls[owner] == TURNS * CALLS
        assert sink.tool_runs == TURNS * CALLS
        assert sink.parents <= sink.runs, "a sink got records of another run tree"
        assert run.run_id in sink.runs
    assert len({run.run_id for run in runs}) == RUNS
    assert asyncio.all_tasks() == {asyncio.current_task()}
    return [weakref.ref(sink) for sink in sinks]


def _live_states(prefixes: str) -> list[Any]:
    """States of the runs whose owner starts with one of ``prefixes`` that are still alive."""
    gc.collect()
    return [
        o
        for o in gc.get_objects()
        if type(o) is FrozenDict and isinstance(o.get("owner"), str) and o["owner"][:1] in prefixes
    ]


@pytest.mark.slow
@pytest.mark.timeout(LONG_TEST_GUARD)
def test_a_thousand_concurrent_runs_keep_results_and_budgets_apart_and_leak_nothing() -> None:
    """Two batches of 1,000 concurrent runs (5 turns of 3 calls each, one trace sink each); the
    second runs under ``tracemalloc``, which starts once the first has been collected."""
    first = asyncio.run(_batch("a"))
    SEEN.clear()
    gc.collect()
    tracemalloc.start()
    try:
        after_first = tracemalloc.get_traced_memory()[0]
        second = asyncio.run(_batch("b"))
        SEEN.clear()
        gc.collect()
        after_second = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()

    assert [ref for ref in first + second if ref() is not None] == [], "a run's sink survived"
    assert _live(TRACKED_TYPES) == Counter(), "contexts or turn inputs survived their runs"
    assert _live_states("ab") == [], "states survived their runs"
    assert after_second - after_first < MiB, (
        f"memory grew by {after_second - after_first:,} bytes across 1,000 runs"
    )


async def test_a_run_that_asks_beyond_its_own_budget_is_refused_while_others_complete() -> None:
    """Budgets are per run: one greedy run fails alone, its 99 concurrent siblings finish."""
    greedy = "greedy"

    def hungry(state: Any, ctx: Any) -> Any:
        if ctx.input == greedy:
            return continue_with(
                *(call("echo", f"{greedy}-{i}", f"c{i}") for i in range(TURNS * CALLS + 1))
            )
        return decide(state, ctx)

    agent = define_agent(
        id="hungry",
        input_schema=str,
        result_schema=Any,
        initial_state=lambda owner: {"owner": owner, "values": ()},
        decide=hungry,
        reduce=reduce,
        tools={
            "echo": define_tool(description="Echo.", input_schema=str, output_schema=str, run=echo)
        },
        limits={
            "max_turns": TURNS + 1,
            "max_calls": TURNS * CALLS,
            "max_decisions": TURNS + 1,
            "max_concurrency": CALLS,
        },
    )
    owners = [f"p{i}" for i in range(99)] + [greedy]

    runs = await asyncio.wait_for(asyncio.gather(*(agent.run(o) for o in owners)), HANG_GUARD)

    assert [run.status for run in runs[:-1]] == ["completed"] * 99
    assert [run.value for run in runs[:-1]] == [_expected(o) for o in owners[:-1]]
    assert (runs[-1].status, runs[-1].errors[0].source_code) == ("failed", AGENT_LIMIT_REACHED)
    SEEN.clear()


# -- one very long run ----------------------------------------------------------------------------
LONG_TURNS = 10_000


def _long_agent() -> Any:
    async def note(value: int, ctx: Any) -> int:
        return value

    def decide(state: Any, ctx: Any) -> Any:
        if ctx.turn < LONG_TURNS:
            return continue_with(call("note", ctx.turn, "only"))
        return finish(len(state["history"]))

    def reduce(state: Any, outcomes: Any) -> Any:
        return {"history": state["history"] + (outcomes[0]["value"],)}

    return define_agent(
        id="long",
        input_schema=Any,
        result_schema=int,
        initial_state=lambda validated: {"history": ()},
        decide=decide,
        reduce=reduce,
        tools={
            "note": define_tool(description="Note.", input_schema=int, output_schema=int, run=note)
        },
        limits={"max_turns": LONG_TURNS, "max_decisions": LONG_TURNS, "max_calls": LONG_TURNS},
    )


@pytest.fixture(scope="module")
def long_trace(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Any]]:
    """A 10,000-turn run traced to NDJSON: (the file, the run)."""
    path = tmp_path_factory.mktemp("long") / "long.ndjson"
    with NdjsonSink(path) as sink:
        run = asyncio.run(asyncio.wait_for(_long_agent().run(None, trace=sink), HANG_GUARD))
    yield path, run


@pytest.mark.slow
@pytest.mark.timeout(LONG_TEST_GUARD)
def test_a_ten_thousand_turn_run_completes_and_its_trace_projects_every_turn(
    long_trace: tuple[Path, Any],
) -> None:
    path, run = long_trace
    assert (run.status, run.value) == ("completed", LONG_TURNS - 1)

    records = read_ndjson(path, max_bytes=2**31, max_records=10**7)
    trees = run_trees(records)

    assert len(records) > 200_000
    (tree,) = trees
    assert tree.run_id == run.run_id
    assert tree.agent is not None
    assert tree.agent.termination == "finish"
    assert [turn.index for turn in tree.agent.turns] == list(range(1, LONG_TURNS + 1))
    assert sum(turn.call_count or 0 for turn in tree.agent.turns) == LONG_TURNS - 1


@pytest.mark.slow
@pytest.mark.timeout(LONG_TEST_GUARD)
def test_trace_show_reads_back_the_ten_thousand_turn_trace(
    long_trace: tuple[Path, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    path, run = long_trace
    bounded = main(["trace", "show", str(path)])  # larger than the default bounds (issue 14)
    refused = capsys.readouterr()
    code = main(
        ["trace", "show", str(path), "--max-bytes", str(2**31), "--max-records", str(10**7)]
    )
    captured = capsys.readouterr()
    assert bounded == 2
    assert "raises the bound" in refused.err
    assert code == 0, captured.err
    assert run.run_id in captured.out
