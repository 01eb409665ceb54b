"""One JSON POST to a model provider: deadline, cancellation, optional retries, no body leaks.

API shared by the adapters (``openai``, ``chat`` and ``anthropic``)::

    body = encode_body(payload, max_request_bytes, "OpenAI")       # _budgets: before the key
    key = require_env(api_key_env)                                  # "<NAME> is required"
    data = await post_json(
        join_url(setting(base_url, base_url_env, DEFAULT), "responses"),
        body,
        headers={"Authorization": f"Bearer {key}"},
        provider="OpenAI",
        signal=ctx.signal,
        timeout_s=30.0,
        max_retries=0,
        transport=None,               # or an httpx.AsyncBaseTransport, e.g. httpx.MockTransport
        owner=adapter,                # one client per owner and run (None: one per request)
    )

:func:`post_json` sends ``body`` once (plus ``max_retries`` retries of transient failures) and
returns the parsed JSON of a 2xx answer, which may be any JSON value (``None`` for ``null``):
the adapter checks its shape. Each attempt has its own deadline of ``timeout_s`` seconds and
is raced against ``signal``: when the run is cancelled the request is abandoned (its task
cancelled and awaited, so nothing is left running) and :class:`RunCancelledError` is raised,
which the harness records as a cancelled step. Failures are
:class:`~tubeless.providers.ProviderError`\\s:

- ``PROVIDER_REQUEST_FAILED``: ``"<provider> request failed (HTTP <status>)"`` (``.status``
  set; the body is never read) or ``"<provider> request failed (<ExceptionType>)"`` for
  transport errors;
- ``PROVIDER_TIMEOUT``: ``"<provider> request timed out after <timeout_s> s"``;
- ``PROVIDER_INVALID_RESPONSE``: ``"<provider> returned invalid JSON"``, or a body larger than
  ``max_response_bytes``.

Retries (only when ``max_retries > 0``; the default is none) cover transport errors, timeouts
and HTTP 408, 409, 429 and 5xx, after a cancellable back-off of 0.5 s, 1 s, 2 s, ... (at most
8 s), each scaled by a random factor between 0.5 and 1 (jitter, so that runs failing together do
not retry together). A 429 or 503 answer's ``Retry-After`` (seconds or an HTTP date) replaces
the back-off; one asking for more than :data:`MAX_RETRY_AFTER_S` is not waited for: the
failure is raised at once.

Connections: one ``httpx.AsyncClient`` (its pool, keep-alive) per ``owner`` (an adapter
instance) and run tree, made by the first request and closed when the root run ends
(:func:`tubeless.pipeline._resources.run_resource`); outside a run, or without an owner, each
request opens and closes its own. Clients honour proxy settings from the environment. The
``transport`` is the caller's: it is used as is and never closed.
"""

from __future__ import annotations

import asyncio
import email.utils
import json
import math
import os
import random
import time
from collections.abc import AsyncIterator, Callable, Hashable
from contextlib import asynccontextmanager
from typing import Any

import httpx

from tubeless.pipeline import CancelToken
from tubeless.pipeline._spi import RunCancelledError, run_resource
from tubeless.providers._errors import (
    PROVIDER_INVALID_RESPONSE,
    PROVIDER_NOT_CONFIGURED,
    PROVIDER_REQUEST_FAILED,
    PROVIDER_TIMEOUT,
    ProviderError,
)

__all__ = [
    "MAX_RESPONSE_BYTES",
    "MAX_RETRY_AFTER_S",
    "join_url",
    "post_json",
    "require_env",
    "setting",
]

#: The largest response body read (after content decoding); larger ones fail the request.
MAX_RESPONSE_BYTES = 4 * 1024 * 1024

#: The longest ``Retry-After`` waited for; a server asking for more fails the request at once.
MAX_RETRY_AFTER_S = 60.0

_RETRY_STATUSES = frozenset({408, 409, 429})
#: Statuses whose ``Retry-After`` header is honoured.
_RETRY_AFTER_STATUSES = frozenset({429, 503})
_MAX_BACKOFF_S = 8.0
#: The random factor source of the back-off (tests replace it).
_jitter: Callable[[], float] = random.random


def setting(value: str | None, env_name: str | None, default: str) -> str:
    """``value`` if given, else the nonblank environment variable ``env_name``, else ``default``.

    Read when a request is about to be sent, never when a project is loaded.
    """
    if value is not None:
        return value
    if env_name:
        from_env = os.environ.get(env_name, "").strip()
        if from_env:
            return from_env
    return default


def require_env(name: str) -> str:
    """The environment variable ``name``; ``PROVIDER_NOT_CONFIGURED`` if blank or not ASCII.

    The message reads ``"<name> is required ..."`` and never includes any value.
    """
    value = os.environ.get(name, "").strip()
    if not value:
        raise ProviderError(
            PROVIDER_NOT_CONFIGURED,
            f"{name} is required to send a model request; set it in the environment",
        )
    if not (value.isascii() and value.isprintable()):
        # Checked here because httpx's own header error would quote the offending character.
        raise ProviderError(
            PROVIDER_NOT_CONFIGURED, f"{name} must contain only printable ASCII characters"
        )
    return value


def join_url(base_url: str, path: str) -> str:
    """``base_url`` and ``path`` joined by exactly one slash."""
    return base_url.rstrip("/") + "/" + path.lstrip("/")


async def post_json(
    url: str,
    body: bytes,
    *,
    headers: dict[str, str],
    provider: str,
    signal: CancelToken,
    timeout_s: float,
    max_retries: int = 0,
    transport: httpx.AsyncBaseTransport | None = None,
    max_response_bytes: int = MAX_RESPONSE_BYTES,
    owner: Hashable | None = None,
) -> Any:
    """POST ``body`` (JSON bytes) to ``url`` and return the parsed JSON of a 2xx answer.

    Args:
        url: The full endpoint URL.
        body: The encoded JSON request (already checked against its byte budget).
        headers: Extra headers (credentials); ``Content-Type`` and ``Accept`` are added.
        provider: The name used in error messages, e.g. ``"OpenAI"``.
        signal: The run's cancellation token; cancelling it abandons the request.
        timeout_s: The deadline of each attempt, in seconds.
        max_retries: Retries of transient failures (0: none).
        transport: An httpx transport to send through (tests use ``httpx.MockTransport``).
        max_response_bytes: The largest body read.
        owner: Who shares a client across requests of one run (an adapter instance).

    Returns:
        The parsed JSON value.

    Raises:
        ProviderError: See the module docstring.
        RunCancelledError: When ``signal`` is cancelled before or during the request.
    """
    all_headers = {
        "Content-Type": "application/json",
        "Accept": "application/json",
        **headers,
    }
    attempt = 0
    async with _client(owner, transport) as client:
        while True:
            signal.raise_if_cancelled()
            try:
                return await _race(
                    _send(client, url, body, all_headers, provider, timeout_s, max_response_bytes),
                    signal=signal,
                    timeout_s=timeout_s,
                    provider=provider,
                )
            except ProviderError as exc:
                if attempt >= max_retries or not _retryable(exc):
                    raise
                delay = _delay(attempt + 1, exc)
                if delay is None:
                    raise
            attempt += 1
            await _pause(signal, delay)


async def _pause(signal: CancelToken, seconds: float) -> None:
    """The cancellable wait before a retry (tests replace it)."""
    await signal.sleep(seconds)


def _delay(attempt: int, error: ProviderError) -> float | None:
    """Seconds to wait before retry ``attempt`` (from 1); ``None``: too long, do not retry."""
    retry_after = getattr(error, "_retry_after", None)
    if isinstance(retry_after, float):
        return retry_after if retry_after <= MAX_RETRY_AFTER_S else None
    base = min(0.5 * 2.0 ** (attempt - 1), _MAX_BACKOFF_S)
    return base * (0.5 + 0.5 * _jitter())


def _retry_after(response: httpx.Response) -> float | None:
    """The ``Retry-After`` of a 429 or 503 answer in seconds (``None``: absent or unreadable)."""
    if response.status_code not in _RETRY_AFTER_STATUSES:
        return None
    value = response.headers.get("Retry-After", "").strip()
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError):
            return None
        seconds = when.timestamp() - time.time()
    return max(0.0, seconds) if math.isfinite(seconds) else None


def _new_client(transport: httpx.AsyncBaseTransport | None) -> httpx.AsyncClient:
    # An injected transport is the caller's; env proxy and netrc settings are ignored for it so
    # that a test transport is never bypassed. Deadlines are per request (see _send).
    return httpx.AsyncClient(
        transport=transport, timeout=None, trust_env=transport is None, follow_redirects=False
    )


async def _close_client(client: httpx.AsyncClient) -> None:
    await client.aclose()


async def _keep_transport(client: httpx.AsyncClient) -> None:
    """Nothing to close: closing the client would close the caller's transport."""


@asynccontextmanager
async def _client(
    owner: Hashable | None, transport: httpx.AsyncBaseTransport | None
) -> AsyncIterator[httpx.AsyncClient]:
    """The run's client of ``owner``, or a client of this request alone."""
    if owner is not None:
        closer = _close_client if transport is None else _keep_transport
        shared = run_resource(
            ("tubeless.providers.client", owner), lambda: _new_client(transport), closer
        )
        if shared is not None:
            yield shared
            return
    client = _new_client(transport)
    try:
        yield client
    finally:
        if transport is None:
            await client.aclose()


def _retryable(error: ProviderError) -> bool:
    if error.code == PROVIDER_TIMEOUT:
        return True
    if error.code != PROVIDER_REQUEST_FAILED:
        return False
    return error.status is None or error.status in _RETRY_STATUSES or error.status >= 500


def _timeout_error(provider: str, timeout_s: float) -> ProviderError:
    return ProviderError(PROVIDER_TIMEOUT, f"{provider} request timed out after {timeout_s:g} s")


async def _race(request: Any, *, signal: CancelToken, timeout_s: float, provider: str) -> Any:
    """Await ``request`` unless ``signal`` is cancelled or ``timeout_s`` passes first.

    Whatever happens (including cancellation of the caller's own task), both helper tasks are
    cancelled and awaited before this returns, so no request outlives its decision.
    """
    sent = asyncio.ensure_future(request)
    stopped = asyncio.ensure_future(signal.wait())
    done: set[asyncio.Future[Any]] = set()
    try:
        done, _ = await asyncio.wait(
            {sent, stopped}, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED
        )
    finally:
        for task in (sent, stopped):
            task.cancel()
        await asyncio.wait({sent, stopped})
        if not sent.cancelled():
            sent.exception()  # retrieved, so an abandoned failure is not reported as unhandled
    if stopped in done:
        raise RunCancelledError(signal.reason)
    if sent in done:
        return sent.result()
    raise _timeout_error(provider, timeout_s)


async def _send(
    client: httpx.AsyncClient,
    url: str,
    body: bytes,
    headers: dict[str, str],
    provider: str,
    timeout_s: float,
    max_response_bytes: int,
) -> Any:
    try:
        async with client.stream(
            "POST", url, content=body, headers=headers, timeout=httpx.Timeout(timeout_s)
        ) as response:
            status = response.status_code
            if not 200 <= status < 300:
                error = ProviderError(
                    PROVIDER_REQUEST_FAILED,
                    f"{provider} request failed (HTTP {status})",
                    status=status,
                )
                error._retry_after = _retry_after(response)  # type: ignore[attr-defined]
                raise error
            data = await _read(response, provider, max_response_bytes)
    except httpx.TimeoutException:
        raise _timeout_error(provider, timeout_s) from None
    except (httpx.HTTPError, httpx.InvalidURL, httpx.StreamError) as exc:
        # The exception type says what went wrong (ConnectError, RemoteProtocolError, ...);
        # its text is left out because it may echo what was received.
        raise ProviderError(
            PROVIDER_REQUEST_FAILED, f"{provider} request failed ({type(exc).__name__})"
        ) from None
    try:
        return json.loads(data)
    except (ValueError, RecursionError):
        raise ProviderError(
            PROVIDER_INVALID_RESPONSE, f"{provider} returned invalid JSON"
        ) from None


async def _read(response: httpx.Response, provider: str, limit: int) -> bytes:
    chunks: list[bytes] = []
    size = 0
    async for chunk in response.aiter_bytes():
        size += len(chunk)
        if size > limit:
            raise ProviderError(
                PROVIDER_INVALID_RESPONSE, f"{provider} response exceeds {limit} bytes"
            )
        chunks.append(chunk)
    return b"".join(chunks)
