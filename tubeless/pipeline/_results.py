"""Run records: what a finished run returns (immutable, never holding trace-only data)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from tubeless.errors import PipelineError

__all__ = [
    "DefinitionIdentity",
    "PipelineRun",
    "RunStatus",
    "SkipReason",
    "StepReport",
    "StepStatus",
    "completed_report",
    "new_run",
]

RunStatus = Literal["completed", "failed", "cancelled"]
StepStatus = Literal["completed", "skipped", "cancelled", "failed"]
SkipReason = Literal[
    "dry-run", "failed-dependency", "fail-fast", "filtered", "policy", "unmet-dependency"
]


@dataclass(frozen=True, kw_only=True, slots=True)
class DefinitionIdentity:
    """The fingerprints that identify a pipeline definition (see ``docs/pipelines.md``)."""

    version: int
    """Identity scheme version: 1 for plain graphs, 2 with iteration or agent steps, 3 with
    definition metadata (schemas, a finalizer, agent policies) or a version-3 child."""
    structural_fingerprint: str
    """``sha256:<hex>`` of the graph, agent metadata, child structures and the definition's
    metadata (the schemas' fingerprints among them; UPSTREAM §1.12); it recomputes from the
    traced definition snapshot. Handlers excluded."""
    definition_id: str
    """``sha256:<hex>`` of the structure, ``implementation_version`` and the full child
    identities; it recomputes from the traced definition snapshot too."""
    implementation_version: str | None = None

    def to_wire(self) -> dict[str, Any]:
        """The camelCase form used in traces and snapshots."""
        wire: dict[str, Any] = {
            "version": self.version,
            "structuralFingerprint": self.structural_fingerprint,
            "definitionId": self.definition_id,
        }
        if self.implementation_version is not None:
            wire["implementationVersion"] = self.implementation_version
        return wire


@dataclass(frozen=True, kw_only=True, slots=True)
class StepReport:
    """The terminal report of one step in one run."""

    id: str
    status: StepStatus
    name: str | None = None
    description: str | None = None
    attempt_id: str | None = None
    """Present only when an attempt was opened (the step actually started)."""
    started_at_ms: int | None = None
    finished_at_ms: int | None = None
    reason: SkipReason | None = None
    message: str | None = None
    dependency_id: str | None = None
    error: PipelineError | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class PipelineRun:
    """The record of one run of one pipeline. ``run()`` returns it for every outcome."""

    run_id: str
    pipeline_id: str
    status: RunStatus
    dry_run: bool
    started_at_ms: int
    finished_at_ms: int
    errors: tuple[PipelineError, ...]
    """Run-level errors, then step errors in plan order, then finalization errors."""
    steps: tuple[StepReport, ...]
    """One terminal report per plan step, in plan (execution) order."""
    finalized: bool
    value: Any = None
    """Exactly what the result schema produced (``None`` unless ``finalized``)."""
    definition_identity: DefinitionIdentity | None = None
    parent_run_id: str | None = None
    correlation_id: str | None = None
    item_key: str | None = None

    @property
    def ok(self) -> bool:
        """Whether the run completed without errors."""
        return self.status == "completed"

    def step(self, step_id: str) -> StepReport:
        """The report of step ``step_id`` (``KeyError`` if the step is not in the run)."""
        for report in self.steps:
            if report.id == step_id:
                return report
        raise KeyError(step_id)


# -- building records without the frozen dataclasses' ``__init__`` ------------------------------
# A frozen dataclass's ``__init__`` sets each field with ``object.__setattr__`` after a class
# call with keywords: about 20,000 instructions for a report and 27,000 for a run record, some
# 8 % of a one-turn agent run (W3). The makers below build the very same objects (same type,
# every field set, equal to the constructor's) with each slot's own setter instead, at about
# 40 % of that. ``tests/pipeline/test_records.py`` checks both against the constructors.
_new = object.__new__
_report_id = StepReport.__dict__["id"].__set__
_report_status = StepReport.__dict__["status"].__set__
_report_name = StepReport.__dict__["name"].__set__
_report_description = StepReport.__dict__["description"].__set__
_report_attempt_id = StepReport.__dict__["attempt_id"].__set__
_report_started = StepReport.__dict__["started_at_ms"].__set__
_report_finished = StepReport.__dict__["finished_at_ms"].__set__
_report_reason = StepReport.__dict__["reason"].__set__
_report_message = StepReport.__dict__["message"].__set__
_report_dependency_id = StepReport.__dict__["dependency_id"].__set__
_report_error = StepReport.__dict__["error"].__set__


def completed_report(
    id: str,
    name: str | None,
    description: str | None,
    attempt_id: str,
    started_at_ms: int,
    finished_at_ms: int,
) -> StepReport:
    """``StepReport(status="completed", ...)`` of a step whose attempt succeeded."""
    report: StepReport = _new(StepReport)
    _report_id(report, id)
    _report_status(report, "completed")
    _report_name(report, name)
    _report_description(report, description)
    _report_attempt_id(report, attempt_id)
    _report_started(report, started_at_ms)
    _report_finished(report, finished_at_ms)
    _report_reason(report, None)
    _report_message(report, None)
    _report_dependency_id(report, None)
    _report_error(report, None)
    return report


_run_run_id = PipelineRun.__dict__["run_id"].__set__
_run_pipeline_id = PipelineRun.__dict__["pipeline_id"].__set__
_run_status = PipelineRun.__dict__["status"].__set__
_run_dry_run = PipelineRun.__dict__["dry_run"].__set__
_run_started = PipelineRun.__dict__["started_at_ms"].__set__
_run_finished = PipelineRun.__dict__["finished_at_ms"].__set__
_run_errors = PipelineRun.__dict__["errors"].__set__
_run_steps = PipelineRun.__dict__["steps"].__set__
_run_finalized = PipelineRun.__dict__["finalized"].__set__
_run_value = PipelineRun.__dict__["value"].__set__
_run_identity = PipelineRun.__dict__["definition_identity"].__set__
_run_parent_run_id = PipelineRun.__dict__["parent_run_id"].__set__
_run_correlation_id = PipelineRun.__dict__["correlation_id"].__set__
_run_item_key = PipelineRun.__dict__["item_key"].__set__


def new_run(
    run_id: str,
    pipeline_id: str,
    status: RunStatus,
    dry_run: bool,
    started_at_ms: int,
    finished_at_ms: int,
    errors: tuple[PipelineError, ...],
    steps: tuple[StepReport, ...],
    finalized: bool,
    value: Any,
    definition_identity: DefinitionIdentity | None,
    parent_run_id: str | None,
    correlation_id: str | None,
    item_key: str | None,
) -> PipelineRun:
    """``PipelineRun(...)`` with every field given, in declaration order."""
    run: PipelineRun = _new(PipelineRun)
    _run_run_id(run, run_id)
    _run_pipeline_id(run, pipeline_id)
    _run_status(run, status)
    _run_dry_run(run, dry_run)
    _run_started(run, started_at_ms)
    _run_finished(run, finished_at_ms)
    _run_errors(run, errors)
    _run_steps(run, steps)
    _run_finalized(run, finalized)
    _run_value(run, value)
    _run_identity(run, definition_identity)
    _run_parent_run_id(run, parent_run_id)
    _run_correlation_id(run, correlation_id)
    _run_item_key(run, item_key)
    return run
