"""Test doubles for users' tests: trace capture and scripted decisions."""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

__all__ = [
    "CapturedTrace",
    "ScriptedDecide",
    "call",
    "capture_trace",
    "continue_with",
    "finish",
    "scripted",
]


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


def finish(result: Any) -> dict[str, Any]:
    """A finish decision."""
    return {"kind": "finish", "result": result}


def call(tool: str, input: Any, id: str | None = None) -> dict[str, Any]:
    """One call of a continue decision (``id`` defaults to ``<tool>-<position>``)."""
    return {"id": id, "tool": tool, "input": input}


def continue_with(*calls: Mapping[str, Any]) -> dict[str, Any]:
    """A continue decision; calls without an id get ``<tool>-<position>``."""
    batch = []
    for index, entry in enumerate(calls):
        item = dict(entry)
        if item.get("id") is None:
            item["id"] = f"{item['tool']}-{index}"
        batch.append(item)
    return {"kind": "continue", "calls": batch}


class ScriptedDecide:
    """A ``decide`` callback that returns prepared decisions in order.

    Each entry is a decision (returned as is, so invalid ones can be scripted too) or a callable
    ``entry(state, ctx)`` returning one. Asking for more decisions than scripted fails the run
    with an ``AssertionError`` naming the turn; :meth:`assert_done` fails if some were never used.

    Attributes:
        seen: ``(turn, state_version, state)`` for every decision asked for.
    """

    def __init__(self, decisions: list[Any]) -> None:
        self._decisions = list(decisions)
        self._next = 0
        self.seen: list[tuple[int, int, Any]] = []

    def __call__(self, state: Any, ctx: Any) -> Any:
        self.seen.append((ctx.turn, ctx.state_version, state))
        if self._next >= len(self._decisions):
            raise AssertionError(
                f"The script has {len(self._decisions)} decisions, but turn {ctx.turn} asked "
                "for another one."
            )
        entry = self._decisions[self._next]
        self._next += 1
        return entry(state, ctx) if callable(entry) else entry

    @property
    def remaining(self) -> int:
        """Decisions not yet used."""
        return len(self._decisions) - self._next

    def assert_done(self) -> None:
        """Fail unless every scripted decision was used."""
        if self.remaining:
            raise AssertionError(
                f"{self.remaining} scripted decisions were never asked for "
                f"(the run asked for {self._next})."
            )


def scripted(*decisions: Any | Callable[[Any, Any], Any]) -> ScriptedDecide:
    """A :class:`ScriptedDecide` for ``define_agent(decide=...)``.

    Example:
        >>> decide = scripted(
        ...     continue_with(call("uppercase", "hi")),
        ...     finish("done"),
        ... )
    """
    return ScriptedDecide(list(decisions))
