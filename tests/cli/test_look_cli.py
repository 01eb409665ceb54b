"""``tubeless plan``, ``inspect``, ``graph`` and ``list`` on the shipped projects and on projects
written to ``tmp_path``: exact output, every exit code of DESIGN.md §6 for these commands, the
documented examples of docs/cli.md, and that none of them calls a handler."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner
from inline_snapshot import Is, snapshot

from tests.fixtures.cli import ROOT, Outcome, tubeless_process
from tubeless._cli import main
from tubeless.project import load_project

TEXT = ROOT / "projects" / "text-pipeline.yaml"
SCRIPTED = ROOT / "projects" / "scripted-agent.yaml"
DELEGATION = ROOT / "projects" / "delegation.yaml"
COMMANDS = ("plan", "inspect", "graph", "list")


def tubeless(*args: str | Path) -> Outcome:
    """The CLI in process through ``main()`` (the real exit-code mapping), with CliRunner's
    isolated stdout and stderr."""
    runner = CliRunner()
    with runner.isolation() as streams:
        code = main([str(arg) for arg in args])
    out, err = streams[0].getvalue(), streams[1].getvalue()
    return Outcome(code, out.decode(), err.decode())


def identity_line(path: Path, entry: str) -> str:
    identity = load_project(path).get(entry).identity
    line = (
        f"Identity: version={identity.version} structural={identity.structural_fingerprint} "
        f"definition={identity.definition_id}"
    )
    if identity.implementation_version is not None:
        line += f" implementation={identity.implementation_version}"
    return line


# -- plan -------------------------------------------------------------------------------------
TEXT_PLAN_COUNT = """\
Pipeline text-pipeline: plan (ok=true, dryRun=false, steps=4)
  - Split words [words]: skip: filtered (outside target closure)
  - Count characters [count]: run (target count)
  - Uppercase words [uppercase]: skip: filtered (outside target closure) -> fan-out pipeline \
uppercase-word (1 declared step)
  - Report [report]: skip: filtered (outside target closure)
"""

SCRIPTED_PLAN = """\
Pipeline scripted-agent: plan (ok=true, dryRun=false, steps=1)
  - agent: run -> iteration (at most 3) pipeline scripted-agent/turn (3 declared steps)
      limits: max_turns=3 max_calls=100 max_decisions=3 max_depth=4 max_concurrency=2
      tool count (replay unsafe): Count the characters of a piece of text.
      tool uppercase (replay unsafe): Uppercase a piece of text.
"""


def test_plan_text_for_a_target_with_explanations() -> None:
    assert tubeless("plan", TEXT, "--target", "count", "--explain") == Outcome(
        0, TEXT_PLAN_COUNT, ""
    )


def test_plan_without_explain_has_no_annotations() -> None:
    outcome = tubeless("plan", TEXT, "text-pipeline", "--target", "report")
    assert outcome.code == 0
    assert outcome.out.splitlines()[1:] == [
        "  - Split words [words]: skip: filtered",
        "  - Count characters [count]: run",
        "  - Uppercase words [uppercase]: skip: filtered -> fan-out pipeline uppercase-word "
        "(1 declared step)",
        "  - Report [report]: run",
    ]


def test_plan_json_for_a_target() -> None:
    outcome = tubeless("plan", TEXT, "--target", "count", "--explain", "--json")
    assert (outcome.code, outcome.err) == (0, "")
    data = json.loads(outcome.out)
    expected = load_project(TEXT).entry().plan(targets=["count"]).to_dict(definition=True)
    assert data == expected
    assert outcome.out == json.dumps(expected, indent=2, ensure_ascii=False) + "\n"
    assert [(s["id"], s["disposition"], s.get("skip_reason")) for s in data["steps"]] == [
        ("words", "skip", "filtered"),
        ("count", "run", None),
        ("uppercase", "skip", "filtered"),
        ("report", "skip", "filtered"),
    ]
    assert data["steps"][1]["selection_reasons"] == [{"kind": "target", "target_id": "count"}]
    assert data["definition"]["identity"]["definitionId"] == (
        load_project(TEXT).entry().identity.definition_id
    )


def test_plan_of_the_scripted_agent_shows_limits_and_tools() -> None:
    assert tubeless("plan", SCRIPTED) == Outcome(0, SCRIPTED_PLAN, "")


def test_plan_dry_run() -> None:
    outcome = tubeless("plan", SCRIPTED, "scripted-agent", "--dry-run")
    assert outcome == Outcome(0, SCRIPTED_PLAN.replace("dryRun=false", "dryRun=true"), "")
    data = json.loads(tubeless("plan", TEXT, "--dry-run", "--json").out)
    assert data["dry_run"] is True


@pytest.mark.parametrize(
    ("args", "line"),
    [
        pytest.param(
            ["--target", "nope"],
            "  ! planning [TUBELESS_PLANNING_TARGET_UNKNOWN]: Unknown targets: 'nope'; "
            "targets: 'count', 'report'.",
            id="unknown-target",
        ),
        pytest.param(
            ["--step", "nope"],
            "  ! planning [TUBELESS_PLANNING_STEP_UNKNOWN]: Unknown steps: 'nope'; "
            "choose from 'words', 'count', 'uppercase', 'report'.",
            id="unknown-step",
        ),
        pytest.param(
            ["--target", "count", "--step", "words"],
            "  ! planning [TUBELESS_PLANNING_SELECTION_CONFLICT]: "
            "Select either targets or exact steps, not both.",
            id="target-and-step",
        ),
    ],
)
def test_a_plan_that_is_not_ok_prints_it_and_exits_5(args: list[str], line: str) -> None:
    outcome = tubeless("plan", TEXT, *args)
    assert outcome == Outcome(
        5,
        f"Pipeline text-pipeline: plan (ok=false, dryRun=false, steps=0)\n{line}\n",
        "",
    )
    as_json = tubeless("plan", TEXT, *args, "--json")
    assert as_json.code == 5
    assert json.loads(as_json.out)["ok"] is False


# -- exit codes shared by the four commands ---------------------------------------------------
@pytest.mark.parametrize("command", ["plan", "inspect", "graph"])
def test_an_unknown_id_exits_2_with_the_choices(command: str) -> None:
    outcome = tubeless(command, DELEGATION, "nope")
    assert outcome == Outcome(
        2,
        "",
        "error: project 'delegation' has no entry 'nope'; choose from agent-summary, "
        "delegating-agent, scripted-agent\n",
    )


TWO_ENTRIES = """\
version: 1
project: {id: two}
python_path: [REPO]
pipelines:
  one:
    steps: [{id: a, run: examples.text_pipeline:split_words}]
  two:
    name: Second
    steps: [{id: a, run: examples.text_pipeline:split_words}]
"""


@pytest.mark.parametrize("command", ["plan", "inspect", "graph"])
def test_an_omitted_id_without_default_exits_2_with_the_choices(
    command: str, tmp_path: Path
) -> None:
    project = tmp_path / "two.yaml"
    project.write_text(TWO_ENTRIES.replace("REPO", str(ROOT)), encoding="utf-8")
    assert tubeless(command, project) == Outcome(
        2, "", "error: project 'two' has several entries and no default; choose one of one, two\n"
    )
    assert tubeless(command, project, "two").code == 0
    assert tubeless("list", project) == Outcome(0, "one\tpipeline\ntwo\tpipeline\tSecond\n", "")


@pytest.mark.parametrize("command", COMMANDS)
def test_a_missing_project_file_exits_2(command: str, tmp_path: Path) -> None:
    missing = tmp_path / "missing.yaml"
    assert tubeless(command, missing) == Outcome(
        2, "", f"error: {missing}: No such file or directory\n"
    )


INVALID = """\
version: 1
project: {id: bad}
pipelines:
  words:
    stepz: []
"""


@pytest.mark.parametrize("command", COMMANDS)
def test_an_invalid_document_exits_4(command: str, tmp_path: Path) -> None:
    project = tmp_path / "bad.yaml"
    project.write_text(INVALID, encoding="utf-8")
    outcome = tubeless(command, project)
    assert (outcome.code, outcome.out) == (4, "")
    assert outcome.err.splitlines() == [
        f"error: {project}:5:5 /pipelines/words: missing required property 'steps' "
        "(The steps, in declaration order)",
        f"error: {project}:5:5 /pipelines/words/stepz: unknown key 'stepz'; did you mean 'steps'?",
    ]


BAD_REFERENCE = """\
version: 1
project: {id: ref}
python_path: [REPO]
pipelines:
  words:
    steps:
      - {id: a, run: examples.text_pipeline:nope}
"""
CYCLE = """\
version: 1
project: {id: cycle}
python_path: [REPO]
pipelines:
  words:
    steps:
      - {id: a, run: examples.text_pipeline:split_words, depends_on: [b]}
      - {id: b, run: examples.text_pipeline:split_words, depends_on: [a]}
"""


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize(
    ("document", "code"),
    [pytest.param(BAD_REFERENCE, 2, id="reference"), pytest.param(CYCLE, 3, id="definition")],
)
def test_reference_and_definition_errors(
    command: str, document: str, code: int, tmp_path: Path
) -> None:
    project = tmp_path / "project.yaml"
    project.write_text(document.replace("REPO", str(ROOT)), encoding="utf-8")
    outcome = tubeless(command, project)
    assert (outcome.code, outcome.out) == (code, "")
    assert outcome.err.startswith("error: ") and outcome.err.count("\n") == 1


@pytest.mark.parametrize(
    "args",
    [
        pytest.param(["graph", TEXT, "--direction", "sideways"], id="bad-direction"),
        pytest.param(["graph", TEXT, "-d", "td"], id="lowercase-direction"),
        pytest.param(["graph", TEXT, "--format", "svg"], id="bad-format"),
        pytest.param(["plan"], id="missing-project"),
        pytest.param(["list", TEXT, "extra"], id="extra-argument"),
        pytest.param(["inspect", TEXT, "--nope"], id="unknown-option"),
    ],
)
def test_usage_errors_exit_1(args: list[str | Path]) -> None:
    outcome = tubeless(*args)
    assert (outcome.code, outcome.out) == (1, "")
    assert outcome.err.startswith("error: ") and "Usage: tubeless" in outcome.err


# -- inspect ----------------------------------------------------------------------------------
#: The input JSON Schema of the shipped examples (examples.text:Question), as one line of compact
#: JSON cut to 200 characters.
QUESTION_SCHEMA = '{"properties":{"question":{"type":"string"}},"type":"object"}'


def test_inspect_text_for_the_scripted_agent() -> None:
    outcome = tubeless("inspect", SCRIPTED)
    expected = "\n".join(
        [
            "Entry scripted-agent (agent)",
            "Pipeline scripted-agent",
            "Name: Scripted agent",
            "Description: Counts characters and uppercases words with scripted decisions.",
            f"Input: {QUESTION_SCHEMA}",
            "Targets: agent",
            "Steps: agent",
            identity_line(SCRIPTED, "scripted-agent"),
            "",
            SCRIPTED_PLAN.rstrip("\n"),
            "",
            "Limits: max_turns=3 max_calls=100 max_decisions=3 max_depth=4 max_concurrency=2",
            "Tools:",
            "  count (function)",
            "    description: Count the characters of a piece of text.",
            '    input: {"type":"string"}',
            "    replay: unsafe",
            "    strict: yes",
            "  uppercase (function)",
            "    description: Uppercase a piece of text.",
            '    input: {"type":"string"}',
            "    replay: unsafe",
            "    strict: yes",
            'Result: {"description":"The final answer text.","type":"string"}',
            "",
        ]
    )
    assert outcome == Outcome(0, expected, "")


def test_inspect_text_for_the_text_pipeline() -> None:
    outcome = tubeless("inspect", TEXT, "text-pipeline")
    expected = textwrap.dedent(
        f"""\
        Entry text-pipeline (pipeline)
        Pipeline text-pipeline
        Name: Text pipeline
        Description: Counts characters and uppercases every word.
        Input: {QUESTION_SCHEMA}
        Targets: count, report
        Steps:
          words
          count
          uppercase (depends_on: words)
          report (depends_on: count; optional_depends_on: uppercase)
        {identity_line(TEXT, "text-pipeline")}

        Pipeline text-pipeline: plan (ok=true, dryRun=false, steps=4)
          - Split words [words]: run
          - Count characters [count]: run
          - Uppercase words [uppercase]: run -> fan-out pipeline uppercase-word (1 declared step)
          - Report [report]: run
        """
    )
    assert outcome == Outcome(0, expected, "")


def test_inspect_shows_pipeline_and_agent_tools_with_schemas_cut_to_200() -> None:
    outcome = tubeless("inspect", DELEGATION)
    assert outcome.code == 0
    lines = outcome.out.splitlines()
    assert lines[0] == "Entry delegating-agent (agent)"
    start = lines.index("Tools:")
    assert lines[start + 1] == "  process_word (agent scripted-agent)"
    assert lines[start + 2] == (
        "    description: Count and uppercase one word with the scripted agent."
    )
    schema_line = lines[start + 3].removeprefix("    input: ")
    assert len(schema_line) == 200 and schema_line.endswith("…")
    assert schema_line.startswith('{"description":"The example agents\' input')
    assert lines[start + 4] == "    replay: safe"
    assert lines[start + 5] == (
        "    strict: no (/properties/input: an object needs additionalProperties: false; "
        "/properties/input: property 'question' must be required)"
    )
    assert lines[start + 6] == "  summarize (pipeline agent-summary)"


def test_inspect_json_for_the_scripted_agent() -> None:
    outcome = tubeless("inspect", SCRIPTED, "--json")
    assert (outcome.code, outcome.err) == (0, "")
    data = json.loads(outcome.out)
    entry = load_project(SCRIPTED).get("scripted-agent")
    assert data == snapshot(
        {
            "entry": "scripted-agent",
            "kind": "agent",
            "pipeline_id": "scripted-agent",
            "name": "Scripted agent",
            "description": "Counts characters and uppercases words with scripted decisions.",
            "target_ids": ["agent"],
            "input_json_schema": {
                "description": "The example agents' input: ``question`` defaults to "
                '"hello tubeless".',
                "properties": {
                    "question": {
                        "description": "The text to work on.",
                        "title": "Question",
                        "type": "string",
                    }
                },
                "title": "Question",
                "type": "object",
            },
            "step_ids": ["agent"],
            "identity": {
                "version": Is(entry.identity.version),
                "structural_fingerprint": Is(entry.identity.structural_fingerprint),
                "definition_id": Is(entry.identity.definition_id),
                "implementation_version": "scripted-v1",
            },
            "plan": Is(entry.plan().to_dict(definition=True)),
            "agent": {
                "limits": {
                    "max_turns": 3,
                    "max_calls": 100,
                    "max_decisions": 3,
                    "max_depth": 4,
                    "max_concurrency": 2,
                },
                "capabilities": [
                    {
                        "name": "count",
                        "description": "Count the characters of a piece of text.",
                        "input_json_schema": {"type": "string"},
                        "kind": "function",
                        "pipeline_id": "scripted-agent/tool/count",
                        "replay": "unsafe",
                    },
                    {
                        "name": "uppercase",
                        "description": "Uppercase a piece of text.",
                        "input_json_schema": {"type": "string"},
                        "kind": "function",
                        "pipeline_id": "scripted-agent/tool/uppercase",
                        "replay": "unsafe",
                    },
                ],
                "result_json_schema": {"description": "The final answer text.", "type": "string"},
                "turn_pipeline_id": "scripted-agent/turn",
            },
        }
    )


def test_inspect_json_for_the_text_pipeline() -> None:
    data = json.loads(tubeless("inspect", TEXT, "--json").out)
    entry = load_project(TEXT).get("text-pipeline")
    assert data["kind"] == "pipeline"
    assert data["agent"] is None
    assert data["target_ids"] == ["count", "report"]
    assert data["step_ids"] == ["words", "count", "uppercase", "report"]
    assert data["identity"]["structural_fingerprint"] == entry.identity.structural_fingerprint
    assert data["identity"]["definition_id"] == entry.identity.definition_id
    assert data["plan"] == entry.plan().to_dict(definition=True)


# -- graph ------------------------------------------------------------------------------------
TEXT_MERMAID = """\
flowchart TD
  step0["Split words"]
  step1["Count characters"]
  step2["Uppercase words (fan-out: uppercase-word)"]
  step3["Report"]

  step0 --> step2
  step1 --> step3
  step2 -. optional input .-> step3
"""
SCRIPTED_MERMAID = """\
flowchart TD
  subgraph step0["agent (agent: scripted-agent/turn)"]
    step0_0["Decide"]
    step0_1["Calls"]
    step0_2["Reduce"]
    step0_tool0(["count"])
    step0_tool1(["uppercase"])
  end

  step0_0 --> step0_1
  step0_0 --> step0_2
  step0_1 --> step0_2
  step0_2 -. next turn (at most 3) .-> step0_0
  step0_1 -. count .-> step0_tool0
  step0_1 -. uppercase .-> step0_tool1
"""


def test_graph_mermaid_for_the_text_pipeline() -> None:
    assert tubeless("graph", TEXT) == Outcome(0, TEXT_MERMAID, "")
    fenced = tubeless("graph", TEXT, "--markdown")
    assert fenced == Outcome(0, f"```mermaid\n{TEXT_MERMAID}```\n", "")


EDGES_MODULE = """\
def handler(inputs, ctx):
    return "ran"
"""
EDGES_PROJECT = """\
version: 1
project: {id: edges}
python_path: [.]
pipelines:
  edges:
    steps:
      - id: source
        name: 'Load "Rows" #1 & <raw>'
        description: "Read safely.\\nNo mutation."
        run: look_edges:handler
      - {id: hint, run: look_edges:handler}
      - {id: validate, run: look_edges:handler}
      - id: publish
        run: look_edges:handler
        depends_on: [source]
        optional_depends_on: [hint, validate]
        skip_after_failure_of: [validate]
      - {id: audit, run: look_edges:handler, skip_after_failure_of: [publish]}
"""


def test_graph_mermaid_all_edge_styles_and_escaping(tmp_path: Path) -> None:
    (tmp_path / "look_edges.py").write_text(EDGES_MODULE, encoding="utf-8")
    project = tmp_path / "edges.yaml"
    project.write_text(EDGES_PROJECT, encoding="utf-8")
    outcome = tubeless("graph", project, "edges", "--direction", "LR", "--descriptions")
    assert outcome == Outcome(
        0,
        "flowchart LR\n"
        '  step0["Load #quot;Rows#quot; #35;1 #38; #60;raw#62; — Read safely. No mutation."]\n'
        '  step1["hint"]\n'
        '  step2["validate"]\n'
        '  step3["publish"]\n'
        '  step4["audit"]\n'
        "\n"
        "  step0 --> step3\n"
        "  step1 -. optional input .-> step3\n"
        "  step2 -. optional input + failure gate .-> step3\n"
        "  step3 -. failure gate .-> step4\n",
        "",
    )
    plain = tubeless("graph", project)
    assert plain.out.splitlines()[1] == '  step0["Load #quot;Rows#quot; #35;1 #38; #60;raw#62;"]'


def test_inspect_text_shows_every_dependency_of_each_step(tmp_path: Path) -> None:
    """Required, optional and failure-gate dependencies per step, in execution order; a
    pipeline without an input schema says so."""
    # A module name of its own: the graph test imports look_edges from another folder.
    (tmp_path / "look_deps.py").write_text(EDGES_MODULE, encoding="utf-8")
    project = tmp_path / "edges.yaml"
    project.write_text(EDGES_PROJECT.replace("look_edges:", "look_deps:"), encoding="utf-8")
    lines = tubeless("inspect", project).out.splitlines()
    assert lines[1:10] == [
        "Pipeline edges",
        "Input: none (any input is accepted)",
        "Targets: audit",
        "Steps:",
        "  source",
        "  hint",
        "  validate",
        "  publish (depends_on: source; optional_depends_on: hint, validate; "
        "skip_after_failure_of: validate)",
        "  audit (skip_after_failure_of: publish)",
    ]


def test_inspect_shows_the_entry_input_schema_compact_and_cut_to_200(tmp_path: Path) -> None:
    (tmp_path / "look_inputs.py").write_text(EDGES_MODULE, encoding="utf-8")
    project = tmp_path / "inputs.yaml"
    project.write_text(
        textwrap.dedent(
            """\
            version: 1
            project: {id: inputs}
            python_path: [.]
            pipelines:
              small:
                input:
                  schema:
                    type: object
                    properties: {n: {type: integer, default: 3}}
                    required: [n]
                steps: [{id: only, run: look_inputs:handler}]
              large:
                input:
                  schema:
                    type: object
                    properties: {text: {type: string, maxLength: 9, pattern: "%s"}}
                steps: [{id: only, run: look_inputs:handler}]
            """
            % ("x" * 300)
        ),
        encoding="utf-8",
    )
    small_outcome = tubeless("inspect", project, "small")
    small = small_outcome.out.splitlines()
    assert small_outcome.code == 0, small_outcome.err
    assert small[2] == (
        'Input: {"type":"object","properties":{"n":{"type":"integer","default":3}},'
        '"required":["n"]}'
    )
    large = tubeless("inspect", project, "large").out.splitlines()[2].removeprefix("Input: ")
    assert len(large) == 200 and large.endswith("x…")
    assert large.startswith('{"type":"object","properties":{"text":{"type":"string"')
    data = json.loads(tubeless("inspect", project, "small", "--json").out)
    assert data["input_json_schema"] == {
        "type": "object",
        "properties": {"n": {"type": "integer", "default": 3}},
        "required": ["n"],
    }


def test_inspect_input_leaves_annotations_out_and_keeps_properties_so_named(
    tmp_path: Path,
) -> None:
    """Titles and descriptions are left out of the Input line (--json keeps them); a property
    that happens to be called ``title`` is part of the shape and stays."""
    project = tmp_path / "annotated.yaml"
    project.write_text(
        textwrap.dedent(
            """\
            version: 1
            project: {id: annotated}
            python_path: [.]
            pipelines:
              annotated:
                input:
                  schema:
                    title: Input
                    description: A long description that used to fill the line.
                    type: object
                    properties: {title: {type: string, description: The title.}}
                steps: [{id: only, run: look_annotated:handler}]
            """
        ),
        encoding="utf-8",
    )
    (tmp_path / "look_annotated.py").write_text(
        "def handler(inputs, ctx):\n    return 1\n", encoding="utf-8"
    )
    outcome = tubeless("inspect", project)
    assert outcome.code == 0, outcome.err
    assert outcome.out.splitlines()[2] == (
        'Input: {"type":"object","properties":{"title":{"type":"string"}}}'
    )


def test_graph_of_the_scripted_agent_in_three_formats() -> None:
    assert tubeless("graph", SCRIPTED) == Outcome(0, SCRIPTED_MERMAID, "")
    dot = tubeless("graph", SCRIPTED, "--format", "dot")
    assert (dot.code, dot.err) == (0, "")
    assert dot.out.startswith('digraph "scripted-agent" {\n  rankdir=TB;\n  compound=true;\n')
    assert '  subgraph "cluster_step0" {\n' in dot.out
    assert '  "step0_1" -> "step0_tool0" [style=dotted, label="count"];\n' in dot.out
    assert_valid_dot(dot.out)
    as_json = tubeless("graph", SCRIPTED, "--format", "json", "-d", "LR")
    assert as_json.code == 0
    data = json.loads(as_json.out)
    assert (data["id"], data["direction"]) == ("scripted-agent", "LR")
    assert [node["id"] for node in data["nodes"]] == [
        "step0",
        "step0_0",
        "step0_1",
        "step0_2",
        "step0_tool0",
        "step0_tool1",
    ]
    assert {
        "from": "step0_2",
        "to": "step0_0",
        "kind": "next-turn",
        "label": "next turn (at most 3)",
    } in data["edges"]


def test_graph_dot_for_the_text_pipeline_parses() -> None:
    outcome = tubeless("graph", TEXT, "--format", "dot", "--descriptions")
    assert outcome.code == 0
    assert '  "step2" -> "step3" [style=dashed, label="optional input"];\n' in outcome.out
    assert_valid_dot(outcome.out)


def test_graph_of_an_agent_with_pipeline_and_agent_tools() -> None:
    outcome = tubeless("graph", DELEGATION, "--direction", "LR")
    assert outcome.code == 0
    assert '    step0_tool0(["agent: scripted-agent"])\n' in outcome.out
    assert '    step0_tool1(["pipeline: agent-summary"])\n' in outcome.out
    assert "  step0_1 -. process_word .-> step0_tool0\n" in outcome.out
    child = tubeless("graph", DELEGATION, "agent-summary", "--markdown", "--format", "dot")
    assert child.out.startswith('```dot\ndigraph "agent-summary" {\n')


# A DOT check with Graphviz when it is installed, otherwise a structural one (see
# tests/reporting/test_graph.py for the full version used on many more graphs).
_QUOTED = r'"(?:[^"\\]|\\.)*"'


def assert_valid_dot(source: str) -> None:
    if shutil.which("dot"):
        done = subprocess.run(
            ["dot", "-Tsvg"], input=source, capture_output=True, text=True, check=False
        )
        assert done.returncode == 0 and not done.stderr, done.stderr
    unquoted = re.sub(_QUOTED, '""', source)
    assert unquoted.count("{") == unquoted.count("}")
    declared = set(re.findall(rf"^\s*({_QUOTED}) \[label=", source, re.MULTILINE))
    endpoints = re.findall(rf"^\s*({_QUOTED}) -> ({_QUOTED})", source, re.MULTILINE)
    assert endpoints and {end for pair in endpoints for end in pair} <= declared


# -- list -------------------------------------------------------------------------------------
def test_list_text() -> None:
    assert tubeless("list", DELEGATION) == Outcome(
        0,
        "delegating-agent\tagent\tDelegating agent (default)\n"
        "scripted-agent\tagent\tScripted agent\n"
        "agent-summary\tpipeline\tAgent summary\n",
        "",
    )


def test_list_json() -> None:
    outcome = tubeless("list", DELEGATION, "--json")
    assert (outcome.code, outcome.err) == (0, "")
    expected = {
        "id": "delegation",
        "name": "Delegation",
        "description": "A parent agent that delegates each word to the scripted agent, then "
        "summarizes.",
        "default": "delegating-agent",
        "path": str(DELEGATION.resolve()),
        "agents": ["delegating-agent", "scripted-agent"],
        "pipelines": ["agent-summary"],
    }
    assert outcome.out == json.dumps(expected, indent=2) + "\n"


def _folder_of_projects(folder: Path, module: str) -> Path:
    """Two projects (one in a subfolder), a CI file that is no project, and a hidden folder;
    their handlers are in ``module`` (one name per test: a module is imported once)."""
    (folder / f"{module}.py").write_text(EDGES_MODULE, encoding="utf-8")
    (folder / "b.yaml").write_text(
        "version: 1\n"
        "project: {id: b, default: second}\n"
        "python_path: [.]\n"
        "pipelines:\n"
        f"  first: {{name: First, steps: [{{id: s, run: {module}:handler}}]}}\n"
        f"  second: {{steps: [{{id: s, run: {module}:handler}}]}}\n",
        encoding="utf-8",
    )
    (folder / "nested").mkdir()
    (folder / "nested" / "a.yml").write_text(
        "version: 1\n"
        "project: {id: a}\n"
        "python_path: [..]\n"
        "pipelines:\n"
        f"  only: {{steps: [{{id: s, run: {module}:handler}}]}}\n",
        encoding="utf-8",
    )
    (folder / "ci.yaml").write_text("on: push\njobs: {}\n", encoding="utf-8")
    (folder / ".hidden").mkdir()
    (folder / ".hidden" / "c.yaml").write_text((folder / "b.yaml").read_text(), encoding="utf-8")
    return folder


def test_list_of_a_folder_lists_every_project_grouped_by_file(tmp_path: Path) -> None:
    folder = _folder_of_projects(tmp_path, "look_folder_listed")
    outcome = tubeless("list", folder)
    assert outcome == Outcome(
        0,
        f"{folder / 'b.yaml'}:\n"
        "  first\tpipeline\tFirst\n"
        "  second\tpipeline (default)\n"
        "\n"
        f"{folder / 'nested' / 'a.yml'}:\n"
        "  only\tpipeline\n",
        "",
    )
    data = json.loads(tubeless("list", folder, "--json").out)
    assert [(project["id"], project["path"]) for project in data] == [
        ("b", str((folder / "b.yaml").resolve())),
        ("a", str((folder / "nested" / "a.yml").resolve())),
    ]
    assert data[0]["pipelines"] == ["first", "second"]


def test_list_of_a_folder_reports_a_broken_project_and_lists_the_others(tmp_path: Path) -> None:
    folder = _folder_of_projects(tmp_path, "look_folder_broken")
    (folder / "broken.yaml").write_text("version: 1\nproject: {id: broken, nmae: x}\n")
    outcome = tubeless("list", folder)
    assert outcome.code == 4
    assert outcome.err == (
        f"error: {folder / 'broken.yaml'}:2:23 /project/nmae: unknown key 'nmae'; "
        "did you mean 'name'?\n"
    )
    assert outcome.out.splitlines()[0] == f"{folder / 'b.yaml'}:"
    assert outcome.out.splitlines()[-1] == "  only\tpipeline"


def test_list_of_a_folder_without_projects_exits_2(tmp_path: Path) -> None:
    (tmp_path / "ci.yaml").write_text("on: push\n", encoding="utf-8")
    assert tubeless("list", tmp_path) == Outcome(
        2, "", f"error: {tmp_path}: no project files found\n"
    )


# -- nothing runs -----------------------------------------------------------------------------
MARKER_MODULE = """\
import pathlib

from tubeless.agent import define_tool

MARKER = pathlib.Path(__file__).with_name("CALLED")


def _called(name):
    with MARKER.open("a", encoding="utf-8") as f:
        f.write(name + "\\n")


def initial_state(validated):
    _called("initial_state")
    return {}


def decide(state, ctx):
    _called("decide")
    return {"kind": "finish", "result": "done"}


def reduce(state, outcomes):
    _called("reduce")
    return state


def run(inputs, ctx):
    _called("run")
    return "ran"


def skip(inputs, ctx):
    _called("skip")
    return False


def items(inputs, ctx):
    _called("items")
    return []


def key(item, index):
    _called("key")
    return str(index)


def map_options(item, index, inputs, ctx):
    _called("map_options")
    return item


def finalize(outputs, ctx):
    _called("finalize")
    return "finalized"


def measure(text, ctx):
    _called("measure")
    return len(text)


tool = define_tool(description="Count.", input_schema=str, output_schema=int, run=measure,
                   preview=measure)
"""
MARKER_PROJECT = """\
version: 1
project: {id: marker, default: agent}
python_path: [.]
agents:
  agent:
    input: {schema: builtins:str}
    result: {schema: builtins:str}
    initial_state: look_marker:initial_state
    decide: look_marker:decide
    dry_run: look_marker:decide
    reduce: look_marker:reduce
    tools:
      count: look_marker:tool
      flow: {pipeline: flow, description: Run the flow.}
pipelines:
  flow:
    input: {schema: builtins:str}
    result: {schema: builtins:str}
    finalize: {run: look_marker:finalize}
    targets: [b]
    steps:
      - {id: a, run: look_marker:run, skip: look_marker:skip, dry_run: look_marker:run}
      - id: b
        depends_on: [a]
        for_each_pipeline:
          pipeline: child
          items: look_marker:items
          key: look_marker:key
          map_options: look_marker:map_options
  child:
    input: {schema: builtins:str}
    steps:
      - {id: c, run: look_marker:run}
"""


@pytest.fixture(scope="module")
def marker_project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("marker")
    (folder / "look_marker.py").write_text(MARKER_MODULE, encoding="utf-8")
    project = folder / "marker.yaml"
    project.write_text(MARKER_PROJECT, encoding="utf-8")
    return project


@pytest.mark.parametrize(
    "args",
    [
        ["plan"],
        ["plan", "--dry-run", "--explain"],
        ["plan", "--json", "--dry-run"],
        ["plan", "flow", "--dry-run", "--target", "b"],
        ["plan", "flow", "--step", "a", "--json"],
        ["inspect"],
        ["inspect", "--json"],
        ["inspect", "flow"],
        ["inspect", "flow", "--json"],
        ["graph", "--descriptions"],
        ["graph", "--format", "dot"],
        ["graph", "flow", "--format", "json"],
        ["list"],
        ["list", "--json"],
    ],
    ids=" ".join,
)
def test_no_command_calls_a_handler(marker_project: Path, args: list[str]) -> None:
    """Handlers, previews, predicates, decide, reduce and initial_state are never called."""
    command, *rest = args
    outcome = tubeless(command, marker_project, *rest)
    assert (outcome.code, outcome.err) == (0, "")
    assert not (marker_project.parent / "CALLED").exists()


# -- real processes ---------------------------------------------------------------------------
def test_plan_in_a_real_process() -> None:
    assert tubeless_process("plan", TEXT, "--target", "count", "--explain") == Outcome(
        0, TEXT_PLAN_COUNT, ""
    )
    failed = tubeless_process("plan", "projects/text-pipeline.yaml", "--target", "nope")
    assert failed.code == 5 and failed.out.endswith("targets: 'count', 'report'.\n")


def test_graph_and_list_in_a_real_process() -> None:
    assert tubeless_process("graph", SCRIPTED) == Outcome(0, SCRIPTED_MERMAID, "")
    assert tubeless_process("graph", SCRIPTED, "-d", "diagonal").code == 1
    assert tubeless_process("list", "projects/delegation.yaml", "nope").code == 1
    missing = tubeless_process("inspect", "projects/missing.yaml")
    assert missing == Outcome(2, "", "error: projects/missing.yaml: No such file or directory\n")


def test_help_imports_no_heavy_module() -> None:
    """``tubeless --help`` stays fast: the look commands import their libraries lazily."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "tubeless", "--help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    for name in ("plan", "inspect", "graph", "list"):
        assert re.search(rf"^  {name} ", done.stdout, re.MULTILINE)
    assert not re.search(r"\b(pydantic|jsonschema|yaml)\b", done.stderr)


# -- docs/cli.md ------------------------------------------------------------------------------
_CONSOLE = re.compile(
    r"^```console\n\$ (tubeless (?:plan|inspect|graph|list)\b.*?)\n(.*?)^```",
    re.DOTALL | re.MULTILINE,
)
_SHA = re.compile(r"sha256:[0-9a-f]{64}")


def _documented() -> list[tuple[str, str]]:
    text = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    return [(match.group(1), match.group(2)) for match in _CONSOLE.finditer(text)]


@pytest.mark.parametrize(("command", "output"), _documented(), ids=[c for c, _ in _documented()])
def test_docs_show_real_output(command: str, output: str) -> None:
    """Every ``$ tubeless plan|inspect|graph|list`` example in docs/cli.md prints what it shows
    (fingerprints aside), run from the repository root; a trailing ``# exit N`` line gives the
    exit code."""
    import shlex

    expected_code = 0
    lines = output.splitlines(keepends=True)
    if lines and lines[-1].startswith("# exit "):
        expected_code = int(lines.pop().removeprefix("# exit "))
    outcome = tubeless_process(*shlex.split(command)[1:])
    assert outcome.code == expected_code
    assert _SHA.sub("sha256:…", outcome.out + outcome.err) == _SHA.sub("sha256:…", "".join(lines))
