"""Test doubles for users' tests: trace capture, scripted decisions, recorded cassettes, and
the checkpoint store contract (``check_store``)."""

from __future__ import annotations

import copy
import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from tubeless._check_store import check_store
from tubeless.agent._spi import Recording, Replaying, recording, replaying

__all__ = [
    "CapturedTrace",
    "Recording",
    "Replaying",
    "ScriptedDecide",
    "call",
    "capture_trace",
    "check_store",
    "continue_with",
    "finish",
    "record",
    "replay",
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
    """A ``decide`` callback that returns prepared decisions in order, per agent invocation.

    Each entry is a decision (returned as is, so invalid ones can be scripted too) or a callable
    ``entry(state, ctx)`` returning one. Every agent invocation (keyed by
    ``ctx.execution["agent_run_id"]``) starts at the first entry, so one script serves every run
    in the process, an agent tool called twice in one run, and concurrent runs alike. Asking for
    more decisions than scripted fails that invocation's turn with an ``AssertionError`` naming
    the turn; :meth:`assert_done` fails if the latest invocation left some unused.

    An invocation's place is dropped when the script hands it a finish decision; places of
    invocations that never finish (a failed run) are kept for the 1,024 most recent only.

    Attributes:
        seen: ``(turn, state_version, state)`` for every decision asked for, by any invocation.
    """

    def __init__(self, decisions: list[Any]) -> None:
        self._decisions = list(decisions)
        # Next entry per invocation, least recently asked first (thread-safe under the lock:
        # runs may happen on several threads' loops at once).
        self._cursors: OrderedDict[Hashable, int] = OrderedDict()
        self._lock = threading.Lock()
        self._latest = 0
        self.seen: list[tuple[int, int, Any]] = []

    def __call__(self, state: Any, ctx: Any) -> Any:
        key = _invocation(ctx)
        with self._lock:
            self.seen.append((ctx.turn, ctx.state_version, state))
            index = self._cursors.pop(key, 0)
            exhausted = index >= len(self._decisions)
            self._cursors[key] = index if exhausted else index + 1
            self._latest = self._cursors[key]
            while len(self._cursors) > _MAX_OPEN_INVOCATIONS:
                self._cursors.popitem(last=False)
        if exhausted:
            raise AssertionError(
                f"The script has {len(self._decisions)} decisions, but turn {ctx.turn} asked "
                "for another one."
            )
        entry = self._decisions[index]
        decision = entry(state, ctx) if callable(entry) else entry
        if isinstance(decision, Mapping) and decision.get("kind") == "finish":
            with self._lock:  # the invocation is over: it will not ask again
                self._cursors.pop(key, None)
        return decision

    @property
    def remaining(self) -> int:
        """Decisions the latest invocation to ask has not used."""
        return len(self._decisions) - self._latest

    def assert_done(self) -> None:
        """Fail unless the latest invocation used every scripted decision."""
        if self.remaining:
            raise AssertionError(
                f"{self.remaining} scripted decisions were never asked for "
                f"(the run asked for {self._latest})."
            )


#: Places kept for invocations that never received a finish decision.
_MAX_OPEN_INVOCATIONS = 1024


def _invocation(ctx: Any) -> Hashable:
    """The agent invocation a decision context belongs to (``None`` for a hand-made context)."""
    execution = getattr(ctx, "execution", None)
    if isinstance(execution, Mapping):
        key = execution.get("agent_run_id")
        if isinstance(key, Hashable):
            return key
    return None


def scripted(*decisions: Any | Callable[[Any, Any], Any]) -> ScriptedDecide:
    """A :class:`ScriptedDecide` for ``define_agent(decide=...)``.

    Example:
        >>> decide = scripted(
        ...     continue_with(call("uppercase", "hi")),
        ...     finish("done"),
        ... )
    """
    return ScriptedDecide(list(decisions))


@contextmanager
def record(path: str | os.PathLike[str]) -> Iterator[Recording]:
    """Record every agent run started inside the block into the cassette file ``path``.

    The cassette (JSONL, created with mode 0600, replacing ``path``) holds, per agent
    invocation, a header (definition identity, input digest, tubeless version), every accepted
    decision, every validated outcome, each turn's reduced state and the result. It holds
    inputs and outputs, so it is a data file; it never holds a key or a request.

    Example:
        >>> with record(tmp_path / "run.cassette"):  # doctest: +SKIP
        ...     await agent.run({"question": "hi"})
    """
    with recording(path) as session:
        yield session


@contextmanager
def replay(
    path: str | os.PathLike[str],
    *,
    outcomes: bool = False,
    show_values: bool = False,
    allow_changed_definition: bool = False,
) -> Iterator[Replaying]:
    """Replay the cassette ``path`` for every agent run started inside the block.

    Decisions come from the cassette (``decide`` is never called, so no model or key is
    needed); tools run for real and each outcome, reduced state and result is compared with the
    recorded one. The first difference fails the run with ``TUBELESS_REPLAY_DIVERGED`` naming
    the route, turn, call id and JSON pointer (also kept as ``.divergence``).

    Args:
        path: The cassette file; a truncated or corrupt one raises ``CassetteError``
            (``TUBELESS_CASSETTE_INVALID``) naming the file and line.
        outcomes: Take outcomes from the cassette too: no tool runs.
        show_values: Quote the differing values in divergence messages.
        allow_changed_definition: Replay a cassette recorded for another definition identity
            (``TUBELESS_CASSETTE_MISMATCH`` otherwise); what changed is in ``.differences``.

    Example:
        >>> with replay(tmp_path / "run.cassette") as cassette:  # doctest: +SKIP
        ...     run = await agent.run({"question": "hi"})
        >>> assert cassette.divergence is None  # doctest: +SKIP
    """
    with replaying(
        path,
        outcomes=outcomes,
        show_values=show_values,
        allow_changed_definition=allow_changed_definition,
    ) as session:
        yield session
