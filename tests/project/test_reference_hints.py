"""Issue 15: a reference that is almost right says what was meant (the closest attribute, step
id or factory setting; a colon for a dot), a project file that shadows a standard module is said
first, and a module that fails to import is one problem naming its own file and line."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.fixtures.cli import tubeless
from tests.project.test_references import (
    AGENT,
    HELPERS,
    isolated_imports,
    problems,
    project,
    write,
)
from tubeless.errors import DocumentError, ReferenceResolutionError
from tubeless.project import check_project, load_project

__all__ = ["isolated_imports"]  # the autouse fixture, used by being imported


def test_a_missing_attribute_names_the_closest_ones(tmp_path: Path) -> None:
    path = project(tmp_path, AGENT.replace("decide: helpers:decide", "decide: helpers:decied"))
    assert problems(path) == [
        (
            9,
            13,
            "/agents/helper/decide",
            "module 'helpers' has no attribute 'decied'; did you mean 'decide'?",
        ),
    ]


def test_a_missing_attribute_without_a_close_name_says_nothing_more(tmp_path: Path) -> None:
    path = project(tmp_path, AGENT.replace("decide: helpers:decide", "decide: helpers:zzz"))
    assert problems(path)[0][3] == "module 'helpers' has no attribute 'zzz'"


def test_a_dotted_path_where_a_colon_was_meant_says_how_to_write_it(tmp_path: Path) -> None:
    path = write(
        tmp_path / "project.yaml", AGENT.replace("decide: helpers:decide", "decide: helpers.decide")
    )

    with pytest.raises(DocumentError) as caught:
        check_project(path)

    assert [(i.line, i.column, i.pointer, i.message) for i in caught.value.issues] == [
        (
            9,
            13,
            "/agents/helper/decide",
            "expected a string matching 'package.module:attribute', found 'helpers.decide'; did "
            "you mean 'helpers:decide'? (a colon separates the module from the attribute)",
        ),
    ]


def test_an_unknown_step_id_names_the_closest_step(tmp_path: Path) -> None:
    path = write(
        tmp_path / "project.yaml",
        """\
version: 1
project: {id: demo}
pipelines:
  flow:
    steps:
      - {id: load, run: nowhere:load}
      - {id: count, run: nowhere:count, depends_on: [lod]}
""",
    )

    with pytest.raises(DocumentError) as caught:
        check_project(path)

    assert [(i.line, i.column, i.message) for i in caught.value.issues] == [
        (
            7,
            54,
            "unknown step 'lod'; did you mean 'load'? (this pipeline's steps: 'load', 'count')",
        ),
    ]


def test_an_unknown_adapter_setting_names_the_closest_setting(tmp_path: Path) -> None:
    path = project(
        tmp_path,
        AGENT.replace(
            "decide: helpers:decide",
            "decide: {use: tubeless.providers.openai:responses, with: {timeout: 30, modle: x}}",
        ),
    )

    assert problems(path) == [
        (
            9,
            63,
            "/agents/helper/decide/with/timeout",
            "'tubeless.providers.openai:responses' has no setting 'timeout'; did you mean "
            "'timeout_s'?",
        ),
        (
            9,
            76,
            "/agents/helper/decide/with/modle",
            "'tubeless.providers.openai:responses' has no setting 'modle'; did you mean 'model'?",
        ),
    ]


def test_a_missing_factory_setting_is_named(tmp_path: Path) -> None:
    helpers = HELPERS + "\n\ndef make_sized(size, *, name='x'):\n    return make_decide()\n"
    path = project(
        tmp_path,
        AGENT.replace(
            "decide: helpers:decide", "decide: {use: helpers:make_sized, with: {name: y}}"
        ),
        helpers,
    )

    assert problems(path) == [
        (
            9,
            13,
            "/agents/helper/decide",
            "'helpers:make_sized' needs the setting 'size' under with:",
        ),
    ]


def test_a_project_file_shadowing_a_standard_module_is_said_before_anything_is_imported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The folders are checked with the document (issue 28, item 14): the project's helpers,
    which would import the shadowing file, are not imported at all."""
    # Another test may have imported the real module: the project's import must find the file.
    monkeypatch.delitem(sys.modules, "statistics", raising=False)
    write(tmp_path / "lib" / "statistics.py", "raise RuntimeError('not the real one')\n")
    helpers = "import statistics\n\n" + HELPERS
    path = project(tmp_path, AGENT, helpers)

    found = problems(path)

    assert found[0] == (
        3,
        15,
        "/python_path/0",
        "lib/statistics.py shadows the standard library module 'statistics' (imports of "
        "'statistics' get this file); rename it",
    )
    assert len(found) == 1
    assert "statistics" not in sys.modules


def test_a_failing_import_is_one_problem_naming_the_module_s_file_and_line(
    tmp_path: Path,
) -> None:
    write(tmp_path / "lib" / "shaky.py", "X = 1\n\n\ndef f():\n    pass\n\n\nmissing_name\n")
    text = AGENT.replace(
        "decide: helpers:decide",
        "decide: shaky:decide\n    reduce: shaky:reduce\n    dry_run: shaky:preview",
    )
    path = project(tmp_path, text)

    assert problems(path) == [
        (
            9,
            13,
            "/agents/helper/decide",
            "importing 'shaky' failed at lib/shaky.py:8: NameError: name 'missing_name' is not "
            "defined",
        ),
    ]


def test_a_syntax_error_names_its_file_and_line(tmp_path: Path) -> None:
    write(tmp_path / "lib" / "typo.py", "X = 1\ndef f(:\n    pass\n")
    path = project(tmp_path, AGENT.replace("decide: helpers:decide", "decide: typo:decide"))

    ((_, _, _, message),) = problems(path)

    assert message.startswith("importing 'typo' failed at lib/typo.py:2: SyntaxError: ")


def test_debug_shows_the_import_s_own_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write(tmp_path / "lib" / "shaky2.py", "X = 1\nraise LookupError('deep inside')\n")
    path = project(tmp_path, AGENT.replace("decide: helpers:decide", "decide: shaky2:decide"))

    plain = tubeless(capsys, "validate", "--resolve", path)
    debug = tubeless(capsys, "--debug", "validate", "--resolve", path)

    line = (
        f"error: {path}:9:13 /agents/helper/decide: importing 'shaky2' failed at "
        "lib/shaky2.py:2: LookupError: deep inside\n"
    )
    assert plain.err == line
    assert (debug.code, plain.code) == (4, 4)
    assert "Traceback" in debug.err
    assert 'shaky2.py", line 2, in <module>' in debug.err
    assert debug.err.endswith(line)


def test_run_under_debug_shows_the_import_s_own_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write(tmp_path / "lib" / "shaky3.py", "X = 1\nraise LookupError('deep inside')\n")
    path = project(tmp_path, AGENT.replace("decide: helpers:decide", "decide: shaky3:decide"))

    outcome = tubeless(capsys, "--debug", "run", path)

    assert outcome.code == 2
    assert 'shaky3.py", line 2, in <module>' in outcome.err
    with pytest.raises(ReferenceResolutionError) as caught:
        load_project(path)
    assert isinstance(caught.value.__cause__, LookupError)
