"""What every model adapter does alike (OpenAI Responses, chat completions, Anthropic Messages),
driving ``projects/openai-agent.yaml`` with canned replies: traces keep secrets out, tool errors
are fed back, byte budgets, HTTP failures, retries, cancellation, deadlines and concurrent runs.
Each test runs once per adapter; what is particular to one API stays in its own suite."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.providers.fixtures.adapters import ADAPTERS, Adapter
from tests.providers.fixtures.openai_responses import BODY_SECRET, SECRET_KEY
from tests.providers.fixtures.runs import (
    AGENT,
    PROJECT,
    QUESTION,
    ROOT,
    everything_said,
    outcome,
    project_agent,
    source_code,
    tool_runs,
)
from tubeless import CancelToken
from tubeless.project import load_project
from tubeless.providers import (
    PROVIDER_BUDGET_EXCEEDED,
    PROVIDER_INVALID_RESPONSE,
    PROVIDER_NOT_CONFIGURED,
    PROVIDER_REQUEST_FAILED,
    PROVIDER_TIMEOUT,
)
from tubeless.testing import capture_trace


@pytest.fixture(params=ADAPTERS, ids=lambda adapter: adapter.id)
def adapter(request: pytest.FixtureRequest) -> Adapter:
    return request.param  # type: ignore[no-any-return]


# -- what the trace and the model see -------------------------------------------------------------
async def test_traces_hold_the_turns_and_tool_runs_but_neither_the_key_nor_the_question(
    adapter: Adapter,
) -> None:
    server = adapter.server(*adapter.three_turns)

    run, records = await adapter.run(server)

    assert run.status == "completed"
    recorded = json.dumps(records)
    assert adapter.key not in recorded
    assert QUESTION not in recorded
    assert "zebra-quokka-7731" not in recorded


async def test_a_tool_error_outcome_is_fed_back_and_the_model_recovers(adapter: Adapter) -> None:
    server = adapter.server(
        adapter.reply(adapter.tool_call("uppercase", "missing", "gone")),
        adapter.reply(adapter.tool_call("uppercase", "found", "found")),
        adapter.reply(adapter.finish_call("FOUND after NOT_FOUND")),
    )

    run, records = await adapter.run(server)

    assert (run.status, run.value) == ("completed", {"answer": "FOUND after NOT_FOUND"})
    failed = {
        "id": "gone",
        "tool": "uppercase",
        "ok": False,
        "error": {"code": "NOT_FOUND", "message": "Word unavailable"},
    }
    assert [i["state"]["observations"] for i in server.inputs] == [
        [],
        [failed],
        [failed, outcome("found", "uppercase", "FOUND")],
    ]
    assert tool_runs(records) == ["gone", "found"]


# -- byte budgets ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("question", "accepted"),
    [
        pytest.param("x" * 4096, True, id="4096-bytes"),
        pytest.param("x" * 4097, False, id="4097-bytes"),
        pytest.param("\N{GRINNING FACE}" * 1024, True, id="1024-emoji-4096-bytes"),
        pytest.param("\N{GRINNING FACE}" * 1025, False, id="1025-emoji"),
    ],
)
async def test_the_question_budget_is_4096_utf8_bytes_checked_before_any_request(
    adapter: Adapter, question: str, accepted: bool
) -> None:
    server = adapter.server(adapter.reply(adapter.finish_call("done")))

    run, _ = await adapter.run(server, question)

    if accepted:
        assert (run.status, len(server.requests)) == ("completed", 1)
        assert server.inputs[0]["state"]["question"] == question
    else:
        assert (run.status, len(server.requests)) == ("failed", 0)
        assert source_code(run) == PROVIDER_BUDGET_EXCEEDED
        assert "Question exceeds 4096 UTF-8 bytes" in run.errors[0].format()


async def test_history_over_16_kib_after_one_batch_fails_before_the_next_request(
    adapter: Adapter,
) -> None:
    word = "\N{LATIN SMALL LETTER E WITH ACUTE}" * 8192
    server = adapter.server(adapter.reply(adapter.tool_call("uppercase", word, "big")))

    run, records = await adapter.run(server)

    assert (run.status, run.finalized, len(server.requests)) == ("failed", False, 1)
    assert tool_runs(records) == ["big"]
    assert source_code(run) == PROVIDER_BUDGET_EXCEEDED
    assert "Observation history exceeds 16384 UTF-8 bytes" in run.errors[0].format()


async def test_a_4096_backslash_question_fails_the_body_check_on_the_second_request(
    adapter: Adapter,
) -> None:
    """The question fits its own budget, but JSON escaping twice (the string carrying the state,
    then the body) quadruples it; with the tool's echo the second body exceeds 32 KiB."""
    question = "\\" * 4096
    server = adapter.server(
        adapter.reply(adapter.tool_call("uppercase", question, "slashes")), adapter.reply()
    )

    run, records = await adapter.run(server, question)

    assert (run.status, len(server.requests)) == ("failed", 1)
    assert tool_runs(records) == ["slashes"]
    assert source_code(run) == PROVIDER_BUDGET_EXCEEDED
    assert f"{adapter.label} request exceeds 32768 UTF-8 bytes" in run.errors[0].format()


async def test_the_body_budget_accepts_a_body_of_exactly_the_limit(adapter: Adapter) -> None:
    probe = adapter.server(adapter.reply(adapter.finish_call("done")))
    await adapter.run(probe)
    size = len(probe.requests[0].content)

    at_limit = adapter.server(adapter.reply(adapter.finish_call("done")))
    over = adapter.server(adapter.reply(adapter.finish_call("done")))
    accepted, _ = await adapter.run(at_limit, max_request_bytes=size)
    rejected, _ = await adapter.run(over, max_request_bytes=size - 1)

    assert (accepted.status, len(at_limit.requests)) == ("completed", 1)
    assert (rejected.status, len(over.requests)) == ("failed", 0)
    assert f"{adapter.label} request exceeds {size - 1} UTF-8 bytes" in (
        rejected.errors[0].format()
    )


async def test_the_body_budget_is_checked_before_the_key_is_read(
    adapter: Adapter, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(adapter.key_env)
    server = adapter.server()

    too_big, _ = await adapter.run(server, max_request_bytes=100)
    no_key, _ = await adapter.run(server)

    assert source_code(too_big) == PROVIDER_BUDGET_EXCEEDED
    assert source_code(no_key) == PROVIDER_NOT_CONFIGURED
    assert f"{adapter.key_env} is required" in no_key.errors[0].format()
    assert server.requests == []


# -- HTTP failures --------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("adapter", "status"),
    [pytest.param(a, s, id=f"{a.id}-{s}") for a in ADAPTERS for s in a.error_statuses],
)
async def test_an_http_error_fails_once_without_leaking_the_body(
    adapter: Adapter, status: int, caplog: pytest.LogCaptureFixture
) -> None:
    server = adapter.server(httpx.Response(status, json=adapter.error_body))

    run, records = await adapter.run(server)

    assert (run.status, len(server.requests)) == ("failed", 1)
    assert source_code(run) == PROVIDER_REQUEST_FAILED
    assert f"{adapter.label} request failed (HTTP {status})" in run.errors[0].format()
    said = everything_said(run, records) + caplog.text
    assert BODY_SECRET not in said
    assert adapter.key not in said
    assert SECRET_KEY not in said
    assert QUESTION not in said


async def test_an_invalid_json_body_fails_once_without_leaking_it(adapter: Adapter) -> None:
    server = adapter.server(httpx.Response(200, content=f"<html>{BODY_SECRET}".encode()))

    run, records = await adapter.run(server)

    assert (run.status, len(server.requests)) == ("failed", 1)
    assert source_code(run) == PROVIDER_INVALID_RESPONSE
    assert f"{adapter.label} returned invalid JSON" in run.errors[0].format()
    assert BODY_SECRET not in everything_said(run, records)


async def test_failures_are_not_retried_by_default_but_max_retries_retries_transient_ones(
    adapter: Adapter,
) -> None:
    status = adapter.transient_status
    once = adapter.server(httpx.Response(status), adapter.reply(adapter.finish_call("done")))
    twice = adapter.server(httpx.Response(status), adapter.reply(adapter.finish_call("done")))

    failed, _ = await adapter.run(once)
    retried, _ = await adapter.run(twice, max_retries=1)

    assert (failed.status, len(once.requests)) == ("failed", 1)
    assert (retried.status, len(twice.requests)) == ("completed", 2)


# -- cancellation, deadline, concurrency ----------------------------------------------------------
async def test_cancelling_the_run_during_a_request_abandons_it(adapter: Adapter) -> None:
    started = asyncio.Event()
    abandoned: list[bool] = []

    async def hang(request: httpx.Request) -> httpx.Response:
        started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            abandoned.append(True)
            raise
        raise AssertionError("unreachable")

    server = adapter.server(hang)
    token = CancelToken()
    agent = project_agent(adapter.factory(transport=server.transport))
    with capture_trace() as trace:
        task = asyncio.create_task(agent.run({"question": QUESTION}, signal=token, trace=trace))
        await asyncio.wait_for(started.wait(), 30)
        token.cancel("stop")
        run = await asyncio.wait_for(task, 30)

    assert (run.status, run.finalized) == ("cancelled", False)
    assert (len(server.requests), abandoned) == (1, [True])
    assert tool_runs(trace.records) == []
    await asyncio.sleep(0)
    assert asyncio.all_tasks() == {asyncio.current_task()}


async def test_a_request_past_its_deadline_fails_with_a_timeout(adapter: Adapter) -> None:
    async def slow(request: httpx.Request) -> httpx.Response:
        await asyncio.sleep(10)
        raise AssertionError("the deadline should have passed")

    server = adapter.server(slow)

    run, records = await adapter.run(server, timeout_s=0.05)

    assert (run.status, len(server.requests)) == ("failed", 1)
    assert source_code(run) == PROVIDER_TIMEOUT
    assert f"{adapter.label} request timed out after 0.05 s" in run.errors[0].format()
    assert tool_runs(records) == []


async def test_two_concurrent_runs_keep_separate_state(adapter: Adapter) -> None:
    """Both first requests are in flight together; each run only ever sees its own outcome."""
    first_requests = 0
    both_asked = asyncio.Event()

    async def reply(request: httpx.Request) -> dict[str, Any]:
        nonlocal first_requests
        state = adapter.user_input(json.loads(request.content))["state"]
        word = state["question"]
        if not state["observations"]:
            first_requests += 1
            if first_requests == 2:
                both_asked.set()
            await asyncio.wait_for(both_asked.wait(), 30)
            return adapter.reply(adapter.tool_call("uppercase", word, f"up-{word}"))
        [seen] = state["observations"]
        return adapter.reply(adapter.finish_call(f"{seen['id']}={seen['value']}"))

    server = adapter.server(reply)
    agent = project_agent(adapter.factory(transport=server.transport))

    alpha, beta = await asyncio.gather(
        agent.run({"question": "alpha"}), agent.run({"question": "beta"})
    )

    assert alpha.value == {"answer": "up-alpha=ALPHA"}
    assert beta.value == {"answer": "up-beta=BETA"}
    assert len(server.requests) == 4


# -- on_limit: finish -----------------------------------------------------------------------------
async def test_after_a_limit_the_final_request_offers_only_finish(
    adapter: Adapter, tmp_path: Path
) -> None:
    """With ``on_limit: finish``, the request asked with ``ctx.final`` offers ``_finish`` alone."""
    text = PROJECT.read_text(encoding="utf-8")
    shipped = "limits: {max_turns: 6,"
    assert text.count(shipped) == 1
    path = tmp_path / "final-agent.yaml"
    path.write_text(
        text.replace(shipped, "limits: {on_limit: finish, max_turns: 1,").replace(
            "python_path: [..]", f"python_path: [{ROOT}]"
        ),
        "utf-8",
    )
    server = adapter.server(
        adapter.reply(adapter.tool_call("uppercase", "red", "red")),
        adapter.reply(adapter.finish_call("RED, at the limit")),
    )
    decide = adapter.factory(transport=server.transport)
    agent = load_project(path, overrides={AGENT: {"decide": decide}}).entry()

    with capture_trace() as trace:
        run = await agent.run({"question": QUESTION}, trace=trace)

    assert (run.status, run.value) == ("completed", {"answer": "RED, at the limit"})
    offered = [
        [tool.get("name") or tool["function"]["name"] for tool in body["tools"]]
        for body in server.bodies
    ]
    assert offered == [["count", "uppercase", "_finish"], ["_finish"]]
    assert tool_runs(trace.records) == []
