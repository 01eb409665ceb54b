"""The NDJSON sink's lines are ``json.dumps`` of each record, byte for byte, however the record
constructors and the sink reuse JSON they made before (shared payloads, quoted ids, attribute
text made while bounding), and whichever way the fan-out hands records to the sink."""

from __future__ import annotations

import json
import math
import threading
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from tubeless import define_agent, define_tool
from tubeless.testing import capture_trace
from tubeless.tracing import NdjsonSink
from tubeless.tracing._bounds import bounded_attributes, bounded_attributes_json
from tubeless.tracing._json import compact_json
from tubeless.tracing.records import (
    ConstantPayload,
    Envelope,
    ShownRows,
    record_json,
    record_line,
)
from tubeless.tracing.sinks import TraceFanout, locks_its_exports


def dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


async def shout(text: str, ctx: Any = None) -> str:
    return text.upper()


def shout_sync(text: str, ctx: Any = None) -> str:
    return text.upper()


def busy_agent(turns: int = 4, width: int = 3) -> Any:
    """Several turns of several calls, run two at a time, with ids JSON must escape."""

    def decide(state: Any, ctx: Any) -> dict[str, Any]:
        if ctx.turn > turns:
            return {"kind": "finish", "result": len(state["history"])}
        calls = [
            {"id": f'c{i} "é"\\', "tool": "shout" if i % 2 else "shout_sync", "input": "ab"}
            for i in range(width)
        ]
        return {"kind": "continue", "calls": calls}

    tools = {
        "shout": define_tool(description="Shout.", input_schema=str, output_schema=str, run=shout),
        "shout_sync": define_tool(
            description="Shout, in a thread.",
            input_schema=str,
            output_schema=str,
            run=shout_sync,
        ),
    }
    return define_agent(
        id="busy-ü",
        input_schema=dict,
        result_schema=int,
        initial_state=lambda _: {"history": ()},
        decide=decide,
        reduce=lambda state, outcomes: {"history": state["history"] + tuple(outcomes)},
        tools=tools,
        limits={
            "max_turns": turns + 1,
            "max_decisions": turns + 1,
            "max_calls": turns * width,
            "max_concurrency": 2,
        },
    )


async def test_an_agents_trace_is_the_compact_json_of_each_record(tmp_path: Path) -> None:
    """Turns, calls run two at a time, progress, attempt attributes: byte for byte."""
    path = tmp_path / "trace.ndjson"
    with capture_trace() as trace, NdjsonSink(path) as sink:
        for _ in range(2):  # a second run reuses every cache the first one filled
            run = await busy_agent().run({}, trace=[sink, trace], correlation_id="corr-✓")
            assert run.status == "completed", run.errors
    names = {r["name"] for r in trace.records}
    assert {"step.attempted", "step.running", "pipeline.completed"} <= names
    assert path.read_text(encoding="utf-8") == "".join(dumps(r) + "\n" for r in trace.records)


async def test_a_run_traced_to_the_sink_alone_writes_canonical_lines(tmp_path: Path) -> None:
    """With the sink as the only one (the fan-out then hands records over without its own
    lock), every line is still the compact JSON of what it holds, in a consistent tree."""
    path = tmp_path / "trace.ndjson"
    with NdjsonSink(path) as sink:
        run = await busy_agent().run({}, trace=sink)
    assert run.status == "completed"
    lines = path.read_text(encoding="utf-8").splitlines()
    records = [json.loads(text) for text in lines]
    assert [dumps(r) for r in records] == lines
    roots = [r for r in records if "parentRunId" not in r]
    assert roots[-1]["name"] == "pipeline.completed"
    assert roots[-1]["payload"]["status"] == "completed"
    assert sum(r["name"] == "step.attempted" for r in records) > 10


def test_runs_that_end_alike_share_their_completed_payload_yet_encode_apart() -> None:
    """``1 == True``, but a payload made with one is never given to a record of the other."""
    envelope = Envelope(run_id="r", pipeline_id="p")

    def completed(**counts: Any) -> Any:
        values: dict[str, Any] = {"status": "completed", "dry_run": False, "finalized": True}
        values.update(counts)
        return envelope.pipeline_completed(
            1, error_count=values.pop("error_count", 0), step_count=1, duration_ms=0.5, **values
        )

    first, second = completed(), completed()
    assert first["payload"] is second["payload"]
    odd = completed(dry_run=0, finalized=1, error_count=False)
    assert odd["payload"] == first["payload"]
    for record in (first, second, odd):
        assert record_line(record) == dumps(record) + "\n"
        assert record_json(record) == dumps(record)
    assert '"dryRun":0,"errorCount":false,"finalized":1' in record_line(odd)


_keys = st.one_of(st.sampled_from(["agent.runId", "agent.turn", "k"]), st.text(max_size=6))
_values = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(["run:1", "continue", "é", "\ud800", 'q"\\', "x" * 4097]),
    st.text(max_size=8),
)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(_keys, _values, max_size=8))
def test_attributes_encoded_while_bounded_are_the_bounded_ones(attributes: dict[str, Any]) -> None:
    """The dict is the one ``bounded_attributes`` keeps; the text, when made, its JSON."""
    for _ in range(2):  # the second time from the caches
        kept, text = bounded_attributes_json(attributes)
        assert kept == bounded_attributes(attributes)
        assert kept is not attributes
        if text is not None:
            assert text == compact_json(kept)
            assert all(type(v) is not float or math.isfinite(v) for v in kept.values())


_ids = st.one_of(st.sampled_from(["run:1", "turn", "é", 'q"\\\n']), st.text(max_size=12))


@settings(max_examples=200, deadline=None)
@given(
    run_id=_ids,
    parent=st.none() | _ids,
    correlation=st.none() | _ids,
    item_key=st.none() | _ids,
    iteration=st.none()
    | st.fixed_dictionaries(
        {"runId": _ids, "stepId": _ids, "attemptId": st.none() | _ids, "index": st.integers()}
    )
    | st.dictionaries(st.text(max_size=4), st.integers() | _ids, max_size=3),
    attributes=st.dictionaries(_keys, _values, max_size=4),
)
def test_every_records_line_is_its_compact_json(
    run_id: str,
    parent: str | None,
    correlation: str | None,
    item_key: str | None,
    iteration: dict[str, Any] | None,
    attributes: dict[str, Any],
) -> None:
    """Relation fields put together from quoted ids, steps, attributes, ends: json.dumps's."""
    envelope = Envelope(
        run_id=run_id,
        pipeline_id="p-✓",
        parent_run_id=parent,
        correlation_id=correlation,
        item_key=item_key,
        iteration=iteration,
    )
    records = [
        envelope.step_running(7, step_id=run_id, attempt_id=f"{run_id}:attempt:1"),
        envelope.step_attempted(
            8, step_id="s", attempt=1, attributes=attributes, attempt_id=f"{run_id}:a"
        ),
        envelope.step_terminal(
            9, status="completed", step_id="s", attempt_id=f"{run_id}:a", duration_ms=0.25
        ),
        envelope.finalize_started(10),
        envelope.pipeline_completed(
            11,
            status="failed",
            dry_run=False,
            error_count=1,
            finalized=True,
            step_count=1,
            duration_ms=1.5,
        ),
    ]
    for record in records:
        assert record_line(record) == dumps(record) + "\n"


def test_a_sink_that_locks_its_own_exports_is_retired_once_when_it_fails() -> None:
    """The only sink, handed records without the fan-out's lock, still fails the usual way:
    reported once, then no longer fed, however many threads were exporting."""

    @locks_its_exports
    class Failing:
        def __init__(self) -> None:
            self.seen = 0
            self.lock = threading.Lock()

        def export(self, record: Any) -> None:
            with self.lock:
                self.seen += 1
            raise OSError("disk full")

        def flush(self) -> None:
            pass

        def close(self) -> None:
            pass

    sink = Failing()
    reported: list[BaseException] = []
    fanout = TraceFanout([sink], on_error=lambda s, exc: reported.append(exc))
    start = threading.Barrier(4)

    def export() -> None:
        start.wait()
        fanout.export({"name": "pipeline.log"})

    threads = [threading.Thread(target=export) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=10)
    assert len(reported) == 1 and isinstance(reported[0], OSError)
    assert fanout.sinks == ()
    seen = sink.seen
    fanout.export({"name": "pipeline.log"})
    assert sink.seen == seen


def test_a_sink_without_the_mark_gets_the_fan_outs_lock() -> None:
    """A sink written without threads in mind never sees two exports at once."""

    class Plain:
        def __init__(self) -> None:
            self.inside = 0
            self.most = 0

        def export(self, record: Any) -> None:
            self.inside += 1
            self.most = max(self.most, self.inside)
            for _ in range(200):
                pass
            self.inside -= 1

        def flush(self) -> None:
            pass

        def close(self) -> None:
            pass

    sink = Plain()
    fanout = TraceFanout([sink])

    def export() -> None:
        for _ in range(300):
            fanout.export({"name": "pipeline.log"})

    threads = [threading.Thread(target=export) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert sink.most == 1


@settings(max_examples=100, deadline=None)
@given(
    current=st.none() | st.text(max_size=5),
    shown=st.lists(st.text(max_size=5), max_size=6),
    earlier=st.none() | st.integers(min_value=1),
)
def test_rows_shown_again_with_their_json_bound_like_any_rows(
    current: str | None, shown: list[str], earlier: int | None
) -> None:
    """A progress report whose constant rows come with their JSON joined (an iteration's
    recent turns) keeps the same rows, and writes the same line, as one without it."""
    envelope = Envelope(run_id="r", pipeline_id="p")
    constants = [ConstantPayload(id=f"iteration-{n}", name=n, status="completed") for n in shown]
    rows = ShownRows()
    if current is not None:
        rows.append({"id": "now", "name": current, "status": "running"})
    start = len(rows)
    rows.extend(constants)
    rows.known = (start, len(rows), ",".join(row.json() for row in constants))
    if earlier is not None:
        rows.append({"id": "earlier", "label": f"{earlier} earlier", "depth": 0})
    plain = list(rows)
    made = [
        envelope.step_running(
            1, step_id="s", attempt_id="a", progress={"completed": 1, "details": d}
        )
        for d in (rows, plain)
    ]
    assert made[0] == made[1]
    assert type(made[0]["payload"]["progress"]["details"]) is list
    for record in made:
        assert record_line(record) == dumps(record) + "\n"
