"""What a run writes to its trace sinks (UPSTREAM §2, §7 items 12 and 14)."""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from collections.abc import Mapping
from typing import Any

import pydantic
import pytest

import tubeless.tracing.records as records_module
from tubeless import errors as codes
from tubeless.pipeline import CancelToken, define_pipeline, from_pipeline, step
from tubeless.testing import capture_trace

ENVELOPE = {"version", "name", "runId", "pipelineId", "timestampMs"}
RELATIONS = {"parentRunId", "correlationId", "itemKey", "iteration"}
ERROR_KEYS = {
    "code",
    "kind",
    "phase",
    "message",
    "stack",
    "sourceCode",
    "cause",
    "issues",
    "fanOut",
}


class CodedError(Exception):
    def __init__(self, code: str, message: str = "boom") -> None:
        super().__init__(message)
        self.code = code


def _two_steps(**kwargs: Any) -> Any:
    return define_pipeline(
        id="two",
        steps=[
            step("a", lambda inputs, ctx: 1),
            step("b", lambda inputs, ctx: inputs["a"] + 1, depends_on=["a"]),
        ],
        **kwargs,
    )


def _nulls(value: Any, path: str = "$") -> list[str]:
    """Paths of every None inside ``value``."""
    if value is None:
        return [path]
    if isinstance(value, Mapping):
        return [p for k, v in value.items() for p in _nulls(v, f"{path}.{k}")]
    if isinstance(value, (list, tuple)):
        return [p for i, v in enumerate(value) for p in _nulls(v, f"{path}[{i}]")]
    return []


def _by_name(records: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    return [r for r in records if r["name"] == name]


# -- order and envelope (item 12) -------------------------------------------------------------


async def test_two_step_run_emits_the_exact_record_sequence() -> None:
    """started, planned x2, running/complete per step, finalize started/completed, completed."""
    with capture_trace() as trace:
        run = await _two_steps().run(trace=trace)

    assert run.status == "completed"
    assert trace.names == [
        "pipeline.started",
        "step.planned",
        "step.planned",
        "step.running",
        "step.complete",
        "step.running",
        "step.complete",
        "pipeline.finalize.started",
        "pipeline.finalize.completed",
        "pipeline.completed",
    ]
    assert [r.get("stepId") for r in trace.records] == [
        None,
        "a",
        "b",
        "a",
        "a",
        "b",
        "b",
        None,
        None,
        None,
    ]


async def test_every_record_carries_the_v3_envelope() -> None:
    """version 3, runId, pipelineId and an int timestampMs on every record, non-decreasing."""
    with capture_trace() as trace:
        run = await _two_steps().run(trace=trace)

    for record in trace.records:
        assert set(record) >= ENVELOPE, record
        assert record["version"] == 3
        assert record["runId"] == run.run_id
        assert record["pipelineId"] == "two"
        assert type(record["timestampMs"]) is int
        assert not RELATIONS & set(record), record
    stamps = [r["timestampMs"] for r in trace.records]
    assert stamps == sorted(stamps)


async def test_step_attempt_ids_and_durations_appear_only_for_started_steps() -> None:
    """durationMs (a float) and attemptId are on step records only when the step started."""
    pipeline = define_pipeline(
        id="mixed",
        steps=[
            step("ran", lambda inputs, ctx: 1),
            step("previewless", lambda inputs, ctx: 2, dry_run="skip"),
            step("dependent", lambda inputs, ctx: 3, depends_on=["previewless"]),
            step("preview", lambda inputs, ctx: 4, dry_run=lambda inputs, ctx: "p"),
        ],
        targets=[],
        finalize=lambda outputs, ctx: None,
    )

    with capture_trace() as trace:
        run = await pipeline.run(dry_run=True, trace=trace)

    assert run.status == "completed", run.errors
    terminal = {
        r["stepId"]: r
        for r in trace.records
        if r["name"].startswith("step.") and r["name"] not in {"step.planned", "step.running"}
    }
    for step_id in ("ran", "preview"):
        assert terminal[step_id]["name"] == "step.complete"
        assert type(terminal[step_id]["durationMs"]) is float
        assert terminal[step_id]["attemptId"] == f"{run.run_id}:attempt:" + (
            "1" if step_id == "ran" else "2"
        )
    for step_id in ("previewless", "dependent"):
        assert terminal[step_id]["name"] == "step.skipped"
        assert "durationMs" not in terminal[step_id]
        assert "attemptId" not in terminal[step_id]
    for record in _by_name(trace.records, "step.planned"):
        assert "durationMs" not in record and "attemptId" not in record
    for record in _by_name(trace.records, "step.running"):
        assert "durationMs" not in record
    for name in ("pipeline.finalize.completed", "pipeline.completed"):
        [record] = _by_name(trace.records, name)
        assert type(record["durationMs"]) is float


async def test_no_record_contains_null_anywhere() -> None:
    """Absent optional fields are omitted, never null, across a tree with every record kind."""

    def work(inputs: dict[str, Any], ctx: Any) -> None:
        ctx.report_progress(1)
        ctx.report_attempt(1, {"kept": "x", "dropped": None})
        ctx.log.info("hello")

    async def explode(inputs: dict[str, Any], ctx: Any) -> None:
        raise CodedError("MY_CODE")

    child = define_pipeline(id="child", steps=[step("explode", explode)])
    pipeline = define_pipeline(
        id="tree",
        steps=[
            step("work", work),
            step("skipped", lambda inputs, ctx: None, dry_run="skip"),
            from_pipeline("sub", child),
            step("later", lambda inputs, ctx: None, depends_on=["sub"]),
        ],
    )

    with capture_trace() as trace:
        dry = await pipeline.run(dry_run=True, trace=trace)
        failed = await pipeline.run(trace=trace, correlation_id="corr")
        planning = await pipeline.run(trace=trace, targets=["nope"])

    assert (dry.status, failed.status, planning.status) == ("failed", "failed", "failed")
    assert {"step.skipped", "step.failed", "pipeline.log", "step.attempted"} <= set(trace.names)
    for record in trace.records:
        assert _nulls(record) == [], record


async def test_plan_failure_emits_only_started_and_completed() -> None:
    """An invalid selection records pipeline.started (planOk false) and pipeline.completed."""
    with capture_trace() as trace:
        run = await _two_steps().run(trace=trace, targets=["nope"])

    assert run.status == "failed"
    assert trace.names == ["pipeline.started", "pipeline.completed"]
    started, completed = trace.records
    assert started["payload"]["planOk"] is False
    assert started["payload"]["stepCount"] == 0
    assert completed["payload"] == {
        "status": "failed",
        "dryRun": False,
        "errorCount": 1,
        "finalized": False,
        "stepCount": 0,
    }
    assert completed["error"]["code"] == codes.PLANNING_TARGET_UNKNOWN
    assert completed["error"]["phase"] == "planning"


class Options(pydantic.BaseModel):
    count: int


async def test_options_validation_failure_emits_only_started_and_completed() -> None:
    """Rejected options record pipeline.started and pipeline.completed, with issues."""
    with capture_trace() as trace:
        run = await _two_steps(options_schema=Options).run({"count": "many"}, trace=trace)

    assert run.status == "failed"
    assert trace.names == ["pipeline.started", "pipeline.completed"]
    assert trace.records[0]["payload"]["planOk"] is True
    error = trace.records[1]["error"]
    assert error["code"] == codes.OPTIONS_VALIDATION_FAILED
    assert error["kind"] == "validation"
    assert error["phase"] == "execution"
    assert error["issues"] and all(set(i) <= {"message", "path"} for i in error["issues"])
    assert error["issues"][0]["path"] == ["count"]
    assert trace.records[1]["payload"]["stepCount"] == 0


# -- payloads ---------------------------------------------------------------------------------


async def test_skipped_failed_and_cancelled_records_carry_status_payloads_and_errors() -> None:
    """Terminal payloads are {status, reason?, message?, dependencyId?}; errors have no stepId."""

    async def explode(inputs: dict[str, Any], ctx: Any) -> None:
        raise CodedError("MY_CODE", "exploded")

    pipeline = define_pipeline(
        id="p",
        steps=[
            step("boom", explode),
            step("after", lambda inputs, ctx: None, depends_on=["boom"]),
            step("independent", lambda inputs, ctx: None),
        ],
        targets=[],
        finalize=lambda outputs, ctx: None,
    )

    with capture_trace() as trace:
        run = await pipeline.run(trace=trace)

    assert run.status == "failed"
    terminal = {
        r["stepId"]: r
        for r in trace.records
        if r["name"] in {"step.complete", "step.skipped", "step.failed", "step.cancelled"}
    }
    failed = terminal["boom"]
    assert failed["name"] == "step.failed"
    assert failed["payload"] == {"status": "failed"}
    assert set(failed["error"]) <= ERROR_KEYS
    assert failed["error"]["code"] == codes.STEP_FAILED
    assert failed["error"]["kind"] == "step"
    assert failed["error"]["phase"] == "execution"
    assert failed["error"]["message"] == "exploded"
    assert failed["error"]["sourceCode"] == "MY_CODE"
    assert failed["error"]["cause"]["sourceCode"] == "MY_CODE"
    assert "stepId" not in failed["error"]
    for step_id in ("after", "independent"):
        skipped = terminal[step_id]
        assert skipped["name"] == "step.skipped"
        assert skipped["payload"] == {
            "status": "skipped",
            "reason": "fail-fast",
            "message": "Not run because fail-fast stopped after boom failed.",
            "dependencyId": "boom",
        }
        assert "error" not in skipped
    [completed] = _by_name(trace.records, "pipeline.completed")
    assert completed["error"] == failed["error"]
    assert completed["payload"]["errorCount"] == 1


async def test_cancelled_step_record_carries_a_cancellation_error() -> None:
    """A cancelled step is step.cancelled with {status: cancelled} and an error without stepId."""
    token = CancelToken()

    async def wait_for_cancel(inputs: dict[str, Any], ctx: Any) -> None:
        token.cancel("operator stop")
        await ctx.sleep(60)

    pipeline = define_pipeline(
        id="p",
        steps=[
            step("waits", wait_for_cancel),
            step("never", lambda inputs, ctx: None),
        ],
        targets=[],
        finalize=lambda outputs, ctx: None,
    )

    with capture_trace() as trace:
        run = await pipeline.run(trace=trace, signal=token)

    assert run.status == "cancelled"
    cancelled = _by_name(trace.records, "step.cancelled")
    assert [r["stepId"] for r in cancelled] == ["waits", "never"]
    started, unstarted = cancelled
    assert started["payload"] == {"status": "cancelled"}
    assert "attemptId" in started and type(started["durationMs"]) is float
    assert "attemptId" not in unstarted and "durationMs" not in unstarted
    for record in cancelled:
        assert set(record["error"]) <= ERROR_KEYS
        assert record["error"]["code"] == codes.RUN_CANCELLED
        assert record["error"]["kind"] == "cancellation"
        assert "stepId" not in record["error"]
    assert _by_name(trace.records, "pipeline.finalize.started") == []
    [completed] = _by_name(trace.records, "pipeline.completed")
    assert completed["payload"]["status"] == "cancelled"
    assert completed["payload"]["finalized"] is False


async def test_pipeline_started_payload_and_definition_snapshot_only_on_the_root() -> None:
    """The root carries definitionIdentity and definitionSnapshot; child runs only the identity."""
    child = define_pipeline(id="child", steps=[step("c", lambda inputs, ctx: 1)])
    pipeline = define_pipeline(
        id="root",
        steps=[step("a", lambda inputs, ctx: 1), from_pipeline("sub", child)],
        targets=["sub"],
    )

    with capture_trace() as trace:
        run = await pipeline.run(trace=trace)

    assert run.status == "completed", run.errors
    root, sub = _by_name(trace.records, "pipeline.started")
    assert root["runId"] == run.run_id and sub["parentRunId"] == run.run_id
    assert set(root["payload"]) == {
        "dryRun",
        "planOk",
        "stepCount",
        "targetIds",
        "definitionIdentity",
        "definitionSnapshot",
    }
    assert root["payload"]["dryRun"] is False
    assert root["payload"]["planOk"] is True
    assert root["payload"]["stepCount"] == 2
    assert root["payload"]["targetIds"] == ["sub"]
    assert root["payload"]["definitionIdentity"] == pipeline.identity.to_wire()
    assert root["payload"]["definitionSnapshot"]["identity"] == pipeline.identity.to_wire()
    assert set(sub["payload"]) == {
        "dryRun",
        "planOk",
        "stepCount",
        "targetIds",
        "definitionIdentity",
    }
    assert sub["payload"]["definitionIdentity"] == child.identity.to_wire()


async def test_pipeline_completed_payload_and_first_error() -> None:
    """pipeline.completed has {status, dryRun, errorCount, finalized, stepCount}."""
    with capture_trace() as trace:
        run = await _two_steps().run(trace=trace, dry_run=True)

    [completed] = _by_name(trace.records, "pipeline.completed")
    assert completed["payload"] == {
        "status": "completed",
        "dryRun": True,
        "errorCount": 0,
        "finalized": True,
        "stepCount": 2,
    }
    assert "error" not in completed
    assert run.finalized


async def test_progress_is_recorded_as_step_running() -> None:
    """ctx.report_progress(1, 2, 'half') republishes step.running with payload.progress."""

    async def work(inputs: dict[str, Any], ctx: Any) -> None:
        ctx.report_progress(1, 2, "half")

    pipeline = define_pipeline(id="p", steps=[step("work", work)])

    with capture_trace() as trace:
        run = await pipeline.run(trace=trace)

    running = _by_name(trace.records, "step.running")
    assert [r["payload"] for r in running] == [
        {},
        {"progress": {"completed": 1, "total": 2, "message": "half"}},
    ]
    assert {r["attemptId"] for r in running} == {f"{run.run_id}:attempt:1"}


async def test_report_attempt_is_recorded_as_step_attempted_without_none_values() -> None:
    """ctx.report_attempt(1, {'a': 1, 'b': None}) records attributes {'a': 1}."""

    async def work(inputs: dict[str, Any], ctx: Any) -> None:
        ctx.report_attempt(1, {"a": 1, "b": None})

    pipeline = define_pipeline(id="p", steps=[step("work", work)])

    with capture_trace() as trace:
        run = await pipeline.run(trace=trace)

    assert trace.names[2:5] == ["step.running", "step.attempted", "step.complete"]
    [attempted] = _by_name(trace.records, "step.attempted")
    assert attempted["stepId"] == "work"
    assert attempted["attemptId"] == f"{run.run_id}:attempt:1"
    assert attempted["payload"] == {"attempt": 1, "attributes": {"a": 1}}


async def test_log_lines_become_pipeline_log_records_from_async_and_thread_handlers() -> None:
    """ctx.log levels map to log/warn/error, also from sync handlers in worker threads."""
    threads: list[bool] = []

    async def async_step(inputs: dict[str, Any], ctx: Any) -> None:
        ctx.log.info("info line")
        ctx.log.warning("warning line")

    def sync_step(inputs: dict[str, Any], ctx: Any) -> None:
        threads.append(threading.current_thread() is not threading.main_thread())
        ctx.log.error("error line %s", 7)
        ctx.log.debug("debug line")

    pipeline = define_pipeline(
        id="p", steps=[step("a", async_step), step("s", sync_step, depends_on=["a"])]
    )

    with capture_trace() as trace:
        run = await pipeline.run(trace=trace)

    assert threads == [True]
    logs = _by_name(trace.records, "pipeline.log")
    assert [(r["stepId"], r["payload"]) for r in logs] == [
        ("a", {"level": "log", "message": "info line"}),
        ("a", {"level": "warn", "message": "warning line"}),
        ("s", {"level": "error", "message": "error line 7"}),
        ("s", {"level": "log", "message": "debug line"}),
    ]
    assert [r["attemptId"] for r in logs] == [f"{run.run_id}:attempt:{n}" for n in "1122"]


async def test_correlation_id_is_on_every_record_of_the_tree() -> None:
    """correlation_id appears on every record, including child runs'."""
    grandchild = define_pipeline(id="grandchild", steps=[step("g", lambda inputs, ctx: 1)])
    child = define_pipeline(id="child", steps=[from_pipeline("inner", grandchild)])
    pipeline = define_pipeline(id="root", steps=[from_pipeline("sub", child)])

    with capture_trace() as trace:
        run = await pipeline.run(trace=trace, correlation_id="corr-42")

    assert run.status == "completed", run.errors
    assert {r["pipelineId"] for r in trace.records} == {"root", "child", "grandchild"}
    assert {r["correlationId"] for r in trace.records} == {"corr-42"}


SECRET = "s3cr3t-VALUE-never-traced"


async def test_records_never_contain_inputs_outputs_or_the_final_value() -> None:
    """A distinctive secret in the input, step outputs and final value never reaches a record."""

    def first(inputs: dict[str, Any], ctx: Any) -> dict[str, str]:
        ctx.log.info("working")
        ctx.report_progress(1, 2, "half")
        return {"echo": ctx.options["secret"], "own": SECRET + "-output"}

    async def second(inputs: dict[str, Any], ctx: Any) -> str:
        return inputs["first"]["echo"] + "-again"

    child = define_pipeline(id="child", steps=[step("echo", lambda inputs, ctx: ctx.options)])
    pipeline = define_pipeline(
        id="p",
        steps=[
            step("first", first),
            step("second", second, depends_on=["first"]),
            from_pipeline(
                "sub",
                child,
                depends_on=["second"],
                map_options=lambda inputs, ctx: inputs["second"],
            ),
        ],
        finalize=lambda outputs, ctx: {"final": SECRET + "-final", **outputs},
    )

    with capture_trace() as trace:
        run = await pipeline.run({"secret": SECRET}, trace=trace)

    assert run.status == "completed", run.errors
    assert SECRET in json.dumps(run.value)
    assert SECRET not in json.dumps(trace.records)


async def test_validation_failures_never_quote_the_rejected_value() -> None:
    """Rejected options, outputs and results leave the offending value out of the trace."""

    class Result(pydantic.BaseModel):
        count: int

    rejects_output = define_pipeline(
        id="out", steps=[step("a", lambda inputs, ctx: SECRET, output_schema=int)]
    )
    rejects_result = define_pipeline(
        id="res", steps=[step("a", lambda inputs, ctx: {"count": SECRET})], result_schema=Result
    )

    with capture_trace() as trace:
        runs = [
            await _two_steps(options_schema=Options).run({"count": SECRET}, trace=trace),
            await rejects_output.run(trace=trace),
            await rejects_result.run(trace=trace),
        ]

    assert [r.status for r in runs] == ["failed"] * 3
    assert [r.errors[0].code for r in runs] == [
        codes.OPTIONS_VALIDATION_FAILED,
        codes.STEP_OUTPUT_VALIDATION_FAILED,
        codes.FINAL_RESULT_VALIDATION_FAILED,
    ]
    assert SECRET not in json.dumps(trace.records)


async def test_runs_without_a_sink_build_no_records(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without trace= no Envelope is built: progress, attempts and logs cost nothing."""

    def forbidden(self: Any, *args: Any, **kwargs: Any) -> None:
        raise AssertionError("a trace envelope was built without a sink")

    monkeypatch.setattr(records_module.Envelope, "__init__", forbidden)

    def work(inputs: dict[str, Any], ctx: Any) -> int:
        ctx.report_progress(1, 2, "half")
        ctx.report_attempt(1, {"a": 1})
        ctx.log.info("hello")
        return 41

    child = define_pipeline(id="child", steps=[step("w", work)])
    pipeline = define_pipeline(
        id="p",
        steps=[
            from_pipeline("sub", child),
            step("b", lambda inputs, ctx: inputs["sub"] + 1, depends_on=["sub"]),
        ],
    )

    run = await pipeline.run()

    assert run.status == "completed", run.errors
    assert run.value == 42


# -- failing sinks (item 14) ------------------------------------------------------------------


class ExplodingSink:
    """Raises on every export (or only on flush)."""

    def __init__(self, *, fail_export: bool = True, fail_flush: bool = False) -> None:
        self.fail_export = fail_export
        self.fail_flush = fail_flush
        self.exports = 0
        self.flushes = 0
        self.closed = False

    def export(self, record: Mapping[str, Any]) -> None:
        self.exports += 1
        if self.fail_export:
            raise OSError("disk on fire")

    def flush(self) -> None:
        self.flushes += 1
        if self.fail_flush:
            raise OSError("flush on fire")

    def close(self) -> None:
        self.closed = True


def _trace_warnings(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [
        r for r in caplog.records if r.name == "tubeless.trace" and r.levelno >= logging.WARNING
    ]


async def test_a_sink_failing_on_export_never_fails_the_run(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """One warning, the bad sink is dropped, the healthy sink still gets the whole tree."""
    bad = ExplodingSink()
    child = define_pipeline(id="child", steps=[step("c", lambda inputs, ctx: 1)])
    pipeline = define_pipeline(
        id="p",
        steps=[step("a", lambda inputs, ctx: 1), from_pipeline("sub", child, depends_on="a")],
    )

    with caplog.at_level(logging.WARNING, logger="tubeless.trace"), capture_trace() as good:
        run = await pipeline.run(trace=[bad, good])

    assert run.status == "completed", run.errors
    assert len(_trace_warnings(caplog)) == 1
    assert bad.exports == 1
    with capture_trace() as reference:
        await pipeline.run(trace=reference)
    assert good.names == reference.names
    assert good.names[0] == "pipeline.started" and good.names[-1] == "pipeline.completed"


async def test_a_sink_failing_on_flush_never_fails_the_run(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A sink failing only in flush is reported once; the run and the other sink are unharmed."""
    bad = ExplodingSink(fail_export=False, fail_flush=True)

    with caplog.at_level(logging.WARNING, logger="tubeless.trace"), capture_trace() as good:
        run = await _two_steps().run(trace=[bad, good])

    assert run.status == "completed", run.errors
    assert len(_trace_warnings(caplog)) == 1
    assert bad.exports == len(good.records) == 10
    assert good.flushes >= 1
    assert good.names[-1] == "pipeline.completed"


async def test_runs_flush_but_never_close_their_sinks() -> None:
    """A run flushes the sinks it was given; whoever opened a sink closes it."""
    other = ExplodingSink(fail_export=False)
    with capture_trace() as trace:
        run = await _two_steps().run(trace=[trace, other])
        assert run.status == "completed"
        assert trace.flushes >= 1
        assert other.flushes >= 1
        assert trace.closed is False
        assert other.closed is False
    assert trace.closed is True
    assert other.closed is False


async def test_an_interrupted_run_still_records_and_flushes_its_sink() -> None:
    """Cancelling the awaiting task still records the cancelled lifecycle and flushes."""
    entered = asyncio.Event()

    async def hang(inputs: dict[str, Any], ctx: Any) -> None:
        entered.set()
        await asyncio.Event().wait()

    pipeline = define_pipeline(id="p", steps=[step("hang", hang)])
    with capture_trace() as trace:
        task = asyncio.ensure_future(pipeline.run(trace=trace))
        await entered.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert trace.names[-2:] == ["step.cancelled", "pipeline.completed"]
        assert trace.records[-1]["payload"]["status"] == "cancelled"
        assert trace.flushes >= 1
        assert trace.closed is False


# -- more record kinds and bounds -------------------------------------------------------------


async def test_finalize_failure_records_finalize_failed_and_the_run_error() -> None:
    """A failing finalizer records pipeline.finalize.failed (durationMs, error) then completed."""

    def finalize(outputs: dict[str, Any], ctx: Any) -> None:
        raise CodedError("FINAL_BAD", "cannot finalize")

    with capture_trace() as trace:
        run = await _two_steps(finalize=finalize).run(trace=trace)

    assert run.status == "failed"
    assert trace.names[-3:] == [
        "pipeline.finalize.started",
        "pipeline.finalize.failed",
        "pipeline.completed",
    ]
    failed = trace.records[-2]
    assert failed["payload"] == {}
    assert type(failed["durationMs"]) is float
    assert "stepId" not in failed and "stepId" not in failed["error"]
    assert failed["error"]["code"] == codes.FINALIZATION_FAILED
    assert failed["error"]["phase"] == "finalization"
    assert failed["error"]["sourceCode"] == "FINAL_BAD"
    assert trace.records[-1]["error"] == failed["error"]
    assert trace.records[-1]["payload"]["finalized"] is False


async def test_step_planned_payload_describes_composed_steps() -> None:
    """step.planned carries the plan step; composed steps add nestedPipeline with stepCount."""
    child = define_pipeline(
        id="child", steps=[step("x", lambda inputs, ctx: 1), step("y", lambda inputs, ctx: 2)]
    )
    pipeline = define_pipeline(
        id="p",
        steps=[
            step("a", lambda inputs, ctx: 1, name="Alpha"),
            from_pipeline("sub", child, depends_on=["a"]),
        ],
    )

    with capture_trace() as trace:
        await pipeline.run(trace=trace)

    planned = {r["stepId"]: r["payload"] for r in _by_name(trace.records, "step.planned")}
    assert planned["a"] == {
        "dependencies": [],
        "optionalDependencies": [],
        "skipAfterFailureOf": [],
        "dryRun": "run",
        "runtimeSkipPossible": False,
        "selected": True,
        "selectionReasons": [{"kind": "all"}],
        "name": "Alpha",
    }
    assert planned["sub"]["dependencies"] == ["a"]
    assert planned["sub"]["nestedPipeline"] == {
        "mode": "single",
        "pipelineId": "child",
        "stepCount": 2,
        "stepIds": ["x", "y"],
    }


async def test_progress_is_accepted_only_while_the_step_is_running() -> None:
    """A context kept past its attempt cannot publish progress once the step has ended."""
    kept: list[Any] = []

    async def first(inputs: dict[str, Any], ctx: Any) -> None:
        kept.append(ctx)

    async def second(inputs: dict[str, Any], ctx: Any) -> None:
        kept[0].report_progress(5, 5, "too late")

    pipeline = define_pipeline(
        id="p", steps=[step("first", first), step("second", second, depends_on=["first"])]
    )

    with capture_trace() as trace:
        run = await pipeline.run(trace=trace)

    assert run.status == "completed", run.errors
    first_records = [r["name"] for r in trace.records if r.get("stepId") == "first"]
    assert first_records == ["step.planned", "step.running", "step.complete"]


def _oversized(value: Any, path: str = "$") -> list[str]:
    if isinstance(value, str):
        return [path] if len(value) > 4096 else []
    if isinstance(value, Mapping):
        return [p for k, v in value.items() for p in _oversized(v, f"{path}.{k}")]
    if isinstance(value, (list, tuple)):
        found = [path] if len(value) > 128 else []
        return found + [p for i, v in enumerate(value) for p in _oversized(v, f"{path}[{i}]")]
    return []


class ManyNumbers(pydantic.BaseModel):
    values: list[int]


async def test_records_respect_the_write_bounds() -> None:
    """Strings are cut at 4096 characters and lists at 128 entries in every record."""
    long_text = "x" * 10_000

    async def noisy(inputs: dict[str, Any], ctx: Any) -> None:
        ctx.log.info(long_text)
        ctx.report_progress(1, 2, long_text, details=[{"id": str(i)} for i in range(300)])

    async def explode(inputs: dict[str, Any], ctx: Any) -> None:
        raise CodedError("LONG", long_text)

    pipeline = define_pipeline(
        id="p",
        steps=[step("noisy", noisy), step("explode", explode, depends_on=["noisy"])],
    )
    validated = define_pipeline(
        id="v", steps=[step("a", lambda inputs, ctx: 1)], options_schema=ManyNumbers
    )

    with capture_trace() as trace:
        failed = await pipeline.run(trace=trace)
        rejected = await validated.run({"values": ["bad"] * 300}, trace=trace)

    assert (failed.status, rejected.status) == ("failed", "failed")
    oversized = [(r["name"], path) for r in trace.records for path in _oversized(r)]
    assert oversized == []
    [progress] = [
        r["payload"]["progress"]
        for r in _by_name(trace.records, "step.running")
        if "progress" in r["payload"]
    ]
    assert progress["detailCount"] == 300
    assert len(progress["details"]) <= 128
