"""The OpenAI Responses adapter driving ``projects/openai-agent.yaml`` with canned responses:
real tools, reducer, limits and finalization; HTTP through ``httpx.MockTransport`` only
(UPSTREAM.md §5.2 "CI fixture tests", issue 7 "Tests without a network")."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
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
from tubeless import CancelToken, Pipeline, PipelineRun
from tubeless import errors as codes
from tubeless.errors import deepest_source_code
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
from tubeless.providers.openai import responses
from tubeless.testing import capture_trace

ROOT = Path(__file__).resolve().parents[2]
PROJECT = ROOT / "projects" / "openai-agent.yaml"
QUESTION = "Uppercase red and blue, then count them joined (marker zebra-quokka-7731)."


def openai_agent(server: ScriptedServer, **options: Any) -> Pipeline:
    """The shipped project, its ``decide`` rebuilt with the server's transport."""
    decide = responses(transport=server.transport, **options)
    return load_project(PROJECT, overrides={"openai-agent": {"decide": decide}}).entry()


async def run_agent(
    server: ScriptedServer, question: str = QUESTION, **options: Any
) -> tuple[PipelineRun, list[dict[str, Any]]]:
    with capture_trace() as trace:
        run = await openai_agent(server, **options).run({"question": question}, trace=trace)
    return run, trace.records


def tool_runs(records: list[dict[str, Any]]) -> list[str]:
    """Item keys (call ids) of the tool runs that started."""
    return [
        r["itemKey"]
        for r in records
        if r["name"] == "pipeline.started" and r["pipelineId"].startswith("openai-agent/tool/")
    ]


def source_code(run: PipelineRun) -> str | None:
    return deepest_source_code(run.errors[0])


def everything_said(run: PipelineRun, records: list[dict[str, Any]]) -> str:
    """Every error message, cause chain and trace record of a run, as one text."""
    parts = [error.format() for error in run.errors]
    parts += [json.dumps(error.to_wire()) for error in run.errors]
    parts += [str(error.exception) for error in run.errors if error.exception is not None]
    parts.append(json.dumps(records))
    return "\n".join(parts)


def compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def closed(key: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {key: schema},
        "required": [key],
        "additionalProperties": False,
    }


TOOLS = [
    {
        "type": "function",
        "name": "count",
        "description": "Count the characters of a piece of text.",
        "parameters": closed("input", {"type": "string"}),
        "strict": True,
    },
    {
        "type": "function",
        "name": "uppercase",
        "description": "Uppercase a piece of text.",
        "parameters": closed("input", {"type": "string"}),
        "strict": True,
    },
    {
        "type": "function",
        "name": "_finish",
        "description": FINISH_DESCRIPTION,
        "parameters": closed("result", {"type": "string", "description": "The final answer text."}),
        "strict": True,
    },
]


def outcome(call_id: str, tool: str, value: Any) -> dict[str, Any]:
    return {"id": call_id, "tool": tool, "ok": True, "value": value}


# -- the three-turn recipe ------------------------------------------------------------------------
async def test_the_three_turn_run_answers_after_exactly_three_requests() -> None:
    server = ScriptedServer(*THREE_TURNS)

    run, records = await run_agent(server)

    assert (run.status, run.errors, run.value) == (
        "completed", (), {"answer": "RED BLUE: 8 characters"}
    )
    assert len(server.requests) == 3
    red_blue = [outcome("red", "uppercase", "RED"), outcome("blue", "uppercase", "BLUE")]
    assert server.inputs == [
        {"state": {"question": QUESTION, "observations": []}, "turn": 1},
        {"state": {"question": QUESTION, "observations": red_blue}, "turn": 2},
        {
            "state": {
                "question": QUESTION,
                "observations": [*red_blue, outcome("count", "count", 8)],
            },
            "turn": 3,
        },
    ]
    assert [r["pipelineId"] for r in records if r["name"] == "pipeline.started"].count(
        "openai-agent/turn"
    ) == 3
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


async def test_traces_hold_the_turns_and_tool_runs_but_neither_the_key_nor_the_question() -> None:
    server = ScriptedServer(*THREE_TURNS)

    run, records = await run_agent(server)

    assert run.status == "completed"
    text = json.dumps(records)
    assert SECRET_KEY not in text
    assert QUESTION not in text
    assert "zebra-quokka-7731" not in text


async def test_a_tool_error_outcome_is_fed_back_and_the_model_recovers() -> None:
    server = ScriptedServer(
        response(tool_call("uppercase", "missing", "gone")),
        response(tool_call("uppercase", "found", "found")),
        response(finish_call("FOUND after NOT_FOUND")),
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
    server = ScriptedServer(response(finish_call("done")))

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
    server = ScriptedServer(response(tool_call("uppercase", word, "big")))

    run, records = await run_agent(server)

    assert (run.status, run.finalized, len(server.requests)) == ("failed", False, 1)
    assert tool_runs(records) == ["big"]
    assert source_code(run) == PROVIDER_BUDGET_EXCEEDED
    assert "Observation history exceeds 16384 UTF-8 bytes" in run.errors[0].format()


async def test_history_over_16_kib_after_three_batches_fails_before_the_fourth_request() -> None:
    """Each batch adds about 5.6 KB: two fit, the third does not."""
    word = "\N{LATIN SMALL LETTER E WITH ACUTE}" * 2800
    server = ScriptedServer(*(response(tool_call("uppercase", word, f"b{i}")) for i in range(3)))

    run, records = await run_agent(server)

    assert (run.status, len(server.requests)) == ("failed", 3)
    assert tool_runs(records) == ["b0", "b1", "b2"]
    assert [len(i["state"]["observations"]) for i in server.inputs] == [0, 1, 2]
    assert "Observation history exceeds 16384 UTF-8 bytes" in run.errors[0].format()


async def test_a_4096_backslash_question_fails_the_body_check_on_the_second_request() -> None:
    """The question fits its own budget, but JSON escaping twice (state string, then body)
    quadruples it; with the tool's echo the second body exceeds 32 KiB."""
    question = "\\" * 4096
    server = ScriptedServer(response(tool_call("uppercase", question, "slashes")), response())

    run, records = await run_agent(server, question)

    assert (run.status, len(server.requests)) == ("failed", 1)
    assert tool_runs(records) == ["slashes"]
    assert source_code(run) == PROVIDER_BUDGET_EXCEEDED
    assert "OpenAI request exceeds 32768 UTF-8 bytes" in run.errors[0].format()


async def test_the_body_budget_accepts_a_body_of_exactly_the_limit() -> None:
    probe = ScriptedServer(response(finish_call("done")))
    await run_agent(probe)
    size = len(probe.requests[0].content)

    at_limit = ScriptedServer(response(finish_call("done")))
    over = ScriptedServer(response(finish_call("done")))
    accepted, _ = await run_agent(at_limit, max_request_bytes=size)
    rejected, _ = await run_agent(over, max_request_bytes=size - 1)

    assert (accepted.status, len(at_limit.requests)) == ("completed", 1)
    assert (rejected.status, len(over.requests)) == ("failed", 0)
    assert f"OpenAI request exceeds {size - 1} UTF-8 bytes" in rejected.errors[0].format()


async def test_the_body_budget_is_checked_before_the_key_is_read(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY")
    server = ScriptedServer()

    too_big, _ = await run_agent(server, max_request_bytes=100)
    no_key, _ = await run_agent(server)

    assert source_code(too_big) == PROVIDER_BUDGET_EXCEEDED
    assert source_code(no_key) == PROVIDER_NOT_CONFIGURED
    assert "OPENAI_API_KEY is required" in no_key.errors[0].format()
    assert server.requests == []


# -- malformed and inadmissible responses ---------------------------------------------------------
def _calls(n: int) -> dict[str, Any]:
    return response(*(tool_call("count", f"w{i}", f"c{i}") for i in range(n)))


MALFORMED = [
    pytest.param(None, PROVIDER_INVALID_RESPONSE,
                 "OpenAI did not return a completed response", id="null-body"),
    pytest.param(
        response(status="incomplete", incomplete_details={"reason": "max_output_tokens"}),
        PROVIDER_INVALID_RESPONSE,
        "OpenAI did not return a completed response (incomplete: max_output_tokens)",
        id="incomplete",
    ),
    pytest.param(response(), PROVIDER_INVALID_RESPONSE, "OpenAI returned no function calls",
                 id="empty-output"),
    pytest.param(response(message(refusal("I can't help with that."))), PROVIDER_REFUSED,
                 "OpenAI refused to answer", id="refusal"),
    pytest.param(response({"type": "function_call"}), PROVIDER_INVALID_RESPONSE,
                 "Invalid OpenAI function call (output item 0)", id="bare-function-call"),
    pytest.param(response(function_call("uppercase", '{"input": "red"', "a")),
                 PROVIDER_INVALID_RESPONSE, "OpenAI function call arguments must be JSON",
                 id="invalid-json-arguments"),
    pytest.param(response(function_call("uppercase", {}, "a")), PROVIDER_INVALID_RESPONSE,
                 "arguments must be an object with exactly the key 'input'", id="empty-arguments"),
    pytest.param(response(function_call("uppercase", {"input": "red", "why": "x"}, "a")),
                 PROVIDER_INVALID_RESPONSE,
                 "arguments must be an object with exactly the key 'input'", id="extra-key"),
    pytest.param(response(tool_call("uppercase", 42, "a")), codes.AGENT_INVALID_DECISION,
                 "uppercase", id="wrong-input-type"),
    pytest.param(response(tool_call("delete", "red", "a")), codes.AGENT_INVALID_DECISION,
                 "Unknown agent tool: 'delete'", id="unknown-tool"),
    pytest.param(response(tool_call("count", "a", "same"), tool_call("count", "b", "same")),
                 codes.AGENT_INVALID_DECISION, "Duplicate agent call id: 'same'",
                 id="duplicate-call-ids"),
    pytest.param(response(tool_call("count", "a", "a"), finish_call("done")),
                 PROVIDER_INVALID_RESPONSE, "OpenAI must finish without other calls",
                 id="finish-mixed-with-a-call"),
    pytest.param(response(finish_call(42)), codes.AGENT_INVALID_DECISION,
                 "Agent finish result was rejected", id="finish-with-a-non-string"),
    pytest.param(_calls(13), codes.AGENT_LIMIT_REACHED, "Agent max_calls=12 exceeded",
                 id="13-calls"),
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
@pytest.mark.parametrize("status", [401, 429, 500])
async def test_an_http_error_fails_once_without_leaking_the_body(
    status: int, caplog: pytest.LogCaptureFixture
) -> None:
    body = {"error": {"message": f"Incorrect API key {BODY_SECRET}", "type": "invalid_request"}}
    server = ScriptedServer(httpx.Response(status, json=body))

    run, records = await run_agent(server)

    assert (run.status, len(server.requests)) == ("failed", 1)
    assert source_code(run) == PROVIDER_REQUEST_FAILED
    assert f"OpenAI request failed (HTTP {status})" in run.errors[0].format()
    said = everything_said(run, records) + caplog.text
    assert BODY_SECRET not in said
    assert SECRET_KEY not in said
    assert QUESTION not in said


async def test_an_invalid_json_body_fails_once_without_leaking_it() -> None:
    server = ScriptedServer(httpx.Response(200, content=f"<html>{BODY_SECRET}".encode()))

    run, records = await run_agent(server)

    assert (run.status, len(server.requests)) == ("failed", 1)
    assert source_code(run) == PROVIDER_INVALID_RESPONSE
    assert "OpenAI returned invalid JSON" in run.errors[0].format()
    assert BODY_SECRET not in everything_said(run, records)


async def test_failures_are_not_retried_by_default_but_max_retries_retries_transient_ones() -> None:
    once = ScriptedServer(httpx.Response(503), response(finish_call("done")))
    twice = ScriptedServer(httpx.Response(503), response(finish_call("done")))

    failed, _ = await run_agent(once)
    retried, _ = await run_agent(twice, max_retries=1)

    assert (failed.status, len(once.requests)) == ("failed", 1)
    assert (retried.status, len(twice.requests)) == ("completed", 2)


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

    server = ScriptedServer(hang)
    token = CancelToken()
    with capture_trace() as trace:
        task = asyncio.create_task(
            openai_agent(server).run({"question": QUESTION}, signal=token, trace=trace)
        )
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

    server = ScriptedServer(slow)

    run, records = await run_agent(server, timeout_s=0.05)

    assert (run.status, len(server.requests)) == ("failed", 1)
    assert source_code(run) == PROVIDER_TIMEOUT
    assert "OpenAI request timed out after 0.05 s" in run.errors[0].format()
    assert tool_runs(records) == []


async def test_two_concurrent_runs_keep_separate_state() -> None:
    """Both first requests are in flight together; each run only ever sees its own outcome."""
    first_requests = 0
    both_asked = asyncio.Event()

    async def reply(request: httpx.Request) -> dict[str, Any]:
        nonlocal first_requests
        state = json.loads(json.loads(request.content)["input"])["state"]
        word = state["question"]
        if not state["observations"]:
            first_requests += 1
            if first_requests == 2:
                both_asked.set()
            await asyncio.wait_for(both_asked.wait(), 30)
            return response(tool_call("uppercase", word, f"up-{word}"))
        [seen] = state["observations"]
        return response(finish_call(f"{seen['id']}={seen['value']}"))

    server = ScriptedServer(reply)
    agent = openai_agent(server)

    alpha, beta = await asyncio.gather(
        agent.run({"question": "alpha"}), agent.run({"question": "beta"})
    )

    assert alpha.value == {"answer": "up-alpha=ALPHA"}
    assert beta.value == {"answer": "up-beta=BETA"}
    assert len(server.requests) == 4


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
