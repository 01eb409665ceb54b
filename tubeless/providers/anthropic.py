"""The Anthropic Messages adapter: ``decide`` for a Claude model over plain HTTP (httpx, no SDK).

Use it from YAML by swapping one line::

    decide: {use: tubeless.providers.anthropic:messages, with: {model: claude-sonnet-4-5}}

Each decision is one stateless ``POST {base_url}/v1/messages`` (the base URL has no ``/v1``):
the instructions as ``system``, one user message with the current state and turn as a JSON
string, one tool per capability whose ``input_schema`` wraps its raw argument in ``{input}``,
and the adapter-only ``_finish`` tool wrapping the result schema in ``{result}``;
``tool_choice: {type: "any", disable_parallel_tool_use: false}`` so the model must call tools
and may call several. The key goes in ``x-api-key`` with an ``anthropic-version`` header.
Budgets, deadline, cancellation, retries and errors are those of
:mod:`tubeless.providers.openai`; messages name ``Anthropic``.
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
    "DEFAULT_ANTHROPIC_VERSION",
    "DEFAULT_BASE_URL",
    "DEFAULT_MODEL",
    "messages",
    "parse_response",
    "request_body",
    "usage",
]

DEFAULT_BASE_URL = "https://api.anthropic.com"
DEFAULT_MODEL = "claude-sonnet-4-5"
DEFAULT_ANTHROPIC_VERSION = "2023-06-01"
_PROVIDER = "Anthropic"
# stop_reason values that carry the decision: "tool_use" is what a forced tool choice gives;
# "end_turn" with tool_use blocks is accepted from compatible servers.
_COMPLETED = frozenset({"tool_use", "end_turn"})
# Reasons of a cut-off answer; only these are repeated in messages.
_INCOMPLETE_REASONS = frozenset({"max_tokens", "model_context_window_exceeded"})
# Every stop_reason the API documents; any other is recorded as "other".
_RECORDED_REASONS = frozenset(
    {
        "end_turn",
        "max_tokens",
        "stop_sequence",
        "tool_use",
        "pause_turn",
        "refusal",
        "model_context_window_exceeded",
    }
)
# Content blocks that carry no call and are ignored (never replayed).
_IGNORED_BLOCKS = frozenset({"text", "thinking", "redacted_thinking"})

Decide = Callable[[Any, DecisionContext], Awaitable[dict[str, Any]]]


def messages(
    model: str | None = None,
    instructions: str | None = None,
    base_url: str | None = None,
    base_url_env: str | None = "ANTHROPIC_BASE_URL",
    api_key_env: str = "ANTHROPIC_API_KEY",
    model_env: str | None = "ANTHROPIC_MODEL",
    timeout_s: float = 30.0,
    max_request_bytes: int = 32768,
    max_output_tokens: int = 2048,
    max_retries: int = 0,
    anthropic_version: str = DEFAULT_ANTHROPIC_VERSION,
    transport: httpx.AsyncBaseTransport | None = None,
) -> Decide:
    """A ``decide(state, ctx)`` that asks the Anthropic Messages API for each decision.

    Settings are checked now (so a project with a bad ``with:`` value fails to load); the
    environment is read only when a request is about to be sent.

    Args:
        model: The model; else the variable ``model_env``; else ``claude-sonnet-4-5``.
        instructions: A jinja2 template (sandboxed, strict about undefined names) rendered per
            request with ``{input, turn, capabilities}``; ``None`` uses a default paragraph.
        base_url: The API root without ``/v1``; else the variable ``base_url_env``; else
            ``https://api.anthropic.com``.
        base_url_env: The variable naming the base URL (``None``: not consulted).
        api_key_env: The variable holding the API key, required when a request is sent.
        model_env: The variable naming the model (``None``: not consulted).
        timeout_s: The deadline of each request, in seconds.
        max_request_bytes: The budget for the whole encoded request body, in UTF-8 bytes.
        max_output_tokens: Sent as ``max_tokens`` (required by the API).
        max_retries: Retries of transient failures (timeouts, transport errors, HTTP 408, 409,
            429, 5xx, which includes Anthropic's 529 "overloaded"); 0, the default, sends each
            request once.
        anthropic_version: Sent as the ``anthropic-version`` header.
        transport: An ``httpx`` async transport to send through (tests inject
            ``httpx.MockTransport``); the caller keeps ownership.

    Returns:
        The async ``decide`` callable.

    Raises:
        ValueError: For an argument of the wrong type or range.
        TemplateError: For an instructions template that does not parse.
    """
    factory = "messages"
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
    if not isinstance(anthropic_version, str) or not anthropic_version.strip():
        raise ValueError(
            f"{factory}(anthropic_version=...) must be a nonblank string, got {anthropic_version!r}"
        )
    if not (anthropic_version.isascii() and anthropic_version.isprintable()):
        raise ValueError(f"{factory}(anthropic_version=...) must be printable ASCII")
    render = compile_instructions(instructions, f"{factory}(instructions=...)")

    return adapter_decide(
        provider=_PROVIDER,
        system="anthropic",
        settings=settings,
        transport=transport,
        render=render,
        model=lambda: setting(model, model_env, DEFAULT_MODEL),
        request_body=request_body,
        api_key_env=api_key_env,
        headers=lambda key: {"x-api-key": str(key), "anthropic-version": anthropic_version},
        url=lambda: join_url(setting(base_url, base_url_env, DEFAULT_BASE_URL), "v1/messages"),
        parse_response=parse_response,
        usage=usage,
    )


def _tool(spec: FunctionSpec) -> dict[str, Any]:
    return {"name": spec.name, "description": spec.description, "input_schema": spec.parameters}


def request_body(
    state: Any, ctx: DecisionContext, *, model: str, instructions: str, max_output_tokens: int
) -> dict[str, Any]:
    """The JSON body of one Messages request for ``state`` at ``ctx.turn``."""
    # After a limit (on_limit="finish") only _finish is offered: the model must answer.
    final = getattr(ctx, "final", False)  # contexts built by hand may not say
    specs = function_specs(() if final else ctx.capabilities, ctx.result_json_schema)
    return {
        "model": model,
        "max_tokens": max_output_tokens,
        "system": instructions,
        "messages": [
            {"role": "user", "content": json_text({"state": state, "turn": ctx.turn})},
        ],
        "tools": [_tool(spec) for spec in specs],
        "tool_choice": {"type": "any", "disable_parallel_tool_use": False},
    }


def _invalid(message: str) -> ProviderError:
    return ProviderError(PROVIDER_INVALID_RESPONSE, message)


def _not_completed(reason: Any = None) -> ProviderError:
    message = "Anthropic did not return a completed response"
    if reason in _INCOMPLETE_REASONS:
        message += f" (incomplete: {reason})"
    return _invalid(message)


def _string(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def parse_response(data: Any) -> dict[str, Any]:
    """The Tubeless decision in a parsed Messages body (UPSTREAM §5.2, Messages shapes).

    The body must be a ``message`` with a ``content`` list. ``stop_reason: refusal`` is a
    refusal; ``max_tokens`` and ``model_context_window_exceeded`` are cut-off answers; only
    ``tool_use`` (or ``end_turn``) carries a decision. ``text`` and ``thinking`` blocks are
    ignored; every other block must be ``tool_use`` with string ``id`` and ``name`` and an
    object ``input`` (already decoded: the wrapped ``{input}`` or ``{result}`` argument).

    Raises:
        ProviderError: ``PROVIDER_REFUSED`` for a refusal, else ``PROVIDER_INVALID_RESPONSE``.
    """
    if (
        not isinstance(data, dict)
        or data.get("type") != "message"
        or not isinstance(data.get("content"), list)
    ):
        raise _not_completed()
    # Only strings name a reason or a block type (and unhashable values must not reach a set).
    stop_reason = _string(data.get("stop_reason"))
    if stop_reason == "refusal":
        raise ProviderError(PROVIDER_REFUSED, "Anthropic refused to answer")
    if stop_reason not in _COMPLETED:
        raise _not_completed(stop_reason)
    calls: list[ParsedCall] = []
    for index, block in enumerate(data["content"]):
        if not isinstance(block, dict):
            raise _invalid(f"Anthropic content block {index} is not an object")
        kind = _string(block.get("type"))
        if kind in _IGNORED_BLOCKS:
            continue
        call_id, name, arguments = (block.get(k) for k in ("id", "name", "input"))
        if (
            kind != "tool_use"
            or not isinstance(call_id, str)
            or not isinstance(name, str)
            or not isinstance(arguments, dict)
        ):
            raise _invalid(f"Invalid Anthropic tool_use block (content block {index})")
        calls.append(
            ParsedCall(
                id=call_id,
                name=name,
                value=parse_arguments(_PROVIDER, name, arguments, what="tool_use input"),
            )
        )
    return decision(_PROVIDER, calls)


def usage(data: Any) -> ModelUsage:
    """Token counts, stop reason and model of a Messages body (never content).

    Input tokens are ``input_tokens`` plus the cache reads and writes Anthropic counts apart
    (``cache_read_input_tokens``, ``cache_creation_input_tokens``), as the GenAI conventions ask.
    A ``stop_reason`` the API does not document is ``other``; the model is kept only when it
    looks like a model name.
    """
    if not isinstance(data, dict):
        return ModelUsage()
    spent = object_at(data, "usage")
    parts = [
        count(spent.get(key))
        for key in ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")
    ]
    stop = _string(data.get("stop_reason"))
    if stop is not None and stop not in _RECORDED_REASONS:
        stop = OTHER_REASON
    return ModelUsage(
        input_tokens=None if parts[0] is None else sum(p or 0 for p in parts),
        cached_input_tokens=parts[1],
        output_tokens=count(spent.get("output_tokens")),
        finish_reasons=() if stop is None else (stop,),
        response_model=recordable_model(data.get("model")),
    )
