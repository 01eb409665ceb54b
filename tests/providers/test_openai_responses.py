"""The OpenAI Responses adapter driving ``projects/openai-agent.yaml`` with canned responses:
real tools, reducer, limits and finalization; HTTP through ``httpx.MockTransport`` only
(UPSTREAM.md §5.2 "CI fixture tests", issue 7 "Tests without a network"). What every adapter
does alike (budgets, HTTP failures, retries, cancellation, deadlines) is in
``test_adapter_contract.py``."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.providers.fixtures.openai_responses import (
    BODY_SECRET,
    SECRET_KEY,
    THREE_TURNS,
    ScriptedServer,
    finish_call,
    function_call,
    message,
    output_text,
    reasoning,
    refusal,
    response,
    tool_call,
)
from tests.providers.fixtures.runs import (
    DESCRIPTIONS,
    PARAMETERS,
    QUESTION,
    THREE_TURN_INPUTS,
    compact,
    everything_said,
    outcome,
    run_with,
    source_code,
    tool_runs,
    turn_runs,
)
from tubeless import PipelineRun
from tubeless import errors as codes
from tubeless.providers import (
    PROVIDER_INVALID_RESPONSE,
    PROVIDER_NOT_CONFIGURED,
    PROVIDER_REFUSED,
    PROVIDER_REQUEST_FAILED,
)
from tubeless.providers._calls import DEFAULT_INSTRUCTIONS, FINISH_DESCRIPTION
from tubeless.providers.openai import responses


async def run_agent(
    server: ScriptedServer, question: str = QUESTION, **options: Any
) -> tuple[PipelineRun, list[dict[str, Any]]]:
    return await run_with(responses(transport=server.transport, **options), question)


def tool(name: str) -> dict[str, Any]:
    return {
        "type": "function",
        "name": name,
        "description": DESCRIPTIONS.get(name, FINISH_DESCRIPTION),
        "parameters": PARAMETERS[name],
        "strict": True,
    }


TOOLS = [tool("count"), tool("uppercase"), tool("_finish")]


# -- the three-turn recipe ------------------------------------------------------------------------
async def test_the_three_turn_run_answers_after_exactly_three_requests() -> None:
    server = ScriptedServer(*THREE_TURNS)

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
    """model, store, budgets, instructions, the state as a JSON string, the tools in name order
    then ``_finish``, all strict, ``tool_choice: required`` and parallel calls."""
    server = ScriptedServer(*THREE_TURNS)

    await run_agent(server)

    for turn, (body, state) in enumerate(zip(server.bodies, server.inputs, strict=True), 1):
        assert body == {
            "model": "gpt-4.1-mini",
            "store": False,
            "max_output_tokens": 2048,
            "instructions": DEFAULT_INSTRUCTIONS,
            "input": compact({"state": state["state"], "turn": turn}),
            "tools": TOOLS,
            "tool_choice": "required",
            "parallel_tool_calls": True,
        }
    assert [tool["name"] for tool in server.bodies[0]["tools"]] == ["count", "uppercase", "_finish"]


async def test_the_request_posts_json_to_the_responses_endpoint_with_the_bearer_key() -> None:
    server = ScriptedServer(response(finish_call("done")))

    await run_agent(server)

    [request] = server.requests
    assert (request.method, str(request.url)) == ("POST", "https://api.openai.com/v1/responses")
    assert request.headers["authorization"] == f"Bearer {SECRET_KEY}"
    assert request.headers["content-type"] == "application/json"
    assert int(request.headers["content-length"]) == len(request.content)


@pytest.mark.parametrize(
    ("options", "env", "url", "model"),
    [
        pytest.param({}, {}, "https://api.openai.com/v1/responses", "gpt-4.1-mini", id="defaults"),
        pytest.param(
            {},
            {"OPENAI_BASE_URL": "http://localhost:8080/v1/", "OPENAI_MODEL": "gpt-4.1"},
            "http://localhost:8080/v1/responses",
            "gpt-4.1",
            id="environment",
        ),
        pytest.param(
            {"base_url": "https://proxy.example/v1", "model": "o4-mini"},
            {"OPENAI_BASE_URL": "http://localhost:8080/v1", "OPENAI_MODEL": "gpt-4.1"},
            "https://proxy.example/v1/responses",
            "o4-mini",
            id="arguments-win",
        ),
        pytest.param(
            {"base_url_env": "MY_BASE", "model_env": "MY_MODEL", "api_key_env": "MY_KEY"},
            {"MY_BASE": "http://local/v1", "MY_MODEL": "local-model", "MY_KEY": "other-key"},
            "http://local/v1/responses",
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
    server = ScriptedServer(response(finish_call("done")))

    run, _ = await run_agent(server, **options)

    assert run.status == "completed"
    [request] = server.requests
    assert (str(request.url), server.bodies[0]["model"]) == (url, model)
    key = env.get("MY_KEY", SECRET_KEY)
    assert request.headers["authorization"] == f"Bearer {key}"


# -- byte budgets ---------------------------------------------------------------------------------
async def test_history_over_16_kib_after_three_batches_fails_before_the_fourth_request() -> None:
    """Each batch adds about 5.6 KB: two fit, the third does not."""
    word = "\N{LATIN SMALL LETTER E WITH ACUTE}" * 2800
    server = ScriptedServer(*(response(tool_call("uppercase", word, f"b{i}")) for i in range(3)))

    run, records = await run_agent(server)

    assert (run.status, len(server.requests)) == ("failed", 3)
    assert tool_runs(records) == ["b0", "b1", "b2"]
    assert [len(i["state"]["observations"]) for i in server.inputs] == [0, 1, 2]
    assert "Observation history exceeds 16384 UTF-8 bytes" in run.errors[0].format()


# -- malformed and inadmissible responses ---------------------------------------------------------
def _calls(n: int) -> dict[str, Any]:
    return response(*(tool_call("count", f"w{i}", f"c{i}") for i in range(n)))


MALFORMED = [
    pytest.param(
        None,
        PROVIDER_INVALID_RESPONSE,
        "OpenAI did not return a completed response",
        id="null-body",
    ),
    pytest.param(
        response(status="incomplete", incomplete_details={"reason": "max_output_tokens"}),
        PROVIDER_INVALID_RESPONSE,
        "OpenAI did not return a completed response (incomplete: max_output_tokens)",
        id="incomplete",
    ),
    pytest.param(
        response(),
        PROVIDER_INVALID_RESPONSE,
        "OpenAI returned no function calls",
        id="empty-output",
    ),
    pytest.param(
        response(message(refusal("I can't help with that."))),
        PROVIDER_REFUSED,
        "OpenAI refused to answer",
        id="refusal",
    ),
    pytest.param(
        response({"type": "function_call"}),
        PROVIDER_INVALID_RESPONSE,
        "Invalid OpenAI function call (output item 0)",
        id="bare-function-call",
    ),
    pytest.param(
        response(function_call("uppercase", '{"input": "red"', "a")),
        PROVIDER_INVALID_RESPONSE,
        "OpenAI function call arguments must be JSON",
        id="invalid-json-arguments",
    ),
    pytest.param(
        response(function_call("uppercase", {}, "a")),
        PROVIDER_INVALID_RESPONSE,
        "arguments must be an object with exactly the key 'input'",
        id="empty-arguments",
    ),
    pytest.param(
        response(function_call("uppercase", {"input": "red", "why": "x"}, "a")),
        PROVIDER_INVALID_RESPONSE,
        "arguments must be an object with exactly the key 'input'",
        id="extra-key",
    ),
    pytest.param(
        response(tool_call("uppercase", 42, "a")),
        codes.AGENT_INVALID_DECISION,
        "uppercase",
        id="wrong-input-type",
    ),
    pytest.param(
        response(tool_call("delete", "red", "a")),
        codes.AGENT_INVALID_DECISION,
        "Unknown agent tool: 'delete'",
        id="unknown-tool",
    ),
    pytest.param(
        response(tool_call("count", "a", "same"), tool_call("count", "b", "same")),
        codes.AGENT_INVALID_DECISION,
        "Duplicate agent call id: 'same'",
        id="duplicate-call-ids",
    ),
    pytest.param(
        response(tool_call("count", "a", "a"), finish_call("done")),
        PROVIDER_INVALID_RESPONSE,
        "OpenAI must finish without other calls",
        id="finish-mixed-with-a-call",
    ),
    pytest.param(
        response(finish_call(42)),
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
    server = ScriptedServer(reply)

    run, records = await run_agent(server)

    assert (run.status, run.finalized, len(server.requests)) == ("failed", False, 1)
    assert tool_runs(records) == []
    assert source_code(run) == code
    assert fragment in run.errors[0].format()


async def test_reasoning_items_and_plain_messages_are_ignored() -> None:
    server = ScriptedServer(
        response(reasoning(), message(output_text("Let me finish.")), finish_call("done"))
    )

    run, _ = await run_agent(server)

    assert (run.status, run.value) == ("completed", {"answer": "done"})


# -- HTTP failures --------------------------------------------------------------------------------
async def test_a_client_error_is_never_retried() -> None:
    server = ScriptedServer(httpx.Response(400), response(finish_call("done")))

    run, _ = await run_agent(server, max_retries=3)

    assert (run.status, len(server.requests)) == ("failed", 1)


async def test_a_transport_error_names_its_type_only() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError(f"refused {BODY_SECRET}", request=request)

    run, records = await run_agent(ScriptedServer(refuse))

    assert source_code(run) == PROVIDER_REQUEST_FAILED
    assert "OpenAI request failed (ConnectError)" in run.errors[0].format()
    assert BODY_SECRET not in everything_said(run, records)


# -- cancellation, deadline, concurrency ----------------------------------------------------------
# -- odd text -------------------------------------------------------------------------------------
async def test_a_lone_surrogate_in_the_state_is_sent_as_a_json_escape() -> None:
    """Valid JSON text that UTF-8 cannot hold neither crashes the budgets nor the request."""
    question = "odd \ud800 text"
    server = ScriptedServer(
        response(tool_call("uppercase", "x\udfff", "odd")), response(finish_call("done"))
    )

    run, _ = await run_agent(server, question)

    assert (run.status, len(server.requests)) == ("completed", 2)
    assert server.requests[0].content.isascii()
    assert server.inputs[1]["state"] == {
        "question": question,
        "observations": [outcome("odd", "uppercase", "X\udfff")],
    }


async def test_a_key_that_cannot_be_a_header_fails_without_quoting_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-\N{LATIN SMALL LETTER E WITH ACUTE}-secret")
    server = ScriptedServer()

    run, records = await run_agent(server)

    assert source_code(run) == PROVIDER_NOT_CONFIGURED
    assert "OPENAI_API_KEY must contain only printable ASCII characters" in run.errors[0].format()
    assert "secret" not in everything_said(run, records)
    assert server.requests == []
