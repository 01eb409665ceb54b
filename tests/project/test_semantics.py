"""Cross-reference rules that need the whole document but import nothing: one namespace for ids,
known entries and steps, no cycles, run-only step keys, valid inline JSON Schemas (DESIGN.md §5).

Every reference in these documents names a module that does not exist: the checks must find the
problems without importing anything.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tubeless.errors import DOCUMENT_INVALID, DocumentError
from tubeless.project import check_project, load_project

Change = tuple[str, str]
Expected = tuple[int, int, str, str]  # (line, column, pointer, message fragment)

BASE = """\
version: 1
project: {id: demo, default: helper}
agents:
  helper:
    input: {schema: nowhere.models:Question}
    result: {schema: {type: string}}
    initial_state: nowhere.state:initial
    decide: nowhere.decide:decide
    tools:
      summarize: {pipeline: words, description: Split the words.}
pipelines:
  words:
    input: {schema: {type: object}}
    steps:
      - {id: split, run: nowhere.steps:split}
      - {id: count, run: nowhere.steps:count, depends_on: [split]}
"""
STEP = "      - {id: count, run: nowhere.steps:count, depends_on: [split]}\n"
TOOL = "{pipeline: words, description: Split the words.}"
PIPELINES = "pipelines:\n"
WORDS_INPUT = "    input: {schema: {type: object}}\n"
OTHER = (PIPELINES, "pipelines:\n  other:\n    steps: [{id: only, run: nowhere.steps:only}]\n")
STEPS = "this pipeline's steps: 'split', 'count'"


def mutate(*changes: Change) -> str:
    text = BASE
    for old, new in changes:
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    return text


CASES = [
    pytest.param(
        [(PIPELINES, "pipelines:\n  helper:\n    steps: [{id: only, run: nowhere.steps:only}]\n")],
        [
            (
                4,
                3,
                "/agents/helper",
                "'helper' is both an agent and a pipeline; ids share one namespace",
            )
        ],
        id="id-used-by-an-agent-and-a-pipeline",
    ),
    pytest.param(
        [("default: helper", "default: helpr")],
        [
            (
                2,
                30,
                "/project/default",
                "unknown entry 'helpr'; did you mean 'helper'? (this project's",
            )
        ],
        id="unknown-default",
    ),
    pytest.param(
        [(TOOL, "{pipeline: wordz, description: Split the words.}")],
        [
            (
                10,
                29,
                "/agents/helper/tools/summarize/pipeline",
                "unknown pipeline 'wordz'; did you mean 'words'? (this project's pipelines: "
                "'words')",
            )
        ],
        id="pipeline-tool-names-an-unknown-pipeline",
    ),
    pytest.param(
        [(TOOL, "{agent: assistant, description: Ask for help.}")],
        [
            (
                10,
                26,
                "/agents/helper/tools/summarize/agent",
                "unknown agent 'assistant'; this project's agents: 'helper'",
            )
        ],
        id="agent-tool-names-an-unknown-agent",
    ),
    pytest.param(
        [(STEP, "      - {id: count, from_pipeline: {pipeline: counter}}\n")],
        [(16, 47, "/pipelines/words/steps/1/from_pipeline/pipeline", "unknown pipeline 'counter'")],
        id="from-pipeline-names-an-unknown-entry",
    ),
    pytest.param(
        [
            (
                STEP,
                "      - id: count\n        for_each_pipeline: {pipeline: counter, items: m:i, "
                "key: m:k, map_options: m:o}\n",
            )
        ],
        [
            (
                17,
                39,
                "/pipelines/words/steps/1/for_each_pipeline/pipeline",
                "unknown pipeline 'counter'",
            )
        ],
        id="for-each-pipeline-names-an-unknown-entry",
    ),
    pytest.param(
        [(TOOL, "{agent: helper, description: Ask myself.}")],
        [
            (
                10,
                26,
                "/agents/helper/tools/summarize/agent",
                "entries use each other in a cycle: helper -> helper",
            )
        ],
        id="agent-uses-itself-as-a-tool",
    ),
    pytest.param(
        [
            (
                PIPELINES,
                "pipelines:\n  ping:\n    steps: [{id: a, from_pipeline: {pipeline: pong}}]\n"
                "  pong:\n    steps: [{id: b, from_pipeline: {pipeline: ping}}]\n",
            )
        ],
        [
            (
                15,
                47,
                "/pipelines/pong/steps/0/from_pipeline/pipeline",
                "entries use each other in a cycle: ping -> pong -> ping",
            )
        ],
        id="two-pipelines-use-each-other",
    ),
    pytest.param(
        [
            (STEP, "      - {id: count, from_pipeline: {pipeline: tally}}\n"),
            (
                PIPELINES,
                "pipelines:\n  tally:\n    steps:\n      - id: each\n        "
                "for_each_pipeline: {pipeline: helper, items: m:i, key: m:k, map_options: m:o}\n",
            ),
        ],
        [
            (
                20,
                47,
                "/pipelines/words/steps/1/from_pipeline/pipeline",
                "entries use each other in a cycle: tally -> helper -> words -> tally",
            )
        ],
        id="three-entries-in-a-cycle",
    ),
    pytest.param(
        [("{id: count,", "{id: split,")],
        [(16, 14, "/pipelines/words/steps/1/id", "step id 'split' is already used by step 0")],
        id="duplicate-step-id",
    ),
    pytest.param(
        [("depends_on: [split]", "depends_on: [split, splt]")],
        [
            (
                16,
                67,
                "/pipelines/words/steps/1/depends_on/1",
                f"unknown step 'splt'; did you mean 'split'? ({STEPS})",
            )
        ],
        id="unknown-step-in-depends-on",
    ),
    pytest.param(
        [("depends_on: [split]", "optional_depends_on: [words]")],
        [
            (
                16,
                69,
                "/pipelines/words/steps/1/optional_depends_on/0",
                f"unknown step 'words'; {STEPS}",
            )
        ],
        id="unknown-step-in-optional-depends-on",
    ),
    pytest.param(
        [("depends_on: [split]", "skip_after_failure_of: [Split]")],
        [
            (
                16,
                71,
                "/pipelines/words/steps/1/skip_after_failure_of/0",
                f"unknown step 'Split'; did you mean 'split'? ({STEPS})",
            )
        ],
        id="unknown-step-in-skip-after-failure-of",
    ),
    pytest.param(
        [(WORDS_INPUT, WORDS_INPUT + "    targets: [count, total]\n")],
        [(14, 22, "/pipelines/words/targets/1", f"unknown step 'total'; {STEPS}")],
        id="unknown-step-in-targets",
    ),
    pytest.param(
        [(WORDS_INPUT, WORDS_INPUT + "    finalize: total\n")],
        [(14, 15, "/pipelines/words/finalize", f"unknown step 'total'; {STEPS}")],
        id="unknown-finalize-step",
    ),
    pytest.param(
        [
            (
                WORDS_INPUT,
                WORDS_INPUT + "    finalize: {run: nowhere.steps:total, "
                "require_outputs: [split, total]}\n",
            )
        ],
        [(14, 67, "/pipelines/words/finalize/require_outputs/1", f"unknown step 'total'; {STEPS}")],
        id="unknown-step-in-require-outputs",
    ),
    pytest.param(
        [
            (
                STEP,
                "      - {id: count, from_pipeline: {pipeline: other}, "
                "output: {schema: {type: integer}}}\n",
            ),
            OTHER,
        ],
        [
            (
                18,
                55,
                "/pipelines/words/steps/1/output",
                "only run steps take an output schema (a child pipeline validates its own result)",
            )
        ],
        id="output-on-a-composed-step",
    ),
    pytest.param(
        [
            (
                STEP,
                "      - {id: count, from_pipeline: {pipeline: other}, "
                "dry_run: nowhere.steps:preview}\n",
            ),
            OTHER,
        ],
        [
            (
                18,
                64,
                "/pipelines/words/steps/1/dry_run",
                "composed steps support only dry_run: skip (children run their own previews)",
            )
        ],
        id="preview-on-a-composed-step",
    ),
    pytest.param(
        [("result: {schema: {type: string}}", "result: {schema: {type: text}}")],
        [(6, 29, "/agents/helper/result/schema/type", "not a valid JSON Schema: ")],
        id="invalid-inline-json-schema",
    ),
    pytest.param(
        [(WORDS_INPUT, "    input: {schema: {type: object, properties: {n: {minimum: ten}}}}\n")],
        [
            (
                13,
                62,
                "/pipelines/words/input/schema/properties/n/minimum",
                "not a valid JSON Schema: ",
            )
        ],
        id="invalid-nested-json-schema",
    ),
    pytest.param(
        [
            (
                STEP,
                "      - {id: count, run: nowhere.steps:count, "
                "output: {schema: {required: true}}}\n",
            )
        ],
        [(16, 75, "/pipelines/words/steps/1/output/schema/required", "not a valid JSON Schema: ")],
        id="invalid-step-output-schema",
    ),
    pytest.param(
        [
            (
                TOOL,
                "{run: m:f, description: Count., input: {schema: {type: 5}}, "
                "output: {schema: {type: integer}}}",
            )
        ],
        [(10, 73, "/agents/helper/tools/summarize/input/schema/type", "not a valid JSON Schema: ")],
        id="invalid-tool-input-schema",
    ),
]


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "project.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def test_the_base_document_is_valid_without_importing_anything(tmp_path: Path) -> None:
    checked = check_project(write(tmp_path, BASE))
    assert set(checked.spec.agents) == {"helper"}
    assert set(checked.spec.pipelines) == {"words"}


@pytest.mark.parametrize(("changes", "expected"), CASES)
def test_a_broken_cross_reference_is_reported_at_its_location(
    tmp_path: Path, changes: list[Change], expected: list[Expected]
) -> None:
    path = write(tmp_path, mutate(*changes))

    with pytest.raises(DocumentError) as caught:
        check_project(path)

    issues = caught.value.issues
    assert [(i.line, i.column, i.pointer) for i in issues] == [e[:3] for e in expected], [
        i.format() for i in issues
    ]
    for issue, (*_, fragment) in zip(issues, expected, strict=True):
        assert fragment in issue.message, issue.format()
        assert (issue.code, issue.file) == (DOCUMENT_INVALID, str(path))
    assert str(caught.value).startswith(issues[0].format())


@pytest.mark.parametrize(("changes", "expected"), CASES)
def test_load_project_reports_the_same_problems_before_resolving_anything(
    tmp_path: Path, changes: list[Change], expected: list[Expected]
) -> None:
    path = write(tmp_path, mutate(*changes))

    with pytest.raises(DocumentError) as caught:
        load_project(path)

    assert [(i.line, i.column, i.pointer) for i in caught.value.issues] == [e[:3] for e in expected]


def test_every_cross_reference_problem_is_reported_together_in_file_order(
    tmp_path: Path,
) -> None:
    path = write(
        tmp_path,
        mutate(
            ("default: helper", "default: nobody"),
            (TOOL, "{agent: helper, description: Ask myself.}"),
            ("{id: count,", "{id: split,"),
            ("depends_on: [split]", "depends_on: [splt]"),
            (WORDS_INPUT, WORDS_INPUT + "    targets: [total]\n"),
        ),
    )

    with pytest.raises(DocumentError) as caught:
        check_project(path)

    assert [(i.line, i.column, i.pointer) for i in caught.value.issues] == [
        (2, 30, "/project/default"),
        (10, 26, "/agents/helper/tools/summarize/agent"),
        (14, 15, "/pipelines/words/targets/0"),
        (17, 14, "/pipelines/words/steps/1/id"),
        (17, 60, "/pipelines/words/steps/1/depends_on/0"),
    ]
    assert str(caught.value).endswith(" (and 4 more problems)")


def test_a_pipeline_tool_naming_an_agent_is_one_unknown_pipeline_problem(tmp_path: Path) -> None:
    path = write(tmp_path, mutate((TOOL, "{pipeline: helper, description: Ask for help.}")))

    with pytest.raises(DocumentError) as caught:
        check_project(path)

    assert [(i.pointer, i.message) for i in caught.value.issues] == [
        (
            "/agents/helper/tools/summarize/pipeline",
            "unknown pipeline 'helper'; this project's pipelines: 'words'",
        ),
    ]


def test_an_unknown_default_lists_the_entries(tmp_path: Path) -> None:
    path = write(tmp_path, mutate(("default: helper", "default: helpr")))

    with pytest.raises(DocumentError) as caught:
        check_project(path)

    assert caught.value.issues[0].message == (
        "unknown entry 'helpr'; did you mean 'helper'? (this project's entries: 'helper', 'words')"
    )


def test_a_project_without_entries_is_invalid(tmp_path: Path) -> None:
    """Issue 15: no agents and no pipelines is a located problem, not a run-time surprise."""
    path = write(tmp_path, "version: 1\nproject: {id: empty}\n")

    with pytest.raises(DocumentError) as caught:
        check_project(path)

    assert [(i.line, i.column, i.pointer, i.message) for i in caught.value.issues] == [
        (
            2,
            1,
            "/project",
            "the project has no entries: add an agent under agents: or a pipeline under pipelines:",
        ),
    ]
