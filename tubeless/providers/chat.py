"""The OpenAI-compatible chat completions adapter: ``decide`` over any ``/v1/chat/completions``.

Use it from YAML by swapping one line::

    decide: {use: tubeless.providers.chat:completions, with: {model: llama3.1}}

It speaks the Chat Completions API that OpenAI and most local servers (vLLM, Ollama, LM Studio,
llama.cpp) share, so ``base_url`` may point at a local server (``http://localhost:11434/v1``)
and ``api_key_env: ""`` sends no key. Each decision is one stateless ``POST
{base_url}/chat/completions``: a system message with the instructions, a user message with the
current state and turn as a JSON string, one function tool per capability wrapping its raw
argument in ``{input}``, and the adapter-only ``_finish`` function wrapping the result schema in
``{result}``; ``tool_choice: "required"``, ``parallel_tool_calls: true``, and ``max_tokens`` (the
name every compatible server accepts; OpenAI's reasoning models want ``max_completion_tokens``
and are better served by the Responses adapter). Budgets, deadline, cancellation, retries and
errors are those of :mod:`tubeless.providers.openai`; messages name ``Chat completions``.
"""

from __future__ import annotations

import re
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
    "completions",
    "parse_response",
    "request_body",
    "usage",
]

DEFAULT_BASE_URL = "https://api.openai.com/v1"
DEFAULT_MODEL = "gpt-4.1-mini"
_PROVIDER = "Chat completions"
# finish_reason values that carry the decision: OpenAI reports "stop" rather than "tool_calls"
# when the tool choice is forced, and so do several compatible servers.
_COMPLETED = frozenset({"tool_calls", "stop"})
# Reasons of a cut-off answer; only these are repeated in messages.
_INCOMPLETE_REASONS = frozenset({"length", "content_filter"})
# Every finish_reason the API documents; any other is recorded as "other".
_RECORDED_REASONS = frozenset({"stop", "length", "tool_calls", "content_filter", "function_call"})

Decide = Callable[[Any, DecisionContext], Awaitable[dict[str, Any]]]


def completions(
    model: str | None = None,
    instructions: str | None = None,
    base_url: str | None = None,
    base_url_env: str | None = "OPENAI_BASE_URL",
    api_key_env: str | None = "OPENAI_API_KEY",
    model_env: str | None = "OPENAI_MODEL",
    timeout_s: float = 30.0,
    max_request_bytes: int = 32768,
    max_output_tokens: int = 2048,
    max_retries: int = 0,
    transport: httpx.AsyncBaseTransport | None = None,
    provider: str = "openai",
) -> Decide:
    """A ``decide(state, ctx)`` that asks an OpenAI-compatible chat endpoint for each decision.

    Settings are checked now (so a project with a bad ``with:`` value fails to load); the
    environment is read only when a request is about to be sent.

    Args:
        model: The model; else the variable ``model_env``; else ``gpt-4.1-mini``.
        instructions: A jinja2 template (sandboxed, strict about undefined names) rendered per
            request with ``{input, turn, capabilities}``; ``None`` uses a default paragraph.
        base_url: The API root including ``/v1``; else the variable ``base_url_env``; else
            ``https://api.openai.com/v1``.
        base_url_env: The variable naming the base URL (``None``: not consulted).
        api_key_env: The variable holding the key, required when a request is sent and sent
            as ``Authorization: Bearer <key>``; ``""`` or ``None``: no key and no header (local
            servers).
        model_env: The variable naming the model (``None``: not consulted).
        timeout_s: The deadline of each request, in seconds.
        max_request_bytes: The budget for the whole encoded request body, in UTF-8 bytes.
        max_output_tokens: Sent as ``max_tokens``.
        max_retries: Retries of transient failures (timeouts, transport errors, HTTP 408, 409,
            429, 5xx); 0, the default, sends each request once.
        transport: An ``httpx`` async transport to send through (tests inject
            ``httpx.MockTransport``); the caller keeps ownership.
        provider: Who serves the model: its ``gen_ai.provider.name`` in traces and the
            ``<provider>:<model>`` under which a cost budget looks its price up (``openai``;
            e.g. ``groq``, ``mistral``, or a name of your own priced in ``pricing:``).

    Returns:
        The async ``decide`` callable.

    Raises:
        ValueError: For an argument of the wrong type or range.
        TemplateError: For an instructions template that does not parse.
    """
    factory = "completions"
    if not isinstance(provider, str) or not re.fullmatch(
        r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}", provider
    ):
        raise ValueError(f"{factory}(provider=...) must be a name such as 'openai'")
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
        key_optional=True,
    )
    render = compile_instructions(instructions, f"{factory}(instructions=...)")

    return adapter_decide(
        provider=_PROVIDER,
        system=provider,
        settings=settings,
        transport=transport,
        render=render,
        model=lambda: setting(model, model_env, DEFAULT_MODEL),
        request_body=request_body,
        api_key_env=api_key_env or None,
        headers=lambda key: {"Authorization": f"Bearer {key}"} if key else {},
        url=lambda: join_url(setting(base_url, base_url_env, DEFAULT_BASE_URL), "chat/completions"),
        parse_response=parse_response,
        usage=usage,
    )


def _tool(spec: FunctionSpec) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": spec.name,
            "description": spec.description,
            "parameters": spec.parameters,
            "strict": spec.strict,
        },
    }


def request_body(
    state: Any, ctx: DecisionContext, *, model: str, instructions: str, max_output_tokens: int
) -> dict[str, Any]:
    """The JSON body of one chat completions request for ``state`` at ``ctx.turn``."""
    # After a limit (on_limit="finish") only _finish is offered: the model must answer.
    final = getattr(ctx, "final", False)  # contexts built by hand may not say
    specs = function_specs(() if final else ctx.capabilities, ctx.result_json_schema)
    return {
        "model": model,
        "max_tokens": max_output_tokens,
        "messages": [
            {"role": "system", "content": instructions},
            {"role": "user", "content": json_text({"state": state, "turn": ctx.turn})},
        ],
        "tools": [_tool(spec) for spec in specs],
        "tool_choice": "required",
        "parallel_tool_calls": True,
    }


def _invalid(message: str) -> ProviderError:
    return ProviderError(PROVIDER_INVALID_RESPONSE, message)


def _not_completed(reason: Any = None) -> ProviderError:
    message = "Chat completions did not return a completed response"
    if reason in _INCOMPLETE_REASONS:
        message += f" (incomplete: {reason})"
    return _invalid(message)


def _message(data: Any) -> tuple[dict[str, Any], Any]:
    """The first choice's message and finish reason, or the not-completed error."""
    if not isinstance(data, dict):
        raise _not_completed()
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise _not_completed()
    message = choices[0].get("message")
    if not isinstance(message, dict):
        raise _not_completed()
    reason = choices[0].get("finish_reason")
    # Only a string can name a reason (and an unhashable value must not reach a set lookup).
    return message, reason if isinstance(reason, str) else None


def parse_response(data: Any) -> dict[str, Any]:
    """The Tubeless decision in a parsed chat completions body (UPSTREAM §5.2, chat shapes).

    Only ``choices[0]`` is read. Its ``message.refusal`` is a refusal; its ``finish_reason``
    must be ``tool_calls`` or ``stop`` (``length`` and ``content_filter`` are cut-off
    answers); ``message.content`` text is ignored; every entry of ``message.tool_calls`` must
    be ``{id, type: "function", function: {name, arguments}}`` with string ``id``, ``name``
    and JSON-text ``arguments``.

    Raises:
        ProviderError: ``PROVIDER_REFUSED`` for a refusal, else ``PROVIDER_INVALID_RESPONSE``.
    """
    message, finish_reason = _message(data)
    if message.get("refusal"):
        raise ProviderError(PROVIDER_REFUSED, "Chat completions refused to answer")
    if finish_reason not in _COMPLETED:
        raise _not_completed(finish_reason)
    tool_calls = message.get("tool_calls")
    if tool_calls is None:
        tool_calls = []
    if not isinstance(tool_calls, list):
        raise _invalid("Chat completions tool_calls is not a list")
    calls: list[ParsedCall] = []
    for index, item in enumerate(tool_calls):
        function = item.get("function") if isinstance(item, dict) else None
        if not isinstance(item, dict) or not isinstance(function, dict):
            raise _invalid(f"Invalid Chat completions tool call (tool call {index})")
        call_id, name, arguments = item.get("id"), function.get("name"), function.get("arguments")
        if (
            item.get("type") != "function"
            or not isinstance(call_id, str)
            or not isinstance(name, str)
            or not isinstance(arguments, str)
        ):
            raise _invalid(f"Invalid Chat completions tool call (tool call {index})")
        calls.append(
            ParsedCall(id=call_id, name=name, value=parse_arguments(_PROVIDER, name, arguments))
        )
    return decision(_PROVIDER, calls)


def usage(data: Any) -> ModelUsage:
    """Token counts, finish reasons and model of a chat completions body (never content):
    ``usage.prompt_tokens``, ``usage.completion_tokens``, each choice's ``finish_reason``
    (``other`` for one the API does not document), and the model when it looks like one."""
    if not isinstance(data, dict):
        return ModelUsage()
    spent = object_at(data, "usage")
    choices = data.get("choices")
    if not isinstance(choices, list):
        choices = []
    reasons = tuple(
        reason if reason in _RECORDED_REASONS else OTHER_REASON
        for reason in (c.get("finish_reason") for c in choices if isinstance(c, dict))
        if isinstance(reason, str)
    )
    return ModelUsage(
        input_tokens=count(spent.get("prompt_tokens")),
        cached_input_tokens=count(object_at(spent, "prompt_tokens_details").get("cached_tokens")),
        output_tokens=count(spent.get("completion_tokens")),
        finish_reasons=reasons,
        response_model=recordable_model(data.get("model")),
    )
