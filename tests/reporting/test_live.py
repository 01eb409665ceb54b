"""The live view (issue 6, "Progress"): its model folds records from real agent runs into
bounded rows (turns newest first with an "earlier turns" row, at most 32 calls per turn with
running and failed ones first and an overflow row), its memory stays flat over hundreds of turns
and 100,000 records, and the rich display draws it and leaves the final frame on close. No
assertion here is about time."""

from __future__ import annotations

import io
import re
import threading
import tracemalloc
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rich.console import Console

from examples.scripted_agent import scripted_agent
from examples.text import count, uppercase
from tubeless import Pipeline, define_pipeline, step
from tubeless.agent import define_agent
from tubeless.reporting import LiveModel, LiveView, PlainReporter, Row, choose_reporter
from tubeless.reporting._live_model import MAX_AGENT_ROWS, MAX_GROUPS
from tubeless.testing import capture_trace
from tubeless.tracing.records import RECORD_NAMES

Records = list[dict[str, Any]]
Shape = tuple[int, str, str, str | None, str | None, str | None]
DURATION = re.compile(r"\b\d+(?:\.\d+)?(?:ms|s)\b|\b\d+m\d+s\b")


def shape(rows: list[Row]) -> list[Shape]:
    """Everything about the rows except timing: (depth, label, status, tool, call id, detail)."""
    return [(r.depth, r.label, r.status, r.tool, r.call_id, r.detail) for r in rows]


def fed(records: Records) -> LiveModel:
    model = LiveModel()
    for record in records:
        model.feed(record)
    assert model.dropped == 0
    return model


async def capture(pipeline: Pipeline, *args: Any, **kwargs: Any) -> Records:
    with capture_trace() as trace:
        run = await pipeline.run(*args, trace=trace, **kwargs)
    assert run.status == "completed", run.errors
    return trace.records


def batch_agent(
    agent_id: str, turns: int, calls: Callable[[int], list[dict[str, Any]]], **limits: int
) -> Pipeline:
    """An agent that sends ``calls(turn)`` for ``turns - 1`` turns, then finishes."""

    def decide(state: Any, ctx: Any) -> dict[str, Any]:
        if ctx.turn < turns:
            return {"kind": "continue", "calls": calls(ctx.turn)}
        return {"kind": "finish", "result": "done"}

    return define_agent(
        id=agent_id,
        input_schema=dict,
        result_schema=str,
        initial_state=lambda validated: {},
        decide=decide,
        reduce=lambda state, outcomes: state,
        tools={"count": count, "uppercase": uppercase},
        limits={"max_turns": turns, "max_decisions": turns, "max_calls": 100_000, **limits},
    )


def words(*texts: str) -> Callable[[int], list[dict[str, Any]]]:
    """One call per text: ``count`` for ``#...`` texts, ``uppercase`` (fails on "missing")
    otherwise; call ids ``c0``, ``c1``, ..."""
    return lambda turn: [
        {"id": f"c{i}", "tool": "count" if t.startswith("#") else "uppercase", "input": t}
        for i, t in enumerate(texts)
    ]


def index_of(records: Records, name: str, item_key: str, after: int = 0) -> int:
    return next(
        i
        for i, r in enumerate(records)
        if i >= after and r["name"] == name and r.get("itemKey") == item_key
    )


# -- exact rows ---------------------------------------------------------------------------------
async def test_rows_of_the_scripted_agent_show_turns_and_calls() -> None:
    model = fed(await capture(scripted_agent, {"question": "missing word"}))
    assert shape(model.rows()) == [
        (0, "agent", "completed", None, None, "Turn 2 of at most 3"),
        (1, "turn 2", "completed", None, None, "finish"),
        (1, "turn 1", "completed", None, None, "3 calls, 1 failed"),
        (2, "uppercase", "failed", "uppercase", "word-0", "NOT_FOUND: Word unavailable"),
        (2, "count", "completed", "count", "length", None),
        (2, "uppercase", "completed", "uppercase", "word-1", None),
    ]
    assert all(r.duration_ms is not None and r.started_ms is not None for r in model.rows())
    summary = (model.pipeline_id, model.status, model.error_count)
    assert summary == ("scripted-agent", "completed", 0)


async def test_running_and_failed_calls_come_first_then_decision_order() -> None:
    agent = batch_agent("order", 2, words("a", "missing", "#b", "c", "#d"), max_concurrency=1)
    records = await capture(agent, {})
    attributed = index_of(records, "pipeline.started", "c4") - 1
    assert records[attributed]["payload"]["attributes"]["agent.callId"] == "c4"
    calls = [
        (r.call_id, r.status, r.tool)
        for r in fed(records[: attributed + 1]).rows()
        if r.kind == "call"
    ]
    assert calls == [
        ("c1", "failed", "uppercase"),
        ("c4", "pending", "count"),
        ("c0", "completed", "uppercase"),
        ("c2", "completed", "count"),
        ("c3", "completed", "uppercase"),
    ]
    started = fed(records[: attributed + 2])
    assert [(r.call_id, r.status) for r in started.rows() if r.kind == "call"][:2] == [
        ("c1", "failed"),
        ("c4", "running"),
    ]
    # Once the turn is over, the current (finish) turn has no calls, so the last batch stays.
    assert [r.call_id for r in fed(records).rows() if r.kind == "call"] == [
        "c1",
        "c0",
        "c2",
        "c3",
        "c4",
    ]


async def test_more_than_32_calls_keep_failures_and_the_first_in_decision_order() -> None:
    texts = ["missing" if i in (35, 38) else f"w{i}" for i in range(40)]
    records = await capture(batch_agent("wide", 2, words(*texts), max_concurrency=3), {})
    rows = fed(records).rows()
    calls = [r.call_id for r in rows if r.kind == "call"]
    assert calls == ["c35", "c38", *(f"c{i}" for i in range(30))]
    assert shape(rows)[-1] == (2, "8 more calls", "more", None, None, None)
    assert shape(rows)[2] == (1, "turn 1", "completed", None, None, "40 calls, 2 failed")


# -- bounds -------------------------------------------------------------------------------------
def bounded_replay(records: Records) -> Iterator[tuple[LiveModel, int]]:
    """Feed ``records`` into one model, yielding it every 37 records and at each run start."""
    model = LiveModel()
    for i, record in enumerate(records):
        model.feed(record)
        if i % 37 == 0 or record["name"] == "pipeline.started":
            yield model, i
    yield model, len(records)


@pytest.fixture(scope="module")
def long_run() -> Records:
    """A real agent run: 500 turns, 499 of them with 20 calls (about 108,000 records)."""
    import asyncio

    agent = batch_agent("long", 500, words(*(f"#{i}" for i in range(20))))
    records: Records = asyncio.run(capture(agent, {}))
    return records


@pytest.mark.slow
def test_500_turns_of_20_calls_stay_within_the_row_and_container_bounds(
    long_run: Records,
) -> None:
    assert len(long_run) > 100_000
    most_rows = most_turns = most_calls = most_tracked = 0
    for model, _ in bounded_replay(long_run):
        most_rows = max(most_rows, len(model.rows()))
        most_turns = max([most_turns, *(len(s.turns) for s in model._steps.values())])
        most_calls = max(most_calls, len(model._turns), len(model._calls))
        tracked = [len(t.calls) for s in model._steps.values() for t in s.turns]
        most_tracked = max([most_tracked, *tracked])
    # step + 32 turns + "earlier turns" + the 20 calls of one turn (no overflow row).
    assert most_rows == 1 + MAX_GROUPS + 1 + 20
    assert (most_turns, most_calls, most_tracked) == (MAX_GROUPS, 1, 20)
    rows = shape(model.rows())
    assert rows[:3] == [
        (0, "agent", "completed", None, None, "Turn 500 of at most 500"),
        (1, "turn 500", "completed", None, None, "finish"),
        (1, "turn 499", "completed", None, None, "20 calls"),
    ]
    assert rows[3:23] == [(2, "count", "completed", "count", f"c{i}", None) for i in range(20)]
    assert [r[1] for r in rows[23:]] == [f"turn {i}" for i in range(498, 468, -1)] + [
        "468 earlier turns"
    ]
    assert (model._turns, model._calls) == ({}, {})


def test_memory_stays_flat_from_50_to_500_turns(long_run: Records) -> None:
    tenth = next(
        i
        for i, r in enumerate(long_run)
        if r["name"] == "pipeline.started" and r.get("itemKey") == "iteration-51"
    )
    tracemalloc.start()
    try:
        baseline = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        model = LiveModel()
        for i in range(tenth):
            model.feed(long_run[i])
        after_50 = tracemalloc.get_traced_memory()[0] - baseline
        for i in range(tenth, len(long_run)):
            model.feed(long_run[i])
        after_500, peak = (m - baseline for m in tracemalloc.get_traced_memory())
    finally:
        tracemalloc.stop()
    assert model.dropped == 0
    assert after_500 - after_50 < 16 * 1024
    assert peak < 256 * 1024


async def test_a_wide_long_run_reaches_exactly_the_documented_row_bound() -> None:
    agent = batch_agent("wide-long", 40, words(*(f"#{i}" for i in range(40))), max_concurrency=4)
    records = await capture(agent, {})
    assert max(len(m.rows()) for m, _ in bounded_replay(records)) == MAX_AGENT_ROWS == 67
    rows = shape(fed(records).rows())
    assert [r[1] for r in rows if r[2] == "more"] == ["8 more calls", "8 earlier turns"]


# -- plain pipelines and garbage ------------------------------------------------------------------
async def test_plain_pipeline_rows_are_its_steps_with_progress() -> None:
    def report(inputs: dict[str, Any], ctx: Any) -> int:
        ctx.report_progress(2, 5, "rows")
        return 1

    pipeline = define_pipeline(
        id="plain", steps=[step("a", report, name="Load"), step("b", report, depends_on="a")]
    )
    model = fed(await capture(pipeline))
    assert shape(model.rows()) == [
        (0, "Load", "completed", None, None, "2/5 rows"),
        (0, "b", "completed", None, None, "2/5 rows"),
    ]


async def test_a_tool_s_progress_is_the_detail_of_its_call_row() -> None:
    """``ctx.report_progress`` in a tool shows on the call's row, while it runs and after, as a
    step's does (issue 13)."""
    from tubeless.agent import define_tool

    def work(text: str, ctx: Any) -> str:
        ctx.report_progress(2, 5, "pages")
        return text

    agent = define_agent(
        id="tool-progress",
        input_schema=dict,
        result_schema=str,
        initial_state=lambda validated: {},
        decide=lambda state, ctx: (
            {"kind": "continue", "calls": [{"id": "c0", "tool": "work", "input": "x"}]}
            if ctx.turn == 1
            else {"kind": "finish", "result": "done"}
        ),
        reduce=lambda state, outcomes: state,
        tools={
            "work": define_tool(description="Works.", input_schema=str, output_schema=str, run=work)
        },
    )
    records = await capture(agent, {})
    running = index_of(records, "pipeline.completed", "c0")  # the call's run ends here
    model = fed(records[:running])
    call_rows = [r for r in shape(model.rows()) if r[0] == 2]
    assert call_rows == [(2, "work", "running", "work", "c0", "2/5 pages")]
    model = fed(records)
    call_rows = [r for r in shape(model.rows()) if r[0] == 2]
    assert call_rows == [(2, "work", "completed", "work", "c0", "2/5 pages")]


def test_garbage_records_never_raise() -> None:
    model = LiveModel()
    garbage: list[Any] = [None, [], {}, {"name": "pipeline.started", "runId": 1}, "x"]
    for record in garbage:
        model.feed(record)
    model.feed({"name": "pipeline.started", "runId": "r", "payload": []})
    model.feed(
        {
            "name": "step.running",
            "runId": "r",
            "stepId": "a",
            "payload": {"progress": {"completed": 10**400, "total": "x"}},
        }
    )
    model.feed(
        {
            "name": "pipeline.started",
            "runId": "t",
            "parentRunId": "r",
            "iteration": {"runId": "r", "stepId": "a", "index": None},
        }
    )
    model.feed({"name": "pipeline.started", "runId": "c", "parentRunId": "t", "itemKey": "k"})
    assert model.dropped == 5
    assert shape(model.rows()) == [
        (0, "a", "planned", None, None, "?/?"),
        (1, "iteration 1", "running", None, None, None),  # not an agent: no call rows
    ]


ANY = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.just(10**400)
    | st.floats()
    | st.text(max_size=4)
    | st.lists(st.integers(), max_size=2)
)
FUZZ = st.fixed_dictionaries(
    {"name": st.sampled_from(RECORD_NAMES), "runId": st.sampled_from(["r", "t", "c"])},
    optional={
        "parentRunId": st.sampled_from(["r", "t"]) | ANY,
        "stepId": st.sampled_from(["agent", "decide", "calls"]) | ANY,
        "itemKey": st.sampled_from(["k", "j"]) | ANY,
        "iteration": st.fixed_dictionaries(
            {"runId": st.just("r")}, optional={"stepId": ANY, "index": ANY}
        )
        | ANY,
        "timestampMs": ANY,
        "durationMs": ANY,
        "error": st.dictionaries(st.sampled_from(["code", "message", "sourceCode"]), ANY) | ANY,
        "payload": st.dictionaries(
            st.sampled_from(["progress", "attributes", "status", "reason", "name", "dryRun"]),
            ANY
            | st.fixed_dictionaries(
                {"agent.turn": ANY},
                optional={
                    "agent.callId": ANY,
                    "agent.tool": ANY,
                    "agent.decision": ANY,
                    "agent.callCount": ANY,
                    "completed": ANY,
                    "total": ANY,
                    "message": ANY,
                },
            ),
        )
        | ANY,
    },
)


@pytest.mark.slow
@settings(max_examples=150, deadline=None)
@given(st.lists(FUZZ, max_size=30))
def test_mistyped_fields_are_read_without_dropping_the_record(records: Records) -> None:
    model = LiveModel()
    for record in records:
        model.feed(record)
    assert model.dropped == 0
    assert len(model.rows()) <= 3 * MAX_AGENT_ROWS


# -- the rich display -----------------------------------------------------------------------------
def frame_text(text: str) -> list[str]:
    """Lines without escape codes, durations as <d>, runs of spaces collapsed, right-stripped."""
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", text).replace("\r", "\n")
    lines = [re.sub(r" +", " ", DURATION.sub("<d>", line)).rstrip() for line in text.split("\n")]
    return [re.sub(r"( run )\S+$", r"\1<id>", line) for line in lines if line]


FINAL_FRAME = [
    "Pipeline scripted-agent completed <d> run <id>",
    "✓ agent <d> Turn 2 of at most 3",
    " ✓ turn 2 <d> finish",
    " ✓ turn 1 <d> 3 calls, 1 failed",
    " ✗ uppercase word-0 <d> NOT_FOUND: Word unavailable",
    " ✓ count length <d>",
    " ✓ uppercase word-1 <d>",
]


async def test_close_prints_the_final_frame_once_off_a_terminal() -> None:
    records = await capture(scripted_agent, {"question": "missing word"})
    out = io.StringIO()
    view = LiveView(console=Console(file=out, width=100))
    for record in records:
        view.export(record)
    assert out.getvalue() == ""  # frames are drawn only on a terminal until the end
    view.close()
    view.close()
    assert frame_text(out.getvalue()) == FINAL_FRAME
    assert view._live._refresh_thread is None


async def test_live_view_attached_to_a_run_draws_and_leaves_the_final_frame() -> None:
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=100)
    view = LiveView(console=console, refresh_per_second=10)
    run = await scripted_agent.run({"question": "missing word"}, trace=[view])
    assert run.status == "completed"
    view.close()
    assert frame_text(out.getvalue())[-len(FINAL_FRAME) :] == FINAL_FRAME
    assert not [t for t in threading.enumerate() if "Refresh" in type(t).__name__]


def test_live_view_never_raises_and_draws_nothing_without_records() -> None:
    out = io.StringIO()
    view = LiveView(out)
    view.close()
    assert out.getvalue() == ""
    view = LiveView(out)
    garbage: list[Any] = [None, {"name": "x"}, {"name": "pipeline.started", "runId": "r"}]
    for record in garbage:
        view.export(record)
    view.flush()
    view.close()
    assert frame_text(out.getvalue()) == ["Pipeline ? running run <id>"]


async def test_the_header_ends_with_the_run_id() -> None:
    """The id ``tubeless trace show`` takes, terminal-safe, last so that nothing cuts it short
    (issue 13)."""
    records = await capture(scripted_agent, {"question": "hi"}, run_id="my-run\x1b[2J")
    out = io.StringIO()
    view = LiveView(console=Console(file=out, width=200))
    for record in records:
        view.export(record)
    view.close()
    assert "\x1b[2J" not in out.getvalue()
    header = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", out.getvalue()).splitlines()[0].rstrip()
    assert DURATION.sub("<d>", header) == "Pipeline scripted-agent  completed  <d>  run my-run [2J"


@pytest.mark.parametrize("rate", [0, -1, 10.5, 60])
def test_refresh_rate_is_at_most_ten_per_second(rate: float) -> None:
    with pytest.raises(ValueError, match="refresh_per_second"):
        LiveView(io.StringIO(), refresh_per_second=rate)


class FakeTty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_choose_reporter_picks_the_live_view_on_a_terminal(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TERM", "xterm")
    view = choose_reporter(FakeTty(), quiet=False)
    assert isinstance(view, LiveView)
    view.close()
    assert isinstance(choose_reporter(io.StringIO(), quiet=False, live=True), LiveView)
    assert isinstance(choose_reporter(FakeTty(), quiet=False, live=False), PlainReporter)
    assert choose_reporter(FakeTty(), quiet=True) is None
