"""The OpenAI-compatible chat completions adapter driving ``projects/openai-agent.yaml`` with
canned completions: real tools, reducer, limits and finalization; HTTP through
``httpx.MockTransport`` only (UPSTREAM.md §5.2 in chat shapes, issue 7 "Tests without a
network"). What every adapter does alike (budgets, HTTP failures, retries, cancellation,
deadlines) is in ``test_adapter_contract.py``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.providers.fixtures.chat_completions import (
    THREE_TURNS,
    ChatServer,
    completion,
    finish_call,
    function_call,
    tool_call,
)
from tests.providers.fixtures.openai_responses import SECRET_KEY
from tests.providers.fixtures.runs import (
    DESCRIPTIONS,
    PARAMETERS,
    QUESTION,
    THREE_TURN_INPUTS,
    compact,
    route_through,
    run_with,
    source_code,
    swapped_project,
    tool_runs,
    turn_runs,
)
from tubeless import PipelineRun
from tubeless import errors as codes
from tubeless.project import load_project
from tubeless.providers import (
    PROVIDER_INVALID_RESPONSE,
    PROVIDER_REFUSED,
)
from tubeless.providers._calls import DEFAULT_INSTRUCTIONS, FINISH_DESCRIPTION
from tubeless.providers.chat import completions


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
        "completed",
        (),
        {"answer": "RED BLUE: 8 characters"},
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
        "POST",
        "https://api.openai.com/v1/chat/completions",
    )
    assert request.headers["authorization"] == f"Bearer {SECRET_KEY}"
    assert request.headers["content-type"] == "application/json"
    assert int(request.headers["content-length"]) == len(request.content)


@pytest.mark.parametrize(
    ("options", "env", "url", "model"),
    [
        pytest.param(
            {}, {}, "https://api.openai.com/v1/chat/completions", "gpt-4.1-mini", id="defaults"
        ),
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
# -- malformed and inadmissible responses ---------------------------------------------------------
def _calls(n: int) -> dict[str, Any]:
    return completion(*(tool_call("count", f"w{i}", f"c{i}") for i in range(n)))


_NOT_COMPLETED = "Chat completions did not return a completed response"
_ARGUMENTS = "Chat completions function call arguments must be an object with exactly the key"

MALFORMED = [
    pytest.param(None, PROVIDER_INVALID_RESPONSE, _NOT_COMPLETED, id="null-body"),
    pytest.param(
        [completion(finish_call("done"))],
        PROVIDER_INVALID_RESPONSE,
        _NOT_COMPLETED,
        id="wrong-top-level-type",
    ),
    pytest.param(
        {k: v for k, v in completion(finish_call("done")).items() if k != "choices"},
        PROVIDER_INVALID_RESPONSE,
        _NOT_COMPLETED,
        id="missing-choices",
    ),
    pytest.param(
        completion(choices=[]), PROVIDER_INVALID_RESPONSE, _NOT_COMPLETED, id="empty-choices"
    ),
    pytest.param(
        completion(choices=[{"index": 0, "finish_reason": "stop"}]),
        PROVIDER_INVALID_RESPONSE,
        _NOT_COMPLETED,
        id="missing-message",
    ),
    pytest.param(
        completion(finish_reason="length", content="I will first"),
        PROVIDER_INVALID_RESPONSE,
        f"{_NOT_COMPLETED} (incomplete: length)",
        id="incomplete-length",
    ),
    pytest.param(
        completion(finish_reason="content_filter"),
        PROVIDER_INVALID_RESPONSE,
        f"{_NOT_COMPLETED} (incomplete: content_filter)",
        id="content-filter",
    ),
    pytest.param(
        completion(tool_call("count", "a", "a"), finish_reason="function_call"),
        PROVIDER_INVALID_RESPONSE,
        _NOT_COMPLETED,
        id="unexpected-finish-reason",
    ),
    pytest.param(
        completion(refusal="I can't help with that.", finish_reason="stop"),
        PROVIDER_REFUSED,
        "Chat completions refused to answer",
        id="refusal",
    ),
    pytest.param(
        completion(content="Sure, RED BLUE.", finish_reason="stop"),
        PROVIDER_INVALID_RESPONSE,
        "Chat completions returned no function calls",
        id="text-only",
    ),
    pytest.param(
        completion(),
        PROVIDER_INVALID_RESPONSE,
        "Chat completions returned no function calls",
        id="no-tool-calls",
    ),
    pytest.param(
        completion(
            choices=[
                {
                    "index": 0,
                    "finish_reason": "tool_calls",
                    "message": {"role": "assistant", "content": None, "tool_calls": "call"},
                }
            ]
        ),
        PROVIDER_INVALID_RESPONSE,
        "Chat completions tool_calls is not a list",
        id="tool-calls-not-a-list",
    ),
    pytest.param(
        completion({"id": "a", "type": "function", "function": {"name": "uppercase"}}),
        PROVIDER_INVALID_RESPONSE,
        "Invalid Chat completions tool call (tool call 0)",
        id="tool-call-missing-arguments",
    ),
    pytest.param(
        completion({"type": "function", "function": {"name": "count", "arguments": "{}"}}),
        PROVIDER_INVALID_RESPONSE,
        "Invalid Chat completions tool call (tool call 0)",
        id="tool-call-missing-id",
    ),
    pytest.param(
        completion({"id": "a", "type": "custom", "custom": {"name": "count", "input": "red"}}),
        PROVIDER_INVALID_RESPONSE,
        "Invalid Chat completions tool call (tool call 0)",
        id="custom-tool-call",
    ),
    pytest.param(
        completion(function_call("uppercase", '{"input": "red"', "a")),
        PROVIDER_INVALID_RESPONSE,
        "Chat completions function call arguments must be JSON",
        id="invalid-json-arguments",
    ),
    pytest.param(
        completion(function_call("uppercase", '"red"', "a")),
        PROVIDER_INVALID_RESPONSE,
        f"{_ARGUMENTS} 'input'",
        id="arguments-not-an-object",
    ),
    pytest.param(
        completion(function_call("uppercase", {}, "a")),
        PROVIDER_INVALID_RESPONSE,
        f"{_ARGUMENTS} 'input'",
        id="empty-arguments",
    ),
    pytest.param(
        completion(function_call("uppercase", {"input": "red", "why": "x"}, "a")),
        PROVIDER_INVALID_RESPONSE,
        f"{_ARGUMENTS} 'input'",
        id="extra-key",
    ),
    pytest.param(
        completion(tool_call("uppercase", 42, "a")),
        codes.AGENT_INVALID_DECISION,
        "uppercase",
        id="wrong-input-type",
    ),
    pytest.param(
        completion(tool_call("delete", "red", "a")),
        codes.AGENT_INVALID_DECISION,
        "Unknown agent tool: 'delete'",
        id="unknown-tool",
    ),
    pytest.param(
        completion(tool_call("count", "a", "same"), tool_call("count", "b", "same")),
        codes.AGENT_INVALID_DECISION,
        "Duplicate agent call id: 'same'",
        id="duplicate-call-ids",
    ),
    pytest.param(
        completion(tool_call("count", "a", "a"), finish_call("done")),
        PROVIDER_INVALID_RESPONSE,
        "Chat completions must finish without other calls",
        id="finish-mixed-with-a-call",
    ),
    pytest.param(
        completion(finish_call(42)),
        codes.AGENT_INVALID_DECISION,
        "Agent finish result was rejected",
        id="finish-with-a-non-string",
    ),
    pytest.param(
        _calls(13), codes.AGENT_LIMIT_REACHED, "Agent max_calls=12 exceeded", id="13-calls"
    ),
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
# -- cancellation, deadline, concurrency ----------------------------------------------------------
