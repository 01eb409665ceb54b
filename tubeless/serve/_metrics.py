"""``GET /metrics``: Prometheus text, version 0.0.4.

Runs by status and the budget consumed come from the run registry (every worker answers the
same); calls and the run and call latency histograms are this worker's, observed from the trace
records its runs emit (a tool call is a ``/tool/`` child run that ended) and from the runs it
finished.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["Metrics"]

_RUN_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)
_CALL_BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0, 30.0)
_ENDED = frozenset({"pipeline.completed", "pipeline.failed", "pipeline.cancelled"})


class _Histogram:
    def __init__(self, buckets: Sequence[float]) -> None:
        self.buckets = tuple(buckets)
        self.counts = [0] * len(self.buckets)
        self.total = 0
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.total += 1
        self.sum += value
        for index, bound in enumerate(self.buckets):
            if value <= bound:
                self.counts[index] += 1

    def lines(self, name: str) -> list[str]:
        out = [
            f'{name}_bucket{{le="{bound}"}} {count}'
            for bound, count in zip(self.buckets, self.counts, strict=True)
        ]
        out.append(f'{name}_bucket{{le="+Inf"}} {self.total}')
        out.append(f"{name}_sum {self.sum}")
        out.append(f"{name}_count {self.total}")
        return out


class _CallObserver:
    """A trace sink that only counts tool calls and their durations (never reads payloads)."""

    def __init__(self, metrics: Metrics) -> None:
        self._metrics = metrics

    def export(self, record: Mapping[str, Any]) -> None:
        if record.get("name") in _ENDED and "/tool/" in str(record.get("pipelineId", "")):
            duration = record.get("durationMs")
            self._metrics.call_ended(float(duration) / 1000 if duration is not None else 0.0)

    def flush(self) -> None:
        return None

    def close(self) -> None:
        return None


class Metrics:
    """This worker's counters and histograms."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.runs = _Histogram(_RUN_BUCKETS)
        self.calls = _Histogram(_CALL_BUCKETS)
        self.ended: dict[str, int] = {}
        self.sink = _CallObserver(self)

    def run_ended(self, status: str, seconds: float) -> None:
        with self._lock:
            self.runs.observe(seconds)
            self.ended[status] = self.ended.get(status, 0) + 1

    def call_ended(self, seconds: float) -> None:
        with self._lock:
            self.calls.observe(seconds)

    def render(
        self,
        by_status: Mapping[str, int],
        calls: int,
        turns: int,
        *,
        tokens: int = 0,
        cost_usd: float = 0.0,
    ) -> str:
        """The exposition text, with the registry's ``by_status`` counts and totals."""
        lines = [
            "# HELP tubeless_serve_runs Runs the server knows, by status.",
            "# TYPE tubeless_serve_runs gauge",
        ]
        for status in ("queued", "running", "waiting", "completed", "failed", "cancelled"):
            lines.append(f'tubeless_serve_runs{{status="{status}"}} {by_status.get(status, 0)}')
        lines += [
            "# HELP tubeless_serve_budget_calls_consumed Tool calls charged to the runs' budgets.",
            "# TYPE tubeless_serve_budget_calls_consumed gauge",
            f"tubeless_serve_budget_calls_consumed {calls}",
            "# HELP tubeless_serve_budget_turns_consumed Turns the runs took.",
            "# TYPE tubeless_serve_budget_turns_consumed gauge",
            f"tubeless_serve_budget_turns_consumed {turns}",
            "# HELP tubeless_serve_budget_tokens_consumed Model tokens (input and output) "
            "charged to the runs' budgets.",
            "# TYPE tubeless_serve_budget_tokens_consumed gauge",
            f"tubeless_serve_budget_tokens_consumed {tokens}",
            "# HELP tubeless_serve_budget_cost_usd_consumed Model cost in US dollars charged to "
            "the runs' budgets.",
            "# TYPE tubeless_serve_budget_cost_usd_consumed gauge",
            f"tubeless_serve_budget_cost_usd_consumed {cost_usd!r}",
        ]
        with self._lock:
            lines += [
                "# HELP tubeless_serve_calls_total Tool calls this worker's runs ended.",
                "# TYPE tubeless_serve_calls_total counter",
                f"tubeless_serve_calls_total {self.calls.total}",
                "# HELP tubeless_serve_run_duration_seconds Time from a run's start here to its "
                "end.",
                "# TYPE tubeless_serve_run_duration_seconds histogram",
                *self.runs.lines("tubeless_serve_run_duration_seconds"),
                "# HELP tubeless_serve_call_duration_seconds Duration of one tool call.",
                "# TYPE tubeless_serve_call_duration_seconds histogram",
                *self.calls.lines("tubeless_serve_call_duration_seconds"),
            ]
        return "\n".join(lines) + "\n"
