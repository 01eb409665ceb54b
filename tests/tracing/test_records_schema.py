"""Every record real runs write matches ``record.schema.json``, and the write bounds hold.

The schema (draft 2020-12, shipped as package data) is only ever used by tests: the record
constructors enforce the bounds on the hot path, and these tests check them against it over a
varied set of runs (UPSTREAM §2.2, §2.3).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Awaitable, Callable
from importlib import resources
from typing import Any

import jsonschema
import pydantic
import pytest

from examples.agent_delegation import delegating_agent
from examples.scripted_agent import scripted_agent
from tubeless import CancelToken, define_pipeline, step
from tubeless.pipeline import for_each_pipeline, from_pipeline, iterate_pipeline
from tubeless.testing import CapturedTrace, capture_trace
from tubeless.tracing.records import (
    MAX_DETAILS_BYTES,
    MAX_LIST,
    Envelope,
    bounded_details,
)

Records = list[dict[str, Any]]


@pytest.fixture(scope="module")
def validator() -> jsonschema.Draft202012Validator:
    text = resources.files("tubeless.tracing").joinpath("record.schema.json").read_text("utf-8")
    schema = json.loads(text)
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def _problems(validator: jsonschema.Draft202012Validator, records: Records) -> list[str]:
    found = []
    for index, record in enumerate(records):
        for error in validator.iter_errors(record):
            where = "/".join(str(p) for p in error.absolute_path)
            found.append(f"#{index} {record.get('name')} /{where}: {error.message}")
    return found


def _size(value: Any) -> int:
    return len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode("utf-8"))


def _cause_depth(node: dict[str, Any] | None) -> int:
    depth = 0
    while node is not None:
        depth += 1
        node = node.get("cause")
    return depth


def _rule_problems(records: Records) -> list[str]:
    """The rules JSON Schema cannot state: cross-field equalities, encoded sizes, depths."""
    found = []
    for index, record in enumerate(records):
        tag = f"#{index} {record['name']}"
        iteration = record.get("iteration")
        if iteration is not None and iteration["runId"] != record.get("parentRunId"):
            found.append(f"{tag}: iteration.runId differs from parentRunId")
        progress = record["payload"].get("progress") if record["name"] == "step.running" else None
        if progress is not None and "details" in progress:
            if _size(progress["details"]) > MAX_DETAILS_BYTES:
                found.append(f"{tag}: progress details over 256 KiB")
            if progress.get("detailCount", len(progress["details"])) < len(progress["details"]):
                found.append(f"{tag}: detailCount below the number of rows")
        snapshot = record["payload"].get("definitionSnapshot")
        if record["name"] == "pipeline.started" and snapshot is not None:
            if snapshot["identity"] != record["payload"].get("definitionIdentity"):
                found.append(f"{tag}: the snapshot carries another identity")
            if _size(snapshot) > 256 * 1024:
                found.append(f"{tag}: definition snapshot over 256 KiB")
        if "error" in record and _cause_depth(record["error"].get("cause")) >= 16:
            found.append(f"{tag}: cause chain 16 or deeper")
    return found


# -- the runs ---------------------------------------------------------------------------------


class CodedError(Exception):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


class Options(pydantic.BaseModel):
    count: int


def _busy(inputs: dict[str, Any], ctx: Any) -> int:
    ctx.log.info("starting %s", "work")
    ctx.log.warning("careful")
    ctx.log.error("not really an error")
    ctx.report_progress(0, 3, "begun")
    ctx.report_progress(1, 3, "rows", [{"id": f"row-{i}", "depth": 0} for i in range(200)])
    ctx.report_progress(3, 3, "big rows", [{"id": "r", "text": "x" * 100_000}] * 5)
    ctx.report_attempt(1, {"text": "a", "number": 1.5, "count": 2, "flag": True, "gone": None})
    return 1


async def _explode(inputs: dict[str, Any], ctx: Any) -> None:
    raise CodedError("MY_CODE", "exploded") from ValueError("inner")


def _plain(**extra: Any) -> Any:
    return define_pipeline(
        id="plain",
        name="Plain",
        options_schema=Options,
        steps=[
            step("busy", _busy, name="Busy", description="Reports everything."),
            step("policy", lambda inputs, ctx: 1, skip=lambda inputs, ctx: "not today"),
            step(
                "valued",
                lambda inputs, ctx: 1,
                skip=lambda inputs, ctx: {"reason": "cached", "value": 2},
                output_schema=int,
            ),
            step("previewless", lambda inputs, ctx: 1, dry_run="skip"),
            step("boom", _explode, depends_on=["busy"]),
            step("after", lambda inputs, ctx: 1, depends_on=["boom"]),
            step("gated", lambda inputs, ctx: 1, skip_after_failure_of=["boom"]),
            step("optional", lambda inputs, ctx: 1, optional_depends_on=["boom"]),
            step("bad-output", lambda inputs, ctx: "text", output_schema=int),
        ],
        targets=["after", "gated", "optional", "bad-output", "valued", "policy", "previewless"],
        **extra,
    )


async def _run_into(trace: CapturedTrace, pipeline: Any, *args: Any, **kwargs: Any) -> None:
    await pipeline.run(*args, trace=trace, **kwargs)


async def plain_runs(trace: CapturedTrace) -> None:
    """Fail-fast, continue-on-error, dry, policy skips, a failing finalizer."""
    await _run_into(trace, _plain(), {"count": 1})
    await _run_into(trace, _plain(), {"count": 1}, continue_on_error=True, correlation_id="c-1")
    await _run_into(trace, _plain(), {"count": 1}, dry_run=True, max_concurrency=4)

    def finalize(outputs: dict[str, Any], ctx: Any) -> None:
        raise CodedError("FINAL", "cannot finalize")

    failing = define_pipeline(id="fin", steps=[step("a", lambda i, c: 1)], finalize=finalize)
    await _run_into(trace, failing)


async def fan_out_run(trace: CapturedTrace) -> None:
    """A fan-out whose items partly fail (a fanOut summary in the error)."""

    def item(inputs: dict[str, Any], ctx: Any) -> int:
        if ctx.options % 2:
            raise CodedError("ODD", f"item {ctx.options} is odd")
        return int(ctx.options)

    child = define_pipeline(id="item", steps=[step("work", item)])
    parent = define_pipeline(
        id="fan",
        steps=[
            for_each_pipeline(
                "each",
                child,
                items=lambda inputs, ctx: list(range(5)),
                key=lambda value, index: f"item-{index}",
                map_options=lambda value, index, inputs, ctx: value,
                concurrency=2,
            ),
            from_pipeline("single", child, map_options=lambda inputs, ctx: 2),
        ],
        targets=["each", "single"],
    )
    await _run_into(trace, parent, continue_on_error=True)


async def iteration_run(trace: CapturedTrace) -> None:
    """Three iterations of a child, then finish."""
    child = define_pipeline(id="turn", steps=[step("inc", lambda i, ctx: ctx.options + 1)])
    parent = define_pipeline(
        id="loop",
        steps=[
            iterate_pipeline(
                "loop",
                child,
                max_iterations=5,
                initial_state=lambda inputs, ctx: 0,
                map_options=lambda state, inputs, ctx: state,
                transition=lambda result, state, ctx: (
                    {"kind": "finish", "result": result}
                    if result >= 3
                    else {"kind": "next", "state": result}
                ),
            )
        ],
    )
    await _run_into(trace, parent)


async def cancelled_run(trace: CapturedTrace) -> None:
    """A token cancelled while a step waits on it."""
    token = CancelToken()

    async def wait(inputs: dict[str, Any], ctx: Any) -> None:
        token.cancel("stop now")
        await ctx.signal.wait()
        ctx.signal.raise_if_cancelled()

    pipeline = define_pipeline(
        id="cancel", steps=[step("wait", wait), step("next", lambda i, c: 1, depends_on=["wait"])]
    )
    await _run_into(trace, pipeline, signal=token)


async def options_failure(trace: CapturedTrace) -> None:
    """Options that fail validation: started and completed only, with issues."""
    await _run_into(trace, _plain(), {"count": "many"})


async def plan_failure(trace: CapturedTrace) -> None:
    """An unknown target: started (planOk false) and completed only."""
    await _run_into(trace, _plain(), {"count": 1}, targets=["nope"])


async def scripted_agent_runs(trace: CapturedTrace) -> None:
    """The scripted agent, live (with a recovered tool error) and dry."""
    await _run_into(trace, scripted_agent, {"question": "hello missing tubeless"})
    await _run_into(trace, scripted_agent, {"question": "hello"}, dry_run=True)


async def delegation_agent_runs(trace: CapturedTrace) -> None:
    """The delegating agent, live and dry: turns, tool calls and child agents."""
    await _run_into(trace, delegating_agent, {"question": "red blue"})
    await _run_into(trace, delegating_agent, {"question": "red blue"}, dry_run=True)


SCENARIOS: list[Callable[[CapturedTrace], Awaitable[None]]] = [
    plain_runs,
    fan_out_run,
    iteration_run,
    cancelled_run,
    options_failure,
    plan_failure,
    scripted_agent_runs,
    delegation_agent_runs,
]


@pytest.mark.parametrize("scenario", [pytest.param(s, id=s.__name__) for s in SCENARIOS])
async def test_every_record_of_real_runs_matches_the_schema(
    scenario: Callable[[CapturedTrace], Awaitable[None]],
    validator: jsonschema.Draft202012Validator,
) -> None:
    """Each scenario's records validate and keep the rules the schema cannot express."""
    with capture_trace() as trace:
        await scenario(trace)

    assert trace.records
    assert _problems(validator, trace.records) == []
    assert _rule_problems(trace.records) == []


async def test_the_scenarios_cover_every_record_kind_and_relation() -> None:
    """Together the scenarios write every record name and every envelope relation."""
    with capture_trace() as trace:
        for scenario in SCENARIOS:
            await scenario(trace)

    assert set(trace.names) == {
        "pipeline.started",
        "step.planned",
        "step.running",
        "step.attempted",
        "step.complete",
        "step.skipped",
        "step.failed",
        "step.cancelled",
        "pipeline.log",
        "pipeline.finalize.started",
        "pipeline.finalize.completed",
        "pipeline.finalize.failed",
        "pipeline.completed",
    }
    keys = {key for record in trace.records for key in record}
    assert {"parentRunId", "correlationId", "itemKey", "iteration", "error"} <= keys
    errors = [r["error"] for r in trace.records if "error" in r]
    assert any("fanOut" in e for e in errors)
    assert any("issues" in e for e in errors)
    assert any("cause" in e for e in errors)
    reasons = {r["payload"].get("reason") for r in trace.records if r["name"] == "step.skipped"}
    assert {"policy", "fail-fast", "failed-dependency", "dry-run"} <= reasons
    progress = [r["payload"]["progress"] for r in trace.records if r["payload"].get("progress")]
    assert any("detailCount" in p for p in progress)


# -- the schema is not vacuous ----------------------------------------------------------------

_GOOD_FAILED: dict[str, Any] = {
    "version": 3,
    "name": "step.failed",
    "runId": "p:1",
    "pipelineId": "p",
    "timestampMs": 1,
    "stepId": "a",
    "attemptId": "p:1:attempt:1",
    "durationMs": 1.5,
    "error": {"code": "C", "kind": "step", "phase": "execution", "message": "m"},
    "payload": {"status": "failed"},
}


def _without(key: str) -> Callable[[dict[str, Any]], None]:
    return lambda record: record.pop(key)


def _setting(path: tuple[str, ...], value: Any) -> Callable[[dict[str, Any]], None]:
    def change(record: dict[str, Any]) -> None:
        target = record
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value

    return change


@pytest.mark.parametrize(
    "change",
    [
        pytest.param(_setting(("correlationId",), None), id="null-field"),
        pytest.param(_setting(("extra",), 1), id="unknown-envelope-field"),
        pytest.param(_without("error"), id="failed-without-error"),
        pytest.param(_setting(("version",), 2), id="version-2"),
        pytest.param(_setting(("name",), "step.unknown"), id="unknown-name"),
        pytest.param(_setting(("error", "stepId"), "a"), id="stepId-inside-error"),
        pytest.param(_setting(("error", "message"), "x" * 4097), id="long-message"),
        pytest.param(_setting(("payload", "status"), "completed"), id="wrong-status"),
        pytest.param(_setting(("timestampMs",), 1.5), id="float-timestamp"),
        pytest.param(
            _setting(("iteration",), {"runId": "q", "stepId": "s", "attemptId": "t", "index": 1}),
            id="iteration-without-parent",
        ),
    ],
)
def test_the_schema_rejects_malformed_records(
    change: Callable[[dict[str, Any]], None], validator: jsonschema.Draft202012Validator
) -> None:
    """A valid record stops validating after each single breaking change."""
    assert _problems(validator, [_GOOD_FAILED]) == []
    record = copy.deepcopy(_GOOD_FAILED)
    change(record)
    assert _problems(validator, [record]) != []


# -- progress detail bounds -------------------------------------------------------------------


def test_bounded_details_keeps_small_lists_whole() -> None:
    """Nothing dropped: the rows are copies and there is no count."""
    rows = [{"id": "a"}, {"id": "b"}]
    kept, count = bounded_details(rows)
    assert kept == rows and count is None
    assert kept[0] is not rows[0]


def test_bounded_details_caps_rows_at_128_and_keeps_the_original_count() -> None:
    """200 small rows: the first 128 kept, detailCount 200."""
    kept, count = bounded_details({"id": str(i)} for i in range(200))
    assert [r["id"] for r in kept] == [str(i) for i in range(MAX_LIST)]
    assert count == 200


def test_bounded_details_stops_before_the_row_that_would_overflow_256_kib() -> None:
    """Rows are appended until the next would overflow; later rows, even small ones, are gone."""
    big = {"t": "y" * 100_000}
    kept, count = bounded_details([big, big, {"t": "y" * 70_000}, {"t": ""}])
    assert kept == [big, big]
    assert _size(kept) <= MAX_DETAILS_BYTES
    assert count == 4


def test_bounded_details_is_exact_at_the_byte_limit() -> None:
    """A list encoding to exactly 256 KiB is kept whole; one byte more drops the last row."""
    # Two rows: [{"t":"..."},{"t":"..."}] = 2 brackets + 1 comma + 2 * (8 + len) bytes.
    length = (MAX_DETAILS_BYTES - 3) // 2 - 8
    first = {"t": "a" * length}
    second = {"t": "b" * (MAX_DETAILS_BYTES - 3 - 2 * 8 - length)}
    assert _size([first, second]) == MAX_DETAILS_BYTES
    assert bounded_details([first, second]) == ([first, second], None)
    longer = {"t": second["t"] + "b"}
    assert bounded_details([first, longer]) == ([first], 2)


def test_bounded_details_counts_multibyte_text_in_utf8_bytes() -> None:
    """Sizes are UTF-8 bytes of the JSON the sinks write, not characters."""
    row = {"t": "é" * 70_000}  # 140,008 bytes
    kept, count = bounded_details([row, row])
    assert kept == [row] and count == 2


def test_bounded_details_drops_rows_it_cannot_encode_and_stringifies_odd_values() -> None:
    """Non-mapping and circular rows are dropped (counted); unknown values become strings."""
    circular: dict[str, Any] = {}
    circular["self"] = circular
    kept, count = bounded_details([{"when": Options(count=1)}, "text", circular, {"id": 1}])
    assert kept == [{"when": "count=1"}, {"id": 1}]
    assert count == 4


def test_step_running_bounds_the_progress_it_is_given() -> None:
    """Raw progress is bounded by the constructor: message, rows, count, no None values."""
    envelope = Envelope(run_id="r", pipeline_id="p")
    record = envelope.step_running(
        5,
        step_id="s",
        attempt_id="r:attempt:1",
        progress={
            "completed": 1,
            "total": None,
            "message": "m" * 5000,
            "details": ({"id": i} for i in range(300)),
        },
    )
    progress = record["payload"]["progress"]
    assert set(progress) == {"completed", "message", "details", "detailCount"}
    assert len(progress["message"]) == 4096
    assert len(progress["details"]) == MAX_LIST
    assert progress["detailCount"] == 300


def test_step_running_keeps_a_larger_detail_count_given_by_the_caller() -> None:
    """Rows cut before (128 of 500) keep the caller's count; a smaller count is ignored."""
    envelope = Envelope(run_id="r", pipeline_id="p")
    rows = [{"id": i} for i in range(128)]
    given = envelope.step_running(
        1,
        step_id="s",
        attempt_id="a",
        progress={"completed": 0, "details": rows, "detailCount": 500},
    )
    assert given["payload"]["progress"]["detailCount"] == 500
    wrong = envelope.step_running(
        1, step_id="s", attempt_id="a", progress={"completed": 0, "details": rows, "detailCount": 3}
    )
    assert "detailCount" not in wrong["payload"]["progress"]
    plain = envelope.step_running(1, step_id="s", attempt_id="a")
    assert plain["payload"] == {}


async def test_a_handler_reporting_huge_details_records_them_within_bounds(
    validator: jsonschema.Draft202012Validator,
) -> None:
    """End to end: 5 rows of 100 kB each are cut to 2 rows under 256 KiB, detailCount 5."""

    def report(inputs: dict[str, Any], ctx: Any) -> None:
        ctx.report_progress(1, 1, "big", [{"id": str(i), "text": "x" * 100_000} for i in range(5)])

    pipeline = define_pipeline(id="big", steps=[step("report", report)])
    with capture_trace() as trace:
        await pipeline.run(trace=trace)

    [progress] = [r["payload"]["progress"] for r in trace.records if "progress" in r["payload"]]
    assert [row["id"] for row in progress["details"]] == ["0", "1"]
    assert progress["detailCount"] == 5
    assert _problems(validator, trace.records) == []


def test_progress_rows_that_json_cannot_encode_as_they_are() -> None:
    """Circular, non-finite and non-JSON rows never break a record (kept as text or dropped)."""
    from tubeless.tracing.records import bounded_details

    circular: dict[str, object] = {"id": "loop"}
    circular["self"] = circular
    rows = [{"id": "a", "value": 1}, circular, {"id": "b", "when": object()}, "not a row"]
    kept, count = bounded_details(rows)
    assert kept[0] == {"id": "a", "value": 1}
    assert [row["id"] for row in kept] == ["a", "b"]
    assert isinstance(kept[1]["when"], str)
    assert count == 4
