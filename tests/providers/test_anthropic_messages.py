"""The Anthropic Messages adapter driving ``projects/openai-agent.yaml`` with canned messages:
real tools, reducer, limits and finalization; HTTP through ``httpx.MockTransport`` only
(UPSTREAM.md §5.2 in Messages shapes, issue 7 "Tests without a network")."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.providers.fixtures.anthropic_messages import (
    ANTHROPIC_KEY,
    THREE_TURNS,
    AnthropicServer,
    finish_call,
    message,
    text,
    thinking,
    tool_call,
    tool_use,
    user_input,
)
from tests.providers.fixtures.openai_responses import BODY_SECRET, SECRET_KEY
from tests.providers.fixtures.runs import (
    DESCRIPTIONS,
    PARAMETERS,
    QUESTION,
    THREE_TURN_INPUTS,
    compact,
    everything_said,
    outcome,
    project_agent,
    route_through,
    run_with,
    source_code,
    swapped_project,
    tool_runs,
    turn_runs,
)
from tubeless import CancelToken, PipelineRun
from tubeless import errors as codes
from tubeless.project import load_project
from tubeless.providers import (
    PROVIDER_BUDGET_EXCEEDED,
    PROVIDER_INVALID_RESPONSE,
    PROVIDER_NOT_CONFIGURED,
    PROVIDER_REFUSED,
    PROVIDER_REQUEST_FAILED,
    PROVIDER_TIMEOUT,
)
from tubeless.providers._calls import DEFAULT_INSTRUCTIONS, FINISH_DESCRIPTION
from tubeless.providers.anthropic import messages
from tubeless.testing import capture_trace


@pytest.fixture(autouse=True)
def anthropic_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A fake key, and no base URL or model taken from the developer's environment."""
    monkeypatch.setenv("ANTHROPIC_API_KEY", ANTHROPIC_KEY)
    monkeypatch.delenv("ANTHROPIC_BASE_URL", raising=False)
    monkeypatch.delenv("ANTHROPIC_MODEL", raising=False)
    yield


async def run_agent(
    server: AnthropicServer, question: str = QUESTION, **options: Any
) -> tuple[PipelineRun, list[dict[str, Any]]]:
    return await run_with(messages(transport=server.transport, **options), question)


def tool(name: str) -> dict[str, Any]:
    return {
        "name": name,
        "description": DESCRIPTIONS.get(name, FINISH_DESCRIPTION),
        "input_schema": PARAMETERS[name],
    }


# -- the three-turn recipe ------------------------------------------------------------------------
async def test_the_three_turn_run_answers_after_exactly_three_requests() -> None:
    server = AnthropicServer(*THREE_TURNS)

    run, records = await run_agent(server)

    assert (run.status, run.errors, run.value) == (
        "completed", (), {"answer": "RED BLUE: 8 characters"}
    )
    assert len(server.requests) == 3
    assert server.inputs == THREE_TURN_INPUTS
    assert turn_runs(records) == 3
    assert sorted(tool_runs(records)) == ["blue", "count", "red"]


async def test_every_request_body_is_exactly_the_documented_one() -> None:
    """model, max_tokens, the instructions as ``system``, the state as the one user message,
    the tools in name order then ``_finish``, and a tool choice of ``any`` with parallel
    calls allowed."""
    server = AnthropicServer(*THREE_TURNS)

    await run_agent(server)

    for turn, (body, state) in enumerate(zip(server.bodies, server.inputs, strict=True), 1):
        assert body == {
            "model": "claude-sonnet-4-5",
            "max_tokens": 2048,
            "system": DEFAULT_INSTRUCTIONS,
            "messages": [
                {"role": "user", "content": compact({"state": state["state"], "turn": turn})},
            ],
            "tools": [tool("count"), tool("uppercase"), tool("_finish")],
            "tool_choice": {"type": "any", "disable_parallel_tool_use": False},
        }


async def test_the_request_posts_json_to_v1_messages_with_the_key_and_version_headers() -> None:
    server = AnthropicServer(message(finish_call("done")))

    await run_agent(server)

    [request] = server.requests
    assert (request.method, str(request.url)) == ("POST", "https://api.anthropic.com/v1/messages")
    assert request.headers["x-api-key"] == ANTHROPIC_KEY
    assert request.headers["anthropic-version"] == "2023-06-01"
    assert "authorization" not in request.headers
    assert request.headers["content-type"] == "application/json"
    assert int(request.headers["content-length"]) == len(request.content)


@pytest.mark.parametrize(
    ("options", "env", "url", "model"),
    [
        pytest.param({}, {}, "https://api.anthropic.com/v1/messages", "claude-sonnet-4-5",
                     id="defaults"),
        pytest.param(
            {},
            {"ANTHROPIC_BASE_URL": "http://localhost:8080/", "ANTHROPIC_MODEL": "claude-haiku-4-5"},
            "http://localhost:8080/v1/messages",
            "claude-haiku-4-5",
            id="environment",
        ),
        pytest.param(
            {"base_url": "https://proxy.example/anthropic", "model": "claude-opus-4-1"},
            {"ANTHROPIC_BASE_URL": "http://localhost:8080", "ANTHROPIC_MODEL": "claude-haiku-4-5"},
            "https://proxy.example/anthropic/v1/messages",
            "claude-opus-4-1",
            id="arguments-win",
        ),
        pytest.param(
            {"base_url_env": "MY_BASE", "model_env": "MY_MODEL", "api_key_env": "MY_KEY"},
            {"MY_BASE": "http://local", "MY_MODEL": "local-model", "MY_KEY": "other-key"},
            "http://local/v1/messages",
            "local-model",
            id="renamed-variables",
        ),
    ],
)
async def test_base_url_model_and_key_come_from_arguments_then_environment_then_defaults(
    monkeypatch: pytest.MonkeyPatch,
    options: dict[str, str],
    env: dict[str, str],
    url: str,
    model: str,
) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    server = AnthropicServer(message(finish_call("done")))

    run, _ = await run_agent(server, **options)

    assert run.status == "completed"
    [request] = server.requests
    assert (str(request.url), server.bodies[0]["model"]) == (url, model)
    assert request.headers["x-api-key"] == env.get("MY_KEY", ANTHROPIC_KEY)


async def test_the_anthropic_version_header_is_configurable() -> None:
    server = AnthropicServer(message(finish_call("done")))

    await run_agent(server, anthropic_version="2024-01-01")

    assert server.requests[0].headers["anthropic-version"] == "2024-01-01"


async def test_traces_hold_the_turns_and_tool_runs_but_neither_the_key_nor_the_question() -> None:
    server = AnthropicServer(*THREE_TURNS)

    run, records = await run_agent(server)

    assert run.status == "completed"
    recorded = json.dumps(records)
    assert ANTHROPIC_KEY not in recorded
    assert QUESTION not in recorded
    assert "zebra-quokka-7731" not in recorded


async def test_a_tool_error_outcome_is_fed_back_and_the_model_recovers() -> None:
    server = AnthropicServer(
        message(tool_call("uppercase", "missing", "gone")),
        message(tool_call("uppercase", "found", "found")),
        message(finish_call("FOUND after NOT_FOUND")),
    )

    run, records = await run_agent(server)

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


# -- swapping the adapter in the project file -----------------------------------------------------
async def test_one_use_line_swaps_the_shipped_project_to_anthropic_messages(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path, changed = swapped_project(tmp_path, "tubeless.providers.anthropic:messages")
    assert changed == [
        "-      use: tubeless.providers.openai:responses",
        "+      use: tubeless.providers.anthropic:messages",
    ]
    # A host that cannot resolve, so a request that escaped the transport could go nowhere.
    monkeypatch.setenv("ANTHROPIC_BASE_URL", "http://offline.invalid")
    server = AnthropicServer(*THREE_TURNS)
    route_through(monkeypatch, server.transport)

    run = await load_project(path).entry().run({"question": QUESTION})

    assert (run.status, run.value) == ("completed", {"answer": "RED BLUE: 8 characters"})
    assert [str(r.url) for r in server.requests] == ["http://offline.invalid/v1/messages"] * 3
    assert server.inputs == THREE_TURN_INPUTS


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
    question: str, accepted: bool
) -> None:
    server = AnthropicServer(message(finish_call("done")))

    run, _ = await run_agent(server, question)

    if accepted:
        assert (run.status, len(server.requests)) == ("completed", 1)
        assert server.inputs[0]["state"]["question"] == question
    else:
        assert (run.status, len(server.requests)) == ("failed", 0)
        assert source_code(run) == PROVIDER_BUDGET_EXCEEDED
        assert "Question exceeds 4096 UTF-8 bytes" in run.errors[0].format()


async def test_history_over_16_kib_after_one_batch_fails_before_the_next_request() -> None:
    word = "\N{LATIN SMALL LETTER E WITH ACUTE}" * 8192
    server = AnthropicServer(message(tool_call("uppercase", word, "big")))

    run, records = await run_agent(server)

    assert (run.status, run.finalized, len(server.requests)) == ("failed", False, 1)
    assert tool_runs(records) == ["big"]
    assert source_code(run) == PROVIDER_BUDGET_EXCEEDED
    assert "Observation history exceeds 16384 UTF-8 bytes" in run.errors[0].format()


async def test_a_4096_backslash_question_fails_the_body_check_on_the_second_request() -> None:
    """The question fits its own budget, but JSON escaping twice (the user message string,
    then the body) quadruples it; with the tool's echo the second body exceeds 32 KiB."""
    question = "\\" * 4096
    server = AnthropicServer(message(tool_call("uppercase", question, "slashes")), message())

    run, records = await run_agent(server, question)

    assert (run.status, len(server.requests)) == ("failed", 1)
    assert tool_runs(records) == ["slashes"]
    assert source_code(run) == PROVIDER_BUDGET_EXCEEDED
    assert "Anthropic request exceeds 32768 UTF-8 bytes" in run.errors[0].format()


async def test_the_body_budget_accepts_a_body_of_exactly_the_limit() -> None:
    probe = AnthropicServer(message(finish_call("done")))
    await run_agent(probe)
    size = len(probe.requests[0].content)

    at_limit = AnthropicServer(message(finish_call("done")))
    over = AnthropicServer(message(finish_call("done")))
    accepted, _ = await run_agent(at_limit, max_request_bytes=size)
    rejected, _ = await run_agent(over, max_request_bytes=size - 1)

    assert (accepted.status, len(at_limit.requests)) == ("completed", 1)
    assert (rejected.status, len(over.requests)) == ("failed", 0)
    assert f"Anthropic request exceeds {size - 1} UTF-8 bytes" in rejected.errors[0].format()


async def test_the_body_budget_is_checked_before_the_key_is_read(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY")
    server = AnthropicServer()

    too_big, _ = await run_agent(server, max_request_bytes=100)
    no_key, _ = await run_agent(server)

    assert source_code(too_big) == PROVIDER_BUDGET_EXCEEDED
    assert source_code(no_key) == PROVIDER_NOT_CONFIGURED
    assert "ANTHROPIC_API_KEY is required" in no_key.errors[0].format()
    assert server.requests == []


# -- malformed and inadmissible responses ---------------------------------------------------------
def _calls(n: int) -> dict[str, Any]:
    return message(*(tool_call("count", f"w{i}", f"c{i}") for i in range(n)))


_NOT_COMPLETED = "Anthropic did not return a completed response"
_INPUT = "Anthropic tool_use input must be an object with exactly the key"
_BLOCK = "Invalid Anthropic tool_use block (content block 0)"

MALFORMED = [
    pytest.param(None, PROVIDER_INVALID_RESPONSE, _NOT_COMPLETED, id="null-body"),
    pytest.param([message(finish_call("done"))], PROVIDER_INVALID_RESPONSE, _NOT_COMPLETED,
                 id="wrong-top-level-type"),
    pytest.param({"type": "error", "error": {"type": "overloaded_error", "message": "busy"}},
                 PROVIDER_INVALID_RESPONSE, _NOT_COMPLETED, id="error-body-with-200"),
    pytest.param({k: v for k, v in message(finish_call("done")).items() if k != "content"},
                 PROVIDER_INVALID_RESPONSE, _NOT_COMPLETED, id="missing-content"),
    pytest.param(message(content="done"), PROVIDER_INVALID_RESPONSE, _NOT_COMPLETED,
                 id="content-not-a-list"),
    pytest.param(message(text("I will first"), stop_reason="max_tokens"),
                 PROVIDER_INVALID_RESPONSE, f"{_NOT_COMPLETED} (incomplete: max_tokens)",
                 id="incomplete-max-tokens"),
    pytest.param(message(stop_reason="model_context_window_exceeded"), PROVIDER_INVALID_RESPONSE,
                 f"{_NOT_COMPLETED} (incomplete: model_context_window_exceeded)",
                 id="context-window-exceeded"),
    pytest.param(message(tool_call("count", "a", "a"), stop_reason="pause_turn"),
                 PROVIDER_INVALID_RESPONSE, _NOT_COMPLETED, id="pause-turn"),
    pytest.param(message(text("I can't help with that."), stop_reason="refusal"),
                 PROVIDER_REFUSED, "Anthropic refused to answer", id="refusal"),
    pytest.param(message(text("Sure, RED BLUE."), stop_reason="end_turn"),
                 PROVIDER_INVALID_RESPONSE, "Anthropic returned no function calls",
                 id="text-only"),
    pytest.param(message(), PROVIDER_INVALID_RESPONSE, "Anthropic returned no function calls",
                 id="empty-content"),
    pytest.param(message("tool_use"), PROVIDER_INVALID_RESPONSE,
                 "Anthropic content block 0 is not an object", id="block-not-an-object"),
    pytest.param(message({"type": "tool_use", "id": "a", "name": "uppercase"}),
                 PROVIDER_INVALID_RESPONSE, _BLOCK, id="tool-use-missing-input"),
    pytest.param(message({"type": "tool_use", "name": "count", "input": {"input": "a"}}),
                 PROVIDER_INVALID_RESPONSE, _BLOCK, id="tool-use-missing-id"),
    pytest.param(message({"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search",
                          "input": {"query": "red"}}),
                 PROVIDER_INVALID_RESPONSE, _BLOCK, id="server-tool-use"),
    pytest.param(message(tool_use("uppercase", '{"input": "red"}', "a")),
                 PROVIDER_INVALID_RESPONSE, _BLOCK, id="input-as-json-text"),
    pytest.param(message(tool_use("uppercase", {}, "a")), PROVIDER_INVALID_RESPONSE,
                 f"{_INPUT} 'input'", id="empty-input"),
    pytest.param(message(tool_use("uppercase", {"input": "red", "why": "x"}, "a")),
                 PROVIDER_INVALID_RESPONSE, f"{_INPUT} 'input'", id="extra-key"),
    pytest.param(message(tool_use("_finish", {"answer": "done"}, "a")),
                 PROVIDER_INVALID_RESPONSE, f"{_INPUT} 'result'", id="finish-without-result"),
    pytest.param(message(tool_call("uppercase", 42, "a")), codes.AGENT_INVALID_DECISION,
                 "uppercase", id="wrong-input-type"),
    pytest.param(message(tool_call("delete", "red", "a")), codes.AGENT_INVALID_DECISION,
                 "Unknown agent tool: 'delete'", id="unknown-tool"),
    pytest.param(message(tool_call("count", "a", "same"), tool_call("count", "b", "same")),
                 codes.AGENT_INVALID_DECISION, "Duplicate agent call id: 'same'",
                 id="duplicate-call-ids"),
    pytest.param(message(tool_call("count", "a", "a"), finish_call("done")),
                 PROVIDER_INVALID_RESPONSE, "Anthropic must finish without other calls",
                 id="finish-mixed-with-a-call"),
    pytest.param(message(finish_call(42)), codes.AGENT_INVALID_DECISION,
                 "Agent finish result was rejected", id="finish-with-a-non-string"),
    pytest.param(_calls(13), codes.AGENT_LIMIT_REACHED, "Agent max_calls=12 exceeded",
                 id="13-calls"),
]


@pytest.mark.parametrize(("reply", "code", "fragment"), MALFORMED)
async def test_a_malformed_or_inadmissible_response_fails_after_one_request_with_no_tool_run(
    reply: Any, code: str, fragment: str
) -> None:
    server = AnthropicServer(reply)

    run, records = await run_agent(server)

    assert (run.status, run.finalized, len(server.requests)) == ("failed", False, 1)
    assert tool_runs(records) == []
    assert source_code(run) == code
    assert fragment in run.errors[0].format()


async def test_text_and_thinking_blocks_are_ignored_and_end_turn_with_calls_is_accepted() -> None:
    server = AnthropicServer(
        message(thinking(), text("Let me finish."), finish_call("done"), stop_reason="end_turn"),
        message({"type": "redacted_thinking", "data": "EmwKAhgB"}, finish_call("again")),
    )

    first, _ = await run_agent(server)
    second, _ = await run_agent(server)

    assert (first.value, second.value) == ({"answer": "done"}, {"answer": "again"})


# -- HTTP failures --------------------------------------------------------------------------------
@pytest.mark.parametrize("status", [401, 429, 500, 529])
async def test_an_http_error_fails_once_without_leaking_the_body(
    status: int, caplog: pytest.LogCaptureFixture
) -> None:
    body = {"type": "error", "error": {"type": "authentication_error", "message": BODY_SECRET}}
    server = AnthropicServer(httpx.Response(status, json=body))

    run, records = await run_agent(server)

    assert (run.status, len(server.requests)) == ("failed", 1)
    assert source_code(run) == PROVIDER_REQUEST_FAILED
    assert f"Anthropic request failed (HTTP {status})" in run.errors[0].format()
    said = everything_said(run, records) + caplog.text
    assert BODY_SECRET not in said
    assert ANTHROPIC_KEY not in said
    assert SECRET_KEY not in said
    assert QUESTION not in said


async def test_an_invalid_json_body_fails_once_without_leaking_it() -> None:
    server = AnthropicServer(httpx.Response(200, content=f"<html>{BODY_SECRET}".encode()))

    run, records = await run_agent(server)

    assert (run.status, len(server.requests)) == ("failed", 1)
    assert source_code(run) == PROVIDER_INVALID_RESPONSE
    assert "Anthropic returned invalid JSON" in run.errors[0].format()
    assert BODY_SECRET not in everything_said(run, records)


async def test_failures_are_not_retried_by_default_but_max_retries_retries_overloaded() -> None:
    once = AnthropicServer(httpx.Response(529), message(finish_call("done")))
    twice = AnthropicServer(httpx.Response(529), message(finish_call("done")))

    failed, _ = await run_agent(once)
    retried, _ = await run_agent(twice, max_retries=1)

    assert (failed.status, len(once.requests)) == ("failed", 1)
    assert (retried.status, len(twice.requests)) == ("completed", 2)


# -- cancellation, deadline, concurrency ----------------------------------------------------------
async def test_cancelling_the_run_during_a_request_abandons_it() -> None:
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

    server = AnthropicServer(hang)
    token = CancelToken()
    agent = project_agent(messages(transport=server.transport))
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


async def test_a_request_past_its_deadline_fails_with_a_timeout() -> None:
    async def slow(request: httpx.Request) -> httpx.Response:
        await asyncio.sleep(10)
        raise AssertionError("the deadline should have passed")

    server = AnthropicServer(slow)

    run, records = await run_agent(server, timeout_s=0.05)

    assert (run.status, len(server.requests)) == ("failed", 1)
    assert source_code(run) == PROVIDER_TIMEOUT
    assert "Anthropic request timed out after 0.05 s" in run.errors[0].format()
    assert tool_runs(records) == []


async def test_two_concurrent_runs_keep_separate_state() -> None:
    """Both first requests are in flight together; each run only ever sees its own outcome."""
    first_requests = 0
    both_asked = asyncio.Event()

    async def reply(request: httpx.Request) -> dict[str, Any]:
        nonlocal first_requests
        state = user_input(json.loads(request.content))["state"]
        word = state["question"]
        if not state["observations"]:
            first_requests += 1
            if first_requests == 2:
                both_asked.set()
            await asyncio.wait_for(both_asked.wait(), 30)
            return message(tool_call("uppercase", word, f"up-{word}"))
        [seen] = state["observations"]
        return message(finish_call(f"{seen['id']}={seen['value']}"))

    server = AnthropicServer(reply)
    agent = project_agent(messages(transport=server.transport))

    alpha, beta = await asyncio.gather(
        agent.run({"question": "alpha"}), agent.run({"question": "beta"})
    )

    assert alpha.value == {"answer": "up-alpha=ALPHA"}
    assert beta.value == {"answer": "up-beta=BETA"}
    assert len(server.requests) == 4
