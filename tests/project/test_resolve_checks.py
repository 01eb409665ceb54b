"""Issue 15: what ``validate --resolve`` (``load_project``) checks beyond importing: each callable
can be called the way the harness calls it, each ``python_path`` folder exists, and templates
read only what an inline input schema declares (this one also without importing anything)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fixtures.cli import tubeless
from tests.project.test_references import (
    AGENT,
    HELPERS,
    PIPELINE,
    isolated_imports,
    problems,
    project,
    write,
)
from tubeless.errors import TEMPLATE_INVALID, TemplateError
from tubeless.project import check_project, load_project

__all__ = ["isolated_imports"]  # the autouse fixture, used by being imported

SIGNATURES = (
    HELPERS
    + """

def one_argument(state):
    return {"kind": "finish", "result": None}


def reduce_three(state, outcomes, extra):
    return state


def takes_nothing():
    return 1


def keyword_needed(inputs, ctx, *, flag):
    return 1


async def async_decide(state, ctx):
    return {"kind": "finish", "result": None}


def flexible(*args, **kwargs):
    return {"kind": "finish", "result": None}


def make_one_argument(**settings):
    return one_argument
"""
)

SIGNATURE_CASES = [
    pytest.param(
        AGENT,
        "decide: helpers:decide",
        "decide: helpers:one_argument",
        (
            9,
            13,
            "/agents/helper/decide",
            "'helpers:one_argument' cannot be called as decide(state, ctx): too many positional "
            "arguments",
        ),
        id="one-argument-decide",
    ),
    pytest.param(
        AGENT,
        "decide: helpers:decide",
        "decide: helpers:decide\n    reduce: helpers:reduce_three",
        (
            10,
            13,
            "/agents/helper/reduce",
            "'helpers:reduce_three' cannot be called as reduce(state, outcomes): missing a "
            "required argument: 'extra'",
        ),
        id="reducer-of-three",
    ),
    pytest.param(
        AGENT,
        "decide: helpers:decide",
        "decide: helpers:decide\n    tools:\n      count: {run: helpers:takes_nothing, "
        "description: Count., input: {schema: {type: string}}, output: {schema: {}}}",
        (
            11,
            20,
            "/agents/helper/tools/count/run",
            "'helpers:takes_nothing' cannot be called as run(input, ctx): too many positional "
            "arguments",
        ),
        id="tool-handler-without-input",
    ),
    pytest.param(
        PIPELINE,
        "run: helpers:plain",
        "run: helpers:keyword_needed",
        (
            7,
            25,
            "/pipelines/flow/steps/0/run",
            "'helpers:keyword_needed' cannot be called as run(inputs, ctx): missing a required "
            "argument: 'flag'",
        ),
        id="step-with-a-required-keyword",
    ),
    pytest.param(
        AGENT,
        "decide: helpers:decide",
        "decide: {use: helpers:make_one_argument}",
        (
            9,
            13,
            "/agents/helper/decide",
            "what 'helpers:make_one_argument' returned cannot be called as decide(state, ctx): too "
            "many positional arguments",
        ),
        id="factory-makes-a-one-argument-decide",
    ),
]


@pytest.mark.parametrize(("text", "old", "new", "expected"), SIGNATURE_CASES)
def test_a_callable_the_harness_cannot_call_is_reported_where_it_is_named(
    tmp_path: Path, text: str, old: str, new: str, expected: tuple[int, int, str, str]
) -> None:
    path = project(tmp_path, text.replace(old, new), SIGNATURES)
    assert problems(path) == [expected]


@pytest.mark.parametrize("name", ["async_decide", "flexible"])
def test_callables_that_fit_the_call_load(tmp_path: Path, name: str) -> None:
    path = project(tmp_path, AGENT.replace("helpers:decide", f"helpers:{name}"), SIGNATURES)
    assert load_project(path).get("helper").id == "helper"


def test_a_missing_python_path_folder_is_reported_at_its_entry(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = project(tmp_path, AGENT.replace("python_path: [lib]", "python_path: [lib, src]"))

    assert problems(path) == [
        (3, 20, "/python_path/1", "python_path folder src does not exist"),
    ]
    outcome = tubeless(capsys, "validate", "--resolve", path)
    assert (outcome.code, outcome.err) == (
        4,
        f"error: {path}:3:20 /python_path/1: python_path folder src does not exist\n",
    )


# -- templates against the input schema ---------------------------------------------------------
TEMPLATED = """\
version: 1
project: {id: demo}
agents:
  helper:
    input:
      schema:
        type: object
        properties:
          question: {type: string}
          options: {type: object, properties: {depth: {type: integer}}}
    result: {schema: {}}
    initial_state: {q: "{{ input.question }}", d: "{{ input.options.depth }}"}
    decide: nowhere:decide
"""


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        pytest.param(
            "{{ input.question }}",
            "{{ input.qestion }}",
            (
                12,
                24,
                "/agents/helper/initial_state/q",
                "the template reads input.qestion, which the input schema does not declare; did "
                "you mean 'question'?",
            ),
            id="top-level-typo",
        ),
        pytest.param(
            "{{ input.options.depth }}",
            "Depth {{ input['options'].dept }}",
            (
                12,
                51,
                "/agents/helper/initial_state/d",
                "the template reads input.options.dept, which the input schema does not declare; "
                "did you mean 'depth'?",
            ),
            id="nested-typo",
        ),
        pytest.param(
            "{{ input.question }}",
            "{{ input.topic }}",
            (
                12,
                24,
                "/agents/helper/initial_state/q",
                "the template reads input.topic, which the input schema does not declare; its "
                "properties: 'question', 'options'",
            ),
            id="no-close-name",
        ),
    ],
)
def test_a_template_reading_an_undeclared_input_property_is_located(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    old: str,
    new: str,
    expected: tuple[int, int, str, str],
) -> None:
    path = write(tmp_path / "project.yaml", TEMPLATED.replace(old, new))

    with pytest.raises(TemplateError) as caught:
        check_project(path)

    assert [(i.line, i.column, i.pointer, i.message) for i in caught.value.issues] == [expected]
    assert caught.value.issues[0].code == TEMPLATE_INVALID
    outcome = tubeless(capsys, "validate", path)
    line, column, pointer, message = expected
    assert (outcome.code, outcome.err) == (
        4,
        f"error: {path}:{line}:{column} {pointer}: {message}\n",
    )


@pytest.mark.parametrize(
    "template",
    [
        "{{ input.question }}",
        "{{ input.question.upper() }}",
        "{{ input.options.depth + 1 }}",
        "{% for key in input %}{{ key }}{% endfor %}",
        "{{ input.items() | list }}",
        "{{ input.name if input.name is defined else 'none' }}",
        "{{ input.name | default('none') }}",
        "{{ input.options.extra | d(0) }}",
    ],
)
def test_templates_reading_declared_input_pass(tmp_path: Path, template: str) -> None:
    path = write(tmp_path / "project.yaml", TEMPLATED.replace("{{ input.question }}", template))
    check_project(path)


def test_an_open_input_schema_is_not_checked(tmp_path: Path) -> None:
    """additionalProperties: true (or a schema) lets a template read any name."""
    text = TEMPLATED.replace(
        "        type: object\n", "        type: object\n        additionalProperties: true\n"
    )
    path = write(tmp_path / "project.yaml", text.replace("input.question", "input.anything"))
    check_project(path)
