"""W10: the per-request overhead of a model adapter's HTTP client, against a loopback stub.

The same ``post_json`` a model adapter sends through, to a keep-alive stub on 127.0.0.1 that
answers at once, measured two ways in one process, alternately:

- ``per request``: a new ``httpx.AsyncClient`` for each request (what every request did before
  issue 29, and still does outside a run), so each pays a client, a TCP connection and its close;
- ``per run``: the adapter's one client of the run (``run_resources``), connection kept alive.

The stub's own work is the same on both sides, so the difference is the client's overhead.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Callable
from typing import Any

from benchmarks.http_stub import stub_server
from tubeless.pipeline import CancelToken
from tubeless.pipeline._resources import run_resources
from tubeless.providers._http import post_json

REQUESTS = 50
_REPLY = {"status": "completed", "output": []}


async def _requests(url: str, owner: object | None, count: int) -> None:
    signal = CancelToken()
    for _ in range(count):
        await post_json(
            url,
            b"{}",
            headers={},
            provider="stub",
            signal=signal,
            timeout_s=30.0,
            owner=owner,
        )


async def _per_request(url: str) -> None:
    await _requests(url, None, REQUESTS)


async def _per_run(url: str) -> None:
    async with run_resources():
        await _requests(url, object(), REQUESTS)


def run(rows: list[dict[str, Any]], repeats: int, *, emit: Callable[..., None]) -> None:
    with stub_server(lambda: _REPLY) as stub:
        url = stub.url + "/responses"

        async def measure() -> tuple[list[float], list[float]]:
            await _per_request(url)  # warm-up
            await _per_run(url)
            before: list[float] = []
            after: list[float] = []
            for _ in range(repeats):
                for make, times in ((_per_request, before), (_per_run, after)):
                    start = time.perf_counter()
                    await make(url)
                    times.append((time.perf_counter() - start) / REQUESTS)
            return before, after

        before, after = asyncio.run(measure())
    old = statistics.median(before) * 1e6
    new = statistics.median(after) * 1e6
    emit(
        rows,
        {
            "workload": "W10 provider request",
            "us_per_call": round(new, 1),
            "baseline_us_per_call": round(old, 1),
            "ratio": round(new / old, 3),
            "note": "per-run client vs a client per request, loopback stub",
        },
    )
