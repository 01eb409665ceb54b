"""Each adapter records every model request's usage in the trace (a ``step.attempted`` record on
``decide`` with GenAI attributes), and the OpenTelemetry sink makes them ``chat <model>`` spans,
live and from the stored trace alike."""

from __future__ import annotations

import json
from importlib import resources
from typing import Any

import httpx
import jsonschema
import pytest

from tests.fixtures.otel import every_text, memory_provider, span_rows
from tests.providers.fixtures import openai_responses as openai
from tests.providers.fixtures.adapters import ADAPTERS, Adapter
from tests.providers.fixtures.runs import QUESTION, project_agent
from tests.tracing._upstream_shape import problems
from tubeless.testing import capture_trace
from tubeless.tracing import OtelSink
from tubeless.tracing.otel import export_records

#: Per adapter: the usage block of each of its three replies, and what the trace says of them.
USAGE: dict[str, tuple[list[dict[str, Any]], dict[str, Any], list[dict[str, Any]]]] = {
    "responses": (
        [
            {"input_tokens": 310, "output_tokens": 42, "total_tokens": 352},
            {"input_tokens": 402, "output_tokens": 17, "total_tokens": 419},
            {"input_tokens": 455, "output_tokens": 23, "total_tokens": 478},
        ],
        {
            "gen_ai.provider.name": "openai",
            "gen_ai.request.model": "gpt-4.1-mini",
            "gen_ai.response.model": "gpt-4.1-mini-2025-04-14",
        },
        [
            {"in": 310, "out": 42, "reasons": "tool_calls"},
            {"in": 402, "out": 17, "reasons": "tool_calls"},
            {"in": 455, "out": 23, "reasons": "tool_calls"},
        ],
    ),
    "completions": (
        [
            {"prompt_tokens": 300, "completion_tokens": 40, "total_tokens": 340},
            {"prompt_tokens": 390, "completion_tokens": 15, "total_tokens": 405},
            {"prompt_tokens": 440, "completion_tokens": 21, "total_tokens": 461},
        ],
        {
            "gen_ai.provider.name": "openai",
            "gen_ai.request.model": "gpt-4.1-mini",
            "gen_ai.response.model": "gpt-4.1-mini-2025-04-14",
        },
        [
            {"in": 300, "out": 40, "reasons": "tool_calls"},
            {"in": 390, "out": 15, "reasons": "tool_calls"},
            {"in": 440, "out": 21, "reasons": "stop"},
        ],
    ),
    "messages": (
        [
            {"input_tokens": 812, "output_tokens": 64},
            {"input_tokens": 20, "output_tokens": 31, "cache_read_input_tokens": 800},
            {
                "input_tokens": 5,
                "output_tokens": 12,
                "cache_read_input_tokens": 800,
                "cache_creation_input_tokens": 100,
            },
        ],
        {
            "gen_ai.provider.name": "anthropic",
            "gen_ai.request.model": "claude-sonnet-4-5",
            "gen_ai.response.model": "claude-sonnet-4-5-20250929",
        },
        [
            {"in": 812, "out": 64, "reasons": "tool_use"},
            {"in": 820, "out": 31, "reasons": "tool_use"},
            {"in": 905, "out": 12, "reasons": "tool_use"},
        ],
    ),
}


def replies(adapter: Adapter) -> list[dict[str, Any]]:
    """The recipe's three turns, each reply with its usage block."""
    blocks = USAGE[adapter.id][0]
    return [
        {**reply, "usage": block} for reply, block in zip(adapter.three_turns, blocks, strict=True)
    ]


async def traced_run(adapter: Adapter, *sinks: Any, server: Any = None) -> list[dict[str, Any]]:
    server = server or adapter.server(*replies(adapter))
    decide = adapter.factory(transport=server.transport)
    with capture_trace() as trace:
        await project_agent(decide).run({"question": QUESTION}, trace=[trace, *sinks])
    return trace.records


def model_records(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        r
        for r in records
        if r["name"] == "step.attempted" and "gen_ai.operation.name" in r["payload"]["attributes"]
    ]


@pytest.mark.parametrize("adapter", ADAPTERS, ids=lambda a: a.id)
async def test_every_request_is_one_decide_record_with_its_token_usage(adapter: Adapter) -> None:
    records = await traced_run(adapter)

    found = model_records(records)
    fixed, expected = USAGE[adapter.id][1], USAGE[adapter.id][2]
    assert [r["payload"]["attributes"] for r in found] == [
        {
            "gen_ai.operation.name": "chat",
            **fixed,
            "gen_ai.usage.input_tokens": e["in"],
            "gen_ai.usage.output_tokens": e["out"],
            "gen_ai.response.finish_reasons": e["reasons"],
        }
        for e in expected
    ]
    assert [r["stepId"] for r in found] == ["decide"] * 3
    assert all(type(r["durationMs"]) is float and r["durationMs"] >= 0 for r in found)


@pytest.mark.parametrize("adapter", ADAPTERS, ids=lambda a: a.id)
async def test_the_usage_records_stay_readable_by_the_record_schema_and_upstream(
    adapter: Adapter,
) -> None:
    text = resources.files("tubeless.tracing").joinpath("record.schema.json").read_text("utf-8")
    validator = jsonschema.Draft202012Validator(json.loads(text))
    found = model_records(await traced_run(adapter))

    assert [list(validator.iter_errors(r)) for r in found] == [[], [], []]
    assert [problems(r) for r in found] == [[], [], []]


@pytest.mark.parametrize("adapter", ADAPTERS, ids=lambda a: a.id)
async def test_each_request_is_a_chat_span_under_its_turn_live_and_from_the_stored_trace(
    adapter: Adapter,
) -> None:
    provider, exporter = memory_provider()
    with OtelSink(provider) as sink:
        records = await traced_run(adapter, sink)
    later, replayed = memory_provider()
    export_records(json.loads(json.dumps(records)), later)

    rows = span_rows(exporter.get_finished_spans(), records)
    assert span_rows(replayed.get_finished_spans(), records) == rows
    model = USAGE[adapter.id][1]["gen_ai.request.model"]
    chats = [r for r in rows if r["name"].startswith("chat ")]
    assert [(r["name"], r["kind"], rows[r["parent"]]["name"]) for r in chats] == [
        (f"chat {model}", "CLIENT", f"turn {n}") for n in (1, 2, 3)
    ]
    assert [r["attributes"] for r in chats] == [
        {
            "gen_ai.operation.name": "chat",
            **USAGE[adapter.id][1],
            "gen_ai.usage.input_tokens": e["in"],
            "gen_ai.usage.output_tokens": e["out"],
            "gen_ai.response.finish_reasons": [e["reasons"]],
            "tubeless.turn": n,
            "openinference.span.kind": "LLM",
        }
        for n, e in enumerate(USAGE[adapter.id][2], start=1)
    ]
    assert all(rows[r["parent"]]["start"] <= r["start"] <= r["end"] for r in chats)


@pytest.mark.parametrize("adapter", ADAPTERS, ids=lambda a: a.id)
async def test_a_failed_request_is_an_error_chat_span_with_the_provider_code(
    adapter: Adapter,
) -> None:
    server = adapter.server(httpx.Response(500, json=adapter.error_body))
    provider, exporter = memory_provider()
    with OtelSink(provider) as sink:
        records = await traced_run(adapter, sink, server=server)

    rows = span_rows(exporter.get_finished_spans(), records)
    chats = [r for r in rows if r["name"].startswith("chat ")]
    assert [(r["status"], r["attributes"].get("error.type")) for r in chats] == [
        ("ERROR", "TUBELESS_PROVIDER_REQUEST_FAILED")
    ]
    assert "gen_ai.usage.input_tokens" not in chats[0]["attributes"]
    assert rows[0]["status"] == "ERROR"


@pytest.mark.parametrize("adapter", ADAPTERS, ids=lambda a: a.id)
async def test_no_span_holds_the_question_a_tool_value_the_key_or_a_response_body(
    adapter: Adapter,
) -> None:
    provider, exporter = memory_provider()
    with OtelSink(provider) as sink:
        await traced_run(adapter, sink)
    text = every_text(exporter.get_finished_spans())

    for secret in ("zebra-quokka-7731", "RED BLUE", "8 characters", adapter.key):
        assert secret not in text
    assert openai.BODY_SECRET not in text


def test_reading_usage_ignores_what_is_not_a_count() -> None:
    """Negative, boolean, fractional or missing counts and non-string reasons are left out."""
    from tubeless.providers.anthropic import usage as anthropic_usage
    from tubeless.providers.chat import usage as chat_usage
    from tubeless.providers.openai import usage as responses_usage

    bad = {"input_tokens": -1, "output_tokens": True, "prompt_tokens": 1.5}
    nothing = (None, None, (), None, None)
    assert tuple(responses_usage({"usage": bad, "status": "failed"})) == nothing
    assert tuple(chat_usage({"usage": bad, "choices": [{"finish_reason": 3}]})) == nothing
    assert tuple(anthropic_usage({"usage": bad, "stop_reason": None})) == nothing
    assert tuple(responses_usage(None)) == nothing
    incomplete = {"status": "incomplete", "incomplete_details": {"reason": "max_output_tokens"}}
    assert responses_usage(incomplete).finish_reasons == ("max_output_tokens",)
