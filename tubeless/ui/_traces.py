"""The trace stores the pages read: loaded once, folded once, reloaded when a file changes.

A :class:`TraceLibrary` holds the paths (or URLs) given to ``tubeless ui``. Each request asks it
for a :class:`Snapshot`; the files are read again only when one of them changed (size or
modification time; a URL store is read again after :data:`URL_TTL_S`). A snapshot holds the
run trees :func:`tubeless.tracing.run_trees` folds, one :class:`RunRow` per root run for the
runs page, and the few facts the fold does not keep (:class:`RunFacts`: correlation id,
definition id, the limits as recorded, the decide attempts' usage, each run's raw error with its
cause chain), gathered in one pass over the records. Batch output files (``tubeless batch
--output``) given among the traces become :class:`Batch` objects, and JUnit files of ``tubeless
eval --junit`` eval reports (:mod:`tubeless.ui._evals`).
"""

from __future__ import annotations

import os
import re
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from tubeless.tracing import RunTree, TraceReadError, read_trace, run_trees
from tubeless.ui._batches import Batch, BatchRow, read_batch
from tubeless.ui._evals import EvalReport, read_junit

__all__ = [
    "URL_TTL_S",
    "Batch",
    "BatchRow",
    "RunFacts",
    "RunRow",
    "Snapshot",
    "TraceLibrary",
]

#: Seconds a snapshot of a URL store (which has no modification time) is reused.
URL_TTL_S: Final = 2.0
_USAGE: Final = ("agent.usage.inputTokens", "agent.usage.outputTokens", "agent.usage.costUsd")
_PASSWORD: Final = re.compile(r"^[a-z][a-z0-9+.-]*://[^:/@]*:([^@]*)@")


@dataclass(slots=True)
class RunFacts:
    """What the records say about one run beyond its tree."""

    correlation_id: str | None = None
    definition_id: str | None = None
    limits: Mapping[str, Any] | None = None
    """The agent's limits as the definition snapshot recorded them (camelCase keys)."""
    error: Mapping[str, Any] | None = None
    """The wire error of ``pipeline.completed``, cause chain included."""
    usage: dict[str, tuple[float, float, float | None]] = field(default_factory=dict)
    """Decide attempts' usage by attempt id: input tokens, output tokens, cost (USD)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class RunRow:
    """One root run as the runs page lists it."""

    run_id: str
    entry: str
    status: str
    started_at_ms: int | None
    duration_ms: float | None
    turns: int
    calls: int
    input_tokens: int | None
    output_tokens: int | None
    cost_usd: float | None
    error_code: str | None
    batch: int | None
    """The index of the batch whose row ran this run."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Snapshot:
    """Everything the pages read, as of one load of the stores."""

    rows: tuple[RunRow, ...]
    """Root runs, newest first."""
    trees: Mapping[str, RunTree]
    """Every run of every tree by run id (the first tree holding an id wins)."""
    roots: Mapping[str, RunTree]
    """Which root each run id sits under."""
    facts: Mapping[str, RunFacts]
    batches: tuple[Batch, ...]
    evals: tuple[EvalReport, ...]
    problems: tuple[str, ...]
    """One line per store that could not be read."""
    record_count: int

    def usage(self, tree: RunTree) -> tuple[int, int, float | None] | None:
        """Tokens in, tokens out and cost of ``tree`` and every run below it (``None``: no
        decide attempt recorded usage)."""
        seen = False
        tokens_in = tokens_out = 0.0
        cost: float | None = None
        for run in tree.walk():
            facts = self.facts.get(run.run_id)
            if facts is None:
                continue
            for used_in, used_out, used_cost in facts.usage.values():
                seen = True
                tokens_in += used_in
                tokens_out += used_out
                if used_cost is not None:
                    cost = (cost or 0.0) + used_cost
        return (int(tokens_in), int(tokens_out), cost) if seen else None


class TraceLibrary:
    """The trace stores (and batch outputs) given to the pages; thread-safe."""

    def __init__(self, sources: Sequence[str]) -> None:
        self.sources = tuple(sources)
        self._lock = threading.Lock()
        self._stamp: object = None
        self._loaded_at = 0.0
        self._snapshot: Snapshot | None = None

    def snapshot(self) -> Snapshot:
        """The current snapshot, reloaded when a store changed."""
        with self._lock:
            stamp = tuple(_stamp(source) for source in self.sources)
            urls = any("://" in source for source in self.sources)
            stale = urls and time.monotonic() - self._loaded_at > URL_TTL_S
            if self._snapshot is None or stamp != self._stamp or stale:
                self._snapshot = _load(self.sources)
                self._stamp = stamp
                self._loaded_at = time.monotonic()
            return self._snapshot


def _stamp(source: str) -> tuple[int, int] | None:
    if "://" in source:
        return None
    try:
        stat = os.stat(source)
    except OSError:
        return None
    wal = Path(source + "-wal")
    extra = wal.stat().st_mtime_ns if wal.exists() else 0
    return (stat.st_size, stat.st_mtime_ns + extra)


def _load(sources: Sequence[str]) -> Snapshot:
    records: list[Mapping[str, Any]] = []
    batches: list[Batch] = []
    evals: list[EvalReport] = []
    problems: list[str] = []
    for source in sources:
        try:
            report = read_junit(source, len(evals) + 1)
        except (OSError, ValueError) as exc:
            problems.append(str(exc))
            continue
        if report is not None:
            evals.append(report)
            continue
        batch = read_batch(source, len(batches) + 1)
        if batch is not None:
            batches.append(batch)
            continue
        try:
            records.extend(read_trace(source))
        except TraceReadError as exc:
            problems.append(_redacted(str(exc), source))
        except OSError as exc:
            problems.append(_redacted(f"{source}: {exc.strerror or exc}", source))
    trees = run_trees(records)
    facts = _facts(records)
    batch_of = {row.run_id: b.number for b in batches for row in b.rows if row.run_id}
    by_id: dict[str, RunTree] = {}
    roots: dict[str, RunTree] = {}
    for root in trees:
        for run in root.walk():
            by_id.setdefault(run.run_id, run)
            roots.setdefault(run.run_id, root)
    snapshot = Snapshot(
        rows=(),
        trees=by_id,
        roots=roots,
        facts=facts,
        batches=tuple(batches),
        evals=tuple(evals),
        problems=tuple(problems),
        record_count=len(records),
    )
    rows = [_row(root, snapshot, batch_of.get(root.run_id)) for root in trees]
    rows.sort(key=lambda row: row.started_at_ms or 0, reverse=True)
    object.__setattr__(snapshot, "rows", tuple(rows))
    return snapshot


def _redacted(text: str, source: str) -> str:
    """``text`` with the password of a URL ``source`` (``postgresql://user:pw@host``) hidden."""
    match = _PASSWORD.search(source)
    if match is None:
        return text
    return text.replace(source, source[: match.start(1)] + "***" + source[match.end(1) :])


def _row(root: RunTree, snapshot: Snapshot, batch: int | None) -> RunRow:
    turns = calls = 0
    for run in root.walk():
        if run.agent is not None:
            turns += len(run.agent.turns)
            calls += sum(len(turn.calls) for turn in run.agent.turns)
    usage = snapshot.usage(root)
    return RunRow(
        run_id=root.run_id,
        entry=root.pipeline_id,
        status=root.status,
        started_at_ms=root.started_at_ms,
        duration_ms=root.duration_ms,
        turns=turns,
        calls=calls,
        input_tokens=None if usage is None else usage[0],
        output_tokens=None if usage is None else usage[1],
        cost_usd=None if usage is None else usage[2],
        error_code=root.error_code,
        batch=batch,
    )


def _facts(records: Iterable[Mapping[str, Any]]) -> dict[str, RunFacts]:
    facts: dict[str, RunFacts] = {}
    for record in records:
        run_id = record.get("runId")
        if not isinstance(run_id, str):
            continue
        one = facts.get(run_id)
        if one is None:
            one = facts[run_id] = RunFacts()
        name = record.get("name")
        if one.correlation_id is None and isinstance(record.get("correlationId"), str):
            one.correlation_id = record["correlationId"]
        payload = record.get("payload")
        if not isinstance(payload, Mapping):
            continue
        if name == "pipeline.started":
            _started(one, payload)
        elif name == "pipeline.completed" and isinstance(record.get("error"), Mapping):
            one.error = record["error"]
        elif name == "step.attempted" and record.get("stepId") == "decide":
            _usage(one, record, payload)
    return facts


def _started(one: RunFacts, payload: Mapping[str, Any]) -> None:
    identity = payload.get("definitionIdentity")
    if isinstance(identity, Mapping) and isinstance(identity.get("definitionId"), str):
        one.definition_id = identity["definitionId"]
    snapshot = payload.get("definitionSnapshot")
    steps = snapshot.get("steps") if isinstance(snapshot, Mapping) else None
    for step in steps if isinstance(steps, list) else ():
        agent = step.get("agent") if isinstance(step, Mapping) else None
        if isinstance(agent, Mapping) and isinstance(agent.get("limits"), Mapping):
            one.limits = agent["limits"]
            return


def _usage(one: RunFacts, record: Mapping[str, Any], payload: Mapping[str, Any]) -> None:
    attributes = payload.get("attributes")
    if not isinstance(attributes, Mapping) or not any(key in attributes for key in _USAGE):
        return
    values = [attributes.get(key) for key in _USAGE]
    numbers = [v if _number(v) else None for v in values]
    attempt = record.get("attemptId")
    one.usage[attempt if isinstance(attempt, str) else str(len(one.usage))] = (
        float(numbers[0] or 0),
        float(numbers[1] or 0),
        None if numbers[2] is None else float(numbers[2]),
    )


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)
