"""References ``module:attribute`` resolve from ``python_path`` first, refuse standard-library
callables unless allowed, and report every problem at the YAML location that named it
(DESIGN.md §5, "References")."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tubeless.errors import REFERENCE_INVALID, ReferenceResolutionError
from tubeless.project import load_project

REPO = Path(__file__).resolve().parents[2]

# ``helpers`` lives in the project's python_path folder ``lib``.
HELPERS = """\
from tubeless import define_tool

NOT_CALLABLE = 42
FACTORY_CALLS = []


def decide(state, ctx):
    return {"kind": "finish", "result": state["question"]}


def plain(text, ctx):
    return text


def echo_options(inputs, ctx):
    return ctx.options


def make_decide(**settings):
    FACTORY_CALLS.append(settings)

    def decide(state, ctx):
        return {"kind": "finish", "result": settings}

    return decide


def make_nothing(**settings):
    return 5


def make_trouble(**settings):
    raise RuntimeError("the factory cannot start")


shout = define_tool(description="Shout.", input_schema=str, output_schema=str, run=plain)
"""

# Line numbers below refer to this document (``decide`` is on line 9, column 13).
AGENT = """\
version: 1
project: {id: demo}
python_path: [lib]
agents:
  helper:
    input: {schema: {type: object, properties: {question: {type: string}}}}
    result: {schema: {}}
    initial_state: {question: "{{ input.question }}"}
    decide: helpers:decide
"""
# A pipeline whose one step runs ``helpers:plain`` (line 7, column 25).
PIPELINE = """\
version: 1
project: {id: demo}
python_path: [lib]
pipelines:
  flow:
    steps:
      - {id: only, run: helpers:plain}
"""


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


@pytest.fixture(autouse=True)
def isolated_imports(tmp_path: Path) -> Iterator[None]:
    """Forget folders put on ``sys.path`` and modules imported from ``tmp_path`` by a test."""
    saved = list(sys.path)
    importlib.invalidate_caches()
    yield
    sys.path[:] = saved
    for name, module in list(sys.modules.items()):
        file = getattr(module, "__file__", None)
        if file is not None and Path(file).resolve().is_relative_to(tmp_path.resolve()):
            del sys.modules[name]


def project(tmp_path: Path, text: str, helpers: str = HELPERS) -> Path:
    write(tmp_path / "lib" / "helpers.py", helpers)
    return write(tmp_path / "project.yaml", text)


def problems(path: Path) -> list[tuple[int, int, str, str]]:
    """``(line, column, pointer, message)`` of every reference problem, in raising order."""
    with pytest.raises(ReferenceResolutionError) as caught:
        load_project(path)
    error = caught.value
    assert error.code == REFERENCE_INVALID
    assert all(
        issue.code == REFERENCE_INVALID and issue.file == str(path) for issue in error.issues
    )
    assert str(error).startswith(error.issues[0].format())
    assert "Traceback" not in str(error)
    return [(i.line, i.column, i.pointer, i.message) for i in error.issues]


# -- where modules come from ------------------------------------------------------------------
def test_python_path_folders_are_searched_before_sys_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    elsewhere = tmp_path / "elsewhere"
    write(elsewhere / "helpers.py", HELPERS.replace('state["question"]', '"from sys.path"'))
    monkeypatch.syspath_prepend(str(elsewhere))
    path = project(tmp_path, AGENT)

    agent = load_project(path).get("helper")

    assert agent.run_sync({"question": "from python_path"}) == "from python_path"
    loaded_from = Path(sys.modules["helpers"].__file__ or "").resolve()
    assert loaded_from == (tmp_path / "lib" / "helpers.py").resolve()


def test_a_module_outside_python_path_is_found_on_sys_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    elsewhere = tmp_path / "elsewhere"
    write(elsewhere / "onsyspath.py", HELPERS)
    monkeypatch.syspath_prepend(str(elsewhere))
    path = project(tmp_path, AGENT.replace("helpers:decide", "onsyspath:decide"))

    assert load_project(path).get("helper").run_sync({"question": "found"}) == "found"


def test_python_path_wins_even_when_its_folder_is_already_on_sys_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    elsewhere = tmp_path / "elsewhere"
    write(elsewhere / "helpers.py", HELPERS.replace('state["question"]', '"from sys.path"'))
    path = project(tmp_path, AGENT)
    monkeypatch.setattr(sys, "path", [str(elsewhere), *sys.path, str(tmp_path / "lib")])

    agent = load_project(path).get("helper")

    assert agent.run_sync({"question": "from python_path"}) == "from python_path"


def test_a_module_already_imported_from_another_file_is_refused_naming_both(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    elsewhere = tmp_path / "elsewhere"
    other = write(elsewhere / "helpers.py", HELPERS)
    monkeypatch.syspath_prepend(str(elsewhere))
    importlib.import_module("helpers")
    path = project(tmp_path, AGENT)
    mine = tmp_path / "lib" / "helpers.py"

    assert problems(path) == [
        (
            9,
            13,
            "/agents/helper/decide",
            f"module 'helpers' is already imported from {other}, but the project's python_path "
            f"provides {mine}; rename one of them",
        ),
    ]


def test_a_module_already_imported_from_the_same_file_is_reused(tmp_path: Path) -> None:
    path = project(tmp_path, AGENT)
    first = load_project(path).get("helper")
    module = sys.modules["helpers"]

    second = load_project(path).get("helper")

    assert sys.modules["helpers"] is module  # never reloaded
    assert first.identity == second.identity


# -- the standard library -------------------------------------------------------------------
STDLIB_CASES = [
    # Callables that could be called as the harness calls them (os.rename takes two arguments).
    pytest.param(
        AGENT,
        "helpers:decide",
        "os:rename",
        "os",
        (9, 13, "/agents/helper/decide"),
        id="decide-os-rename",
    ),
    pytest.param(
        AGENT,
        "helpers:decide",
        "builtins:eval",
        "builtins",
        (9, 13, "/agents/helper/decide"),
        id="decide-builtins-eval",
    ),
    pytest.param(
        PIPELINE,
        "helpers:plain",
        "subprocess:run",
        "subprocess",
        (7, 25, "/pipelines/flow/steps/0/run"),
        id="step-subprocess-run",
    ),
    pytest.param(
        PIPELINE,
        "helpers:plain",
        "os.path:join",
        "os.path",
        (7, 25, "/pipelines/flow/steps/0/run"),
        id="step-submodule",
    ),
]


@pytest.mark.parametrize(("text", "old", "reference", "module", "where"), STDLIB_CASES)
def test_standard_library_callables_are_refused_at_their_location(
    tmp_path: Path,
    text: str,
    old: str,
    reference: str,
    module: str,
    where: tuple[int, int, str],
) -> None:
    path = project(tmp_path, text.replace(old, reference))
    assert problems(path) == [
        (
            *where,
            f"{reference!r} names the standard library module {module!r}; add it to "
            "allow_modules if the project really needs it",
        ),
    ]


@pytest.mark.parametrize(("text", "old", "reference", "module", "where"), STDLIB_CASES)
def test_standard_library_callables_are_allowed_when_their_module_is_listed(
    tmp_path: Path,
    text: str,
    old: str,
    reference: str,
    module: str,
    where: tuple[int, int, str],
) -> None:
    allowed = module.split(".")[0]  # listing a package allows its submodules
    text = text.replace("python_path: [lib]\n", f"python_path: [lib]\nallow_modules: [{allowed}]\n")
    path = project(tmp_path, text.replace(old, reference))

    loaded = load_project(path)  # resolved, never called

    assert set(loaded.entries) == ({"helper"} if "agents:" in text else {"flow"})


def test_standard_types_are_allowed_as_schemas(tmp_path: Path) -> None:
    text = PIPELINE.replace("helpers:plain", "helpers:echo_options").replace(
        "    steps:\n",
        "    input: {schema: builtins:str}\n    result: {schema: builtins:str}\n    steps:\n",
    )
    path = project(tmp_path, text)

    flow = load_project(path).get("flow")

    assert flow.run_sync("echo") == "echo"


# -- what a reference may name ----------------------------------------------------------------
REFERENCE_CASES = [
    pytest.param(
        "decide: helpers:decide",
        "decide: nowhere.at_all:decide",
        (
            9,
            13,
            "/agents/helper/decide",
            "cannot import module 'nowhere.at_all': no module named 'nowhere'; check the spelling "
            "or add its folder to python_path",
        ),
        id="missing-module",
    ),
    pytest.param(
        "decide: helpers:decide",
        "decide: helpers:decyde",
        (
            9,
            13,
            "/agents/helper/decide",
            "module 'helpers' has no attribute 'decyde'; did you mean 'decide'?",
        ),
        id="missing-attribute",
    ),
    pytest.param(
        "decide: helpers:decide",
        "decide: broken:decide",
        (
            9,
            13,
            "/agents/helper/decide",
            "importing 'broken' failed at lib/broken.py:1: RuntimeError: broken at import time",
        ),
        id="import-raises",
    ),
    pytest.param(
        "decide: helpers:decide",
        "decide: broken_dependency:decide",
        (
            9,
            13,
            "/agents/helper/decide",
            "importing 'broken_dependency' failed at lib/broken_dependency.py:1: "
            "ModuleNotFoundError: No module named "
            "'not_installed_anywhere'",
        ),
        id="import-of-a-missing-dependency",
    ),
    pytest.param(
        "decide: helpers:decide",
        "decide: helpers:NOT_CALLABLE",
        (9, 13, "/agents/helper/decide", "'helpers:NOT_CALLABLE' is an int, not a callable"),
        id="decide-not-callable",
    ),
    pytest.param(
        "decide: helpers:decide",
        "decide: helpers:decide\n    tools: {echo: helpers:plain}",
        (
            10,
            19,
            "/agents/helper/tools/echo",
            "'helpers:plain' is a function, not a tool; make it with define_tool(...) or declare "
            "{run, description, input, output} here",
        ),
        id="tool-plain-function",
    ),
    pytest.param(
        "decide: helpers:decide",
        "decide: {use: helpers:make_nothing, with: {size: 1}}",
        (
            9,
            13,
            "/agents/helper/decide",
            "factory 'helpers:make_nothing' returned an int, not a callable",
        ),
        id="factory-returns-non-callable",
    ),
    pytest.param(
        "decide: helpers:decide",
        "decide: {use: helpers:make_trouble}",
        (
            9,
            13,
            "/agents/helper/decide",
            "factory 'helpers:make_trouble' failed: RuntimeError: the factory cannot start",
        ),
        id="factory-raises",
    ),
    pytest.param(
        "decide: helpers:decide",
        "decide: {use: helpers:NOT_CALLABLE}",
        (9, 19, "/agents/helper/decide/use", "'helpers:NOT_CALLABLE' is an int, not a callable"),
        id="factory-not-callable",
    ),
]


@pytest.mark.parametrize(("old", "new", "expected"), REFERENCE_CASES)
def test_an_unusable_reference_is_reported_where_it_is_named(
    tmp_path: Path, old: str, new: str, expected: tuple[int, int, str, str]
) -> None:
    write(tmp_path / "lib" / "broken.py", 'raise RuntimeError("broken at import time")\n')
    write(tmp_path / "lib" / "broken_dependency.py", "import not_installed_anywhere\n")
    path = project(tmp_path, AGENT.replace(old, new))
    assert problems(path) == [expected]


def test_every_reference_problem_of_a_file_is_reported_together_in_file_order(
    tmp_path: Path,
) -> None:
    text = """\
version: 1
project: {id: demo}
python_path: [lib]
pipelines:
  flow:
    steps:
      - {id: a, run: helpers:missing_a}
      - {id: b, run: os:system, skip: helpers:NOT_CALLABLE}
agents:
  helper:
    input: {schema: helpers:NoSuchModel}
    result: {schema: {type: object}}
    initial_state: helpers:nope
    decide: nowhere:decide
    tools: {echo: helpers:plain, shout: helpers:shout}
"""
    path = project(tmp_path, text)

    with pytest.raises(ReferenceResolutionError) as caught:
        load_project(path)

    assert [(i.line, i.column, i.pointer) for i in caught.value.issues] == [
        (7, 22, "/pipelines/flow/steps/0/run"),
        (8, 22, "/pipelines/flow/steps/1/run"),
        (8, 39, "/pipelines/flow/steps/1/skip"),
        (11, 21, "/agents/helper/input/schema"),
        (13, 20, "/agents/helper/initial_state"),
        (14, 13, "/agents/helper/decide"),
        (15, 19, "/agents/helper/tools/echo"),
    ]
    assert str(caught.value).endswith(" (and 6 more problems)")


# -- factories ------------------------------------------------------------------------------------
def test_a_factory_is_called_once_at_compile_time_with_its_literal_arguments(
    tmp_path: Path,
) -> None:
    path = project(
        tmp_path,
        AGENT.replace(
            "decide: helpers:decide",
            "decide: {use: helpers:make_decide, with: {model: small, retries: 2, "
            'key_env: "${HOME}", nested: {a: [1, 2]}}}',
        ),
    )
    settings = {"model": "small", "retries": 2, "key_env": "${HOME}", "nested": {"a": [1, 2]}}

    agent = load_project(path).get("helper")
    calls = sys.modules["helpers"].FACTORY_CALLS

    assert calls == [settings]
    assert agent.run_sync({"question": "one"}) == settings
    assert agent.run_sync({"question": "two"}) == settings
    assert calls == [settings]
