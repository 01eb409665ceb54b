"""``tubeless.testing``: the test doubles shipped for users' tests."""

from __future__ import annotations

from typing import Any

from tubeless.pipeline import define_pipeline, from_pipeline, step
from tubeless.testing import capture_trace


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
