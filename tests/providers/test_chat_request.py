"""What the chat completions adapter sends and accepts, checked against the official ``openai``
types (a dev dependency only); request bodies as units; factory arguments; and that a project
file using the adapter loads, plans and inspects without a key or a request."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from inline_snapshot import Is, snapshot
from openai.types.chat import ChatCompletion, ChatCompletionToolParam
from openai.types.chat.completion_create_params import CompletionCreateParamsNonStreaming
from pydantic import BaseModel, TypeAdapter, ValidationError

from tests.providers.fixtures.chat_completions import (
    THREE_TURNS,
    ChatServer,
    completion,
    finish_call,
    function_call,
    tool_call,
)
from tests.providers.fixtures.requests import ECHO, decision_ctx, plain, typed_keys
from tests.providers.fixtures.runs import ROOT, project_agent, swapped_project
from tubeless import define_agent, define_tool
from tubeless import errors as codes
from tubeless.errors import TemplateError, deepest_source_code
from tubeless.frozen import freeze
from tubeless.providers import PROVIDER_INVALID_RESPONSE, PROVIDER_REFUSED, ProviderError
from tubeless.providers.chat import completions, parse_response, request_body

# -- fixture shapes are real ones -----------------------------------------------------------------
REAL_SHAPES = [
    pytest.param(THREE_TURNS[0], id="turn-1-two-calls"),
    pytest.param(THREE_TURNS[1], id="turn-2-count"),
    pytest.param(THREE_TURNS[2], id="turn-3-text-then-finish"),
    pytest.param(completion(), id="no-tool-calls"),
    pytest.param(completion(finish_reason="length", content="I will first"), id="length"),
    pytest.param(completion(finish_reason="content_filter"), id="content-filter"),
    pytest.param(completion(refusal="No.", finish_reason="stop"), id="refusal"),
    pytest.param(
        completion(function_call("uppercase", '{"input": "red"', "a")), id="unparseable-arguments"
    ),
    pytest.param(completion(function_call("uppercase", '"red"', "a")), id="arguments-not-object"),
    pytest.param(completion(function_call("uppercase", {}, "a")), id="empty-arguments"),
    pytest.param(completion(tool_call("delete", "red", "a")), id="unknown-tool"),
    pytest.param(completion(tool_call("count", "a", "a"), finish_call(42)), id="finish-mixed"),
]


@pytest.mark.parametrize("fixture", REAL_SHAPES)
def test_every_well_formed_fixture_is_a_valid_chat_completion(fixture: dict[str, Any]) -> None:
    parsed = ChatCompletion.model_validate(fixture)
    assert parsed.model_dump(mode="json", exclude_unset=True)["choices"] == fixture["choices"]


@pytest.mark.parametrize(
    "fixture",
    [
        pytest.param(None, id="null"),
        pytest.param([THREE_TURNS[0]], id="list"),
        pytest.param(
            {k: v for k, v in THREE_TURNS[0].items() if k != "choices"}, id="missing-choices"
        ),
        pytest.param(
            completion({"id": "a", "type": "function", "function": {"name": "count"}}),
            id="tool-call-missing-arguments",
        ),
        pytest.param(
            completion({"type": "function", "function": {"name": "c", "arguments": ""}}),
            id="tool-call-missing-id",
        ),
    ],
)
def test_the_openai_types_reject_the_malformed_fixtures_too(fixture: Any) -> None:
    with pytest.raises(ValidationError):
        ChatCompletion.model_validate(fixture)


async def test_request_bodies_use_the_chat_completions_create_params_fields() -> None:
    server = ChatServer(*THREE_TURNS)

    await project_agent(completions(transport=server.transport)).run({"question": "q"})

    assert len(server.bodies) == 3
    for body in server.bodies:
        assert set(body) <= typed_keys(CompletionCreateParamsNonStreaming)
        TypeAdapter(CompletionCreateParamsNonStreaming).validate_python(body)
        for tool in body["tools"]:
            assert set(tool) <= typed_keys(ChatCompletionToolParam)
            TypeAdapter(ChatCompletionToolParam).validate_python(tool)


# -- request bodies as units ----------------------------------------------------------------------
def test_a_request_body_holds_the_state_as_compact_json_with_text_kept() -> None:
    state = freeze({"question": "caf\N{LATIN SMALL LETTER E WITH ACUTE}?", "observations": []})

    body = plain(
        request_body(
            state, decision_ctx(4, ECHO), model="m", instructions="Be brief.", max_output_tokens=64
        )
    )

    assert body == snapshot(
        {
            "model": "m",
            "max_tokens": 64,
            "messages": [
                {"role": "system", "content": "Be brief."},
                {
                    "role": "user",
                    "content": '{"state":{"question":"café?","observations":[]},"turn":4}',
                },
            ],
            "tools": [
                {
                    "type": "function",
                    "function": {
                        "name": "echo",
                        "description": "Echo.",
                        "parameters": {
                            "type": "object",
                            "properties": {"input": {"type": "string"}},
                            "required": ["input"],
                            "additionalProperties": False,
                        },
                        "strict": True,
                    },
                },
                {
                    "type": "function",
                    "function": {
                        "name": "_finish",
                        "description": Is(body["tools"][1]["function"]["description"]),
                        "parameters": {
                            "type": "object",
                            "properties": {"result": {"type": "integer"}},
                            "required": ["result"],
                            "additionalProperties": False,
                        },
                        "strict": True,
                    },
                },
            ],
            "tool_choice": "required",
            "parallel_tool_calls": True,
        }
    )


def test_a_schema_outside_the_strict_subset_is_sent_with_strict_false() -> None:
    loose = {"name": "loose", "description": "L.", "input_json_schema": {"type": "object"}}

    body = plain(
        request_body(
            {}, decision_ctx(1, ECHO, loose), model="m", instructions="", max_output_tokens=1
        )
    )

    assert [(t["function"]["name"], t["function"]["strict"]) for t in body["tools"]] == [
        ("echo", True),
        ("loose", False),
        ("_finish", True),
    ]


# -- parsing as a unit ----------------------------------------------------------------------------
def test_parse_response_maps_calls_in_order_and_finish_alone() -> None:
    continued = parse_response(
        completion(tool_call("count", "a", "c1"), tool_call("uppercase", "b", "c2"))
    )
    finished = parse_response(completion(finish_call({"any": "value"})))

    assert continued == {
        "kind": "continue",
        "calls": [
            {"id": "c1", "tool": "count", "input": "a"},
            {"id": "c2", "tool": "uppercase", "input": "b"},
        ],
    }
    assert finished == {"kind": "finish", "result": {"any": "value"}}


def test_a_refusal_wins_over_tool_calls() -> None:
    with pytest.raises(ProviderError) as caught:
        parse_response(completion(tool_call("count", "a", "a"), refusal="No."))
    assert caught.value.code == PROVIDER_REFUSED


@pytest.mark.parametrize(
    "reply",
    [
        pytest.param(completion(finish_call("x"), finish_reason=["stop"]), id="finish-reason"),
        pytest.param(
            completion(
                choices=[{"message": {"tool_calls": [finish_call("x")]}, "finish_reason": {"a": 1}}]
            ),
            id="finish-reason-dict",
        ),
        pytest.param(
            completion({"id": "a", "type": ["function"], "function": {}}), id="tool-call-type"
        ),
    ],
)
def test_unhashable_values_where_strings_belong_are_invalid_not_a_crash(reply: Any) -> None:
    with pytest.raises(ProviderError) as caught:
        parse_response(reply)
    assert caught.value.code == PROVIDER_INVALID_RESPONSE


def test_parse_errors_never_quote_what_the_model_sent() -> None:
    secret = "model-said-7f3a"
    for reply in (
        completion(function_call("count", "{" + secret, "a")),
        completion(function_call("count", {"input": 1, secret: 2}, "a")),
        completion(content=secret, finish_reason="stop"),
        completion(finish_reason=secret),
    ):
        with pytest.raises(ProviderError) as caught:
            parse_response(reply)
        assert caught.value.code == PROVIDER_INVALID_RESPONSE
        assert secret not in str(caught.value)


# -- instructions and factory arguments -----------------------------------------------------------
async def test_instructions_render_into_the_system_message() -> None:
    server = ChatServer(completion(tool_call("uppercase", "a", "a")), completion(finish_call("ok")))
    decide = completions(
        instructions="Turn {{ turn }}: {{ input.question }}", transport=server.transport
    )

    await project_agent(decide).run_or_raise({"question": "abc"})

    assert [body["messages"][0]["content"] for body in server.bodies] == [
        "Turn 1: abc",
        "Turn 2: abc",
    ]


def test_an_instructions_template_that_does_not_parse_fails_in_the_factory() -> None:
    with pytest.raises(TemplateError, match=r"completions\(instructions=\.\.\.\)"):
        completions(instructions="{{ turn ")


async def test_an_undefined_name_in_the_instructions_fails_the_run_before_any_request() -> None:
    server = ChatServer()

    run = await project_agent(
        completions(instructions="{{ nothing.here }}", transport=server.transport)
    ).run({"question": "q"})

    assert deepest_source_code(run.errors[0]) == codes.TEMPLATE_INVALID
    assert server.requests == []


@pytest.mark.parametrize(
    ("options", "fragment"),
    [
        pytest.param(
            {"timeout_s": 0}, "completions(timeout_s=...) must be a number > 0", id="timeout"
        ),
        pytest.param({"max_request_bytes": 0}, "completions(max_request_bytes=...)", id="body"),
        pytest.param({"max_output_tokens": 2.5}, "completions(max_output_tokens=...)", id="tokens"),
        pytest.param({"max_retries": -1}, "must be an integer >= 0", id="retries"),
        pytest.param(
            {"model": " "}, "completions(model=...) must be a nonblank string", id="model"
        ),
        pytest.param({"base_url": 5}, "completions(base_url=...)", id="base-url"),
        pytest.param(
            {"api_key_env": " "},
            'completions(api_key_env=...) must name an environment variable (or be "" for no key)',
            id="key-env",
        ),
        pytest.param({"api_key_env": 0}, "completions(api_key_env=...)", id="key-env-number"),
        pytest.param({"model_env": ""}, "completions(model_env=...) must name", id="model-env"),
        pytest.param({"transport": object()}, "httpx.AsyncBaseTransport", id="transport"),
    ],
)
def test_factory_arguments_are_checked_when_the_factory_runs(
    options: dict[str, Any], fragment: str
) -> None:
    with pytest.raises(ValueError) as caught:
        completions(**options)
    assert fragment in str(caught.value)


class Loose(BaseModel):
    name: str
    size: int = 3


async def test_a_tool_outside_the_strict_subset_is_offered_with_strict_false_and_runs() -> None:
    async def run(value: Loose, ctx: Any) -> str:
        return f"{value.name}:{value.size}"

    async def same(value: str, ctx: Any) -> str:
        return value

    server = ChatServer(
        completion(tool_call("loose", {"name": "n"}, "a")),
        completion(finish_call("done")),
    )
    agent = define_agent(
        id="mixed",
        input_schema=dict,
        result_schema=str,
        initial_state=lambda validated: {"observations": []},
        decide=completions(transport=server.transport),
        reduce=lambda state, outcomes: {"observations": [*state["observations"], *outcomes]},
        tools={
            "closed": define_tool(description="c", input_schema=str, output_schema=str, run=same),
            "loose": define_tool(description="l", input_schema=Loose, output_schema=str, run=run),
        },
    )

    assert await agent.run_or_raise({}) == "done"
    offered = [t["function"] for t in server.bodies[0]["tools"]]
    assert [(function["name"], function["strict"]) for function in offered] == [
        ("closed", True),
        ("loose", False),
        ("_finish", True),
    ]
    assert server.inputs[1]["state"]["observations"][0]["value"] == "n:3"


# -- no key, no request ---------------------------------------------------------------------------
@pytest.mark.slow
def test_a_project_using_the_adapter_loads_plans_and_inspects_without_a_key(
    tmp_path: Path,
) -> None:
    path, _ = swapped_project(tmp_path, "tubeless.providers.chat:completions")
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENAI_")}
    env["OPENAI_BASE_URL"] = "http://127.0.0.1:9/v1"
    for command in (("validate", "--resolve"), ("plan",), ("inspect",), ("graph",)):
        done = subprocess.run(
            [sys.executable, "-m", "tubeless", *command, str(path)],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert (done.returncode, done.stderr) == (0, ""), command
