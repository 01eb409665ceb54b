"""The run records' fast makers build exactly what the frozen dataclasses' constructors build."""

from __future__ import annotations

import dataclasses
import pickle

import pytest

from tubeless.pipeline import PipelineRun, StepReport
from tubeless.pipeline._results import DefinitionIdentity, completed_report, new_run


def _sentinels(cls: type) -> dict[str, object]:
    """A distinct value for every field of ``cls``, so a field set from the wrong one shows."""
    return {f.name: f"{cls.__name__}.{f.name}" for f in dataclasses.fields(cls)}


def test_new_run_sets_every_field_like_the_constructor() -> None:
    values = _sentinels(PipelineRun)
    made = new_run(*values.values())
    built = PipelineRun(**values)  # type: ignore[arg-type]
    assert type(made) is PipelineRun
    assert made == built
    assert hash(made) == hash(built)
    assert repr(made) == repr(built)
    assert dataclasses.asdict(made) == values
    assert pickle.loads(pickle.dumps(made)) == built


def test_completed_report_sets_every_field_like_the_constructor() -> None:
    identity = DefinitionIdentity(version=1, structural_fingerprint="s", definition_id="d")
    made = completed_report("step", "Step", "What it does", "run:attempt:1", 10, 12)
    built = StepReport(
        id="step",
        status="completed",
        name="Step",
        description="What it does",
        attempt_id="run:attempt:1",
        started_at_ms=10,
        finished_at_ms=12,
    )
    assert type(made) is StepReport
    assert made == built
    assert repr(made) == repr(built)
    assert dataclasses.asdict(made) == dataclasses.asdict(built)
    run = new_run(
        "r", "p", "completed", False, 1, 2, (), (made,), True, 3, identity, None, None, None
    )
    assert run.step("step") is made


def test_made_records_stay_frozen() -> None:
    made = completed_report("step", None, None, "run:attempt:1", 10, 12)
    with pytest.raises(dataclasses.FrozenInstanceError):
        made.status = "failed"  # type: ignore[misc]
