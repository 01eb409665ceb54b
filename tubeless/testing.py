"""Test doubles for users' tests: trace capture (and, as the harness grows, scripted decisions)."""

from __future__ import annotations

import copy
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

__all__ = ["CapturedTrace", "capture_trace"]


class CapturedTrace:
    """An in-memory trace sink; ``records`` holds the wire dicts in export order."""

    def __init__(self) -> None:
        self.records: list[dict[str, Any]] = []
        self.flushes = 0
        self.closed = False

    def export(self, record: Mapping[str, Any]) -> None:
        """Keep a deep copy of ``record``."""
        self.records.append(copy.deepcopy(dict(record)))

    def flush(self) -> None:
        """Count flushes (runs flush their sinks when they end)."""
        self.flushes += 1

    def close(self) -> None:
        """Mark the sink closed."""
        self.closed = True

    @property
    def names(self) -> list[str]:
        """The record names, in order."""
        return [r["name"] for r in self.records]

    def for_run(self, run_id: str) -> list[dict[str, Any]]:
        """The records of one run."""
        return [r for r in self.records if r["runId"] == run_id]


@contextmanager
def capture_trace() -> Iterator[CapturedTrace]:
    """Yield a sink to pass as ``run(trace=...)``; its ``records`` are the wire dicts.

    Example:
        >>> with capture_trace() as trace:  # doctest: +SKIP
        ...     await pipeline.run({"x": 1}, trace=trace)
        >>> trace.names[0]  # doctest: +SKIP
        'pipeline.started'
    """
    sink = CapturedTrace()
    try:
        yield sink
    finally:
        sink.close()
