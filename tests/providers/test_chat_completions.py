"""The OpenAI-compatible chat completions adapter driving ``projects/openai-agent.yaml`` with
canned completions: real tools, reducer, limits and finalization; HTTP through
``httpx.MockTransport`` only (UPSTREAM.md §5.2 in chat shapes, issue 7 "Tests without a
network")."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.providers.fixtures.chat_completions import (
    THREE_TURNS,
    ChatServer,
    completion,
    finish_call,
    function_call,
    tool_call,
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
from tubeless.providers.chat import completions
from tubeless.testing import capture_trace


async def run_agent(
    server: ChatServer, question: str = QUESTION, **options: Any
) -> tuple[PipelineRun, list[dict[str, Any]]]:
    return await run_with(completions(transport=server.transport, **options), question)


def tool(name: str) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": DESCRIPTIONS.get(name, FINISH_DESCRIPTION),
            "parameters": PARAMETERS[name],
            "strict": True,
        },
    }


# -- the three-turn recipe ------------------------------------------------------------------------
async def test_the_three_turn_run_answers_after_exactly_three_requests() -> None:
    server = ChatServer(*THREE_TURNS)

    run, records = await run_agent(server)

    assert (run.status, run.errors, run.value) == (
        "completed", (), {"answer": "RED BLUE: 8 characters"}
    )
    assert len(server.requests) == 3
    assert server.inputs == THREE_TURN_INPUTS
    assert turn_runs(records) == 3
    assert sorted(tool_runs(records)) == ["blue", "count", "red"]


async def test_every_request_body_is_exactly_the_documented_one() -> None:
    """model, max_tokens, the instructions as the system message, the state as the user
    message, the tools in name order then ``_finish``, all strict, ``tool_choice: required``
    and parallel calls."""
    server = ChatServer(*THREE_TURNS)

    await run_agent(server)

    for turn, (body, state) in enumerate(zip(server.bodies, server.inputs, strict=True), 1):
        assert body == {
            "model": "gpt-4.1-mini",
            "max_tokens": 2048,
            "messages": [
                {"role": "system", "content": DEFAULT_INSTRUCTIONS},
                {"role": "user", "content": compact({"state": state["state"], "turn": turn})},
            ],
            "tools": [tool("count"), tool("uppercase"), tool("_finish")],
            "tool_choice": "required",
            "parallel_tool_calls": True,
        }


async def test_the_request_posts_json_to_chat_completions_with_the_bearer_key() -> None:
    server = ChatServer(completion(finish_call("done")))

    await run_agent(server)

    [request] = server.requests
    assert (request.method, str(request.url)) == (
        "POST", "https://api.openai.com/v1/chat/completions"
    )
    assert request.headers["authorization"] == f"Bearer {SECRET_KEY}"
    assert request.headers["content-type"] == "application/json"
    assert int(request.headers["content-length"]) == len(request.content)


@pytest.mark.parametrize(
    ("options", "env", "url", "model"),
    [
        pytest.param({}, {}, "https://api.openai.com/v1/chat/completions", "gpt-4.1-mini",
                     id="defaults"),
        pytest.param(
            {},
            {"OPENAI_BASE_URL": "http://localhost:8000/v1/", "OPENAI_MODEL": "qwen2.5"},
            "http://localhost:8000/v1/chat/completions",
            "qwen2.5",
            id="environment",
        ),
        pytest.param(
            {"base_url": "http://localhost:11434/v1", "model": "llama3.1"},
            {"OPENAI_BASE_URL": "http://localhost:8000/v1", "OPENAI_MODEL": "qwen2.5"},
            "http://localhost:11434/v1/chat/completions",
            "llama3.1",
            id="arguments-win",
        ),
        pytest.param(
            {"base_url_env": "MY_BASE", "model_env": "MY_MODEL", "api_key_env": "MY_KEY"},
            {"MY_BASE": "http://local/v1", "MY_MODEL": "local-model", "MY_KEY": "other-key"},
            "http://local/v1/chat/completions",
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
    server = ChatServer(completion(finish_call("done")))

    run, _ = await run_agent(server, **options)

    assert run.status == "completed"
    [request] = server.requests
    assert (str(request.url), server.bodies[0]["model"]) == (url, model)
    assert request.headers["authorization"] == f"Bearer {env.get('MY_KEY', SECRET_KEY)}"


@pytest.mark.parametrize("no_key", ["", None])
async def test_a_local_server_needs_no_key_when_api_key_env_is_empty(
    monkeypatch: pytest.MonkeyPatch, no_key: str | None
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY")
    server = ChatServer(completion(finish_call("done")))

    run, _ = await run_agent(
        server, base_url="http://localhost:11434/v1", model="llama3.1", api_key_env=no_key
    )

    assert (run.status, run.value) == ("completed", {"answer": "done"})
    [request] = server.requests
    assert str(request.url) == "http://localhost:11434/v1/chat/completions"
    assert "authorization" not in request.headers


async def test_traces_hold_the_turns_and_tool_runs_but_neither_the_key_nor_the_question() -> None:
    server = ChatServer(*THREE_TURNS)

    run, records = await run_agent(server)

    assert run.status == "completed"
    text = json.dumps(records)
    assert SECRET_KEY not in text
    assert QUESTION not in text
    assert "zebra-quokka-7731" not in text


async def test_a_tool_error_outcome_is_fed_back_and_the_model_recovers() -> None:
    server = ChatServer(
        completion(tool_call("uppercase", "missing", "gone")),
        completion(tool_call("uppercase", "found", "found")),
        completion(finish_call("FOUND after NOT_FOUND")),
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
async def test_one_use_line_swaps_the_shipped_project_to_chat_completions(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path, changed = swapped_project(tmp_path, "tubeless.providers.chat:completions")
    assert changed == [
        "-      use: tubeless.providers.openai:responses",
        "+      use: tubeless.providers.chat:completions",
    ]
    # A host that cannot resolve, so a request that escaped the transport could go nowhere.
    monkeypatch.setenv("OPENAI_BASE_URL", "http://offline.invalid/v1")
    server = ChatServer(*THREE_TURNS)
    route_through(monkeypatch, server.transport)

    run = await load_project(path).entry().run({"question": QUESTION})

    assert (run.status, run.value) == ("completed", {"answer": "RED BLUE: 8 characters"})
    assert [str(r.url) for r in server.requests] == [
        "http://offline.invalid/v1/chat/completions"
    ] * 3
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
    server = ChatServer(completion(finish_call("done")))

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
    server = ChatServer(completion(tool_call("uppercase", word, "big")))

    run, records = await run_agent(server)

    assert (run.status, run.finalized, len(server.requests)) == ("failed", False, 1)
    assert tool_runs(records) == ["big"]
    assert source_code(run) == PROVIDER_BUDGET_EXCEEDED
    assert "Observation history exceeds 16384 UTF-8 bytes" in run.errors[0].format()


async def test_a_4096_backslash_question_fails_the_body_check_on_the_second_request() -> None:
    """The question fits its own budget, but JSON escaping twice (the user message string,
    then the body) quadruples it; with the tool's echo the second body exceeds 32 KiB."""
    question = "\\" * 4096
    server = ChatServer(completion(tool_call("uppercase", question, "slashes")), completion())

    run, records = await run_agent(server, question)

    assert (run.status, len(server.requests)) == ("failed", 1)
    assert tool_runs(records) == ["slashes"]
    assert source_code(run) == PROVIDER_BUDGET_EXCEEDED
    assert "Chat completions request exceeds 32768 UTF-8 bytes" in run.errors[0].format()


async def test_the_body_budget_accepts_a_body_of_exactly_the_limit() -> None:
    probe = ChatServer(completion(finish_call("done")))
    await run_agent(probe)
    size = len(probe.requests[0].content)

    at_limit = ChatServer(completion(finish_call("done")))
    over = ChatServer(completion(finish_call("done")))
    accepted, _ = await run_agent(at_limit, max_request_bytes=size)
    rejected, _ = await run_agent(over, max_request_bytes=size - 1)

    assert (accepted.status, len(at_limit.requests)) == ("completed", 1)
    assert (rejected.status, len(over.requests)) == ("failed", 0)
    assert f"Chat completions request exceeds {size - 1} UTF-8 bytes" in (
        rejected.errors[0].format()
    )


async def test_the_body_budget_is_checked_before_the_key_is_read(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY")
    server = ChatServer()

    too_big, _ = await run_agent(server, max_request_bytes=100)
    no_key, _ = await run_agent(server)

    assert source_code(too_big) == PROVIDER_BUDGET_EXCEEDED
    assert source_code(no_key) == PROVIDER_NOT_CONFIGURED
    assert "OPENAI_API_KEY is required" in no_key.errors[0].format()
    assert server.requests == []


# -- malformed and inadmissible responses ---------------------------------------------------------
def _calls(n: int) -> dict[str, Any]:
    return completion(*(tool_call("count", f"w{i}", f"c{i}") for i in range(n)))


_NOT_COMPLETED = "Chat completions did not return a completed response"
_ARGUMENTS = "Chat completions function call arguments must be an object with exactly the key"

MALFORMED = [
    pytest.param(None, PROVIDER_INVALID_RESPONSE, _NOT_COMPLETED, id="null-body"),
    pytest.param([completion(finish_call("done"))], PROVIDER_INVALID_RESPONSE, _NOT_COMPLETED,
                 id="wrong-top-level-type"),
    pytest.param({k: v for k, v in completion(finish_call("done")).items() if k != "choices"},
                 PROVIDER_INVALID_RESPONSE, _NOT_COMPLETED, id="missing-choices"),
    pytest.param(completion(choices=[]), PROVIDER_INVALID_RESPONSE, _NOT_COMPLETED,
                 id="empty-choices"),
    pytest.param(completion(choices=[{"index": 0, "finish_reason": "stop"}]),
                 PROVIDER_INVALID_RESPONSE, _NOT_COMPLETED, id="missing-message"),
    pytest.param(completion(finish_reason="length", content="I will first"),
                 PROVIDER_INVALID_RESPONSE, f"{_NOT_COMPLETED} (incomplete: length)",
                 id="incomplete-length"),
    pytest.param(completion(finish_reason="content_filter"), PROVIDER_INVALID_RESPONSE,
                 f"{_NOT_COMPLETED} (incomplete: content_filter)", id="content-filter"),
    pytest.param(completion(tool_call("count", "a", "a"), finish_reason="function_call"),
                 PROVIDER_INVALID_RESPONSE, _NOT_COMPLETED, id="unexpected-finish-reason"),
    pytest.param(completion(refusal="I can't help with that.", finish_reason="stop"),
                 PROVIDER_REFUSED, "Chat completions refused to answer", id="refusal"),
    pytest.param(completion(content="Sure, RED BLUE.", finish_reason="stop"),
                 PROVIDER_INVALID_RESPONSE, "Chat completions returned no function calls",
                 id="text-only"),
    pytest.param(completion(), PROVIDER_INVALID_RESPONSE,
                 "Chat completions returned no function calls", id="no-tool-calls"),
    pytest.param(completion(choices=[{"index": 0, "finish_reason": "tool_calls", "message": {
                     "role": "assistant", "content": None, "tool_calls": "call"}}]),
                 PROVIDER_INVALID_RESPONSE, "Chat completions tool_calls is not a list",
                 id="tool-calls-not-a-list"),
    pytest.param(completion({"id": "a", "type": "function", "function": {"name": "uppercase"}}),
                 PROVIDER_INVALID_RESPONSE, "Invalid Chat completions tool call (tool call 0)",
                 id="tool-call-missing-arguments"),
    pytest.param(completion({"type": "function", "function": {"name": "count",
                                                              "arguments": "{}"}}),
                 PROVIDER_INVALID_RESPONSE, "Invalid Chat completions tool call (tool call 0)",
                 id="tool-call-missing-id"),
    pytest.param(completion({"id": "a", "type": "custom", "custom": {"name": "count",
                                                                     "input": "red"}}),
                 PROVIDER_INVALID_RESPONSE, "Invalid Chat completions tool call (tool call 0)",
                 id="custom-tool-call"),
    pytest.param(completion(function_call("uppercase", '{"input": "red"', "a")),
                 PROVIDER_INVALID_RESPONSE, "Chat completions function call arguments must be JSON",
                 id="invalid-json-arguments"),
    pytest.param(completion(function_call("uppercase", '"red"', "a")),
                 PROVIDER_INVALID_RESPONSE, f"{_ARGUMENTS} 'input'", id="arguments-not-an-object"),
    pytest.param(completion(function_call("uppercase", {}, "a")), PROVIDER_INVALID_RESPONSE,
                 f"{_ARGUMENTS} 'input'", id="empty-arguments"),
    pytest.param(completion(function_call("uppercase", {"input": "red", "why": "x"}, "a")),
                 PROVIDER_INVALID_RESPONSE, f"{_ARGUMENTS} 'input'", id="extra-key"),
    pytest.param(completion(tool_call("uppercase", 42, "a")), codes.AGENT_INVALID_DECISION,
                 "uppercase", id="wrong-input-type"),
    pytest.param(completion(tool_call("delete", "red", "a")), codes.AGENT_INVALID_DECISION,
                 "Unknown agent tool: 'delete'", id="unknown-tool"),
    pytest.param(completion(tool_call("count", "a", "same"), tool_call("count", "b", "same")),
                 codes.AGENT_INVALID_DECISION, "Duplicate agent call id: 'same'",
                 id="duplicate-call-ids"),
    pytest.param(completion(tool_call("count", "a", "a"), finish_call("done")),
                 PROVIDER_INVALID_RESPONSE, "Chat completions must finish without other calls",
                 id="finish-mixed-with-a-call"),
    pytest.param(completion(finish_call(42)), codes.AGENT_INVALID_DECISION,
                 "Agent finish result was rejected", id="finish-with-a-non-string"),
    pytest.param(_calls(13), codes.AGENT_LIMIT_REACHED, "Agent max_calls=12 exceeded",
                 id="13-calls"),
]


@pytest.mark.parametrize(("reply", "code", "fragment"), MALFORMED)
async def test_a_malformed_or_inadmissible_response_fails_after_one_request_with_no_tool_run(
    reply: Any, code: str, fragment: str
) -> None:
    server = ChatServer(reply)

    run, records = await run_agent(server)

    assert (run.status, run.finalized, len(server.requests)) == ("failed", False, 1)
    assert tool_runs(records) == []
    assert source_code(run) == code
    assert fragment in run.errors[0].format()


async def test_message_text_is_ignored_and_stop_with_tool_calls_is_accepted() -> None:
    server = ChatServer(
        completion(finish_call("done"), content="Let me finish.", finish_reason="stop")
    )

    run, _ = await run_agent(server)

    assert (run.status, run.value) == ("completed", {"answer": "done"})


# -- HTTP failures --------------------------------------------------------------------------------
@pytest.mark.parametrize("status", [401, 429, 500])
async def test_an_http_error_fails_once_without_leaking_the_body(
    status: int, caplog: pytest.LogCaptureFixture
) -> None:
    body = {"error": {"message": f"Incorrect API key {BODY_SECRET}", "type": "invalid_request"}}
    server = ChatServer(httpx.Response(status, json=body))

    run, records = await run_agent(server)

    assert (run.status, len(server.requests)) == ("failed", 1)
    assert source_code(run) == PROVIDER_REQUEST_FAILED
    assert f"Chat completions request failed (HTTP {status})" in run.errors[0].format()
    said = everything_said(run, records) + caplog.text
    assert BODY_SECRET not in said
    assert SECRET_KEY not in said
    assert QUESTION not in said


async def test_an_invalid_json_body_fails_once_without_leaking_it() -> None:
    server = ChatServer(httpx.Response(200, content=f"<html>{BODY_SECRET}".encode()))

    run, records = await run_agent(server)

    assert (run.status, len(server.requests)) == ("failed", 1)
    assert source_code(run) == PROVIDER_INVALID_RESPONSE
    assert "Chat completions returned invalid JSON" in run.errors[0].format()
    assert BODY_SECRET not in everything_said(run, records)


async def test_failures_are_not_retried_by_default_but_max_retries_retries_transient_ones() -> None:
    once = ChatServer(httpx.Response(503), completion(finish_call("done")))
    twice = ChatServer(httpx.Response(503), completion(finish_call("done")))

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

    server = ChatServer(hang)
    token = CancelToken()
    agent = project_agent(completions(transport=server.transport))
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

    server = ChatServer(slow)

    run, records = await run_agent(server, timeout_s=0.05)

    assert (run.status, len(server.requests)) == ("failed", 1)
    assert source_code(run) == PROVIDER_TIMEOUT
    assert "Chat completions request timed out after 0.05 s" in run.errors[0].format()
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
            return completion(tool_call("uppercase", word, f"up-{word}"))
        [seen] = state["observations"]
        return completion(finish_call(f"{seen['id']}={seen['value']}"))

    server = ChatServer(reply)
    agent = project_agent(completions(transport=server.transport))

    alpha, beta = await asyncio.gather(
        agent.run({"question": "alpha"}), agent.run({"question": "beta"})
    )

    assert alpha.value == {"answer": "up-alpha=ALPHA"}
    assert beta.value == {"answer": "up-beta=BETA"}
    assert len(server.requests) == 4
