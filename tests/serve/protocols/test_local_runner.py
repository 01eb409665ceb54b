"""``LocalRunner``, the in-process run interface the protocol adapters speak: events in order,
approvals bound to their digest, callers kept apart, cancel, and the observer leaving other
runs alone."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.serve.protocols.agents import agents_project
from tests.serve.protocols.conftest import APPROVALS, SCRIPTED
from tubeless.durable import MemoryCheckpoints, SqliteCheckpoints
from tubeless.project import load_project
from tubeless.serve.protocols import LocalRunner, RunnerError
from tubeless.serve.protocols._a2a import decisions_of
from tubeless.serve.protocols._ag_ui import _answers


@pytest.fixture
async def approvals(tmp_path: Path) -> AsyncIterator[LocalRunner]:
    store = SqliteCheckpoints(tmp_path / "runs.sqlite")
    runner = LocalRunner(load_project(APPROVALS), checkpoints=store)
    try:
        yield runner
    finally:
        await runner.close()
        store.close()


async def test_events_tell_the_turns_in_order_and_end_with_the_status() -> None:
    runner = LocalRunner(load_project(SCRIPTED), checkpoints=MemoryCheckpoints())
    view = await runner.start("scripted-agent", {"question": "a b"}, key="k1")
    events = [event async for event in runner.events(view.run_id)]
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    shape = [(e.kind, e.step or e.call_id or e.status) for e in events]
    assert shape == [
        ("status", "running"),
        ("step_started", "decide"),
        ("step_finished", "decide"),
        ("call", "length"),
        ("call", "word-0"),
        ("call", "word-1"),
        ("outcome", "length"),
        ("outcome", "word-0"),
        ("outcome", "word-1"),
        ("step_started", "reduce"),
        ("step_finished", "reduce"),
        ("state", None),
        ("step_started", "decide"),
        ("step_finished", "decide"),
        ("status", "completed"),
    ]
    assert events[3].data == "a b"  # the call's arguments as the decision gave them
    assert events[6].data["ok"] is True
    assert (await runner.wait(view.run_id)).result == {"answer": "3 characters; A; B"}


async def test_an_approval_binds_to_its_digest_and_the_run_resumes_when_all_are_decided(
    approvals: LocalRunner,
) -> None:
    view = await approvals.start("approvals", {"to": "ops@elsewhere.org"}, caller="alice")
    view = await approvals.wait(view.run_id)
    assert view.status == "waiting"
    publish, mail = view.pending
    with pytest.raises(RunnerError) as wrong:
        await approvals.answer(
            view.run_id, "publish", digest=mail.digest, approve=True, caller="alice"
        )
    assert wrong.value.code == "TUBELESS_SERVE_CONFLICT"
    with pytest.raises(RunnerError) as foreign:
        await approvals.answer(
            view.run_id, "publish", digest=publish.digest, approve=True, caller="bob"
        )
    assert foreign.value.code == "TUBELESS_SERVE_NOT_FOUND"

    half = await approvals.answer(
        view.run_id, "publish", digest=publish.digest, approve=True, caller="alice"
    )
    assert half.status == "waiting"
    assert [p.call_id for p in half.pending] == ["mail"]
    await approvals.answer(
        view.run_id, "mail", digest=mail.digest, approve=False, reason="not today", caller="alice"
    )
    done = await approvals.wait(view.run_id)
    assert done.status == "completed"
    assert done.result["published"] is True
    assert done.result["denied"] == ["mail"]


async def test_callers_see_only_their_runs_and_a_live_key_conflicts(tmp_path: Path) -> None:
    runner = LocalRunner(agents_project(tmp_path), checkpoints=MemoryCheckpoints())
    mine = await runner.start("hanging", {"text": "x"}, key="k", caller="alice")
    assert [v.run_id for v in runner.list(caller="alice")] == [mine.run_id]
    assert runner.list(caller="bob") == []
    assert runner.find("k", caller="bob") is None
    with pytest.raises(RunnerError) as hidden:
        runner.get(mine.run_id, caller="bob")
    assert hidden.value.code == "TUBELESS_SERVE_NOT_FOUND"
    with pytest.raises(RunnerError) as busy:
        await runner.start("hanging", {"text": "y"}, key="k", caller="alice")
    assert busy.value.code == "TUBELESS_SERVE_CONFLICT"
    cancelled = await runner.cancel(mine.run_id, caller="alice")
    assert cancelled.status == "cancelled"
    assert cancelled.error is not None


async def test_refusals_run_nothing(tmp_path: Path) -> None:
    runner = LocalRunner(agents_project(tmp_path), checkpoints=MemoryCheckpoints())
    with pytest.raises(RunnerError) as refused:
        await runner.start("echo", {"text": 3})
    assert refused.value.code == "TUBELESS_OPTIONS_VALIDATION_FAILED"
    assert refused.value.issues
    with pytest.raises(RunnerError) as unknown:
        await runner.start("nope", {})
    assert unknown.value.code == "TUBELESS_SERVE_NOT_FOUND"
    assert runner.list() == []


async def test_without_a_store_a_call_needing_approval_fails_the_run() -> None:
    runner = LocalRunner(load_project(APPROVALS))
    view = await runner.start("approvals", {"to": "ops@elsewhere.org"})
    done = await runner.wait(view.run_id)
    assert done.status == "failed"
    assert done.error is not None
    assert done.error["code"] == "TUBELESS_APPROVAL_REQUIRED"


async def test_runs_outside_the_runner_are_not_observed() -> None:
    from examples.scripted_agent import scripted_agent

    runner = LocalRunner(load_project(SCRIPTED), checkpoints=MemoryCheckpoints())
    view = await runner.start("scripted-agent", {"question": "x"})
    plain = asyncio.create_task(scripted_agent.run({"question": "y"}))
    await runner.wait(view.run_id)
    assert (await plain).status == "completed"
    events = [e async for e in runner.events(view.run_id)]
    assert {e.data for e in events if e.kind == "call"} == {"x"}  # none of the other run's


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=8,
)


@settings(deadline=None)  # the first example imports ag_ui
@given(payload=_JSON, status=st.sampled_from(["resolved", "cancelled"]))
def test_an_ag_ui_answer_approves_only_a_resolved_approve_true(payload: Any, status: str) -> None:
    from ag_ui.core import RunAgentInput

    agent_input = RunAgentInput.model_validate(
        {
            "threadId": "t",
            "runId": "r",
            "messages": [],
            "resume": [{"interruptId": "sha256:1", "status": status, "payload": payload}],
        }
    )
    approve, _ = _answers(agent_input)["sha256:1"]
    expected = status == "resolved" and isinstance(payload, dict) and payload.get("approve") is True
    assert approve is expected


@given(data=_JSON)
def test_an_a2a_reply_approves_only_with_approve_true(data: Any) -> None:
    for name, (approve, reason) in decisions_of(data).items():
        assert isinstance(name, str)
        assert reason is None or isinstance(reason, str)
        if approve:
            items = data.get("decisions") if isinstance(data, dict) else None
            entries = items if isinstance(items, list) else [data]
            assert any(isinstance(e, dict) and e.get("approve") is True for e in entries)
