"""``initial_state`` template mappings: rendered from the validated input, sandboxed, strict about
undefined names, and checked for syntax when a project loads (DESIGN.md §5, "Templates")."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tubeless import PipelineExecutionError
from tubeless._cli import main
from tubeless.errors import TEMPLATE_INVALID, TemplateError
from tubeless.frozen import thaw
from tubeless.project import check_project, load_project
from tubeless.testing import finish, scripted

# The state template is the value of ``initial_state`` (line 13); each key is on its own line.
DOCUMENT = """\
version: 1
project: {id: demo}
agents:
  helper:
    input:
      schema:
        type: object
        properties:
          question: {type: string, default: hello tubeless}
          count: {type: integer}
          tags: {type: array, items: {type: string}}
    result: {schema: {}}
    initial_state:
STATE
    decide: examples.scripted_agent:decide
"""


def write_project(tmp_path: Path, state: dict[str, Any]) -> Path:
    """A project whose ``initial_state`` template mapping is ``state`` (one key a line)."""
    lines = "".join(f"      {key}: {json.dumps(value)}\n" for key, value in state.items())
    path = tmp_path / "project.yaml"
    path.write_text(DOCUMENT.replace("STATE\n", lines), encoding="utf-8")
    return path


def echo_state() -> dict[str, Any]:
    """Overrides ``decide`` to finish with the state it is given."""
    return {"helper": {"decide": scripted(lambda state, ctx: finish(state))}}


def rendered(tmp_path: Path, state: dict[str, Any], raw_input: Any) -> Any:
    agent = load_project(write_project(tmp_path, state), overrides=echo_state()).get("helper")
    return thaw(agent.run_sync(raw_input))


# -- rendering ---------------------------------------------------------------------------------
def test_a_template_mapping_renders_native_values_and_text_from_the_validated_input(
    tmp_path: Path,
) -> None:
    state = {
        "question": "{{ input.question }}",
        "words": "{{ input.question.split() }}",
        "count": "{{ input.count }}",
        "next": "{{ input.count + 1 }}",
        "tags": "{{ input.tags }}",
        "heading": "Question: {{ input.question }}",
        "padded": "  {{ input.count }}  ",
        "nested": {"list": ["{{ input.count * 2 }}", "#{{ input.count }}", 7], "flag": True},
        "plain": "no template here",
        "empty": [],
    }

    value = rendered(tmp_path, state, {"question": "red blue", "count": 3, "tags": ["a", "b"]})

    assert value == {
        "question": "red blue",
        "words": ["red", "blue"],
        "count": 3,
        "next": 4,
        "tags": ["a", "b"],
        "heading": "Question: red blue",
        "padded": 3,
        "nested": {"list": [6, "#3", 7], "flag": True},
        "plain": "no template here",
        "empty": [],
    }


def test_templates_see_the_input_after_validation_filled_its_defaults(tmp_path: Path) -> None:
    state = {"question": "{{ input.question }}", "keys": "{{ input | list | sort }}"}
    assert rendered(tmp_path, state, {}) == {"question": "hello tubeless", "keys": ["question"]}


def test_each_run_renders_the_templates_again(tmp_path: Path) -> None:
    path = write_project(tmp_path, {"question": "{{ input.question }}"})
    decide = scripted(lambda state, ctx: finish(state), lambda state, ctx: finish(state))
    agent = load_project(path, overrides={"helper": {"decide": decide}}).get("helper")

    assert thaw(agent.run_sync({"question": "one"})) == {"question": "one"}
    assert thaw(agent.run_sync({"question": "two"})) == {"question": "two"}


# -- failing at run time ------------------------------------------------------------------------
@pytest.mark.parametrize(
    "template",
    [
        pytest.param("{{ input.count }}", id="native"),
        pytest.param("Question: {{ input.count }}", id="text"),
    ],
)
def test_an_undefined_name_fails_the_run_with_template_invalid_naming_the_pointer(
    tmp_path: Path, template: str
) -> None:
    """``count`` is declared but optional: a run without it fails at the render (a name the
    schema does not declare at all is refused when the project loads)."""
    path = write_project(tmp_path, {"question": "{{ input.question }}", "broken": template})
    agent = load_project(path, overrides=echo_state()).get("helper")

    with pytest.raises(PipelineExecutionError) as caught:
        agent.run_sync({"question": "hi"})

    assert caught.value.source_code == TEMPLATE_INVALID
    (error,) = caught.value.run.errors
    assert error.source_code == TEMPLATE_INVALID
    assert error.message.startswith("/agents/helper/initial_state/broken: template failed: ")
    assert "count" in error.message


def test_a_name_other_than_input_is_refused_when_the_project_loads(tmp_path: Path) -> None:
    """Templates see only ``input``: an unknown name is a load error, located, not a run error."""
    path = write_project(tmp_path, {"question": "{{ input.question }}", "broken": "{{ nope }}"})
    with pytest.raises(TemplateError) as caught:
        load_project(path, overrides=echo_state())
    assert caught.value.code == TEMPLATE_INVALID
    assert "/agents/helper/initial_state/broken" in str(caught.value)
    assert "unknown: nope" in str(caught.value)


def template_failure(tmp_path: Path, template: str) -> str | None:
    """The code a template fails with, whether the project refuses it or the run fails."""
    path = write_project(tmp_path, {"value": template})
    try:
        agent = load_project(path, overrides=echo_state()).get("helper")
    except TemplateError as exc:
        return exc.code
    with pytest.raises(PipelineExecutionError) as caught:
        agent.run_sync({"question": "hi"})
    return caught.value.source_code


@pytest.mark.parametrize(
    "template",
    [
        pytest.param("{{ input.__class__ }}", id="dunder-class"),
        pytest.param("{{ ''.__class__.__mro__ }}", id="mro"),
        pytest.param("{{ cycler.__init__.__globals__ }}", id="globals"),
        pytest.param("{{ lipsum.__globals__ }}", id="function-globals"),
        pytest.param("{{ __import__('os') }}", id="import"),
        pytest.param("{{ '{0.__class__}'.format(input) }}", id="format-string"),
        pytest.param("{{ input.update({'a': 1}) }}", id="mutating-method"),
        pytest.param(
            "{% include '/etc/passwd' %}",
            id="include",
        ),
        pytest.param(
            "{% import 'macros' as m %}{{ m }}",
            id="import-tag",
        ),
        pytest.param(
            "{% extends 'base' %}",
            id="extends",
        ),
        pytest.param(
            "{{ 1 / 0 }}",
            id="arithmetic-error",
        ),
    ],
)
def test_the_sandbox_refuses_escapes_and_file_access_with_template_invalid(
    tmp_path: Path, template: str
) -> None:
    assert template_failure(tmp_path, template) == TEMPLATE_INVALID


# -- syntax, checked before anything runs -------------------------------------------------------
SYNTAX_ERRORS = {
    "question": "{{ input.question ",
    "ok": "{{ input.question }}",
    "heading": "Q: {% if input.question %}",
}
SYNTAX_ISSUES = [
    (14, 17, "/agents/helper/initial_state/question"),
    (16, 16, "/agents/helper/initial_state/heading"),
]


def test_invalid_syntax_is_reported_by_check_project_with_every_location(tmp_path: Path) -> None:
    path = write_project(tmp_path, SYNTAX_ERRORS)

    with pytest.raises(TemplateError) as caught:
        check_project(path)

    issues = caught.value.issues
    assert caught.value.code == TEMPLATE_INVALID
    assert [(i.line, i.column, i.pointer) for i in issues] == SYNTAX_ISSUES
    assert all(i.code == TEMPLATE_INVALID and i.file == str(path) for i in issues)
    assert issues[0].message == (
        "invalid template: unexpected end of template, expected 'end of print statement'."
    )
    assert issues[1].message.startswith("invalid template: ")
    assert str(caught.value).startswith(issues[0].format() + " (and 1 more problem")


def test_invalid_syntax_stops_load_project_before_anything_is_imported(tmp_path: Path) -> None:
    path = write_project(tmp_path, SYNTAX_ERRORS)
    text = path.read_text(encoding="utf-8").replace(
        "examples.scripted_agent:decide", "not_imported_anywhere:decide"
    )
    path.write_text(text, encoding="utf-8")

    with pytest.raises(TemplateError) as caught:
        load_project(path)

    assert [(i.line, i.column, i.pointer) for i in caught.value.issues] == SYNTAX_ISSUES


def test_invalid_syntax_fails_validate_with_exit_4(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_project(tmp_path, {"question": "{{ input.question "})

    assert main(["validate", str(path)]) == 4

    assert capsys.readouterr().err == (
        f"error: {path}:14:17 /agents/helper/initial_state/question: invalid template: "
        "unexpected end of template, expected 'end of print statement'.\n"
    )
