"""The event stream never ends before the records of a run that finished while it looked.

A run's records are committed before its status becomes terminal, so a stream may end only
when a read of the store began after it saw the terminal status. Reading the status only after
the records let a run that finished between the two end the stream without its records (seen
under load with a short run: ``status`` and ``end``, no ``record``).
"""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from types import SimpleNamespace
from typing import Any

import pytest
from starlette.requests import Request

from tubeless.serve import _events


@dataclass(frozen=True)
class _Row:
    run_id: str
    status: str
    turns: int = 0
    calls: int = 0


class _Manager:
    """A run that completes (its records committed first) right after the stream's first read."""

    def __init__(self) -> None:
        self.row = _Row("run_x", "running")
        self.config = SimpleNamespace(trace="unused", keepalive_s=15.0)
        self.readers = ThreadPoolExecutor(max_workers=1)
        self.committed: list[tuple[int, dict[str, Any]]] = []

    def get(self, run_id: str) -> _Row:
        return self.row

    def current(self, row: _Row) -> _Row:
        return row

    def read_since(self, source: str, *, run_id: str, after: int, limit: int) -> Any:
        found = [(s, r) for s, r in self.committed if s > after][:limit]
        if self.row.status == "running":  # the run finishes just after this read
            self.committed = [
                (1, {"name": "pipeline.started"}),
                (2, {"name": "pipeline.completed"}),
            ]
            self.row = replace(self.row, status="completed", turns=2, calls=1)
        return found


async def _stream(manager: _Manager) -> list[tuple[str, str]]:
    scope = {
        "type": "http",
        "method": "GET",
        "path": "/v1/runs/run_x/events",
        "headers": [],
        "query_string": b"",
        "path_params": {"run_id": "run_x"},
    }
    response: Any = await _events.stream_events(Request(scope), manager)  # type: ignore[arg-type]
    seen: list[tuple[str, str]] = []
    async for event in response.body_iterator:
        seen.append((event.event, event.id or ""))
        if event.event == "end":
            break
    return seen


def test_a_run_finishing_between_the_read_and_the_status_still_streams_its_records(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    manager = _Manager()
    monkeypatch.setattr(_events, "read_since", manager.read_since)
    try:
        seen = asyncio.run(_stream(manager))
    finally:
        manager.readers.shutdown()
    assert [e for e in seen if e[0] == "record"] == [("record", "1"), ("record", "2")]
    assert seen[-1][0] == "end"
