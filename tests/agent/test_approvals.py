"""Tool approvals (DESIGN §12): gated calls wait for the run's approver while the others run, a
decision binds one call id and one digest, and no error or cancellation path runs a gated call."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tubeless import CancelToken, Pipeline, define_agent, define_tool, pipeline_tool
from tubeless.agent import ApprovalError, RecordedApprovals, call_digest
from tubeless.errors import (
    AGENT_INVALID_DEFINITION,
    APPROVAL_PREDICATE_FAILED,
    APPROVAL_REQUIRED,
    TOOL_DENIED,
    AgentDefinitionError,
)
from tubeless.frozen import thaw
from tubeless.testing import call, capture_trace, continue_with, finish, scripted


def _tool(ran: list[str], approval: Any = "never", name: str = "") -> Any:
    async def handler(value: str, ctx: Any) -> str:
        ran.append(f"{name}{value}")
        return value.upper()

    return define_tool(
        description="Echo text in capitals.",
        input_schema=str,
        output_schema=str,
        run=handler,
        approval=approval,
    )


def _agent(decide: Any, tools: dict[str, Any], agent_id: str = "gated", **limits: Any) -> Any:
    seen: list[Any] = []

    def reduce(state: Any, outcomes: Any) -> Any:
        seen.append(thaw(outcomes))
        return state

    agent = define_agent(
        id=agent_id,
        input_schema=dict[str, Any],
        result_schema=Any,
        initial_state=lambda validated: {},
        decide=decide,
        tools=tools,
        reduce=reduce,
        limits=limits or None,
    )
    return agent, seen


def _denied(call_id: str, tool: str) -> dict[str, Any]:
    return {
        "id": call_id,
        "tool": tool,
        "ok": False,
        "error": {
            "code": TOOL_DENIED,
            "message": f"Call {call_id!r} to tool {tool!r} was denied.",
        },
    }


def _ok(call_id: str, tool: str, value: Any) -> dict[str, Any]:
    return {"id": call_id, "tool": tool, "ok": True, "value": value}


def _approval_error(run: Any) -> ApprovalError:
    exc = run.errors[0].exception
    while exc is not None and not isinstance(exc, ApprovalError):
        inner = getattr(exc, "run", None)
        exc = inner.errors[0].exception if inner is not None else exc.__cause__
    assert isinstance(exc, ApprovalError)
    return exc


async def test_an_approved_call_runs_and_the_request_is_plain_data_bound_to_its_digest() -> None:
    ran: list[str] = []
    requests: list[Any] = []

    def approver(request: Any) -> bool:
        requests.append(thaw(request))
        return True

    agent, seen = _agent(
        scripted(continue_with(call("send", "hi", "c1")), finish("done")),
        {"send": _tool(ran, "always")},
    )

    run = await agent.run({}, approver=approver, run_id="gated:1")

    assert (run.status, ran) == ("completed", ["hi"])
    assert requests == [
        {
            "key": "gated:1",
            "route": "gated",
            "turn": 1,
            "call_id": "c1",
            "tool": "send",
            "input": "hi",
            "digest": call_digest("send", "hi"),
        }
    ]
    assert requests[0]["digest"].startswith("sha256:")
    assert seen == [[_ok("c1", "send", "HI")]]


async def test_a_denied_call_is_a_tool_denied_outcome_in_decision_order() -> None:
    ran: list[str] = []
    agent, seen = _agent(
        scripted(
            continue_with(
                call("send", "a", "s1"), call("echo", "b", "e1"), call("send", "c", "s2")
            ),
            finish("done"),
        ),
        {"send": _tool(ran, "always", "send:"), "echo": _tool(ran, name="echo:")},
    )

    with capture_trace() as trace:
        run = await agent.run({}, approver=lambda request: request["call_id"] == "s2", trace=trace)

    assert run.status == "completed"
    counted = [
        (a["agent.approvalsRequested"], a["agent.callsDenied"])
        for r in trace.records
        if r["name"] == "step.attempted"
        and "agent.callsDenied" in (a := r["payload"].get("attributes", {}))
    ]
    assert counted == [(2, 1)]
    assert sorted(ran) == ["echo:b", "send:c"]
    assert seen == [[_denied("s1", "send"), _ok("e1", "echo", "B"), _ok("s2", "send", "C")]]


async def test_without_an_approver_no_call_of_the_batch_starts() -> None:
    ran: list[str] = []
    agent, _ = _agent(
        scripted(continue_with(call("echo", "b", "e1"), call("send", "a", "s1"))),
        {"send": _tool(ran, "always"), "echo": _tool(ran)},
    )

    run = await agent.run({})

    assert (run.status, ran) == ("failed", [])
    assert run.errors[0].source_code == APPROVAL_REQUIRED
    error = _approval_error(run)
    assert error.message == (
        "Call 's1' to tool 'send' needs approval and the run has no approver; "
        "no call of the batch ran"
    )
    assert [p["call_id"] for p in error.pending] == ["s1"]


async def test_a_predicate_decides_per_call_from_the_validated_input() -> None:
    ran: list[str] = []
    asked: list[str] = []
    looked: list[Any] = []

    def risky(value: str, ctx: Any) -> bool:
        looked.append((value, ctx.execution["call_id"], ctx.execution["tool"]))
        return value.startswith("rm")

    def approver(request: Any) -> bool:
        asked.append(request["call_id"])
        return True

    agent, _ = _agent(
        scripted(continue_with(call("sh", "ls", "a"), call("sh", "rm x", "b")), finish("done")),
        {"sh": _tool(ran, risky)},
    )

    run = await agent.run({}, approver=approver)

    assert run.status == "completed"
    assert (asked, sorted(ran)) == (["b"], ["ls", "rm x"])
    assert looked == [("ls", "a", "sh"), ("rm x", "b", "sh")]


async def test_a_predicate_that_raises_runs_no_call_of_the_batch() -> None:
    ran: list[str] = []

    def broken(value: str, ctx: Any) -> bool:
        raise KeyError("oops")

    agent, _ = _agent(
        scripted(continue_with(call("echo", "b", "e1"), call("sh", "a", "s1"))),
        {"sh": _tool(ran, broken), "echo": _tool(ran)},
    )

    run = await agent.run({}, approver=lambda request: True)

    assert (run.status, ran) == ("failed", [])
    assert run.errors[0].source_code == APPROVAL_PREDICATE_FAILED
    assert _approval_error(run).message == (
        "The approval predicate of tool 'sh' raised for call 's1' (KeyError); "
        "no call of the batch ran"
    )


async def test_calls_needing_no_approval_run_while_the_approver_waits() -> None:
    """With max_concurrency 1 the sibling still runs: the approver waits for its handler."""
    ran: list[str] = []
    sibling_ran = asyncio.Event()

    async def echo(value: str, ctx: Any) -> str:
        ran.append(value)
        sibling_ran.set()
        return value

    async def approver(request: Any) -> bool:
        await sibling_ran.wait()
        return True

    agent, seen = _agent(
        scripted(continue_with(call("send", "a", "s1"), call("echo", "b", "e1")), finish("ok")),
        {
            "send": _tool(ran, "always"),
            "echo": define_tool(description="Echo.", input_schema=str, output_schema=str, run=echo),
        },
    )

    run = await asyncio.wait_for(agent.run({}, approver=approver), 30)

    assert (run.status, ran) == ("completed", ["b", "a"])
    assert seen == [[_ok("s1", "send", "A"), _ok("e1", "echo", "b")]]


async def test_a_sibling_failing_the_run_while_approval_waits_never_runs_the_gated_call() -> None:
    ran: list[str] = []
    approver_cancelled = asyncio.Event()

    async def boom(value: str, ctx: Any) -> str:
        raise RuntimeError("sibling broke")

    async def approver(request: Any) -> bool:
        try:
            await asyncio.Event().wait()  # a person who never answers
        except asyncio.CancelledError:
            approver_cancelled.set()
            raise
        return True

    agent, _ = _agent(
        scripted(continue_with(call("send", "a", "s1"), call("boom", "b", "e1"))),
        {
            "send": _tool(ran, "always"),
            "boom": define_tool(
                description="Break.", input_schema=str, output_schema=str, run=boom
            ),
        },
    )

    run = await asyncio.wait_for(agent.run({}, approver=approver), 30)

    assert (run.status, ran) == ("failed", [])
    assert "sibling broke" in run.errors[0].format()
    assert approver_cancelled.is_set()


async def test_a_recoverable_sibling_error_does_not_let_a_denied_call_through() -> None:
    from tubeless import ToolError

    ran: list[str] = []

    async def missing(value: str, ctx: Any) -> str:
        raise ToolError("NOT_FOUND", "nothing there")

    agent, seen = _agent(
        scripted(continue_with(call("send", "a", "s1"), call("find", "b", "f1")), finish("ok")),
        {
            "send": _tool(ran, "always"),
            "find": define_tool(
                description="Find.", input_schema=str, output_schema=str, run=missing
            ),
        },
    )

    run = await agent.run({}, approver=lambda request: False)

    assert (run.status, ran) == ("completed", [])
    assert seen[0][0] == _denied("s1", "send")
    assert seen[0][1]["error"]["code"] == "NOT_FOUND"


async def test_cancelling_while_approval_waits_cancels_the_run_and_runs_nothing_gated() -> None:
    ran: list[str] = []
    token = CancelToken()
    waiting = asyncio.Event()

    async def approver(request: Any) -> bool:
        waiting.set()
        await asyncio.Event().wait()
        return True

    async def cancel_when_waiting() -> None:
        await waiting.wait()
        token.cancel("stop")

    agent, _ = _agent(
        scripted(continue_with(call("send", "a", "s1"))), {"send": _tool(ran, "always")}
    )

    run, _ = await asyncio.wait_for(
        asyncio.gather(agent.run({}, approver=approver, signal=token), cancel_when_waiting()), 30
    )

    assert (run.status, ran) == ("cancelled", [])


async def test_a_denied_call_retried_under_a_new_call_id_needs_a_new_approval() -> None:
    ran: list[str] = []
    asked: list[tuple[str, str]] = []

    def approver(request: Any) -> bool:
        asked.append((request["call_id"], request["digest"]))
        return request["call_id"] == "retry"

    agent, seen = _agent(
        scripted(
            continue_with(call("send", "a", "first")),
            continue_with(call("send", "a", "retry")),
            finish("ok"),
        ),
        {"send": _tool(ran, "always")},
    )

    run = await agent.run({}, approver=approver)

    assert (run.status, ran) == ("completed", ["a"])
    digest = call_digest("send", "a")
    assert asked == [("first", digest), ("retry", digest)]
    assert seen == [[_denied("first", "send")], [_ok("retry", "send", "A")]]


async def test_a_recorded_approval_applies_to_its_own_call_id_only() -> None:
    ran: list[str] = []
    recorded = RecordedApprovals()
    digest = call_digest("send", "a")
    recorded.approve({"route": "gated", "turn": 1, "call_id": "first", "digest": digest})
    agent, _ = _agent(
        scripted(continue_with(call("send", "a", "other"))), {"send": _tool(ran, "always")}
    )

    run = await agent.run({}, approver=recorded)

    assert (run.status, ran) == ("failed", [])
    assert run.errors[0].source_code == APPROVAL_REQUIRED
    assert [p["call_id"] for p in _approval_error(run).pending] == ["other"]


async def test_a_digest_mismatch_cannot_run_under_another_call_s_approval() -> None:
    """An approval recorded for ``send("a")`` does not cover the same call id asking ``"b"``."""
    ran: list[str] = []
    recorded = RecordedApprovals(
        [
            {
                "route": "gated",
                "turn": 1,
                "call_id": "c1",
                "digest": call_digest("send", "a"),
                "approved": True,
            }
        ]
    )
    agent, _ = _agent(
        scripted(continue_with(call("send", "b", "c1"))), {"send": _tool(ran, "always")}
    )

    run = await agent.run({}, approver=recorded)

    assert (run.status, ran) == ("failed", [])
    error = _approval_error(run)
    assert error.code == APPROVAL_REQUIRED
    assert error.message == (
        "Call 'c1' to tool 'send' needs approval: no decision was recorded for this exact call"
    )
    assert error.pending[0]["digest"] == call_digest("send", "b")


async def test_recorded_decisions_round_trip_as_plain_data_and_run_the_exact_call() -> None:
    ran: list[str] = []
    recorded = RecordedApprovals()
    request = {"route": "gated", "turn": 1, "call_id": "c1", "digest": call_digest("send", "a")}
    recorded.deny({**request, "call_id": "c2", "digest": call_digest("send", "b")}, "no")
    recorded.approve(request)
    again = RecordedApprovals(recorded.to_data())
    assert again.decision(request) is True
    assert again.decision({**request, "digest": call_digest("send", "z")}) is None
    agent, seen = _agent(
        scripted(continue_with(call("send", "a", "c1"), call("send", "b", "c2")), finish("ok")),
        {"send": _tool(ran, "always")},
    )

    run = await agent.run({}, approver=again)

    assert (run.status, ran) == ("completed", ["a"])
    denied = _denied("c2", "send")
    denied["error"]["message"] = "Call 'c2' to tool 'send' was denied: no"
    assert seen == [[_ok("c1", "send", "A"), denied]]


async def test_an_approver_answer_that_is_not_a_bool_runs_nothing() -> None:
    ran: list[str] = []
    agent, _ = _agent(
        scripted(continue_with(call("send", "a", "c1"))), {"send": _tool(ran, "always")}
    )

    run = await agent.run({}, approver=lambda request: "yes")

    assert (run.status, ran) == ("failed", [])
    assert _approval_error(run).message == (
        "The approver must answer True or False, not str; call 'c1' to tool 'send' did not run"
    )


async def test_a_subagent_s_request_names_its_route_and_uses_the_same_approver() -> None:
    ran: list[str] = []
    routes: list[str] = []

    def approver(request: Any) -> bool:
        routes.append(request["route"])
        return True

    child, _ = _agent(
        scripted(continue_with(call("send", "x", "c1")), finish("child")),
        {"send": _tool(ran, "always")},
        agent_id="child",
    )
    parent, _ = _agent(
        scripted(continue_with(call("ask", {}, "sub")), finish("parent")),
        {"ask": pipeline_tool(child, description="Ask the child.")},
        agent_id="parent",
    )

    run = await parent.run({}, approver=approver)

    assert (run.status, ran, routes) == ("completed", ["x"], ["parent/1/sub/child"])


def test_an_unknown_approval_is_a_definition_error() -> None:
    with pytest.raises(AgentDefinitionError) as caught:
        _tool([], "sometimes")
    assert caught.value.code == AGENT_INVALID_DEFINITION
    assert caught.value.message == (
        "A tool's approval must be 'never', 'always' or a callable predicate(input, ctx)."
    )


def _gated(approval: Any) -> Pipeline:
    agent: Pipeline = _agent(scripted(), {"send": _tool([], approval)})[0]
    return agent


def _identity(approval: Any) -> Any:
    return _gated(approval).identity


def test_approval_never_keeps_the_identity_and_a_gate_changes_the_definition_id() -> None:
    plain = define_agent(
        id="gated",
        input_schema=dict[str, Any],
        result_schema=Any,
        initial_state=lambda v: {},
        decide=scripted(),
        tools={
            "send": define_tool(
                description="Echo text in capitals.",
                input_schema=str,
                output_schema=str,
                run=lambda v, c: v,
            )
        },
        reduce=lambda s, o: s,
    ).identity
    assert _identity("never") == plain
    gated = _identity("always")
    assert gated.structural_fingerprint != plain.structural_fingerprint
    assert gated.definition_id != plain.definition_id
    # The gate sits in the definition's metadata; the agent entry keeps the original shape.
    snapshot = _gated("always").definition_snapshot()
    assert snapshot["metadata"]["agentPolicies"] == {"agent": {"approvals": {"send": "always"}}}
    assert "approval" not in str(snapshot["steps"])
