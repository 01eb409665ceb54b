"""The per-record half of the projection: what each trace record says about its run.

:func:`fold` folds one record into the mutable :class:`Run` state of its run;
:func:`tubeless.tracing.projection.run_trees` links those runs into trees and projects them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final

from tubeless.tracing._projection_agents import as_int as _int
from tubeless.tracing._projection_agents import as_str as _str

if TYPE_CHECKING:
    from tubeless.tracing.projection import RunStatus, RunTree, StepStatus

__all__ = ["Run", "fold"]

_RUN_STATUSES: Final = frozenset({"completed", "failed", "cancelled"})
_TERMINAL: Final[Mapping[str, StepStatus]] = {
    "step.complete": "completed",
    "step.skipped": "skipped",
    "step.failed": "failed",
    "step.cancelled": "cancelled",
}


class _Step:
    __slots__ = (
        "attempt_id",
        "duration_ms",
        "error_code",
        "rank",
        "reason",
        "source_code",
        "status",
    )

    def __init__(self) -> None:
        self.status: StepStatus = "planned"
        self.rank = 0
        self.reason: str | None = None
        self.attempt_id: str | None = None
        self.duration_ms: float | None = None
        self.error_code: str | None = None
        self.source_code: str | None = None


class Run:
    """What the fold learned about one run (one generation of a run id)."""

    __slots__ = (
        "arrival",
        "attributes",
        "completed",
        "dry_run",
        "duration_ms",
        "errors",
        "first_ts",
        "item_key",
        "iterate_steps",
        "iteration",
        "kids",
        "parent",
        "parent_run_id",
        "pipeline_id",
        "run_error",
        "run_id",
        "snapshot_steps",
        "started",
        "started_at_ms",
        "status",
        "steps",
        "tree",
    )

    tree: RunTree

    def __init__(self, run_id: str, arrival: int) -> None:
        self.run_id = run_id
        self.arrival = arrival
        self.pipeline_id: str | None = None
        self.parent_run_id: str | None = None
        self.parent: Run | None = None
        self.item_key: str | None = None
        self.iteration: Mapping[str, Any] | None = None
        self.first_ts: int | None = None
        self.started = False
        self.started_at_ms: int | None = None
        self.completed = False
        self.status: RunStatus = "running"
        self.dry_run = False
        self.duration_ms: float | None = None
        self.run_error: Mapping[str, Any] | None = None
        self.errors: list[Mapping[str, Any]] = []
        self.steps: dict[str, _Step] = {}
        self.attributes: dict[str, list[Mapping[str, Any]]] = {}
        self.snapshot_steps: Sequence[Mapping[str, Any]] | None = None
        self.iterate_steps: dict[str, tuple[str, ...]] = {}
        self.kids: list[Run] = []

    def order(self) -> tuple[bool, int, int]:
        start = self.started_at_ms if self.started_at_ms is not None else self.first_ts
        return (start is None, start or 0, self.arrival)


def fold(run: Run, record: Mapping[str, Any]) -> None:
    """Fold one trace record of ``run`` into what is known about the run."""
    if run.pipeline_id is None and isinstance(record.get("pipelineId"), str):
        run.pipeline_id = record["pipelineId"]
    if run.parent_run_id is None and isinstance(record.get("parentRunId"), str):
        run.parent_run_id = record["parentRunId"]
    if run.item_key is None and isinstance(record.get("itemKey"), str):
        run.item_key = record["itemKey"]
    if run.iteration is None and isinstance(record.get("iteration"), Mapping):
        run.iteration = record["iteration"]
    ts = _int(record.get("timestampMs"))
    if ts is not None and (run.first_ts is None or ts < run.first_ts):
        run.first_ts = ts
    name = record.get("name")
    raw_payload = record.get("payload")
    payload: Mapping[str, Any] = raw_payload if isinstance(raw_payload, Mapping) else {}
    error = record.get("error")
    if isinstance(error, Mapping):
        run.errors.append(error)
    if name == "pipeline.started":
        run.started = True
        run.started_at_ms = ts
        run.dry_run = payload.get("dryRun") is True
        snapshot = payload.get("definitionSnapshot")
        if isinstance(snapshot, Mapping) and isinstance(snapshot.get("steps"), list):
            run.snapshot_steps = [s for s in snapshot["steps"] if isinstance(s, Mapping)]
    elif name == "pipeline.completed":
        run.completed = True
        status = payload.get("status")
        # An unknown status from a foreign writer still ended the run; call it failed.
        run.status = status if status in _RUN_STATUSES else "failed"
        run.dry_run = run.dry_run or payload.get("dryRun") is True
        run.duration_ms = _duration(record.get("durationMs"))
        run.run_error = error if isinstance(error, Mapping) else None
    elif (
        isinstance(name, str) and name.startswith("step.") and isinstance(record.get("stepId"), str)
    ):
        _fold_step(run, name, record["stepId"], record, payload)


def _fold_step(
    run: Run, name: str, step_id: str, record: Mapping[str, Any], payload: Mapping[str, Any]
) -> None:
    step = run.steps.get(step_id)
    if step is None:
        step = run.steps[step_id] = _Step()
    attempt_id = record.get("attemptId")
    if isinstance(attempt_id, str):
        step.attempt_id = attempt_id
    if name == "step.planned":
        nested = payload.get("nestedPipeline")
        if isinstance(nested, Mapping) and nested.get("mode") == "iterate":
            ids = nested.get("stepIds")
            if isinstance(ids, list):
                run.iterate_steps[step_id] = tuple(str(i) for i in ids)
    elif name == "step.running":
        # Ranks keep a late progress record from reopening a finished step.
        if step.rank < 1:
            step.status, step.rank = "running", 1
    elif name == "step.attempted":
        attributes = payload.get("attributes")
        if isinstance(attributes, Mapping):
            run.attributes.setdefault(step_id, []).append(attributes)
    elif name in _TERMINAL:
        step.status, step.rank = _TERMINAL[name], 2
        reason = payload.get("reason")
        step.reason = reason if isinstance(reason, str) else None
        step.duration_ms = _duration(record.get("durationMs"))
        error = record.get("error")
        if isinstance(error, Mapping):
            step.error_code = _str(error.get("code"))
            step.source_code = _str(error.get("sourceCode"))


def _duration(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None
