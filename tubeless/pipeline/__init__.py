"""The pipeline core: steps, plans, runs, composition, cancellation and identity."""

from __future__ import annotations

from tubeless.pipeline._cancel import (
    YIELD_EVERY,
    CancelToken,
    RunCancelledError,
    clear_interrupt,
    interrupt,
    interruptibly,
    stop_waiting,
)
from tubeless.pipeline._child import run_child
from tubeless.pipeline._compose import (
    FanOutFailedError,
    for_each_pipeline,
    from_pipeline,
)
from tubeless.pipeline._context import StepContext, StepLogger
from tubeless.pipeline._definition import define_pipeline
from tubeless.pipeline._execute import Controls
from tubeless.pipeline._failures import ChildRunFailedError
from tubeless.pipeline._finalize import FINALIZE_STEP_ID
from tubeless.pipeline._iterate import iterate_pipeline
from tubeless.pipeline._lean import LeanPathSwitch, lean_path
from tubeless.pipeline._pipeline import Pipeline
from tubeless.pipeline._plan import Plan, PlanStep, SelectionReason
from tubeless.pipeline._results import DefinitionIdentity, PipelineRun, StepReport
from tubeless.pipeline._step import NestedPipeline, RequiredOutputs, Step, require_outputs, step

__all__ = [
    "FINALIZE_STEP_ID",
    "YIELD_EVERY",
    "CancelToken",
    "ChildRunFailedError",
    "Controls",
    "DefinitionIdentity",
    "FanOutFailedError",
    "LeanPathSwitch",
    "NestedPipeline",
    "Pipeline",
    "PipelineRun",
    "Plan",
    "PlanStep",
    "RequiredOutputs",
    "RunCancelledError",
    "SelectionReason",
    "Step",
    "StepContext",
    "StepLogger",
    "StepReport",
    "clear_interrupt",
    "define_pipeline",
    "for_each_pipeline",
    "from_pipeline",
    "interrupt",
    "interruptibly",
    "iterate_pipeline",
    "lean_path",
    "require_outputs",
    "run_child",
    "step",
    "stop_waiting",
]
