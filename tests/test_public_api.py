"""The public API is exactly what ``tubeless.__all__`` pins, and every name imports.

The explicit list below is the deliberate record; the other tests derive the same list from
the module itself (its lazy ``_HOMES`` table and its ``TYPE_CHECKING`` imports) and from the
documented import lines, so a name added in one place and not the others fails here.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from importlib import import_module
from pathlib import Path

import tubeless

ROOT = Path(__file__).resolve().parents[1]

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

#: The names of DESIGN.md section 3's import line (the contract, kept outside this repository).
DESIGN_IMPORTS = [
    "define_pipeline",
    "step",
    "from_pipeline",
    "for_each_pipeline",
    "iterate_pipeline",
    "require_outputs",
    "define_agent",
    "define_tool",
    "pipeline_tool",
    "ToolError",
    "Limits",
    "Schema",
    "CancelToken",
    "load_project",
    "TubelessError",
    "PipelineExecutionError",
]
_DOC_IMPORT = re.compile(r"^from tubeless import \(?([\w, \n]+?)\)?$", re.MULTILINE)


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


def test_importing_the_agent_api_loads_neither_pydantic_nor_jsonschema() -> None:
    """``from tubeless import define_agent, define_tool, Limits`` imports the validators only
    when a schema is built, and an agent built from type schemas never needs jsonschema."""
    code = (
        "import sys\n"
        "from tubeless import define_agent, define_tool, Limits\n"
        "heavy = {'pydantic', 'jsonschema'}\n"
        "loaded = lambda: sorted({m.split('.')[0] for m in sys.modules} & heavy)\n"
        "print(loaded())\n"
        "async def upper(text: str) -> str:\n"
        "    return text.upper()\n"
        "define_tool(description='Upper.', input_schema=str, output_schema=str, run=upper)\n"
        "print(loaded())\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split("\n")[:2] == ["[]", "['pydantic']"]


def test_importing_the_agent_api_defers_what_only_runs_need() -> None:
    """The import leaves out pydantic_core (the durable journal encodes tool values with it),
    ``secrets`` (run ids draw from ``os.urandom`` directly), sqlite3 (a SQLite checkpoint
    store loads it when first named), decimal and difflib (a float's fingerprint and an
    unknown tool's suggestion import them)."""
    deferred = "{'pydantic_core', 'secrets', 'random', 'sqlite3', 'decimal', 'difflib'}"
    code = (
        "import sys\n"
        "from tubeless import define_agent, define_tool, Limits\n"
        f"print(sorted({deferred} & set(sys.modules)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_all_is_every_lazily_homed_name_plus_the_version() -> None:
    """``__all__`` and the ``_HOMES`` table that ``__getattr__`` reads name the same names."""
    homed = [name for names in tubeless._HOMES.values() for name in names]

    assert len(homed) == len(set(homed)), "a name has two homes"
    assert sorted([*homed, "__version__"]) == tubeless.__all__


def test_each_name_comes_from_its_home_module_s_public_names() -> None:
    """``tubeless.X`` is the very object its home module exports under the same name."""
    for module_name, names in tubeless._HOMES.items():
        module = import_module(module_name)
        for name in names:
            assert getattr(tubeless, name) is getattr(module, name), name
            assert name in getattr(module, "__all__", [name]), f"{module_name} hides {name}"


def test_the_type_checking_imports_match_the_lazy_homes() -> None:
    """What type checkers see (the ``TYPE_CHECKING`` block) is what runs (``_HOMES``)."""
    tree = ast.parse((ROOT / "tubeless" / "__init__.py").read_text(encoding="utf-8"))
    guarded = next(
        node
        for node in tree.body
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING"
    )
    seen: dict[str, tuple[str, ...]] = {}
    for node in guarded.body:
        assert isinstance(node, ast.ImportFrom) and node.module is not None
        seen[node.module] = tuple(alias.name for alias in node.names)

    assert seen == {module: tuple(sorted(names)) for module, names in tubeless._HOMES.items()}


def test_design_s_import_line_is_all_exported() -> None:
    """Every name DESIGN.md section 3 imports from ``tubeless`` is public."""
    assert set(DESIGN_IMPORTS) <= set(tubeless.__all__)


def test_every_documented_import_names_public_names() -> None:
    """``from tubeless import ...`` in README.md and docs/*.md only names exported names."""
    documents = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    imported = {
        name.strip()
        for path in documents
        for match in _DOC_IMPORT.finditer(path.read_text(encoding="utf-8"))
        for name in match.group(1).split(",")
        if name.strip()
    }

    assert imported, "no documented imports were found"
    assert imported <= set(tubeless.__all__)


#: The public names of the layer packages users import from directly (the machinery other
#: tubeless packages use is named in each package's ``_spi`` module instead).
SUBPACKAGES = {
    "tubeless.pipeline": [
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
    ],
    "tubeless.batch": [
        "CaseResult",
        "EngineName",
        "EntrySource",
        "Finding",
        "run_batch",
        "run_eval",
    ],
    "tubeless.tracing": [
        "NdjsonSink",
        "OtelSink",
        "PostgresSink",
        "RunTree",
        "SqliteSink",
        "TraceFold",
        "TraceReadError",
        "TraceSink",
        "find_run",
        "format_tree",
        "read_since",
        "read_trace",
        "run_trees",
    ],
}
_SUBPACKAGE_IMPORT = re.compile(
    r"^from (tubeless\.(?:pipeline|batch|tracing)) import \(?([\w, \n]+?)\)?$", re.MULTILINE
)


def test_the_layer_packages_export_what_is_pinned() -> None:
    """``tubeless.pipeline``, ``tubeless.batch`` and ``tubeless.tracing`` name what users need,
    not the machinery; each name resolves (the tracing storages lazily)."""
    for module_name, expected in SUBPACKAGES.items():
        module = import_module(module_name)
        assert module.__all__ == expected, module_name
        for name in expected:
            assert getattr(module, name) is not None, (module_name, name)


def test_every_documented_subpackage_import_names_public_names() -> None:
    """``from tubeless.pipeline|batch|tracing import ...`` in the docs names pinned names only."""
    documents = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    found = 0
    for path in documents:
        for match in _SUBPACKAGE_IMPORT.finditer(path.read_text(encoding="utf-8")):
            names = {name.strip() for name in match.group(2).split(",") if name.strip()}
            found += 1
            assert names <= set(SUBPACKAGES[match.group(1)]), (path.name, match.group(0))
    assert found >= 3, "no documented subpackage imports were found"
