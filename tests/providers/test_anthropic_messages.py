"""The Anthropic Messages adapter driving ``projects/openai-agent.yaml`` with canned messages:
real tools, reducer, limits and finalization; HTTP through ``httpx.MockTransport`` only
(UPSTREAM.md §5.2 in Messages shapes, issue 7 "Tests without a network"). What every adapter
does alike (budgets, HTTP failures, retries, cancellation, deadlines) is in
``test_adapter_contract.py``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

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
)
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
from tubeless.providers.anthropic import messages


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
        "completed",
        (),
        {"answer": "RED BLUE: 8 characters"},
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
        pytest.param(
            {}, {}, "https://api.anthropic.com/v1/messages", "claude-sonnet-4-5", id="defaults"
        ),
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
# -- malformed and inadmissible responses ---------------------------------------------------------
def _calls(n: int) -> dict[str, Any]:
    return message(*(tool_call("count", f"w{i}", f"c{i}") for i in range(n)))


_NOT_COMPLETED = "Anthropic did not return a completed response"
_INPUT = "Anthropic tool_use input must be an object with exactly the key"
_BLOCK = "Invalid Anthropic tool_use block (content block 0)"

MALFORMED = [
    pytest.param(None, PROVIDER_INVALID_RESPONSE, _NOT_COMPLETED, id="null-body"),
    pytest.param(
        [message(finish_call("done"))],
        PROVIDER_INVALID_RESPONSE,
        _NOT_COMPLETED,
        id="wrong-top-level-type",
    ),
    pytest.param(
        {"type": "error", "error": {"type": "overloaded_error", "message": "busy"}},
        PROVIDER_INVALID_RESPONSE,
        _NOT_COMPLETED,
        id="error-body-with-200",
    ),
    pytest.param(
        {k: v for k, v in message(finish_call("done")).items() if k != "content"},
        PROVIDER_INVALID_RESPONSE,
        _NOT_COMPLETED,
        id="missing-content",
    ),
    pytest.param(
        message(content="done"), PROVIDER_INVALID_RESPONSE, _NOT_COMPLETED, id="content-not-a-list"
    ),
    pytest.param(
        message(text("I will first"), stop_reason="max_tokens"),
        PROVIDER_INVALID_RESPONSE,
        f"{_NOT_COMPLETED} (incomplete: max_tokens)",
        id="incomplete-max-tokens",
    ),
    pytest.param(
        message(stop_reason="model_context_window_exceeded"),
        PROVIDER_INVALID_RESPONSE,
        f"{_NOT_COMPLETED} (incomplete: model_context_window_exceeded)",
        id="context-window-exceeded",
    ),
    pytest.param(
        message(tool_call("count", "a", "a"), stop_reason="pause_turn"),
        PROVIDER_INVALID_RESPONSE,
        _NOT_COMPLETED,
        id="pause-turn",
    ),
    pytest.param(
        message(text("I can't help with that."), stop_reason="refusal"),
        PROVIDER_REFUSED,
        "Anthropic refused to answer",
        id="refusal",
    ),
    pytest.param(
        message(text("Sure, RED BLUE."), stop_reason="end_turn"),
        PROVIDER_INVALID_RESPONSE,
        "Anthropic returned no function calls",
        id="text-only",
    ),
    pytest.param(
        message(),
        PROVIDER_INVALID_RESPONSE,
        "Anthropic returned no function calls",
        id="empty-content",
    ),
    pytest.param(
        message("tool_use"),
        PROVIDER_INVALID_RESPONSE,
        "Anthropic content block 0 is not an object",
        id="block-not-an-object",
    ),
    pytest.param(
        message({"type": "tool_use", "id": "a", "name": "uppercase"}),
        PROVIDER_INVALID_RESPONSE,
        _BLOCK,
        id="tool-use-missing-input",
    ),
    pytest.param(
        message({"type": "tool_use", "name": "count", "input": {"input": "a"}}),
        PROVIDER_INVALID_RESPONSE,
        _BLOCK,
        id="tool-use-missing-id",
    ),
    pytest.param(
        message(
            {
                "type": "server_tool_use",
                "id": "srvtoolu_1",
                "name": "web_search",
                "input": {"query": "red"},
            }
        ),
        PROVIDER_INVALID_RESPONSE,
        _BLOCK,
        id="server-tool-use",
    ),
    pytest.param(
        message(tool_use("uppercase", '{"input": "red"}', "a")),
        PROVIDER_INVALID_RESPONSE,
        _BLOCK,
        id="input-as-json-text",
    ),
    pytest.param(
        message(tool_use("uppercase", {}, "a")),
        PROVIDER_INVALID_RESPONSE,
        f"{_INPUT} 'input'",
        id="empty-input",
    ),
    pytest.param(
        message(tool_use("uppercase", {"input": "red", "why": "x"}, "a")),
        PROVIDER_INVALID_RESPONSE,
        f"{_INPUT} 'input'",
        id="extra-key",
    ),
    pytest.param(
        message(tool_use("_finish", {"answer": "done"}, "a")),
        PROVIDER_INVALID_RESPONSE,
        f"{_INPUT} 'result'",
        id="finish-without-result",
    ),
    pytest.param(
        message(tool_call("uppercase", 42, "a")),
        codes.AGENT_INVALID_DECISION,
        "uppercase",
        id="wrong-input-type",
    ),
    pytest.param(
        message(tool_call("delete", "red", "a")),
        codes.AGENT_INVALID_DECISION,
        "Unknown agent tool: 'delete'",
        id="unknown-tool",
    ),
    pytest.param(
        message(tool_call("count", "a", "same"), tool_call("count", "b", "same")),
        codes.AGENT_INVALID_DECISION,
        "Duplicate agent call id: 'same'",
        id="duplicate-call-ids",
    ),
    pytest.param(
        message(tool_call("count", "a", "a"), finish_call("done")),
        PROVIDER_INVALID_RESPONSE,
        "Anthropic must finish without other calls",
        id="finish-mixed-with-a-call",
    ),
    pytest.param(
        message(finish_call(42)),
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
# -- cancellation, deadline, concurrency ----------------------------------------------------------
