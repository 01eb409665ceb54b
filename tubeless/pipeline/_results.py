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
