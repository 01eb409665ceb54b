"""What an agent run records: run relations, attempt attributes, privacy, definition snapshot.

UPSTREAM §2.4-2.5 and §4.12; DESIGN §7.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

import pytest

from tubeless import ToolError, define_agent, define_tool
from tubeless.testing import call, capture_trace, continue_with, finish

SECRET = "s3cr3t-7f3a9c"
"""A distinctive string put into the question, tool inputs and outputs, the state and answer."""

_ATTEMPT = re.compile(r"^(?P<run>.+):attempt:(?P<n>[0-9a-z]+)$")


async def _echo(text: str, ctx: Any) -> str:
    return f"{text}|{SECRET}-out"


async def _fail(text: str, ctx: Any) -> str:
    raise ToolError("NOT_FOUND", "Nothing here")


def _decide(state: Any, ctx: Any) -> Any:
    if ctx.turn == 1:
        return continue_with(call("echo", f"{state['question']}-in", "c1"), call("fail", "x", "c2"))
    if ctx.turn == 2:
        return continue_with(call("echo", "again", "c1"))
    return finish(f"answer {SECRET} " + "; ".join(state["seen"]))


def _reduce(state: Any, outcomes: Sequence[Any]) -> Any:
    seen = [o["value"] if o["ok"] else o["error"]["code"] for o in outcomes]
    return {**state, "seen": [*state["seen"], *seen]}


agent = define_agent(
    id="trace-agent",
    input_schema=dict[str, str],
    result_schema=str,
    initial_state=lambda validated: {"question": validated["question"], "seen": []},
    decide=_decide,
    reduce=_reduce,
    tools={
        "echo": define_tool(description="Echo.", input_schema=str, output_schema=str, run=_echo),
        "fail": define_tool(description="Fail.", input_schema=str, output_schema=str, run=_fail),
    },
    limits={"max_turns": 4, "max_calls": 10, "max_decisions": 10, "max_concurrency": 1},
)


@pytest.fixture
async def traced() -> tuple[Any, list[dict[str, Any]]]:
    with capture_trace() as trace:
        run = await agent.run({"question": f"question {SECRET}"}, trace=trace, run_id="root")
    return run, trace.records


def _aliases(records: list[dict[str, Any]]) -> dict[str, str]:
    """Readable names for run ids: ``agent``, ``turn-<i>``, ``turn-<i>/<call id>``."""
    names: dict[str, str] = {}
    for r in records:
        if r["name"] != "pipeline.started":
            continue
        if "parentRunId" not in r:
            names[r["runId"]] = "agent"
        elif "iteration" in r:
            names[r["runId"]] = f"turn-{r['iteration']['index']}"
        else:
            names[r["runId"]] = f"{names[r['parentRunId']]}/{r['itemKey']}"
    return names


def _normalise(value: Any, names: dict[str, str]) -> Any:
    """Replace run and attempt ids by aliases; drop timestamps and durations."""
    if isinstance(value, dict):
        return {
            k: _normalise(v, names)
            for k, v in value.items()
            if k not in ("timestampMs", "durationMs")
        }
    if isinstance(value, list):
        return [_normalise(v, names) for v in value]
    if isinstance(value, str):
        if value in names:
            return names[value]
        match = _ATTEMPT.match(value)
        if match and match["run"] in names:
            return f"{names[match['run']]}:attempt:{match['n']}"
    return value


def test_the_run_tree_links_turns_to_the_agent_and_calls_to_their_turn(traced: Any) -> None:
    run, records = traced
    names = _aliases(records)
    relations = [
        {
            key: r[key]
            for key in ("runId", "pipelineId", "parentRunId", "itemKey", "iteration")
            if key in r
        }
        for r in _normalise(records, names)
        if r["name"] == "pipeline.started"
    ]

    assert run.status == "completed"
    assert relations == [
        {"runId": "agent", "pipelineId": "trace-agent"},
        {
            "runId": "turn-1",
            "pipelineId": "trace-agent/turn",
            "parentRunId": "agent",
            "itemKey": "iteration-1",
            "iteration": {
                "runId": "agent",
                "stepId": "agent",
                "attemptId": "agent:attempt:1",
                "index": 1,
            },
        },
        {
            "runId": "turn-1/c1",
            "pipelineId": "trace-agent/tool/echo",
            "parentRunId": "turn-1",
            "itemKey": "c1",
        },
        {
            "runId": "turn-1/c2",
            "pipelineId": "trace-agent/tool/fail",
            "parentRunId": "turn-1",
            "itemKey": "c2",
        },
        {
            "runId": "turn-2",
            "pipelineId": "trace-agent/turn",
            "parentRunId": "agent",
            "itemKey": "iteration-2",
            "iteration": {
                "runId": "agent",
                "stepId": "agent",
                "attemptId": "agent:attempt:1",
                "index": 2,
            },
        },
        {
            "runId": "turn-2/c1",
            "pipelineId": "trace-agent/tool/echo",
            "parentRunId": "turn-2",
            "itemKey": "c1",
        },
        {
            "runId": "turn-3",
            "pipelineId": "trace-agent/turn",
            "parentRunId": "agent",
            "itemKey": "iteration-3",
            "iteration": {
                "runId": "agent",
                "stepId": "agent",
                "attemptId": "agent:attempt:1",
                "index": 3,
            },
        },
    ]
    # Every record of a run carries the same relations as its pipeline.started record.
    for r in records:
        started = next(
            s for s in records if s["name"] == "pipeline.started" and s["runId"] == r["runId"]
        )
        for key in ("parentRunId", "itemKey", "iteration"):
            assert r.get(key) == started.get(key), (r["name"], key)
        if "iteration" in r:
            assert r["iteration"]["runId"] == r["parentRunId"]


def test_turn_and_tool_attempts_record_the_agent_attributes(traced: Any) -> None:
    _, records = traced
    names = _aliases(records)
    attempted = [
        (r["runId"], r["stepId"], r["attemptId"], r["payload"])
        for r in _normalise(records, names)
        if r["name"] == "step.attempted"
    ]

    def turn(index: int, step: str, attempt: int, **attributes: Any) -> tuple[Any, ...]:
        run = f"turn-{index}"
        named = {f"agent.{key}": value for key, value in attributes.items()}
        payload = {"attempt": 1, "attributes": {"agent.runId": "agent", **named}}
        return (run, step, f"{run}:attempt:{attempt}", payload)

    def dispatch(index: int, call_id: str, name: str) -> tuple[Any, ...]:
        run = f"turn-{index}"
        attributes = {
            "agent.runId": "agent",
            "agent.turn": index,
            "agent.callId": call_id,
            "agent.tool": name,
            "agent.parentAttemptId": f"turn-{index}:attempt:2",
        }
        return (run, "calls", f"{run}:attempt:2", {"attempt": 1, "attributes": attributes})

    def tool(index: int, call_id: str, name: str) -> tuple[Any, ...]:
        run = f"turn-{index}/{call_id}"
        attributes = {
            "agent.runId": "agent",
            "agent.turn": index,
            "agent.callId": call_id,
            "agent.tool": name,
            "agent.parentAttemptId": f"turn-{index}:attempt:2",
        }
        return (run, "tool", f"{run}:attempt:1", {"attempt": 1, "attributes": attributes})

    assert attempted == [
        turn(
            1,
            "decide",
            1,
            turn=1,
            stateVersion=0,
            callsAdmitted=0,
            decision="continue",
            callCount=2,
        ),
        turn(1, "calls", 2, turn=1, callsAdmitted=2, callCount=2),
        dispatch(1, "c1", "echo"),
        tool(1, "c1", "echo"),
        dispatch(1, "c2", "fail"),
        tool(1, "c2", "fail"),
        turn(1, "reduce", 3, turn=1, stateVersion=1, callsAdmitted=2),
        turn(
            2,
            "decide",
            1,
            turn=2,
            stateVersion=1,
            callsAdmitted=2,
            decision="continue",
            callCount=1,
        ),
        turn(2, "calls", 2, turn=2, callsAdmitted=3, callCount=1),
        dispatch(2, "c1", "echo"),
        tool(2, "c1", "echo"),
        turn(2, "reduce", 3, turn=2, stateVersion=2, callsAdmitted=3),
        turn(
            3, "decide", 1, turn=3, stateVersion=2, callsAdmitted=3, decision="finish", callCount=0
        ),
    ]
    # The parent attempt named by each tool run really is its turn's `calls` attempt.
    calls_attempts = {
        r["runId"]: r["attemptId"]
        for r in records
        if r["name"] == "step.running" and r.get("stepId") == "calls"
    }
    for r in records:
        if r["name"] == "step.attempted" and r["stepId"] == "tool":
            assert (
                r["payload"]["attributes"]["agent.parentAttemptId"]
                == (calls_attempts[r["parentRunId"]])
            )


def test_a_tool_error_call_keeps_its_failed_lifecycle_while_the_agent_completes(
    traced: Any,
) -> None:
    run, records = traced
    names = _aliases(records)
    lifecycle = [
        {k: r[k] for k in ("name", "stepId", "payload", "error") if k in r}
        for r in _normalise(records, names)
        if r["runId"] == "turn-1/c2"
        and r["name"] in ("step.running", "step.failed", "pipeline.completed")
    ]
    error = {
        "code": "TUBELESS_STEP_FAILED",
        "kind": "step",
        "phase": "execution",
        "message": "Nothing here",
        "sourceCode": "NOT_FOUND",
        "cause": {"message": "Nothing here", "name": "ToolError", "sourceCode": "NOT_FOUND"},
    }

    assert (run.status, run.finalized) == ("completed", True)
    assert lifecycle == [
        {"name": "step.running", "stepId": "tool", "payload": {}},
        {"name": "step.failed", "stepId": "tool", "payload": {"status": "failed"}, "error": error},
        {
            "name": "pipeline.completed",
            "payload": {
                "status": "failed",
                "dryRun": False,
                "errorCount": 1,
                "finalized": False,
                "stepCount": 1,
            },
            "error": error,
        },
    ]
    root_completed = [
        r["payload"]["status"]
        for r in records
        if r["name"] == "pipeline.completed" and r["runId"] == "root"
    ]
    assert root_completed == ["completed"]


def test_no_record_contains_the_question_tool_values_state_or_answer(traced: Any) -> None:
    run, records = traced

    assert SECRET in run.value  # the secret really went through question, tools and state
    assert SECRET not in json.dumps(records)


def test_the_root_definition_snapshot_carries_the_agent_limits_and_capabilities(
    traced: Any,
) -> None:
    _, records = traced
    snapshots = [
        r["payload"]["definitionSnapshot"]
        for r in records
        if r["name"] == "pipeline.started" and "definitionSnapshot" in r["payload"]
    ]

    assert len(snapshots) == 1
    [step] = snapshots[0]["steps"]
    assert step["id"] == "agent"
    assert step["agent"]["limits"] == {
        "maxTurns": 4,
        "maxCalls": 10,
        "maxDecisions": 10,
        "maxDepth": 4,
        "maxConcurrency": 1,
    }
    capabilities = step["agent"]["capabilities"]
    assert [c["name"] for c in capabilities] == ["echo", "fail"]
    # Each tool carries its input descriptor's fingerprint and its pipeline's identity.
    assert [c["identity"]["definitionId"][:7] for c in capabilities] == ["sha256:"] * 2
    assert [c["inputSchemaFingerprint"][:7] for c in capabilities] == ["sha256:"] * 2
