"""Meta-schema violations become located, actionable issues: what was expected, what was found,
the closest valid key; every problem reported, in file order (DESIGN.md sections 5 and 6)."""

from __future__ import annotations

from typing import Any

import pytest

from tubeless.errors import DOCUMENT_INVALID, DocumentError
from tubeless.project import metaschema
from tubeless.project._check import check_schema
from tubeless.project._issues import DocumentIssue, escape_pointer, join_pointer, raise_issues
from tubeless.project._yaml import parse_document

Expected = tuple[int, int, str, str]  # (line, column, pointer, message fragment)

BASE = """\
version: 1
project: {id: demo}
agents:
  helper:
    input: {schema: examples.text:Question}
    result: {schema: {type: string}}
    initial_state: examples.scripted_agent:initial_state
    decide: examples.scripted_agent:decide
    limits: {max_turns: 3}
    tools:
      uppercase: examples.text:uppercase
pipelines:
  words:
    input: {schema: {type: object}}
    steps:
      - {id: split, run: examples.text_pipeline:split_words}
"""
STEP = "{id: split, run: examples.text_pipeline:split_words}"
TOOL = "uppercase: examples.text:uppercase"


def mutate(*changes: tuple[str, str]) -> str:
    text = BASE
    for old, new in changes:
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    return text


def check(text: str, schema: dict[str, Any] | None = None) -> list[DocumentIssue]:
    doc = parse_document(text, file="project.yaml")
    return check_schema(doc, metaschema.load() if schema is None else schema)


def assert_issues(issues: list[DocumentIssue], expected: list[Expected]) -> None:
    assert [(i.line, i.column, i.pointer) for i in issues] == [e[:3] for e in expected], [
        i.format() for i in issues
    ]
    for issue, (*_, fragment) in zip(issues, expected, strict=True):
        assert fragment in issue.message, issue.format()
        assert issue.code == DOCUMENT_INVALID
        assert issue.file == "project.yaml"


def test_base_document_is_valid() -> None:
    assert check(BASE) == []


CASES = [
    pytest.param(
        mutate(("version: 1", "version: 2")),
        [(1, 10, "/version", "expected 1, found 2")],
        id="wrong-version",
    ),
    pytest.param(
        mutate(("version: 1", "version: '1'")),
        [(1, 10, "/version", "expected 1, found '1'")],
        id="version-as-text",
    ),
    pytest.param(
        mutate(("project: {id: demo}", "project: {name: Demo}")),
        [(2, 10, "/project", "missing required property 'id'")],
        id="missing-project-id",
    ),
    pytest.param(
        mutate(("project: {id: demo}", "project: demo")),
        [(2, 10, "/project", "expected a mapping with 'id', found 'demo'")],
        id="project-not-a-mapping",
    ),
    pytest.param(
        mutate(("{id: demo}", "{id: 9demo}")),
        [(2, 15, "/project/id", "expected an id (a letter, then letters, digits")],
        id="bad-id-pattern",
    ),
    pytest.param(
        mutate(("pipelines:", "pipeline:")),
        [(12, 1, "/pipeline", "unknown key 'pipeline'; did you mean 'pipelines'?")],
        id="unknown-top-level-key-with-suggestion",
    ),
    pytest.param(
        mutate(("version: 1\n", "version: 1\nzzz: 1\n")),
        [(2, 1, "/zzz", "unknown key 'zzz'; valid keys: $schema, agents")],
        id="unknown-key-lists-valid-keys",
    ),
    pytest.param(
        mutate(("    decide:", "    decid:")),
        [
            (5, 5, "/agents/helper", "missing required property 'decide'"),
            (8, 5, "/agents/helper/decid", "unknown key 'decid'; did you mean 'decide'?"),
        ],
        id="agent-key-typo",
    ),
    pytest.param(
        mutate(("{max_turns: 3}", "{max_turn: 3}")),
        [
            (
                9,
                14,
                "/agents/helper/limits/max_turn",
                "unknown key 'max_turn'; did you mean 'max_turns'?",
            )
        ],
        id="limits-key-typo",
    ),
    pytest.param(
        mutate(("max_turns: 3", "max_turns: 0")),
        [(9, 25, "/agents/helper/limits/max_turns", "expected an integer >= 1, found 0")],
        id="max-turns-zero",
    ),
    pytest.param(
        mutate(("max_turns: 3", "max_turns: three")),
        [(9, 25, "/agents/helper/limits/max_turns", "expected an integer >= 1, found 'three'")],
        id="max-turns-text",
    ),
    pytest.param(
        mutate(("max_turns: 3", "max_turns: 9007199254740992")),
        [
            (
                9,
                25,
                "/agents/helper/limits/max_turns",
                "expected an integer >= 1 and <= 9007199254740991, found 9007199254740992",
            )
        ],
        id="max-turns-above-json-safe-integers",
    ),
    pytest.param(
        mutate(("decide: examples.scripted_agent:decide", "decide: foo")),
        [
            (
                8,
                13,
                "/agents/helper/decide",
                "expected a string matching 'package.module:attribute', found 'foo'",
            )
        ],
        id="decide-not-a-reference",
    ),
    pytest.param(
        mutate(("decide: examples.scripted_agent:decide", "decide: {use: foo}")),
        [
            (
                8,
                19,
                "/agents/helper/decide/use",
                "expected a string matching 'package.module:attribute', found 'foo'",
            )
        ],
        id="factory-with-bad-reference",
    ),
    pytest.param(
        mutate(("decide: examples.scripted_agent:decide", "decide: 5")),
        [
            (
                8,
                13,
                "/agents/helper/decide",
                "expected a string matching 'package.module:attribute' or a mapping with "
                "'use', found 5",
            )
        ],
        id="decide-of-no-allowed-type",
    ),
    pytest.param(
        mutate(("      uppercase:", "      1bad:")),
        [
            (
                11,
                7,
                "/agents/helper/tools/1bad",
                "invalid key '1bad': expected a tool name (a letter",
            )
        ],
        id="bad-tool-name",
    ),
    pytest.param(
        mutate(("  helper:", "  1helper:")),
        [(4, 3, "/agents/1helper", "invalid key '1helper': expected an id")],
        id="bad-agent-id",
    ),
    pytest.param(
        mutate(
            (
                TOOL,
                "count: {run: examples.text:count, input: {schema: {type: string}}"
                ", output: {schema: {type: integer}}}",
            )
        ),
        [(11, 14, "/agents/helper/tools/count", "missing required property 'description'")],
        id="handler-tool-missing-description",
    ),
    pytest.param(
        mutate(
            (
                TOOL,
                "count: {run: examples.text:count, description: Count, input: "
                "{schema: {type: string}}, output: {schema: 5}}",
            )
        ),
        [
            (
                11,
                111,
                "/agents/helper/tools/count/output/schema",
                "expected a string matching 'package.module:attribute' or a mapping, found 5",
            )
        ],
        id="handler-tool-bad-schema",
    ),
    pytest.param(
        mutate(
            (
                TOOL,
                "count: {run: examples.text:count, description: Count, input: "
                "{schema: {type: string}}, output: {schema: {type: integer}}, "
                "preview: maybe}",
            )
        ),
        [
            (
                11,
                138,
                "/agents/helper/tools/count/preview",
                "expected one of 'run', 'skip' or a string matching "
                "'package.module:attribute', found 'maybe'",
            )
        ],
        id="tool-preview-maybe",
    ),
    pytest.param(
        mutate(
            (TOOL, "split: {pipeline: words, description: Split, input: {schema: {type: string}}}")
        ),
        [
            (
                11,
                14,
                "/agents/helper/tools/split",
                "input and map_options go together: add map_options",
            )
        ],
        id="pipeline-tool-input-without-map-options",
    ),
    pytest.param(
        mutate((TOOL, "ask: {agent: helper, description: Ask, map_options: a.b:c}")),
        [(11, 12, "/agents/helper/tools/ask", "map_options and input go together: add input")],
        id="agent-tool-map-options-without-input",
    ),
    pytest.param(
        mutate((TOOL, "ask: {agent: helper}")),
        [(11, 12, "/agents/helper/tools/ask", "missing required property 'description'")],
        id="agent-tool-branch-chosen",
    ),
    pytest.param(
        mutate((TOOL, "odd: {description: What}")),
        [
            (
                11,
                12,
                "/agents/helper/tools/odd",
                "expected a mapping with 'run', 'description', 'input', 'output', a mapping "
                "with 'pipeline', 'description', a mapping with 'agent', 'description' or a "
                "mapping with 'mcp', 'include', found a mapping with 'description'",
            )
        ],
        id="tool-of-no-clear-kind",
    ),
    pytest.param(
        mutate((STEP, "{id: split, run: a.b:c, from_pipeline: {pipeline: words}}")),
        [
            (
                16,
                9,
                "/pipelines/words/steps/0",
                "a step needs exactly one of run, from_pipeline, for_each_pipeline "
                "(found: run, from_pipeline)",
            )
        ],
        id="step-with-run-and-from-pipeline",
    ),
    pytest.param(
        mutate((STEP, "{id: split}")),
        [
            (
                16,
                9,
                "/pipelines/words/steps/0",
                "a step needs exactly one of run, from_pipeline, for_each_pipeline (found none)",
            )
        ],
        id="step-with-neither",
    ),
    pytest.param(
        mutate((STEP, "{id: split, run: examples.text.split_words}")),
        [
            (
                16,
                26,
                "/pipelines/words/steps/0/run",
                "expected a string matching 'package.module:attribute', found "
                "'examples.text.split_words'",
            )
        ],
        id="step-run-dotted-not-colon",
    ),
    pytest.param(
        mutate((STEP, "{id: split, run: a.b:c, dry_run: maybe}")),
        [
            (
                16,
                42,
                "/pipelines/words/steps/0/dry_run",
                "expected 'skip' or a string matching 'package.module:attribute', found 'maybe'",
            )
        ],
        id="step-dry-run-maybe",
    ),
    pytest.param(
        mutate((STEP, "{id: split, run: a.b:c, for_each_pipeline: {pipeline: words}}")),
        [
            (16, 9, "/pipelines/words/steps/0", "(found: run, for_each_pipeline)"),
            (
                16,
                52,
                "/pipelines/words/steps/0/for_each_pipeline",
                "missing required property 'items'",
            ),
            (
                16,
                52,
                "/pipelines/words/steps/0/for_each_pipeline",
                "missing required property 'key'",
            ),
            (
                16,
                52,
                "/pipelines/words/steps/0/for_each_pipeline",
                "missing required property 'map_options'",
            ),
        ],
        id="fan-out-missing-keys",
    ),
    pytest.param(
        mutate(("    steps:", "    finalize: {}\n    steps:")),
        [
            (
                15,
                15,
                "/pipelines/words/finalize",
                "expected a mapping with at least one of 'require_outputs', 'run', found an "
                "empty mapping",
            )
        ],
        id="finalize-empty-mapping",
    ),
    pytest.param(
        mutate(("    steps:\n      - " + STEP, "    steps: []")),
        [
            (
                15,
                12,
                "/pipelines/words/steps",
                "expected a list of at least 1 item, found an empty list",
            )
        ],
        id="no-steps",
    ),
    pytest.param(
        mutate(("version: 1\n", "version: 1\npython_path: ['']\n")),
        [(2, 15, "/python_path/0", "expected non-blank text, found ''")],
        id="blank-python-path",
    ),
    pytest.param(
        mutate(("  helper:\n", "  helper:\n    name: null\n")),
        [
            (
                5,
                11,
                "/agents/helper/name",
                "expected non-blank text, found null (to leave an optional key unset, remove it)",
            )
        ],
        id="null-optional-field",
    ),
    pytest.param(
        mutate(("  helper:\n", "  helper:\n    implementation_version: '" + "v" * 300 + "'\n")),
        [
            (
                5,
                29,
                "/agents/helper/implementation_version",
                "expected at most 256 characters, found '" + "v" * 57 + "...' (300 characters)",
            )
        ],
        id="found-value-bounded-to-60-characters",
    ),
    pytest.param(
        mutate(
            (
                "initial_state: examples.scripted_agent:initial_state",
                "initial_state: {use: a.b:c, wth: {x: 1}}",
            )
        ),
        [(7, 33, "/agents/helper/initial_state/wth", "unknown key 'wth'; did you mean 'with'?")],
        id="factory-key-typo",
    ),
]


@pytest.mark.parametrize(("text", "expected"), CASES)
def test_schema_violation_is_reported_where_it_is(text: str, expected: list[Expected]) -> None:
    assert_issues(check(text), expected)


def test_problems_in_two_agents_are_reported_together_in_file_order() -> None:
    text = (
        "version: 1\n"
        "pipelines: {early: {steps: [{id: s}]}}\n"
        "project: {id: demo}\n"
        "agents:\n"
        "  first:\n"
        "    input: {schema: examples.text:Question}\n"
        "    result: {schema: {type: string}}\n"
        "    initial_state: examples.scripted_agent:initial_state\n"
        "    decide: examples.scripted_agent:decide\n"
        "    limits: {max_turns: 0}\n"
        "  second:\n"
        "    input: {schema: x}\n"
        "    result: {schema: {type: string}}\n"
        "    initial_state: {}\n"
        "    decid: a.b:c\n"
    )
    # jsonschema reports agents before pipelines (schema order); issues follow the file.
    assert_issues(
        check(text),
        [
            (2, 29, "/pipelines/early/steps/0", "a step needs exactly one of"),
            (10, 25, "/agents/first/limits/max_turns", "expected an integer >= 1, found 0"),
            (12, 5, "/agents/second", "missing required property 'decide'"),
            (
                12,
                21,
                "/agents/second/input/schema",
                "expected a string matching 'package.module:attribute', found 'x'",
            ),
            (15, 5, "/agents/second/decid", "unknown key 'decid'; did you mean 'decide'?"),
        ],
    )


def test_property_names_violations_are_located_at_the_key() -> None:
    schema = {"type": "object", "propertyNames": {"pattern": "^[a-z]+$"}}
    assert_issues(
        check("ok: 1\nNot-ok: 2\n", schema),
        [(2, 1, "/Not-ok", "invalid key 'Not-ok': expected a string matching")],
    )


def test_keys_with_slash_and_tilde_get_escaped_pointers() -> None:
    schema = {"type": "object", "additionalProperties": False, "properties": {"a": {}}}
    assert_issues(
        check("a: 1\nx/y: 2\nz~w: 3\n", schema),
        [
            (2, 1, "/x~1y", "unknown key 'x/y'"),
            (3, 1, "/z~0w", "unknown key 'z~w'"),
        ],
    )


def test_one_of_matching_several_branches_says_so() -> None:
    schema = {"oneOf": [{"type": "object"}, {"required": ["a"]}]}
    (issue,) = check("a: 1\n", schema)
    assert "valid under each of" in issue.message
    assert (issue.line, issue.column, issue.pointer) == (1, 1, "")


# -- the issue type ------------------------------------------------------------------------------


def issue(line: int, column: int, pointer: str, message: str = "bad") -> DocumentIssue:
    return DocumentIssue(file="p.yaml", line=line, column=column, pointer=pointer, message=message)


def test_issue_formats_as_file_line_column_pointer_message() -> None:
    assert (
        issue(12, 7, "/agents/x/limits/max_turns", "expected an integer >= 1, found 0").format()
        == "p.yaml:12:7 /agents/x/limits/max_turns: expected an integer >= 1, found 0"
    )
    assert issue(1, 1, "").format() == "p.yaml:1:1 /: bad"


def test_issue_to_dict_is_the_validate_json_shape() -> None:
    assert issue(3, 4, "/a").to_dict() == {
        "code": DOCUMENT_INVALID,
        "message": "bad",
        "pointer": "/a",
        "line": 3,
        "column": 4,
    }


def test_pointers_escape_tilde_before_slash() -> None:
    assert escape_pointer("a~/b") == "a~0~1b"
    assert join_pointer("", "agents", "x/y", 0) == "/agents/x~1y/0"


def test_raise_issues_sorts_by_line_column_pointer_and_counts_the_rest() -> None:
    issues = [issue(9, 1, "/z"), issue(2, 5, "/b"), issue(2, 5, "/a"), issue(2, 1, "/c")]
    with pytest.raises(DocumentError) as caught:
        raise_issues(issues)
    error = caught.value
    assert error.code == DOCUMENT_INVALID
    assert [i.pointer for i in error.issues] == ["/c", "/a", "/b", "/z"]
    assert error.message == "p.yaml:2:1 /c: bad (and 3 more problems)"


def test_raise_issues_with_one_issue_has_no_count_and_drops_exact_duplicates() -> None:
    with pytest.raises(DocumentError) as caught:
        raise_issues([issue(1, 2, "/a"), issue(1, 2, "/a")])
    assert caught.value.message == "p.yaml:1:2 /a: bad"
    assert len(caught.value.issues) == 1
    with pytest.raises(DocumentError, match=r"\(and 1 more problem\)$"):
        raise_issues([issue(1, 2, "/a"), issue(1, 3, "/a")])
