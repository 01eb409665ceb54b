"""The OpenAI Responses adapter: ``decide`` for a real model over plain HTTP (httpx, no SDK).

Use it from YAML by swapping one line::

    decide: {use: tubeless.providers.openai:responses, with: {model: gpt-4.1-mini}}

Each decision is one stateless ``POST {base_url}/responses`` (``store: false``): the
instructions, the current state and turn as a JSON string, one function per capability wrapping
its raw argument in ``{input}``, and the adapter-only ``_finish`` function wrapping the result
schema in ``{result}``; ``tool_choice: "required"``, ``parallel_tool_calls: true``. Tubeless owns
the state: no provider conversation, no replayed reasoning items. The encoded body is checked
against ``max_request_bytes`` before the API key is read; the key is read only then, so loading,
planning, inspecting and validating a project never need it. Each request has a deadline of
``timeout_s`` seconds, is abandoned when the run is cancelled, and is not retried unless
``max_retries`` > 0. Failures are :class:`~tubeless.providers.ProviderError`\\s whose messages
never contain a response body, the key, the question or the state.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import httpx

from tubeless.agent import DecisionContext
from tubeless.providers._budgets import json_text
from tubeless.providers._calls import (
    FunctionSpec,
    ParsedCall,
    compile_instructions,
    decision,
    function_specs,
    parse_arguments,
    strict_problems,
)
from tubeless.providers._errors import (
    PROVIDER_INVALID_RESPONSE,
    PROVIDER_REFUSED,
    ProviderError,
)
from tubeless.providers._http import join_url, setting
from tubeless.providers._settings import (
    ModelUsage,
    adapter_decide,
    adapter_settings,
    count,
    object_at,
)
from tubeless.tracing._spi import OTHER_REASON, recordable_model

__all__ = [
    "DEFAULT_BASE_URL",
    "DEFAULT_MODEL",
    "parse_response",
    "request_body",
    "responses",
    "strict_problems",
    "usage",
]

DEFAULT_BASE_URL = "https://api.openai.com/v1"
DEFAULT_MODEL = "gpt-4.1-mini"
_PROVIDER = "OpenAI"
# Reasons OpenAI gives for an incomplete response; only these are repeated in messages.
_INCOMPLETE_REASONS = frozenset({"max_output_tokens", "content_filter"})
# Every incomplete_details.reason the API documents; any other is recorded as "other".
_RECORDED_REASONS = frozenset({"max_output_tokens", "max_messages", "content_filter", "steered"})

Decide = Callable[[Any, DecisionContext], Awaitable[dict[str, Any]]]


def responses(
    model: str | None = None,
    instructions: str | None = None,
    base_url: str | None = None,
    base_url_env: str | None = "OPENAI_BASE_URL",
    api_key_env: str = "OPENAI_API_KEY",
    model_env: str | None = "OPENAI_MODEL",
    timeout_s: float = 30.0,
    max_request_bytes: int = 32768,
    max_output_tokens: int = 2048,
    max_retries: int = 0,
    transport: httpx.AsyncBaseTransport | None = None,
) -> Decide:
    """A ``decide(state, ctx)`` that asks the OpenAI Responses API for each decision.

    Settings are checked now (so a project with a bad ``with:`` value fails to load); the
    environment is read only when a request is about to be sent.

    Args:
        model: The model; else the variable ``model_env``; else ``gpt-4.1-mini``.
        instructions: A jinja2 template (sandboxed, strict about undefined names) rendered per
            request with ``{input, turn, capabilities}``; ``None`` uses a default paragraph.
        base_url: The API root including ``/v1``; else the variable ``base_url_env``; else
            ``https://api.openai.com/v1``.
        base_url_env: The variable naming the base URL (``None``: not consulted).
        api_key_env: The variable holding the API key, required when a request is sent.
        model_env: The variable naming the model (``None``: not consulted).
        timeout_s: The deadline of each request, in seconds.
        max_request_bytes: The budget for the whole encoded request body, in UTF-8 bytes.
        max_output_tokens: Sent as ``max_output_tokens``.
        max_retries: Retries of transient failures (timeouts, transport errors, HTTP 408, 409,
            429, 5xx); 0, the default, sends each request once.
        transport: An ``httpx`` async transport to send through (tests inject
            ``httpx.MockTransport``); the caller keeps ownership.

    Returns:
        The async ``decide`` callable.

    Raises:
        ValueError: For an argument of the wrong type or range.
        TemplateError: For an instructions template that does not parse.
    """
    factory = "responses"
    settings = adapter_settings(
        factory,
        model=model,
        base_url=base_url,
        base_url_env=base_url_env,
        api_key_env=api_key_env,
        model_env=model_env,
        timeout_s=timeout_s,
        max_request_bytes=max_request_bytes,
        max_output_tokens=max_output_tokens,
        max_retries=max_retries,
        transport=transport,
    )
    render = compile_instructions(instructions, f"{factory}(instructions=...)")

    return adapter_decide(
        provider=_PROVIDER,
        system="openai",
        settings=settings,
        transport=transport,
        render=render,
        model=lambda: setting(model, model_env, DEFAULT_MODEL),
        request_body=request_body,
        api_key_env=api_key_env,
        headers=lambda key: {"Authorization": f"Bearer {key}"},
        url=lambda: join_url(setting(base_url, base_url_env, DEFAULT_BASE_URL), "responses"),
        parse_response=parse_response,
        usage=usage,
    )


def _function(spec: FunctionSpec) -> dict[str, Any]:
    return {
        "type": "function",
        "name": spec.name,
        "description": spec.description,
        "parameters": spec.parameters,
        "strict": spec.strict,
    }


def request_body(
    state: Any, ctx: DecisionContext, *, model: str, instructions: str, max_output_tokens: int
) -> dict[str, Any]:
    """The JSON body of one Responses request for ``state`` at ``ctx.turn``."""
    # After a limit (on_limit="finish") only _finish is offered: the model must answer.
    final = getattr(ctx, "final", False)  # contexts built by hand may not say
    specs = function_specs(() if final else ctx.capabilities, ctx.result_json_schema)
    return {
        "model": model,
        "store": False,
        "max_output_tokens": max_output_tokens,
        "instructions": instructions,
        "input": json_text({"state": state, "turn": ctx.turn}),
        "tools": [_function(spec) for spec in specs],
        "tool_choice": "required",
        "parallel_tool_calls": True,
    }


def _invalid(message: str) -> ProviderError:
    return ProviderError(PROVIDER_INVALID_RESPONSE, message)


def _not_completed(data: Any) -> ProviderError:
    message = "OpenAI did not return a completed response"
    if isinstance(data, dict) and data.get("status") == "incomplete":
        details = data.get("incomplete_details")
        reason = details.get("reason") if isinstance(details, dict) else None
        if isinstance(reason, str) and reason in _INCOMPLETE_REASONS:
            message += f" (incomplete: {reason})"
    return _invalid(message)


def parse_response(data: Any) -> dict[str, Any]:
    """The Tubeless decision in a parsed Responses body (UPSTREAM §5.2).

    ``reasoning`` items and messages without a refusal are ignored; every other item must be
    a ``function_call`` with string ``call_id``, ``name`` and ``arguments``.

    Raises:
        ProviderError: ``PROVIDER_REFUSED`` for a refusal, else ``PROVIDER_INVALID_RESPONSE``.
    """
    if (
        not isinstance(data, dict)
        or data.get("status") != "completed"
        or not isinstance(data.get("output"), list)
    ):
        raise _not_completed(data)
    calls: list[ParsedCall] = []
    for index, item in enumerate(data["output"]):
        if not isinstance(item, dict):
            raise _invalid(f"OpenAI output item {index} is not an object")
        kind = item.get("type")
        if kind == "reasoning":
            continue
        if kind == "message":
            content = item.get("content")
            if not isinstance(content, list) or any(
                isinstance(part, dict) and part.get("type") == "refusal" for part in content
            ):
                raise ProviderError(PROVIDER_REFUSED, "OpenAI refused to answer")
            continue
        call_id, name, arguments = (item.get(k) for k in ("call_id", "name", "arguments"))
        if (
            kind != "function_call"
            or not isinstance(call_id, str)
            or not isinstance(name, str)
            or not isinstance(arguments, str)
        ):
            raise _invalid(f"Invalid OpenAI function call (output item {index})")
        calls.append(
            ParsedCall(id=call_id, name=name, value=parse_arguments(_PROVIDER, name, arguments))
        )
    return decision(_PROVIDER, calls)


def usage(data: Any) -> ModelUsage:
    """Token counts, finish reason and model of a Responses body (trace data, never content).

    ``usage.input_tokens`` and ``usage.output_tokens``; the Responses API has no finish reason,
    so it is ``tool_calls`` for a completed response with function calls, ``stop`` for another
    completed one, and the ``incomplete_details.reason`` of an incomplete one (``other`` when it is
    not one the API documents). The model is kept only when it looks like a model name.
    """
    if not isinstance(data, dict):
        return ModelUsage()
    spent = object_at(data, "usage")
    reasons: tuple[str, ...] = ()
    output = data.get("output")
    if data.get("status") == "completed":
        calls = isinstance(output, list) and any(
            isinstance(item, dict) and item.get("type") == "function_call" for item in output
        )
        reasons = ("tool_calls",) if calls else ("stop",)
    elif isinstance(details := data.get("incomplete_details"), dict):
        reason = details.get("reason")
        if isinstance(reason, str):
            reasons = (reason if reason in _RECORDED_REASONS else OTHER_REASON,)
    return ModelUsage(
        input_tokens=count(spent.get("input_tokens")),
        cached_input_tokens=count(object_at(spent, "input_tokens_details").get("cached_tokens")),
        output_tokens=count(spent.get("output_tokens")),
        finish_reasons=reasons,
        response_model=recordable_model(data.get("model")),
    )
