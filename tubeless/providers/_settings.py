"""The factory arguments every model adapter takes, checked once when a project compiles, and
the ``decide`` they all return (one request per decision, its usage recorded in the trace)."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

import httpx

from tubeless.agent import NO_USAGE, DecisionContext, Usage
from tubeless.providers._budgets import encode_body, positive_int, positive_number
from tubeless.providers._errors import PROVIDER_INVALID_RESPONSE, ProviderError
from tubeless.providers._http import post_json, require_env

if TYPE_CHECKING:
    from decimal import Decimal

__all__ = [
    "AdapterSettings",
    "ModelUsage",
    "adapter_decide",
    "adapter_settings",
    "count",
    "holds_secret",
    "object_at",
]

#: Keys shorter than this are not looked for in responses: such a value is a placeholder
#: (``ollama``, ``lm-studio``) that a genuine answer may contain, not a secret.
MIN_SECRET_LENGTH = 12


class ModelUsage(NamedTuple):
    """What a response says about itself: token counts, finish reasons, the model that answered.

    Each adapter reads its provider's shape; anything missing or malformed is ``None`` / empty.
    """

    input_tokens: int | None = None
    """All input tokens, those read from the provider's cache included."""
    output_tokens: int | None = None
    finish_reasons: tuple[str, ...] = ()
    response_model: str | None = None
    cached_input_tokens: int | None = None
    """The input tokens read from the provider's cache (priced lower)."""


def object_at(data: dict[str, Any], key: str) -> dict[str, Any]:
    """``data[key]`` if it is a JSON object, else an empty one."""
    value = data.get(key)
    return value if isinstance(value, dict) else {}


def count(value: Any) -> int | None:
    """A token count: a non-negative integer (not a bool), else ``None``."""
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    return None


@dataclass(frozen=True, slots=True)
class AdapterSettings:
    """Checked numbers of one adapter instance."""

    timeout_s: float
    max_request_bytes: int
    max_output_tokens: int
    max_retries: int


def adapter_settings(
    factory: str,
    *,
    model: Any,
    base_url: Any,
    base_url_env: Any,
    api_key_env: Any,
    model_env: Any,
    timeout_s: Any,
    max_request_bytes: Any,
    max_output_tokens: Any,
    max_retries: Any,
    transport: Any,
    key_optional: bool = False,
) -> AdapterSettings:
    """Check an adapter factory's arguments; raises ``ValueError`` naming the bad one.

    Args:
        factory: The factory's name, for messages (``responses``, ``completions``, ...).
        key_optional: ``api_key_env`` may be ``""`` or ``None`` (no key is sent).
        (the rest): The factory's own arguments.
    """
    for name, value in (("model", model), ("base_url", base_url)):
        if value is not None and (not isinstance(value, str) or not value.strip()):
            raise ValueError(f"{factory}({name}=...) must be a nonblank string, got {value!r}")
    key_env = None if key_optional and api_key_env == "" else api_key_env
    for name, value, required in (
        ("base_url_env", base_url_env, False),
        ("api_key_env", key_env, not key_optional),
        ("model_env", model_env, False),
    ):
        if (value is not None or required) and (not isinstance(value, str) or not value.strip()):
            hint = ' (or be "" for no key)' if key_optional and name == "api_key_env" else ""
            raise ValueError(f"{factory}({name}=...) must name an environment variable{hint}")
    if transport is not None and not isinstance(transport, httpx.AsyncBaseTransport):
        raise ValueError(f"{factory}(transport=...) must be an httpx.AsyncBaseTransport")
    return AdapterSettings(
        timeout_s=positive_number(factory, "timeout_s", timeout_s),
        max_request_bytes=positive_int(factory, "max_request_bytes", max_request_bytes),
        max_output_tokens=positive_int(factory, "max_output_tokens", max_output_tokens),
        max_retries=positive_int(factory, "max_retries", max_retries, minimum=0),
    )


def adapter_decide(
    *,
    provider: str,
    system: str,
    settings: AdapterSettings,
    transport: httpx.AsyncBaseTransport | None,
    render: Callable[[DecisionContext], str],
    model: Callable[[], str],
    request_body: Callable[..., dict[str, Any]],
    api_key_env: str | None,
    headers: Callable[[str | None], dict[str, str]],
    url: Callable[[], str],
    parse_response: Callable[[Any], dict[str, Any]],
    usage: Callable[[Any], ModelUsage],
) -> Callable[[Any, DecisionContext], Awaitable[dict[str, Any]]]:
    """The ``decide`` callable every adapter returns: one stateless request per decision.

    The encoded body is checked against its budget before the key (the variable
    ``api_key_env``; ``None``: no key) is read and passed to ``headers``, so a credential is read
    only for a request that will really be sent. A response that holds the key anywhere (a server
    or proxy echoing the ``Authorization`` header) is refused with ``PROVIDER_INVALID_RESPONSE``
    and nothing of it is used or recorded. Every request sent is recorded with
    ``ctx.report_model_request`` (``system`` is its ``gen_ai.provider.name``): its duration
    (retries included), the ``usage`` of the response, and the error code when it failed.
    Requests of one run share one HTTP client, closed when the run ends.

    Under a token or cost budget (``ctx.usage``), the request's worst case is reserved before
    the key is read: input tokens bounded by the encoded body's UTF-8 bytes (no tokenizer
    makes more tokens than bytes), output tokens by ``max_output_tokens``, priced at the
    requested model's prices when a cost budget applies. A reservation that does not fit
    raises ``TUBELESS_AGENT_LIMIT_REACHED`` and nothing is sent. After a response the real
    usage is charged (a response without usage data keeps the whole reservation); a request
    that failed or was abandoned keeps its whole reservation too (it may have been billed).
    """

    async def decide(state: Any, ctx: DecisionContext) -> dict[str, Any]:
        requested = model()
        instructions = render(ctx)
        body = request_body(
            state,
            ctx,
            model=requested,
            instructions=instructions,
            max_output_tokens=settings.max_output_tokens,
        )
        encoded = encode_body(body, settings.max_request_bytes, provider)
        meter: Usage = getattr(ctx, "usage", NO_USAGE)  # contexts built by hand may lack it
        reservation = None
        if meter.budgeted:
            if _last_that_fits(
                ctx, meter, len(encoded), settings.max_output_tokens, system, requested
            ):
                # on_limit: finish keeps room for an answer: what remains could not cover this
                # request and one more, so this one offers only _finish.
                ctx.final = True
                body = request_body(
                    state,
                    ctx,
                    model=requested,
                    instructions=instructions,
                    max_output_tokens=settings.max_output_tokens,
                )
                encoded = encode_body(body, settings.max_request_bytes, provider)
            reservation = meter.reserve(
                input_tokens=len(encoded),
                output_tokens=settings.max_output_tokens,
                provider=system,
                model=requested,
            )
        key = require_env(api_key_env) if api_key_env else None
        request_headers = headers(key)
        started = time.perf_counter()
        try:
            data = await post_json(
                url(),
                encoded,
                headers=request_headers,
                provider=provider,
                signal=ctx.signal,
                timeout_s=settings.timeout_s,
                max_retries=settings.max_retries,
                transport=transport,
                owner=decide,  # one client (connection pool) per adapter instance and run
            )
        except ProviderError as exc:
            _report(ctx, system, requested, started, ModelUsage(), exc.code)
            raise
        spent = usage(data)
        cost = None
        if reservation is not None:
            cost = meter.charge(
                reservation,
                input_tokens=spent.input_tokens,
                cached_input_tokens=spent.cached_input_tokens or 0,
                output_tokens=spent.output_tokens,
                provider=system,
                model=requested,
            )
        if key is not None and holds_secret(data, key):
            refused = ProviderError(
                PROVIDER_INVALID_RESPONSE,
                f"{provider} response contains the API key; it was not used",
            )
            _report(ctx, system, requested, started, ModelUsage(), refused.code)
            raise refused
        try:
            decision = parse_response(data)
        except ProviderError as exc:
            _report(ctx, system, requested, started, spent, exc.code, cost)
            raise
        _report(ctx, system, requested, started, spent, None, cost)
        return decision

    return decide


def _last_that_fits(
    ctx: DecisionContext,
    meter: Usage,
    input_tokens: int,
    output_tokens: int,
    system: str,
    model: str,
) -> bool:
    """Under ``on_limit: finish``, whether this request must be the final one: it fits, but it
    and one more of the same worst case would not."""
    if getattr(ctx, "on_limit", "fail") != "finish" or getattr(ctx, "final", False):
        return False
    worst = {"input_tokens": input_tokens, "output_tokens": output_tokens}
    return meter.fits(**worst, provider=system, model=model) and not meter.fits(
        **worst, provider=system, model=model, times=2
    )


def holds_secret(data: Any, secret: str) -> bool:
    """Whether a parsed JSON value holds ``secret`` in any string or object key.

    Decoded strings are searched, so a JSON escape (``\\u0073k-...``) hides nothing; a
    ``secret`` shorter than :data:`MIN_SECRET_LENGTH` is never found.
    """
    if len(secret) < MIN_SECRET_LENGTH:
        return False
    pending = [data]  # a stack, not recursion: the body may nest as deep as the parser allowed
    while pending:
        value = pending.pop()
        if isinstance(value, str):
            if secret in value:
                return True
        elif isinstance(value, dict):
            pending.extend(value.keys())
            pending.extend(value.values())
        elif isinstance(value, list):
            pending.extend(value)
    return False


def _report(
    ctx: DecisionContext,
    system: str,
    model: str,
    started: float,
    spent: ModelUsage,
    error_type: str | None,
    cost: Decimal | None = None,
) -> None:
    if cost is not None:
        ctx.report_model_request(
            provider=system,
            model=model,
            duration_ms=(time.perf_counter() - started) * 1000.0,
            input_tokens=spent.input_tokens,
            output_tokens=spent.output_tokens,
            finish_reasons=spent.finish_reasons,
            response_model=spent.response_model,
            error_type=error_type,
            cost_usd=cost,
        )
        return
    ctx.report_model_request(
        provider=system,
        model=model,
        duration_ms=(time.perf_counter() - started) * 1000.0,
        input_tokens=spent.input_tokens,
        output_tokens=spent.output_tokens,
        finish_reasons=spent.finish_reasons,
        response_model=spent.response_model,
        error_type=error_type,
    )
