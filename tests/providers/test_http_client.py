"""One HTTP client per adapter instance and run (issue 29 item 9): connections are reused
within a run and closed when it ends; retries wait with jitter and honour ``Retry-After``.

Connections are counted by a keep-alive server on 127.0.0.1; waits are recorded by a fake
pause and the jitter is fixed, so nothing here is timed.
"""

from __future__ import annotations

import email.utils
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from benchmarks.http_stub import StubServer, stub_server
from tests.providers.fixtures.openai_responses import SECRET_KEY, THREE_TURNS
from tests.providers.fixtures.runs import QUESTION, project_agent
from tubeless.pipeline import CancelToken
from tubeless.providers import PROVIDER_REQUEST_FAILED, ProviderError, _http
from tubeless.providers.openai import responses


@pytest.fixture
def scripted(monkeypatch: pytest.MonkeyPatch) -> Iterator[StubServer]:
    """The Responses stub answering the provider tests' three turns, in a loop."""
    monkeypatch.setenv("OPENAI_API_KEY", SECRET_KEY)
    turns = iter(THREE_TURNS * 10)
    with stub_server(lambda: next(turns)) as stub:
        yield stub


async def test_the_requests_of_one_run_share_one_connection_closed_when_the_run_ends(
    scripted: StubServer,
) -> None:
    run = await project_agent(responses(base_url=scripted.url)).run({"question": QUESTION})

    assert run.status == "completed"
    assert (scripted.requests, scripted.opened) == (3, 1)
    assert scripted.all_closed.wait(30)  # hang guard: the run's end closed the client


async def test_each_run_has_a_client_of_its_own(
    scripted: StubServer,
) -> None:
    decide = responses(base_url=scripted.url)
    agent = project_agent(decide)

    first = await agent.run({"question": QUESTION})
    assert scripted.all_closed.wait(30)
    second = await agent.run({"question": QUESTION})

    assert (first.status, second.status) == ("completed", "completed")
    assert (scripted.requests, scripted.opened) == (6, 2)
    assert scripted.all_closed.wait(30)


async def test_a_request_outside_a_run_opens_and_closes_a_client_of_its_own(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``decide`` called by hand (no run to close a shared client): one client per request."""
    answering = httpx.MockTransport(lambda request: httpx.Response(200, json={"a": 1}))
    opened: list[httpx.AsyncClient] = []

    def new_client(given: httpx.AsyncBaseTransport | None) -> httpx.AsyncClient:
        assert given is None
        opened.append(httpx.AsyncClient(transport=answering))
        return opened[-1]

    monkeypatch.setattr(_http, "_new_client", new_client)
    owner = object()
    for _ in range(2):
        assert await _post(None, owner=owner) == {"a": 1}

    assert [client.is_closed for client in opened] == [True, True]


# -- retries --------------------------------------------------------------------------------------
_ARGS: dict[str, Any] = {
    "url": "https://models.invalid/v1/responses",
    "body": b"{}",
    "headers": {},
    "provider": "OpenAI",
    "timeout_s": 5.0,
}


async def _post(transport: httpx.AsyncBaseTransport | None, **extra: Any) -> Any:
    return await _http.post_json(
        _ARGS["url"],
        _ARGS["body"],
        headers=_ARGS["headers"],
        provider=_ARGS["provider"],
        signal=CancelToken(),
        timeout_s=_ARGS["timeout_s"],
        transport=transport,
        **extra,
    )


def _answers(*replies: httpx.Response) -> tuple[httpx.MockTransport, list[int]]:
    sent: list[int] = []
    queue = list(replies)

    def handle(request: httpx.Request) -> httpx.Response:
        sent.append(len(sent))
        return queue.pop(0)

    return httpx.MockTransport(handle), sent


@pytest.fixture
def pauses(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """Every retry wait, recorded instead of slept."""
    waited: list[float] = []

    async def pause(signal: CancelToken, seconds: float) -> None:
        waited.append(seconds)

    monkeypatch.setattr(_http, "_pause", pause)
    return waited


@pytest.mark.parametrize(("jitter", "expected"), [(0.0, [0.25, 0.5, 1.0]), (1.0, [0.5, 1.0, 2.0])])
async def test_the_back_off_is_scaled_by_a_random_factor_between_half_and_one(
    pauses: list[float], monkeypatch: pytest.MonkeyPatch, jitter: float, expected: list[float]
) -> None:
    monkeypatch.setattr(_http, "_jitter", lambda: jitter)
    transport, sent = _answers(*[httpx.Response(500)] * 3, httpx.Response(200, json={"ok": 1}))

    assert await _post(transport, max_retries=3) == {"ok": 1}
    assert (len(sent), pauses) == (4, expected)


@pytest.mark.parametrize("status", [429, 503])
async def test_retry_after_in_seconds_replaces_the_back_off_on_429_and_503(
    pauses: list[float], status: int
) -> None:
    transport, sent = _answers(
        httpx.Response(status, headers={"Retry-After": "7"}), httpx.Response(200, json=[1])
    )

    assert await _post(transport, max_retries=1) == [1]
    assert (len(sent), pauses) == (2, [7.0])


async def test_retry_after_as_an_http_date_is_honoured(pauses: list[float]) -> None:
    later = email.utils.formatdate(time.time() + 30, usegmt=True)
    transport, _ = _answers(
        httpx.Response(429, headers={"Retry-After": later}), httpx.Response(200, json=[1])
    )

    assert await _post(transport, max_retries=1) == [1]
    assert len(pauses) == 1 and 20 <= pauses[0] <= 31


async def test_retry_after_on_another_status_is_ignored(
    pauses: list[float], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_http, "_jitter", lambda: 1.0)
    transport, _ = _answers(
        httpx.Response(500, headers={"Retry-After": "7"}), httpx.Response(200, json=[1])
    )

    assert await _post(transport, max_retries=1) == [1]
    assert pauses == [0.5]


async def test_a_retry_after_beyond_the_bound_fails_at_once(pauses: list[float]) -> None:
    transport, sent = _answers(
        httpx.Response(429, headers={"Retry-After": "3600"}), httpx.Response(200, json=[1])
    )

    with pytest.raises(ProviderError) as caught:
        await _post(transport, max_retries=3)

    assert (caught.value.code, str(caught.value)) == (
        PROVIDER_REQUEST_FAILED,
        "OpenAI request failed (HTTP 429)",
    )
    assert (len(sent), pauses) == (1, [])


async def test_without_max_retries_retry_after_changes_nothing(pauses: list[float]) -> None:
    transport, sent = _answers(httpx.Response(429, headers={"Retry-After": "1"}))

    with pytest.raises(ProviderError):
        await _post(transport)

    assert (len(sent), pauses) == (1, [])


def test_a_run_in_a_fresh_event_loop_leaves_no_connection_open(scripted: StubServer) -> None:
    """``run_sync`` (asyncio.run): the client is closed before the loop is."""
    value = project_agent(responses(base_url=scripted.url)).run_sync({"question": QUESTION})

    assert value is not None
    assert (scripted.requests, scripted.opened) == (3, 1)
    assert scripted.all_closed.wait(30)
