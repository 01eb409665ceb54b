"""What a batch did, counted a row at a time: the CLI's summary, in memory bounded whatever the
number of rows (duration percentiles come from a sample of :data:`SAMPLE` rows past that)."""

from __future__ import annotations

import random
import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["SAMPLE", "BatchSummary", "SummaryCounter", "summarize"]

#: Durations kept for the percentiles: every row's up to this many rows, then a uniform sample.
SAMPLE = 10_000


@dataclass(frozen=True, kw_only=True, slots=True)
class BatchSummary:
    """What a batch did, from its rows."""

    rows: int
    completed: int
    failed: dict[str, int] = field(default_factory=dict)
    """Failed rows by error code, most frequent first."""
    cancelled: int = 0
    skipped: int = 0
    """Rows reused from the output file (completed earlier)."""
    exhausted: int = 0
    """Rows not started because a batch-wide budget was spent (status ``skipped``)."""
    p50_ms: float | None = None
    p95_ms: float | None = None
    turns: int = 0
    calls: int = 0

    def lines(self) -> list[str]:
        """The summary as the CLI prints it."""
        failed = sum(self.failed.values())
        head = f"{self.rows} rows: {self.completed} completed, {failed} failed"
        if self.failed:
            head += " (" + ", ".join(f"{code} {n}" for code, n in self.failed.items()) + ")"
        if self.cancelled:
            head += f", {self.cancelled} cancelled"
        if self.exhausted:
            head += f", {self.exhausted} skipped (the batch budget was spent)"
        not_run = self.rows - self.completed - failed - self.cancelled - self.exhausted
        if not_run > 0:
            head += f", {not_run} not run"
        if self.skipped:
            head += f"; {self.skipped} already completed, not run again"
        lines = [head]
        if self.p50_ms is not None and self.p95_ms is not None:
            lines.append(
                f"duration p50 {self.p50_ms:.1f} ms, p95 {self.p95_ms:.1f} ms; "
                f"turns {self.turns}, calls {self.calls}"
            )
        return lines


class SummaryCounter:
    """Counts rows as they come (:meth:`add`), holding no row."""

    def __init__(self) -> None:
        self.rows = self.completed = self.cancelled = self.turns = self.calls = 0
        self.exhausted = 0
        self.failed: dict[str, int] = {}
        self.durations: list[float] = []
        self._timed = 0
        self._random = random.Random(0)  # a reproducible sample

    def add(self, row: Mapping[str, Any]) -> None:
        self.rows += 1
        status = row.get("status")
        if status == "completed":
            self.completed += 1
        elif status == "cancelled":
            self.cancelled += 1
        elif status == "skipped":
            self.exhausted += 1
        elif status == "failed":
            code = str((row.get("error") or {}).get("code"))
            self.failed[code] = self.failed.get(code, 0) + 1
        if row.get("run_id") is not None:
            self._sample(float(row.get("duration_ms") or 0.0))
        self.turns += int(row.get("turns") or 0)
        self.calls += int(row.get("calls") or 0)

    def _sample(self, duration: float) -> None:
        self._timed += 1
        if len(self.durations) < SAMPLE:
            self.durations.append(duration)
            return
        slot = self._random.randrange(self._timed)  # reservoir sampling: uniform over all rows
        if slot < SAMPLE:
            self.durations[slot] = duration

    def summary(self, *, total: int | None = None, skipped: int = 0) -> BatchSummary:
        durations = self.durations
        p50 = p95 = None
        if durations:
            p50 = statistics.median(durations)
            p95 = (
                statistics.quantiles(durations, n=20, method="inclusive")[-1]
                if len(durations) > 1
                else durations[0]
            )
        return BatchSummary(
            rows=self.rows if total is None else total,
            completed=self.completed,
            failed=dict(sorted(self.failed.items(), key=lambda item: (-item[1], item[0]))),
            cancelled=self.cancelled,
            exhausted=self.exhausted,
            skipped=skipped,
            p50_ms=p50,
            p95_ms=p95,
            turns=self.turns,
            calls=self.calls,
        )


def summarize(
    rows: Iterable[Mapping[str, Any]], *, total: int | None = None, skipped: int = 0
) -> BatchSummary:
    """Count ``rows`` by status and failure code, with duration percentiles of rows that ran."""
    counter = SummaryCounter()
    for row in rows:
        counter.add(row)
    return counter.summary(total=total, skipped=skipped)
