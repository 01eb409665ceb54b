"""The public API is exactly what ``tubeless.__all__`` pins, and every name imports."""

from __future__ import annotations

import subprocess
import sys

import tubeless

EXPECTED = [
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


def test_all_is_pinned_and_sorted() -> None:
    """Adding or removing a public name is a deliberate change to this list."""
    assert tubeless.__all__ == EXPECTED
    assert sorted(tubeless.__all__) == tubeless.__all__


def test_every_public_name_resolves() -> None:
    """Each lazily exported name resolves to a real object from its home module."""
    for name in tubeless.__all__:
        assert getattr(tubeless, name) is not None, name
    assert set(tubeless.__all__) <= set(dir(tubeless))


def test_unknown_attribute_is_an_attribute_error() -> None:
    """Misspelt names fail like any module attribute."""
    try:
        tubeless.define_pipe  # type: ignore[attr-defined]  # noqa: B018
    except AttributeError as err:
        assert "define_pipe" in str(err)
    else:  # pragma: no cover - the assertion below explains the failure
        raise AssertionError("expected AttributeError")


def test_importing_the_package_stays_light() -> None:
    """``import tubeless`` loads neither pydantic nor jsonschema until a name is used."""
    code = (
        "import sys, tubeless; "
        "print(any(m.split('.')[0] in {'pydantic', 'jsonschema'} for m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
