"""The built-in adapters under token and cost budgets: each request's worst case is reserved
before it is sent, so a request that does not fit is never sent (the fake server counts what
it received), and the real usage is charged after it."""

from __future__ import annotations

import asyncio
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from tests.fixtures.cli import Outcome
from tests.providers.fixtures.adapters import ADAPTERS, Adapter
from tests.providers.fixtures.runs import ROOT
from tubeless import PipelineRun
from tubeless._cli import main
from tubeless.agent import LimitReachedError
from tubeless.errors import AGENT_LIMIT_REACHED, BUDGET_PRICE_UNKNOWN, deepest_source_code
from tubeless.project import load_project
from tubeless.providers import _http
from tubeless.testing import capture_trace

_REAL_CLIENT = _http._new_client


def route_through(monkeypatch: pytest.MonkeyPatch, transport: Any) -> None:
    """Send the project's adapter requests through ``transport`` (again and again in a test)."""
    monkeypatch.setattr(_http, "_new_client", lambda given: _REAL_CLIENT(transport))


_MODULES = {
    "responses": "tubeless.providers.openai:responses",
    "completions": "tubeless.providers.chat:completions",
    "messages": "tubeless.providers.anthropic:messages",
}
_MODELS = {"responses": "gpt-4.1-mini", "completions": "gpt-4.1-mini", "messages": "claude-x"}
MAX_OUT = 64
QUESTION = "Uppercase four words, one per turn."

_PROJECT = """\
version: 1
project: {{id: budgeted}}
python_path: [{root}]
agents:
  budgeted:
    input: {{schema: examples.text:Question}}
    result: {{schema: examples.text:Answer}}
    result_json_schema: {{type: string}}
    initial_state: {{use: tubeless.providers:question_state, with: {{max_bytes: 4096}}}}
    reduce: {{use: tubeless.providers:append_outcomes, with: {{max_bytes: 16384}}}}
    decide:
      use: {use}
      with: {{model: {model}, max_output_tokens: {max_out}}}
    limits: {{max_turns: 8, max_decisions: 8, {limits}}}
    tools:
      uppercase: examples.text:uppercase
{extra}
"""


def _project(tmp_path: Path, adapter: Adapter, limits: str, extra: str = "") -> Path:
    path = tmp_path / f"{adapter.id}.yaml"
    path.write_text(
        _PROJECT.format(
            root=ROOT,
            use=_MODULES[adapter.id],
            model=_MODELS[adapter.id],
            max_out=MAX_OUT,
            limits=limits,
            extra=extra,
        )
    )
    return path


def _replies(adapter: Adapter, *, usage: bool) -> list[Any]:
    bodies = [adapter.reply(adapter.tool_call("uppercase", f"w{i}", f"c{i}")) for i in range(4)]
    bodies.append(adapter.reply(adapter.finish_call("done")))
    for body in bodies:
        if usage:
            # Anthropic's canned replies say 812 / 64; give every API the same small usage.
            if adapter.id == "completions":
                body["usage"] = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
            else:
                body["usage"] = {"input_tokens": 10, "output_tokens": 5}
        else:
            body.pop("usage", None)
    return bodies


def _run(path: Path, **options: Any) -> PipelineRun:
    return asyncio.run(load_project(path).entry().run({"question": QUESTION}, **options))


def _sizes(tmp_path: Path, adapter: Adapter, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The body sizes of the five requests of an unbudgeted run (bodies are deterministic)."""
    server = adapter.server(*_replies(adapter, usage=False))
    route_through(monkeypatch, server.transport)
    run = _run(_project(tmp_path, adapter, "max_calls: 12"))
    assert run.status == "completed", [e.format() for e in run.errors]
    return [len(request.content) for request in server.requests]


def _limit(run: PipelineRun) -> LimitReachedError:
    for error in run.errors:
        current: BaseException | None = error.exception
        pending = [current]
        while pending:
            current = pending.pop()
            while current is not None:
                if isinstance(current, LimitReachedError):
                    return current
                inner = getattr(current, "run", None)
                if isinstance(inner, PipelineRun):
                    pending.extend(e.exception for e in inner.errors)
                current = current.__cause__
    raise AssertionError([e.format() for e in run.errors])


@pytest.mark.parametrize("adapter", ADAPTERS, ids=lambda a: a.id)
def test_a_budget_that_fits_two_requests_never_sends_the_third(
    adapter: Adapter, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sizes = _sizes(tmp_path, adapter, monkeypatch)
    # Without usage data each request keeps its whole reservation: body bytes + max output.
    bound = sizes[0] + sizes[1] + sizes[2] + 3 * MAX_OUT - 1
    server = adapter.server(*_replies(adapter, usage=False))
    route_through(monkeypatch, server.transport)
    run = _run(_project(tmp_path, adapter, f"max_total_tokens: {bound}"))
    assert run.status == "failed"
    assert len(server.requests) == 2
    error = _limit(run)
    assert error.code == AGENT_LIMIT_REACHED
    assert (error.limit, error.bound) == ("max_total_tokens", bound)
    assert error.consumed == sizes[0] + sizes[1] + 2 * MAX_OUT
    assert error.requested == sizes[2] + MAX_OUT


@pytest.mark.parametrize("adapter", ADAPTERS, ids=lambda a: a.id)
def test_on_limit_finish_makes_the_last_request_that_fits_the_final_one(
    adapter: Adapter, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sizes = _sizes(tmp_path, adapter, monkeypatch)
    bound = sizes[0] + sizes[1] + sizes[2] + 3 * MAX_OUT - 1
    replies = _replies(adapter, usage=False)
    server = adapter.server(replies[0], replies[1], replies[4])
    route_through(monkeypatch, server.transport)
    path = _project(tmp_path, adapter, f"max_total_tokens: {bound}, on_limit: finish")
    with capture_trace() as trace:
        run = _run(path, trace=trace)
    assert run.status == "completed", [e.format() for e in run.errors]
    assert run.value == {"answer": "done"}
    assert len(server.requests) == 3
    # The final request offers only _finish, so it is smaller than the refused one.
    assert len(server.requests[2].content) < sizes[2]
    reached = [
        r["payload"]["attributes"]["agent.limitReached"]
        for r in trace.records
        if "agent.limitReached" in r["payload"].get("attributes", {})
    ]
    assert reached == ["max_total_tokens"]


@pytest.mark.parametrize("adapter", ADAPTERS, ids=lambda a: a.id)
def test_real_usage_is_charged_and_the_rest_released(
    adapter: Adapter, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With usage data each request costs 15 tokens, so a budget of two reservations lets
    all five requests through."""
    sizes = _sizes(tmp_path, adapter, monkeypatch)
    bound = 2 * (max(sizes) + MAX_OUT)
    server = adapter.server(*_replies(adapter, usage=True))
    route_through(monkeypatch, server.transport)
    with capture_trace() as trace:
        run = _run(_project(tmp_path, adapter, f"max_total_tokens: {bound}"), trace=trace)
    assert run.status == "completed", [e.format() for e in run.errors]
    assert len(server.requests) == 5
    summaries = [
        r["payload"]["attributes"]
        for r in trace.records
        if "agent.usage.inputTokens" in r["payload"].get("attributes", {})
    ]
    assert [(s["agent.usage.inputTokens"], s["agent.usage.outputTokens"]) for s in summaries] == [
        (10, 5)
    ] * 5


_PRICED = """\
pricing:
  "{provider}:{model}": {{input_per_mtok: 1000, output_per_mtok: 1000}}
"""


@pytest.mark.parametrize("adapter", ADAPTERS, ids=lambda a: a.id)
def test_a_cost_budget_without_a_price_sends_nothing_and_pricing_fixes_it(
    adapter: Adapter, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = adapter.server(*_replies(adapter, usage=True))
    route_through(monkeypatch, server.transport)
    model = "house-model-1"
    text = _project(tmp_path, adapter, "max_cost_usd: '5'").read_text()
    path = tmp_path / "unpriced.yaml"
    path.write_text(text.replace(_MODELS[adapter.id], model))
    run = _run(path)
    assert run.status == "failed"
    assert server.requests == []
    codes = {deepest_source_code(e) for e in run.errors}
    assert BUDGET_PRICE_UNKNOWN in codes

    provider = "anthropic" if adapter.id == "messages" else "openai"
    priced = tmp_path / "priced.yaml"
    priced.write_text(path.read_text() + _PRICED.format(provider=provider, model=model))
    with capture_trace() as trace:
        run = _run(priced, trace=trace)
    assert run.status == "completed", [e.format() for e in run.errors]
    costs = [
        r["payload"]["attributes"]["agent.usage.costUsd"]
        for r in trace.records
        if "agent.usage.costUsd" in r["payload"].get("attributes", {})
    ]
    # 15 tokens at $1000 per million tokens each.
    assert costs == [float(Decimal(15) * 1000 / 1_000_000)] * 5


def test_the_cli_exits_6_naming_the_unknown_price(tmp_path: Path) -> None:
    adapter = ADAPTERS[0]
    text = _project(tmp_path, adapter, "max_cost_usd: '5'").read_text()
    path = tmp_path / "unpriced.yaml"
    path.write_text(text.replace("gpt-4.1-mini", "house-model-1"))
    runner = CliRunner()
    with runner.isolation() as streams:
        code = main(["run", str(path), "--question", "hello"])
    outcome = Outcome(code, streams[0].getvalue().decode(), streams[1].getvalue().decode())
    assert outcome.code == 6
    assert BUDGET_PRICE_UNKNOWN in outcome.err
    assert "'house-model-1'" in outcome.err
    assert "pricing:" in outcome.err


def test_trace_show_meters_the_budget(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    adapter = ADAPTERS[0]
    server = adapter.server(*_replies(adapter, usage=True))
    route_through(monkeypatch, server.transport)
    text = _project(tmp_path, adapter, "max_cost_usd: '5', max_total_tokens: 200000")
    path = tmp_path / "priced.yaml"
    path.write_text(
        text.read_text().replace("gpt-4.1-mini", "house-model-1")
        + _PRICED.format(provider="openai", model="house-model-1")
    )
    trace = tmp_path / "trace.ndjson"
    runner = CliRunner()
    with runner.isolation():
        assert main(["run", str(path), "--question", "hi", "--trace", str(trace)]) == 0
    with runner.isolation() as streams:
        assert main(["trace", "show", str(trace), "--last"]) == 0
    shown = streams[0].getvalue().decode()
    # Five requests of 15 tokens at $1000 per million: $0.075 of $5.00, 75 of 200k tokens.
    assert "agent  finish  budget $0.07 of $5.00, 75 of 200k tokens\n" in shown


def test_otel_agent_spans_carry_the_budget(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.fixtures.otel import memory_provider
    from tubeless.tracing import OtelSink

    adapter = ADAPTERS[0]
    server = adapter.server(*_replies(adapter, usage=True))
    route_through(monkeypatch, server.transport)
    path = _project(tmp_path, adapter, "max_total_tokens: 200000")
    provider, exporter = memory_provider()
    with OtelSink(provider) as sink:
        run = _run(path, trace=sink)
    assert run.status == "completed"
    spans = {span.name: dict(span.attributes or {}) for span in exporter.get_finished_spans()}
    agent = spans["invoke_agent budgeted"]
    assert agent["tubeless.budget.max_total_tokens.bound"] == 200000
    assert agent["tubeless.budget.max_total_tokens.consumed"] == 75
    chat = [a for name, a in spans.items() if name.startswith("chat ")]
    assert chat and chat[0]["gen_ai.usage.input_tokens"] == 10


@pytest.mark.parametrize("adapter", ADAPTERS, ids=lambda a: a.id)
def test_on_limit_finish_keeps_room_for_an_answer(
    adapter: Adapter, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """When what remains covers the next request but not one more after it, the adapter makes
    that request the final one: only ``_finish`` is offered."""
    sizes = _sizes(tmp_path, adapter, monkeypatch)
    r1, r2 = sizes[0] + MAX_OUT, sizes[1] + MAX_OUT
    bound = r1 + r2 + r2 // 2
    replies = _replies(adapter, usage=False)
    server = adapter.server(replies[0], replies[4])
    route_through(monkeypatch, server.transport)
    path = _project(tmp_path, adapter, f"max_total_tokens: {bound}, on_limit: finish")
    run = _run(path)
    assert run.status == "completed", [e.format() for e in run.errors]
    assert len(server.requests) == 2
    offered = server.requests[1].content.decode()
    assert '"uppercase"' not in offered
    assert '"_finish"' in offered


def test_the_live_view_meters_the_budget(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tubeless.reporting._live_model import LiveModel

    adapter = ADAPTERS[0]
    server = adapter.server(*_replies(adapter, usage=True))
    route_through(monkeypatch, server.transport)
    with capture_trace() as trace:
        run = _run(_project(tmp_path, adapter, "max_total_tokens: 100000"), trace=trace)
    assert run.status == "completed"
    model = LiveModel()
    shown = []
    for record in trace.records:
        model.feed(record)
        shown.append(model.meters)
    assert shown[-1] == "75 of 100k tokens"
    assert "30 of 100k tokens" in shown  # after the second decision
