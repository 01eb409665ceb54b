"""The static step graph (issue 15): what the pipeline core rejects about dependencies, targets
and the finalizer is found without importing anything, with the core's ``TUBELESS_DEFINITION_*``
code and the file:line:col of the offending entry; ``run`` and ``plan`` say it the same way.

Every reference names a module that does not exist: nothing may be imported to find these.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fixtures.cli import tubeless
from tubeless.errors import (
    AGENT_INVALID_DEFINITION,
    DEFINITION_DEPENDENCY_CONTRADICTORY,
    DEFINITION_DEPENDENCY_CYCLE,
    DEFINITION_DEPENDENCY_DUPLICATE,
    DEFINITION_DEPENDENCY_SELF_REFERENCE,
    DEFINITION_STEP_ID_RESERVED,
    DEFINITION_TARGET_FINALIZER_MISMATCH,
    DEFINITION_TARGETS_DUPLICATE,
    DOCUMENT_INVALID,
    AgentDefinitionError,
    DocumentError,
    PipelineDefinitionError,
)
from tubeless.project import check_project, load_project

BASE = """\
version: 1
project: {id: demo}
pipelines:
  words:
    steps:
      - {id: load, run: nowhere.steps:load}
      - {id: split, run: nowhere.steps:split, depends_on: [load]}
      - {id: count, run: nowhere.steps:count, depends_on: [split]}
"""
LOAD = "      - {id: load, run: nowhere.steps:load}\n"
SPLIT = "      - {id: split, run: nowhere.steps:split, depends_on: [load]}\n"
COUNT = "      - {id: count, run: nowhere.steps:count, depends_on: [split]}\n"
STEPS = "    steps:\n"

Expected = tuple[int, int, str, str, str]  # (line, column, pointer, code, message)

CASES = [
    pytest.param(
        [(COUNT, "      - {id: count, run: nowhere.steps:count, depends_on: [count]}\n")],
        [
            (
                8,
                60,
                "/pipelines/words/steps/2/depends_on/0",
                DEFINITION_DEPENDENCY_SELF_REFERENCE,
                "Step 'count' depends on itself in depends_on.",
            )
        ],
        id="self-dependency",
    ),
    pytest.param(
        [
            (
                COUNT,
                "      - {id: count, run: nowhere.steps:count, skip_after_failure_of: [count]}\n",
            )
        ],
        [
            (
                8,
                71,
                "/pipelines/words/steps/2/skip_after_failure_of/0",
                DEFINITION_DEPENDENCY_SELF_REFERENCE,
                "Step 'count' depends on itself in skip_after_failure_of.",
            )
        ],
        id="self-gate",
    ),
    pytest.param(
        [(COUNT, "      - {id: count, run: nowhere.steps:count, depends_on: [split, split]}\n")],
        [
            (
                8,
                67,
                "/pipelines/words/steps/2/depends_on/1",
                DEFINITION_DEPENDENCY_DUPLICATE,
                "Step 'count' lists a dependency twice in depends_on.",
            )
        ],
        id="duplicate-dependency",
    ),
    pytest.param(
        [
            (
                COUNT,
                "      - id: count\n        run: nowhere.steps:count\n"
                "        depends_on: [split]\n        optional_depends_on: [load, split]\n",
            )
        ],
        [
            (
                11,
                37,
                "/pipelines/words/steps/2/optional_depends_on/1",
                DEFINITION_DEPENDENCY_CONTRADICTORY,
                "Step 'count' lists 'split' as both a required and an optional dependency.",
            )
        ],
        id="required-and-optional",
    ),
    pytest.param(
        [(LOAD, "      - {id: load, run: nowhere.steps:load, optional_depends_on: [count]}\n")],
        [
            (
                7,
                60,
                "/pipelines/words/steps/1/depends_on/0",
                DEFINITION_DEPENDENCY_CYCLE,
                "Dependencies form a cycle: 'split' -> 'load' -> 'count' -> 'split' (each step "
                "waits for the next).",
            )
        ],
        id="cycle-of-three",
    ),
    pytest.param(
        [(LOAD, "      - {id: load, run: nowhere.steps:load, depends_on: [split]}\n")],
        [
            (
                7,
                60,
                "/pipelines/words/steps/1/depends_on/0",
                DEFINITION_DEPENDENCY_CYCLE,
                "Dependencies form a cycle: 'split' -> 'load' -> 'split' (each step waits for the "
                "next).",
            )
        ],
        id="cycle-of-two",
    ),
    pytest.param(
        [
            (LOAD, "      - {id: __finalize__, run: nowhere.steps:load}\n"),
            ("depends_on: [load]", "depends_on: [__finalize__]"),
        ],
        [
            (
                6,
                14,
                "/pipelines/words/steps/0/id",
                DEFINITION_STEP_ID_RESERVED,
                "Step id '__finalize__' is reserved for finalization; rename the step.",
            )
        ],
        id="reserved-step-id",
    ),
    pytest.param(
        [(STEPS, "    targets: [count, split, count]\n" + STEPS)],
        [
            (
                5,
                29,
                "/pipelines/words/targets/2",
                DEFINITION_TARGETS_DUPLICATE,
                "Targets must be unique; duplicated: 'count'.",
            )
        ],
        id="duplicate-target",
    ),
    pytest.param(
        [(STEPS, "    targets: [split]\n    finalize: count\n" + STEPS)],
        [
            (
                5,
                15,
                "/pipelines/words/targets/0",
                DEFINITION_TARGET_FINALIZER_MISMATCH,
                "Target 'split' cannot produce the finalizer's required outputs: 'count'.",
            )
        ],
        id="target-cannot-feed-the-finalizer",
    ),
]


def write(tmp_path: Path, changes: list[tuple[str, str]]) -> Path:
    text = BASE
    for old, new in changes:
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    path = tmp_path / "project.yaml"
    path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize(("changes", "expected"), CASES)
def test_a_graph_problem_is_found_without_importing_and_located(
    tmp_path: Path, changes: list[tuple[str, str]], expected: list[Expected]
) -> None:
    path = write(tmp_path, changes)

    with pytest.raises(PipelineDefinitionError) as caught:
        check_project(path)

    found = [(i.line, i.column, i.pointer, i.code, i.message) for i in caught.value.issues]
    assert found == expected
    assert {i.file for i in caught.value.issues} == {str(path)}
    assert [(e.code, e.message) for e in caught.value.errors] == [e[3:] for e in expected]
    assert str(caught.value).startswith(f"{path}:{expected[0][0]}:{expected[0][1]} ")


@pytest.mark.parametrize(("changes", "expected"), CASES)
def test_load_project_raises_the_same_before_importing(
    tmp_path: Path, changes: list[tuple[str, str]], expected: list[Expected]
) -> None:
    with pytest.raises(PipelineDefinitionError) as caught:
        load_project(write(tmp_path, changes))
    assert [(i.line, i.column) for i in caught.value.issues] == [e[:2] for e in expected]


def test_every_graph_problem_of_every_pipeline_is_reported_together(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        [
            (LOAD, "      - {id: load, run: nowhere.steps:load, depends_on: [load]}\n"),
            (
                COUNT,
                COUNT + "  other:\n    steps:\n"
                "      - {id: a, run: nowhere.steps:a, depends_on: [b]}\n"
                "      - {id: b, run: nowhere.steps:b, depends_on: [a]}\n",
            ),
        ],
    )

    with pytest.raises(PipelineDefinitionError) as caught:
        check_project(path)

    assert [(i.line, i.pointer, i.code) for i in caught.value.issues] == [
        (6, "/pipelines/words/steps/0/depends_on/0", DEFINITION_DEPENDENCY_SELF_REFERENCE),
        (12, "/pipelines/other/steps/1/depends_on/0", DEFINITION_DEPENDENCY_CYCLE),
    ]
    assert str(caught.value).endswith(" (and 1 more problem)")


def test_graph_problems_beside_document_problems_are_one_document_error(tmp_path: Path) -> None:
    """A document that is also invalid as a document reports everything as one DocumentError."""
    path = write(
        tmp_path,
        [
            (LOAD, "      - {id: load, run: nowhere.steps:load, depends_on: [load]}\n"),
            ("depends_on: [split]", "depends_on: [splt]"),
        ],
    )

    with pytest.raises(DocumentError) as caught:
        check_project(path)

    assert [(i.pointer, i.code) for i in caught.value.issues] == [
        ("/pipelines/words/steps/0/depends_on/0", DEFINITION_DEPENDENCY_SELF_REFERENCE),
        ("/pipelines/words/steps/2/depends_on/0", DOCUMENT_INVALID),
    ]


@pytest.mark.parametrize("command", ["run", "plan", "validate"])
def test_run_plan_and_validate_say_a_graph_problem_at_its_location(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    path = write(
        tmp_path, [(COUNT, "      - {id: count, run: nowhere.steps:count, depends_on: [count]}\n")]
    )

    outcome = tubeless(capsys, command, path)

    assert (outcome.code, outcome.out) == (4 if command == "validate" else 3, "")
    assert outcome.err == (
        f"error: {path}:8:60 /pipelines/words/steps/2/depends_on/0: "
        "[TUBELESS_DEFINITION_DEPENDENCY_SELF_REFERENCE] Step 'count' depends on itself in "
        "depends_on.\n"
    )


def test_a_pipeline_tool_whose_pipeline_takes_no_input_is_found_without_importing(
    tmp_path: Path,
) -> None:
    """What pipeline_tool(...) refuses when compiling, said at the tool in the file's terms."""
    text = BASE.replace(
        "pipelines:\n",
        "agents:\n  helper:\n    input: {schema: {}}\n"
        "    result: {schema: {}}\n    initial_state: nowhere:initial\n"
        "    decide: nowhere:decide\n"
        "    tools: {count: {pipeline: words, description: Count.}}\n"
        "pipelines:\n",
    )
    path = tmp_path / "project.yaml"
    path.write_text(text, encoding="utf-8")

    with pytest.raises(AgentDefinitionError) as caught:
        check_project(path)

    message = (
        "Pipeline 'words' has no input schema: give the pipeline an input:, or give this "
        "tool input: and map_options:."
    )
    assert [(i.line, i.column, i.pointer, i.code, i.message) for i in caught.value.issues] == [
        (9, 31, "/agents/helper/tools/count/pipeline", AGENT_INVALID_DEFINITION, message)
    ]
    assert str(caught.value) == f"{path}:9:31 /agents/helper/tools/count/pipeline: {message}"
