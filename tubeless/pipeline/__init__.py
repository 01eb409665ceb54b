"""The pipeline core: steps, plans, runs, composition, cancellation and identity.

The names here are the ones users need besides ``tubeless``'s own: the definitions, the run and
plan records, the step context and the lean-path switch. What other tubeless packages use of
the machinery (slots, child runs, controls, interrupts) is named in ``tubeless.pipeline._spi``.
"""

from __future__ import annotations

from tubeless.pipeline._cancel import CancelToken
from tubeless.pipeline._compose import for_each_pipeline, from_pipeline
from tubeless.pipeline._context import StepContext, StepLogger
from tubeless.pipeline._definition import define_pipeline
from tubeless.pipeline._iterate import iterate_pipeline
from tubeless.pipeline._lean import lean_path
from tubeless.pipeline._pipeline import Pipeline
from tubeless.pipeline._plan import Plan
from tubeless.pipeline._results import DefinitionIdentity, PipelineRun, StepReport
from tubeless.pipeline._step import Step, require_outputs, step

__all__ = [
    "CancelToken",
    "DefinitionIdentity",
    "Pipeline",
    "PipelineRun",
    "Plan",
    "Step",
    "StepContext",
    "StepLogger",
    "StepReport",
    "define_pipeline",
    "for_each_pipeline",
    "from_pipeline",
    "iterate_pipeline",
    "lean_path",
    "require_outputs",
    "step",
]
