"""What the Anthropic Messages adapter sends and accepts, checked against the official
``anthropic`` types (a dev dependency only); request bodies as units; factory arguments; and
that project files using the chat or Anthropic adapter load without a key, a request or an SDK."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from anthropic.types import Message, ToolChoiceAnyParam, ToolParam
from anthropic.types.message_create_params import MessageCreateParamsNonStreaming
from inline_snapshot import Is, snapshot
from pydantic import TypeAdapter, ValidationError

from tests.providers.fixtures.anthropic_messages import (
    THREE_TURNS,
    AnthropicServer,
    finish_call,
    message,
    text,
    thinking,
    tool_call,
    tool_use,
)
from tests.providers.fixtures.requests import ECHO, decision_ctx, plain, typed_keys
from tests.providers.fixtures.runs import ROOT, project_agent, swapped_project
from tubeless import errors as codes
from tubeless.errors import TemplateError, deepest_source_code
from tubeless.frozen import freeze
from tubeless.providers import PROVIDER_INVALID_RESPONSE, PROVIDER_REFUSED, ProviderError
from tubeless.providers.anthropic import messages, parse_response, request_body

# -- fixture shapes are real ones -----------------------------------------------------------------
REAL_SHAPES = [
    pytest.param(THREE_TURNS[0], id="turn-1-two-calls"),
    pytest.param(THREE_TURNS[1], id="turn-2-text-then-count"),
    pytest.param(THREE_TURNS[2], id="turn-3-thinking-text-finish"),
    pytest.param(message(), id="empty-content"),
    pytest.param(message(text("I will first"), stop_reason="max_tokens"), id="max-tokens"),
    pytest.param(message(text("No."), stop_reason="refusal"), id="refusal"),
    pytest.param(message(text("Sure."), stop_reason="end_turn"), id="text-only"),
    pytest.param(message(tool_use("uppercase", {}, "a")), id="empty-input"),
    pytest.param(message(tool_use("uppercase", {"input": "red", "why": "x"}, "a")), id="extra-key"),
    pytest.param(message(tool_call("delete", "red", "a")), id="unknown-tool"),
    pytest.param(
        message(thinking(), tool_call("count", "a", "a"), finish_call(42)), id="finish-mixed"
    ),
    pytest.param(
        message({"type": "redacted_thinking", "data": "EmwKAhgB"}, finish_call("x")),
        id="redacted-thinking",
    ),
]


@pytest.mark.parametrize("fixture", REAL_SHAPES)
def test_every_well_formed_fixture_is_a_valid_anthropic_message(fixture: dict[str, Any]) -> None:
    parsed = Message.model_validate(fixture)
    assert parsed.model_dump(mode="json", exclude_unset=True)["content"] == fixture["content"]


@pytest.mark.parametrize(
    "fixture",
    [
        pytest.param(None, id="null"),
        pytest.param([THREE_TURNS[0]], id="list"),
        pytest.param(
            {k: v for k, v in THREE_TURNS[0].items() if k != "content"}, id="missing-content"
        ),
        pytest.param(
            message({"type": "tool_use", "id": "a", "name": "uppercase"}),
            id="tool-use-missing-input",
        ),
        pytest.param(
            message(tool_use("uppercase", '{"input": "red"}', "a")), id="input-as-json-text"
        ),
    ],
)
def test_the_anthropic_types_reject_the_malformed_fixtures_too(fixture: Any) -> None:
    with pytest.raises(ValidationError):
        Message.model_validate(fixture)


async def test_request_bodies_use_the_messages_create_params_fields() -> None:
    server = AnthropicServer(*THREE_TURNS)

    await project_agent(messages(transport=server.transport)).run({"question": "q"})

    assert len(server.bodies) == 3
    for body in server.bodies:
        assert set(body) <= typed_keys(MessageCreateParamsNonStreaming)
        TypeAdapter(MessageCreateParamsNonStreaming).validate_python(body)
        assert set(body["tool_choice"]) <= typed_keys(ToolChoiceAnyParam)
        for tool in body["tools"]:
            assert set(tool) <= typed_keys(ToolParam)
            TypeAdapter(ToolParam).validate_python(tool)


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
            "system": "Be brief.",
            "messages": [
                {
                    "role": "user",
                    "content": '{"state":{"question":"café?","observations":[]},"turn":4}',
                }
            ],
            "tools": [
                {
                    "name": "echo",
                    "description": "Echo.",
                    "input_schema": {
                        "type": "object",
                        "properties": {"input": {"type": "string"}},
                        "required": ["input"],
                        "additionalProperties": False,
                    },
                },
                {
                    "name": "_finish",
                    "description": Is(body["tools"][1]["description"]),
                    "input_schema": {
                        "type": "object",
                        "properties": {"result": {"type": "integer"}},
                        "required": ["result"],
                        "additionalProperties": False,
                    },
                },
            ],
            "tool_choice": {"type": "any", "disable_parallel_tool_use": False},
        }
    )


def test_any_schema_is_sent_as_is_without_a_strict_flag() -> None:
    loose = {"name": "loose", "description": "L.", "input_json_schema": {"type": "object"}}

    body = plain(
        request_body(
            {}, decision_ctx(1, ECHO, loose), model="m", instructions="", max_output_tokens=1
        )
    )

    assert [sorted(t) for t in body["tools"]] == [["description", "input_schema", "name"]] * 3
    assert body["tools"][1]["input_schema"]["properties"]["input"] == {"type": "object"}


# -- parsing as a unit ----------------------------------------------------------------------------
def test_parse_response_maps_tool_use_blocks_in_order_and_finish_alone() -> None:
    continued = parse_response(
        message(
            text("Two calls."), tool_call("count", "a", "c1"), tool_call("uppercase", "b", "c2")
        )
    )
    finished = parse_response(message(finish_call({"any": "value"})))

    assert continued == {
        "kind": "continue",
        "calls": [
            {"id": "c1", "tool": "count", "input": "a"},
            {"id": "c2", "tool": "uppercase", "input": "b"},
        ],
    }
    assert finished == {"kind": "finish", "result": {"any": "value"}}


def test_a_refusal_wins_over_tool_use_blocks() -> None:
    with pytest.raises(ProviderError) as caught:
        parse_response(message(tool_call("count", "a", "a"), stop_reason="refusal"))
    assert caught.value.code == PROVIDER_REFUSED


@pytest.mark.parametrize(
    "reply",
    [
        pytest.param(message(finish_call("x"), stop_reason=["tool_use"]), id="stop-reason"),
        pytest.param(message(finish_call("x"), stop_reason={"a": 1}), id="stop-reason-dict"),
        pytest.param(message({"type": ["text"], "text": "x"}, finish_call("x")), id="block-type"),
        pytest.param(message(finish_call("x"), type=["message"]), id="body-type"),
    ],
)
def test_unhashable_values_where_strings_belong_are_invalid_not_a_crash(reply: Any) -> None:
    with pytest.raises(ProviderError) as caught:
        parse_response(reply)
    assert caught.value.code == PROVIDER_INVALID_RESPONSE


def test_parse_errors_never_quote_what_the_model_sent() -> None:
    secret = "model-said-7f3a"
    for reply in (
        message(tool_use("count", {"input": 1, secret: 2}, "a")),
        message(text(secret), stop_reason="end_turn"),
        message(stop_reason=secret),
        message({"type": secret}),
    ):
        with pytest.raises(ProviderError) as caught:
            parse_response(reply)
        assert caught.value.code == PROVIDER_INVALID_RESPONSE
        assert secret not in str(caught.value)


# -- instructions and factory arguments -----------------------------------------------------------
async def test_instructions_render_into_the_system_prompt() -> None:
    server = AnthropicServer(message(tool_call("uppercase", "a", "a")), message(finish_call("ok")))
    decide = messages(
        instructions="Turn {{ turn }}: {{ input.question }}", transport=server.transport
    )

    await project_agent(decide).run_or_raise({"question": "abc"})

    assert [body["system"] for body in server.bodies] == ["Turn 1: abc", "Turn 2: abc"]


def test_an_instructions_template_that_does_not_parse_fails_in_the_factory() -> None:
    with pytest.raises(TemplateError, match=r"messages\(instructions=\.\.\.\)"):
        messages(instructions="{{ turn ")


async def test_an_undefined_name_in_the_instructions_fails_the_run_before_any_request() -> None:
    server = AnthropicServer()

    run = await project_agent(
        messages(instructions="{{ nothing.here }}", transport=server.transport)
    ).run({"question": "q"})

    assert deepest_source_code(run.errors[0]) == codes.TEMPLATE_INVALID
    assert server.requests == []


@pytest.mark.parametrize(
    ("options", "fragment"),
    [
        pytest.param(
            {"timeout_s": 0}, "messages(timeout_s=...) must be a number > 0", id="timeout"
        ),
        pytest.param({"max_request_bytes": 0}, "messages(max_request_bytes=...)", id="body"),
        pytest.param({"max_output_tokens": 0}, "messages(max_output_tokens=...)", id="tokens"),
        pytest.param({"max_retries": -1}, "must be an integer >= 0", id="retries"),
        pytest.param({"model": ""}, "messages(model=...) must be a nonblank string", id="model"),
        pytest.param({"base_url": 5}, "messages(base_url=...)", id="base-url"),
        pytest.param({"api_key_env": ""}, "messages(api_key_env=...) must name", id="key-env"),
        pytest.param(
            {"api_key_env": None}, "messages(api_key_env=...) must name", id="key-env-none"
        ),
        pytest.param(
            {"anthropic_version": None}, "messages(anthropic_version=...)", id="version-none"
        ),
        pytest.param(
            {"anthropic_version": "2023-06-01\n"},
            "must be printable ASCII",
            id="version-header-injection",
        ),
        pytest.param({"transport": object()}, "httpx.AsyncBaseTransport", id="transport"),
    ],
)
def test_factory_arguments_are_checked_when_the_factory_runs(
    options: dict[str, Any], fragment: str
) -> None:
    with pytest.raises(ValueError) as caught:
        messages(**options)
    assert fragment in str(caught.value)


# -- no key, no request, no SDK -------------------------------------------------------------------
def _clean_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "ANTHROPIC_"))}
    env["OPENAI_BASE_URL"] = "http://127.0.0.1:9/v1"
    env["ANTHROPIC_BASE_URL"] = "http://127.0.0.1:9"
    return env


@pytest.mark.slow
def test_a_project_using_the_adapter_validates_plans_and_inspects_without_a_key(
    tmp_path: Path,
) -> None:
    path, _ = swapped_project(tmp_path, "tubeless.providers.anthropic:messages")
    for command in (("validate", "--resolve"), ("plan",), ("inspect",), ("graph",)):
        done = subprocess.run(
            [sys.executable, "-m", "tubeless", *command, str(path)],
            cwd=ROOT,
            env=_clean_env(),
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert (done.returncode, done.stderr) == (0, ""), command


def test_a_live_run_without_a_key_fails_before_any_request(tmp_path: Path) -> None:
    path, _ = swapped_project(tmp_path, "tubeless.providers.anthropic:messages")

    done = subprocess.run(
        [sys.executable, "-m", "tubeless", "run", str(path), "--question", "hi"],
        cwd=ROOT,
        env=_clean_env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )

    assert done.returncode == 6
    assert "TUBELESS_PROVIDER_NOT_CONFIGURED" in done.stderr
    assert "ANTHROPIC_API_KEY is required" in done.stderr


def test_the_runtime_never_imports_a_provider_sdk(tmp_path: Path) -> None:
    paths = []
    for folder, reference in (
        ("chat", "tubeless.providers.chat:completions"),
        ("anthropic", "tubeless.providers.anthropic:messages"),
    ):
        (tmp_path / folder).mkdir()
        paths.append(swapped_project(tmp_path / folder, reference)[0])
    script = (
        "import sys\n"
        "from tubeless.project import load_project\n"
        f"for path in {[str(p) for p in paths]!r}:\n"
        "    load_project(path).entry().plan()\n"
        "assert 'tubeless.providers.chat' in sys.modules\n"
        "assert 'tubeless.providers.anthropic' in sys.modules\n"
        "assert 'tubeless.providers.openai' not in sys.modules\n"
        "assert 'openai' not in sys.modules, 'the OpenAI SDK was imported'\n"
        "assert 'anthropic' not in sys.modules, 'the Anthropic SDK was imported'\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=ROOT,
        env=_clean_env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
