"""tubeless: bounded, inspectable, testable agent pipelines declared in Python or YAML.

Public names are imported lazily, so ``tubeless --help`` never pays for pydantic or jsonschema.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from tubeless._version import __version__

if TYPE_CHECKING:
    from tubeless.agent import Limits, ToolError, define_agent, define_tool, pipeline_tool
    from tubeless.errors import (
        AgentDefinitionError,
        DocumentError,
        PipelineDefinitionError,
        PipelineError,
        PipelineExecutionError,
        PlanningError,
        ReferenceResolutionError,
        TemplateError,
        TubelessError,
    )
    from tubeless.pipeline import (
        CancelToken,
        DefinitionIdentity,
        Pipeline,
        PipelineRun,
        Plan,
        StepContext,
        define_pipeline,
        for_each_pipeline,
        from_pipeline,
        iterate_pipeline,
        require_outputs,
        step,
    )
    from tubeless.project import Project, load_project
    from tubeless.schema import Schema

__all__ = [
    "AgentDefinitionError",
    "CancelToken",
    "DefinitionIdentity",
    "DocumentError",
    "Limits",
    "Pipeline",
    "PipelineDefinitionError",
    "PipelineError",
    "PipelineExecutionError",
    "PipelineRun",
    "Plan",
    "PlanningError",
    "Project",
    "ReferenceResolutionError",
    "Schema",
    "StepContext",
    "TemplateError",
    "ToolError",
    "TubelessError",
    "__version__",
    "define_agent",
    "define_pipeline",
    "define_tool",
    "for_each_pipeline",
    "from_pipeline",
    "iterate_pipeline",
    "load_project",
    "pipeline_tool",
    "require_outputs",
    "step",
]

_HOMES = {
    "tubeless.agent": ("Limits", "ToolError", "define_agent", "define_tool", "pipeline_tool"),
    "tubeless.errors": (
        "AgentDefinitionError",
        "DocumentError",
        "PipelineDefinitionError",
        "PipelineError",
        "PipelineExecutionError",
        "PlanningError",
        "ReferenceResolutionError",
        "TemplateError",
        "TubelessError",
    ),
    "tubeless.pipeline": (
        "CancelToken",
        "DefinitionIdentity",
        "Pipeline",
        "PipelineRun",
        "Plan",
        "StepContext",
        "define_pipeline",
        "for_each_pipeline",
        "from_pipeline",
        "iterate_pipeline",
        "require_outputs",
        "step",
    ),
    "tubeless.project": ("Project", "load_project"),
    "tubeless.schema": ("Schema",),
}
_MODULE_OF = {name: module for module, names in _HOMES.items() for name in names}


def __getattr__(name: str) -> Any:
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module 'tubeless' has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
