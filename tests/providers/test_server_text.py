"""What a model server writes never carries a credential into a trace (DESIGN §7).

A server or proxy may echo the request's ``Authorization`` (or ``x-api-key``) header into any
field of its answer. Each adapter runs the shipped project against a real 127.0.0.1 server that
does, traced to NDJSON, SQLite and OpenTelemetry at once, and the key must be in none of them:
not in a finish reason, a model name, a call id, a tool name or an error message. Finish reasons
are recorded from each API's closed set (anything else is ``other``) and a response model only
when it looks like a model name.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.fixtures.otel import every_text, memory_provider
from tests.fixtures.processes import HANG_GUARD, cli_env
from tests.providers.fixtures.adapters import ADAPTERS, Adapter
from tests.providers.fixtures.echo_server import MODES, SERVER_TEXT, echo_server
from tests.providers.fixtures.openai_responses import SECRET_KEY
from tests.providers.fixtures.runs import (
    QUESTION,
    ROOT,
    everything_said,
    project_agent,
    swapped_project,
)
from tubeless import PipelineRun
from tubeless.errors import deepest_source_code
from tubeless.tracing import NdjsonSink, OtelSink, SqliteSink, read_trace

#: The adapter reference each API's project uses.
REFERENCE = {
    "responses": "tubeless.providers.openai:responses",
    "completions": "tubeless.providers.chat:completions",
    "messages": "tubeless.providers.anthropic:messages",
}
BASE_URL_ENV = {
    "responses": "OPENAI_BASE_URL",
    "completions": "OPENAI_BASE_URL",
    "messages": "ANTHROPIC_BASE_URL",
}


@pytest.fixture(params=ADAPTERS, ids=lambda adapter: adapter.id)
def adapter(request: pytest.FixtureRequest) -> Adapter:
    return request.param  # type: ignore[no-any-return]


class Traced:
    """One run's error text, its trace records, and the raw bytes of every trace it wrote."""

    def __init__(self, run: PipelineRun, records: list[dict[str, Any]], raw: bytes, spans: str):
        self.run, self.records, self.raw, self.spans = run, records, raw, spans

    @property
    def source_code(self) -> str | None:
        return deepest_source_code(self.run.errors[0]) if self.run.errors else None

    def model_attributes(self) -> list[dict[str, Any]]:
        """The ``gen_ai`` attributes of each model request the trace recorded."""
        return [
            r["payload"]["attributes"]
            for r in self.records
            if r["name"] == "step.attempted"
            and "gen_ai.operation.name" in r["payload"]["attributes"]
        ]

    def holds(self, text: str) -> list[str]:
        """Where ``text`` was found: the trace files, the spans, the run's errors."""
        places = []
        if text.encode() in self.raw:
            places.append("trace files")
        if text in self.spans:
            places.append("spans")
        if text in everything_said(self.run, self.records):
            places.append("run errors and records")
        return places


async def traced_run(adapter: Adapter, base_url: str, tmp_path: Path) -> Traced:
    """The shipped project with ``adapter`` at ``base_url``, traced to three sinks."""
    ndjson, sqlite = tmp_path / "trace.ndjson", tmp_path / "trace.sqlite"
    provider, exporter = memory_provider()
    sinks = [NdjsonSink(ndjson), SqliteSink(sqlite), OtelSink(provider)]
    try:
        decide = adapter.factory(base_url=base_url)
        run = await project_agent(decide).run({"question": QUESTION}, trace=sinks)
    finally:
        for sink in sinks:
            sink.close()
    files = sorted(tmp_path.glob("trace.*"))  # the -wal and -shm of SQLite too, if any are left
    raw = b"".join(path.read_bytes() for path in files)
    records = read_trace(ndjson)
    assert read_trace(sqlite) == records
    return Traced(run, records, raw, every_text(exporter.get_finished_spans()))


# -- the credential --------------------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["fields", "everything", "finish"])
async def test_an_answer_that_echoes_the_key_is_refused_and_the_key_is_in_no_trace(
    adapter: Adapter, mode: str, tmp_path: Path
) -> None:
    with echo_server(adapter.id, mode) as server:
        traced = await traced_run(adapter, server.base_url, tmp_path)

    assert server.requests == 1
    assert adapter.key in server.echoed[0]  # the server really had the key to echo
    assert traced.holds(adapter.key) == []
    assert traced.run.status == "failed"
    assert traced.source_code == "TUBELESS_PROVIDER_INVALID_RESPONSE"
    assert (
        traced.run.errors[0]
        .format()
        .endswith(f"{adapter.label} response contains the API key; it was not used")
    )
    # Nothing of an answer that was not used is recorded, only that the request failed.
    assert traced.model_attributes() == [
        {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": "anthropic" if adapter.id == "messages" else "openai",
            "gen_ai.request.model": "claude-sonnet-4-5"
            if adapter.id == "messages"
            else "gpt-4.1-mini",
            "error.type": "TUBELESS_PROVIDER_INVALID_RESPONSE",
        }
    ]


async def test_an_error_answer_that_echoes_the_key_records_only_its_status(
    adapter: Adapter, tmp_path: Path
) -> None:
    with echo_server(adapter.id, "error") as server:
        traced = await traced_run(adapter, server.base_url, tmp_path)

    status = {"responses": 401, "completions": 500, "messages": 529}[adapter.id]
    assert adapter.key in server.echoed[0]
    assert traced.holds(adapter.key) == []
    assert traced.source_code == "TUBELESS_PROVIDER_REQUEST_FAILED"
    assert traced.run.errors[0].format().endswith(f"{adapter.label} request failed (HTTP {status})")


# -- other text a server chose ---------------------------------------------------------------------
#: What the trace says of the one request each adapter makes to a server whose free strings are
#: :data:`SERVER_TEXT`: known reasons as they are, any other as ``other``, no response model.
SERVER_TEXT_REASONS = {
    ("responses", "fields"): "tool_calls",
    ("responses", "finish"): "other",
    ("completions", "fields"): "tool_calls,other",
    ("completions", "finish"): "other,other",
    ("messages", "fields"): "tool_use",
    ("messages", "finish"): "other",
}


@pytest.mark.parametrize("mode", ["fields", "finish"])
async def test_finish_reasons_outside_the_api_s_set_are_other_and_odd_models_are_left_out(
    adapter: Adapter, mode: str, tmp_path: Path
) -> None:
    with echo_server(adapter.id, mode, echo_text=SERVER_TEXT) as server:
        traced = await traced_run(adapter, server.base_url, tmp_path)

    assert traced.holds("server-chose-3e8b") == []
    [attributes] = traced.model_attributes()
    assert attributes["gen_ai.response.finish_reasons"] == SERVER_TEXT_REASONS[(adapter.id, mode)]
    assert "gen_ai.response.model" not in attributes
    # A 4 KiB call id is refused by the harness, a cut-off answer by the adapter.
    expected = (
        "TUBELESS_AGENT_INVALID_DECISION"
        if mode == "fields"
        else ("TUBELESS_PROVIDER_INVALID_RESPONSE")
    )
    assert traced.source_code == expected


# -- the CLI: stdout, stderr and the trace files of a real process ---------------------------------
@pytest.mark.parametrize("mode", MODES)
def test_the_cli_never_prints_or_records_an_echoed_key(
    adapter: Adapter, mode: str, tmp_path: Path
) -> None:
    project, _ = swapped_project(tmp_path, REFERENCE[adapter.id])
    traces = [tmp_path / "run.ndjson", tmp_path / "run.sqlite"]
    with echo_server(adapter.id, mode) as server:
        done = subprocess.run(
            [sys.executable, "-m", "tubeless", "run", str(project), "--question", "red and blue"]
            + [arg for path in traces for arg in ("--trace", str(path))],
            capture_output=True,
            cwd=ROOT,
            env=cli_env(
                **{adapter.key_env: adapter.key, BASE_URL_ENV[adapter.id]: server.base_url}
            ),
            timeout=HANG_GUARD,
        )

    assert adapter.key in server.echoed[0]
    assert done.returncode == 6, done.stderr
    written = b"".join(path.read_bytes() for path in sorted(tmp_path.glob("run.*")))
    assert adapter.key.encode() not in done.stdout + done.stderr + written
    code = "REQUEST_FAILED" if mode == "error" else "INVALID_RESPONSE"
    assert f"TUBELESS_PROVIDER_{code}".encode() in done.stderr


# -- the pieces: escapes, placeholders, key shapes, other callers, stored traces -------------------
def _escaped(text: str) -> str:
    """``text`` as JSON with every character escaped (``\\u0073\\u006b...``)."""
    return "".join(f"\\u{ord(c):04x}" for c in text)


async def test_a_key_hidden_in_json_escapes_is_found_after_decoding(adapter: Adapter) -> None:
    calls = [adapter.tool_call("uppercase", "red", "a"), adapter.finish_call("x")]
    body = json.dumps(adapter.reply(*calls)).replace('"a"', f'"{_escaped(adapter.key)}"', 1)
    server = adapter.server(httpx.Response(200, content=body.encode()))

    run, records = await adapter.run(server)

    assert (
        run.errors[0]
        .format()
        .endswith(f"{adapter.label} response contains the API key; it was not used")
    )
    assert adapter.key not in everything_said(run, records)


async def test_a_short_placeholder_key_is_not_looked_for(monkeypatch: pytest.MonkeyPatch) -> None:
    """Local servers take any key; a short placeholder may well occur in a genuine answer."""
    monkeypatch.setenv("OPENAI_API_KEY", "lm-studio")
    chat = ADAPTERS[1]
    server = chat.server(
        {**chat.reply(chat.tool_call("uppercase", "lm-studio", "a")), "model": "lm-studio-q4"},
        chat.reply(chat.finish_call("done")),
    )

    run, records = await chat.run(server)

    assert run.status == "completed"
    [first, _] = [
        r["payload"]["attributes"]
        for r in records
        if r["name"] == "step.attempted" and "gen_ai.operation.name" in r["payload"]["attributes"]
    ]
    assert first["gen_ai.response.model"] == "lm-studio-q4"


@pytest.mark.parametrize(
    ("call_id", "name"),
    [
        ("call_sk-proj-0123456789abcdefABCDEF", "uppercase"),  # another key, e.g. a proxy's own
        ("toolu_01", "sk-ant-api03-0123456789abcdef"),
        ("Bearer 0123456789abcdef", "uppercase"),
    ],
)
async def test_call_ids_and_names_shaped_like_keys_are_refused(
    adapter: Adapter, call_id: str, name: str
) -> None:
    server = adapter.server(adapter.reply(adapter.tool_call(name, "red", call_id)))

    run, records = await adapter.run(server)

    assert (
        run.errors[0]
        .format()
        .endswith(f"{adapter.label} call 0 has an id or name shaped like an API key")
    )
    assert deepest_source_code(run.errors[0]) == "TUBELESS_PROVIDER_INVALID_RESPONSE"
    said = everything_said(run, records)
    assert call_id not in said
    assert name == "uppercase" or name not in said


def test_usage_keeps_each_api_s_documented_reasons_and_model_names() -> None:
    # What an adapter keeps, the trace keeps too (else it would say "other" after all).
    from tubeless.providers import anthropic, chat, openai
    from tubeless.providers.anthropic import usage as anthropic_usage
    from tubeless.providers.chat import usage as chat_usage
    from tubeless.providers.openai import usage as responses_usage
    from tubeless.tracing._server_text import KNOWN_FINISH_REASONS

    for module in (openai, chat, anthropic):
        assert module._RECORDED_REASONS <= KNOWN_FINISH_REASONS
    assert {"stop", "tool_calls"} <= KNOWN_FINISH_REASONS  # what the Responses adapter says
    for reason in ("max_output_tokens", "max_messages", "content_filter", "steered"):
        incomplete = {"status": "incomplete", "incomplete_details": {"reason": reason}}
        assert responses_usage(incomplete).finish_reasons == (reason,)
    odd = {"status": "incomplete", "incomplete_details": {"reason": "end_turn"}}
    assert responses_usage(odd).finish_reasons == ("other",)
    choices = [{"finish_reason": r} for r in ("stop", "length", "function_call", "end_turn", "")]
    assert chat_usage({"choices": choices}).finish_reasons == (
        "stop",
        "length",
        "function_call",
        "other",
        "other",
    )
    for reason in ("end_turn", "pause_turn", "refusal", "model_context_window_exceeded"):
        assert anthropic_usage({"stop_reason": reason}).finish_reasons == (reason,)
    assert anthropic_usage({"stop_reason": "tool_calls"}).finish_reasons == ("other",)
    for model, kept in [
        ("gpt-4.1-mini-2025-04-14", True),
        ("llama3.1:8b", True),
        ("hf.co/bartowski/Llama-3.2-3B-Instruct-GGUF:Q4_K_M", True),
        ("m" * 128, True),
        ("m" * 129, False),
        ("sk-proj-0123456789abcdefABCDEF", False),
        ("gpt 4", False),
        ("-gpt", False),
        ("gpt\n4", False),
        ("", False),
    ]:
        expected = model if kept else None
        assert responses_usage({"model": model}).response_model == expected
        assert chat_usage({"model": model}).response_model == expected
        assert anthropic_usage({"model": model}).response_model == expected


def test_model_request_attributes_bound_what_any_caller_reports() -> None:
    """``ctx.report_model_request`` is public: a hand-written adapter gets the same bounds."""
    from tubeless.tracing._otel_spans import model_request_attributes

    attributes = model_request_attributes(
        provider="custom",
        model="my-model",
        finish_reasons=("stop", "Bearer sk-test-SECRET-0b5e7c1d", "STOP", "a,b"),
        response_model="Bearer sk-test-SECRET-0b5e7c1d",
    )

    assert attributes == {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "custom",
        "gen_ai.request.model": "my-model",
        "gen_ai.response.finish_reasons": "stop,other,other,other",
    }


def test_a_stored_trace_from_before_the_bounds_is_exported_with_them() -> None:
    """A trace written by an earlier release may hold a verbatim reason and model."""
    from tubeless.tracing.otel import export_records

    records = _recorded_run()
    leaked = f"Bearer {SECRET_KEY}"
    for record in records:
        attributes = record.get("payload", {}).get("attributes", {})
        if "gen_ai.response.finish_reasons" in attributes:
            attributes["gen_ai.response.finish_reasons"] = f"tool_calls,{leaked}"
            attributes["gen_ai.response.model"] = leaked
    provider, exporter = memory_provider()

    export_records(records, provider)

    spans = exporter.get_finished_spans()
    assert SECRET_KEY not in every_text(spans)
    chats = [dict(s.attributes or {}) for s in spans if s.name.startswith("chat ")]
    assert [a["gen_ai.response.finish_reasons"] for a in chats] == [("tool_calls", "other")] * 3
    assert all("gen_ai.response.model" not in a for a in chats)


def _recorded_run() -> list[dict[str, Any]]:
    import asyncio

    responses = ADAPTERS[0]
    server = responses.server(*responses.three_turns)
    _, records = asyncio.run(responses.run(server))
    return json.loads(json.dumps(records))
