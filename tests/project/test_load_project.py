"""``load_project``: every shipped project loads and gives its documented answers; overrides swap
agent callables; ``Project.entry`` picks the entry; definition errors are located
(DESIGN.md §3 and §5)."""

from __future__ import annotations

import re
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.cli import tubeless
from tubeless import Pipeline
from tubeless.errors import (
    AGENT_INVALID_DEFINITION,
    DEFINITION_DEPENDENCY_SELF_REFERENCE,
    AgentDefinitionError,
    DocumentError,
    PipelineDefinitionError,
)
from tubeless.project import Project, load_project
from tubeless.testing import finish, scripted

ROOT = Path(__file__).resolve().parents[2]
PROJECTS = ROOT / "projects"
SHIPPED = sorted(PROJECTS.glob("*.yaml"))
SCHEMA_COMMENT = "# yaml-language-server: $schema=../schemas/project.schema.json"

# A project of two pipelines built from the example handlers (``python_path`` is filled in).
TWO_PIPELINES = """\
version: 1
project: {id: two}
python_path: [REPO]
pipelines:
  words:
    steps:
      - {id: split, run: examples.text_pipeline:split_words}
  count:
    steps:
      - {id: count, run: examples.text_pipeline:count_characters}
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "project.yaml"
    path.write_text(text.replace("REPO", str(ROOT)), encoding="utf-8")
    return path


# -- the shipped projects -------------------------------------------------------------------
ANSWERS = [
    pytest.param(
        "scripted-agent",
        {},
        False,
        None,
        {"answer": "14 characters; HELLO; TUBELESS"},
        id="scripted-default-question",
    ),
    pytest.param(
        "scripted-agent",
        {"question": "hello tubeless"},
        False,
        None,
        {"answer": "14 characters; HELLO; TUBELESS"},
        id="scripted-hello-tubeless",
    ),
    pytest.param(
        "scripted-agent",
        {"question": "missing word"},
        False,
        None,
        {"answer": "12 characters; Observed NOT_FOUND: Word unavailable; WORD"},
        id="scripted-recovered-tool-error",
    ),
    pytest.param(
        "scripted-agent",
        {"question": "preview"},
        True,
        None,
        {"answer": "7 characters; PREVIEW"},
        id="scripted-dry-run-preview",
    ),
    pytest.param(
        "delegation",
        {"question": "red blue"},
        False,
        None,
        {"answer": "Summary: 3 characters; RED | 4 characters; BLUE"},
        id="delegation-red-blue",
    ),
    pytest.param(
        "text-pipeline",
        {"question": "hello tubeless"},
        False,
        None,
        {"answer": "14 characters; HELLO; TUBELESS"},
        id="text-pipeline",
    ),
    pytest.param(
        "text-pipeline",
        {"question": "hello tubeless"},
        False,
        ["count"],
        {"answer": "14 characters"},
        id="text-pipeline-count-target",
    ),
    pytest.param(
        "mcp-notes",
        {"question": "hello tubeless"},
        False,
        None,
        {"answer": "note 1 of 1; notes with 'hello': hello tubeless"},
        id="mcp-notes-starts-its-server",
    ),
]


@pytest.mark.parametrize(("name", "raw_input", "dry_run", "targets", "answer"), ANSWERS)
async def test_every_shipped_project_gives_its_documented_answer(
    name: str, raw_input: dict[str, str], dry_run: bool, targets: list[str] | None, answer: Any
) -> None:
    project = load_project(PROJECTS / f"{name}.yaml")

    run = await project.entry().run(raw_input, dry_run=dry_run, targets=targets)

    assert (run.status, run.errors, run.dry_run) == ("completed", (), dry_run)
    assert run.value == answer


# Projects whose decisions come from a live model (paid requests) run against recorded responses
# in tests/providers/ (test_adapter_contract.py and one suite per adapter) instead.
MODEL_BACKED = {"openai-agent"}


# Projects with approval-gated tools answer with an approver that says yes, or no, to all.
GATED_ANSWERS = [
    pytest.param(
        "approvals",
        {"to": "ops@elsewhere.org"},
        True,
        {"drafted": "RELEASE NOTES", "published": True, "mailed": True, "denied": []},
        id="approvals-approved",
    ),
    pytest.param(
        "approvals",
        {"to": "ops@elsewhere.org"},
        False,
        {
            "drafted": "RELEASE NOTES",
            "published": False,
            "mailed": False,
            "denied": ["publish", "mail"],
        },
        id="approvals-denied",
    ),
]


@pytest.mark.parametrize(("name", "raw_input", "approve", "answer"), GATED_ANSWERS)
async def test_every_gated_project_gives_its_documented_answer(
    name: str, raw_input: dict[str, str], approve: bool, answer: Any
) -> None:
    project = load_project(PROJECTS / f"{name}.yaml")

    run = await project.entry().run(raw_input, approver=lambda request: approve)

    assert (run.status, run.errors) == ("completed", ())
    assert run.value.model_dump() == answer


def test_the_answers_cover_every_shipped_project() -> None:
    covered = {param.values[0] for param in (*ANSWERS, *GATED_ANSWERS)}
    assert covered == {path.stem for path in SHIPPED} - MODEL_BACKED


@pytest.mark.parametrize("path", SHIPPED, ids=[path.stem for path in SHIPPED])
def test_every_shipped_project_starts_with_the_schema_comment(path: Path) -> None:
    assert path.read_text(encoding="utf-8").splitlines()[0] == SCHEMA_COMMENT


@pytest.mark.parametrize("path", SHIPPED, ids=[path.stem for path in SHIPPED])
def test_every_shipped_project_compiles_to_pipelines_named_by_their_ids(path: Path) -> None:
    project = load_project(path)

    assert (project.id, project.path) == (path.stem, path)
    assert project.default in project.entries
    for entry_id, entry in project.entries.items():
        assert isinstance(entry, Pipeline)
        assert entry.id == entry_id
        assert project.get(entry_id) is entry


def test_a_project_splits_its_entries_into_agents_and_pipelines() -> None:
    project = load_project(PROJECTS / "delegation.yaml")
    assert sorted(project.agents) == ["delegating-agent", "scripted-agent"]
    assert sorted(project.pipelines) == ["agent-summary"]


# -- overrides ------------------------------------------------------------------------------------
def test_overrides_swap_an_agents_decide_for_a_scripted_one() -> None:
    decide = scripted(finish("scripted answer"))
    project = load_project(
        PROJECTS / "scripted-agent.yaml", overrides={"scripted-agent": {"decide": decide}}
    )

    assert project.entry().run_sync({"question": "hello"}) == {"answer": "scripted answer"}
    decide.assert_done()
    (turn, _, state) = decide.seen[0]
    assert (turn, state["question"]) == (1, "hello")


def test_overrides_leave_the_other_callables_in_place() -> None:
    project = load_project(
        PROJECTS / "delegation.yaml",
        overrides={"scripted-agent": {"decide": scripted(finish("from the override"))}},
    )
    assert project.get("scripted-agent").run_sync({}) == {"answer": "from the override"}
    assert load_project(PROJECTS / "delegation.yaml").get("scripted-agent").run_sync({}) == {
        "answer": "14 characters; HELLO; TUBELESS"
    }


@pytest.mark.parametrize(
    ("overrides", "fragment"),
    [
        pytest.param({"nobody": {"decide": print}}, "'nobody'", id="unknown-entry"),
        pytest.param({"agent-summary": {"decide": print}}, "'agent-summary'", id="a-pipeline"),
        pytest.param({"scripted-agent": {"tools": {}}}, "'tools'", id="unknown-field"),
    ],
)
def test_overrides_naming_something_that_cannot_be_overridden_raise_agent_definition_error(
    overrides: dict[str, dict[str, Any]], fragment: str
) -> None:
    with pytest.raises(AgentDefinitionError, match=re.escape(fragment)) as caught:
        load_project(PROJECTS / "delegation.yaml", overrides=overrides)
    assert caught.value.code == AGENT_INVALID_DEFINITION


# -- choosing the entry ---------------------------------------------------------------------------
def test_entry_without_an_id_is_the_default() -> None:
    project = load_project(PROJECTS / "delegation.yaml")
    assert project.entry() is project.get("delegating-agent")
    assert project.entry("agent-summary") is project.get("agent-summary")


def test_entry_without_an_id_is_the_only_entry_of_a_project_without_default(
    tmp_path: Path,
) -> None:
    project = load_project(write(tmp_path, TWO_PIPELINES.split("  count:\n")[0]))
    assert project.default is None
    assert project.entry() is project.get("words")


def test_entry_without_an_id_is_ambiguous_with_several_entries_and_no_default(
    tmp_path: Path,
) -> None:
    project = load_project(write(tmp_path, TWO_PIPELINES))

    with pytest.raises(KeyError) as caught:
        project.entry()

    assert caught.value.args[0] == (
        "project 'two' has several entries and no default; choose one of count, words"
    )


def test_an_unknown_id_lists_the_choices() -> None:
    project: Project = load_project(PROJECTS / "text-pipeline.yaml")
    with pytest.raises(KeyError) as caught:
        project.entry("nope")
    assert caught.value.args[0] == (
        "project 'text-pipeline' has no entry 'nope'; choose from text-pipeline, uppercase-word"
    )


# -- definition errors ----------------------------------------------------------------------------
def test_a_graph_the_core_rejects_raises_a_located_pipeline_definition_error(
    tmp_path: Path,
) -> None:
    """A step depending on itself is found before anything is imported, at the dependency."""
    path = write(
        tmp_path,
        TWO_PIPELINES.replace(
            "{id: split, run: examples.text_pipeline:split_words}",
            "{id: split, run: examples.text_pipeline:split_words, depends_on: [split]}",
        ),
    )

    with pytest.raises(PipelineDefinitionError) as caught:
        load_project(path)

    error = caught.value
    assert error.code == DEFINITION_DEPENDENCY_SELF_REFERENCE
    assert [(e.code, e.step_id) for e in error.errors] == [
        (DEFINITION_DEPENDENCY_SELF_REFERENCE, "split")
    ]
    assert error.message == (
        f"{path}:7:75 /pipelines/words/steps/0/depends_on/0: "
        "[TUBELESS_DEFINITION_DEPENDENCY_SELF_REFERENCE] Step 'split' depends on itself in "
        "depends_on."
    )
    assert [(i.line, i.column, i.pointer) for i in error.issues] == [
        (7, 75, "/pipelines/words/steps/0/depends_on/0")
    ]
    assert str(error) == error.message
    assert error.args == (error.message,)


# A result model pydantic cannot express as JSON Schema: only compiling the agent finds out.
UNDESCRIBED_RESULT = """\
version: 1
project: {id: two}
python_path: [REPO, lib]
agents:
  helper:
    input: {schema: examples.text:Question}
    result: {schema: MODULE:Odd}
    initial_state: examples.scripted_agent:initial_state
    decide: examples.scripted_agent:decide
"""
ODD_TYPES = """\
from pydantic import BaseModel, ConfigDict


class Thing:
    pass


class Odd(BaseModel):
    model_config = ConfigDict(arbitrary_types_allowed=True)
    thing: Thing
"""


def test_a_located_definition_error_is_a_new_error_caused_by_the_core_s_own(
    tmp_path: Path,
) -> None:
    """A definition error only compiling finds is not rewritten in place: the located copy
    names the harness's own error as its cause, and carries the located issue."""
    module = f"odd_{uuid.uuid4().hex}"
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / f"{module}.py").write_text(ODD_TYPES, encoding="utf-8")
    path = write(tmp_path, UNDESCRIBED_RESULT.replace("MODULE", module))

    with pytest.raises(AgentDefinitionError) as caught:
        load_project(path)

    original = caught.value.__cause__
    assert isinstance(original, AgentDefinitionError)
    assert original.message.startswith("Agent 'helper': result_schema has no JSON Schema")
    assert original.args == (original.message,)
    assert caught.value.message == f"{path}:6:5 /agents/helper: {original.message}"
    assert [(i.line, i.column, i.pointer, i.code, i.message) for i in caught.value.issues] == [
        (6, 5, "/agents/helper", "TUBELESS_AGENT_INVALID_DEFINITION", original.message)
    ]


def test_run_prints_a_compile_time_definition_error_at_its_location(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 15: ``run`` says a definition error with the file:line:col validate computes."""
    module = f"odd_{uuid.uuid4().hex}"
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / f"{module}.py").write_text(ODD_TYPES, encoding="utf-8")
    path = write(tmp_path, UNDESCRIBED_RESULT.replace("MODULE", module))

    outcome = tubeless(capsys, "run", path, "--input", '{"question": "q"}')

    assert (outcome.code, outcome.out) == (3, "")
    assert outcome.err.startswith(
        f"error: {path}:6:5 /agents/helper: [TUBELESS_AGENT_INVALID_DEFINITION] Agent 'helper': "
        "result_schema has no JSON Schema"
    )
    assert len(outcome.err.splitlines()) == 1


TOO_LONG_DESCRIPTION = """\
version: 1
project: {id: demo}
python_path: [REPO]
agents:
  helper:
    input: {schema: examples.text:Question}
    result: {schema: examples.text:Answer}
    initial_state: examples.scripted_agent:initial_state
    decide: examples.scripted_agent:decide
    tools:
      count:
        run: examples.text_pipeline:count_characters
        description: DESCRIPTION
        input: {schema: {type: string}}
        output: {schema: {type: integer}}
"""


def test_a_tool_the_harness_rejects_is_reported_at_its_yaml_location(tmp_path: Path) -> None:
    path = write(tmp_path, TOO_LONG_DESCRIPTION.replace("DESCRIPTION", "x" * 5000))

    # A fix may locate it while compiling (AgentDefinitionError) or in the meta-schema (a
    # maxLength on tool descriptions, DocumentError); either way it names the tool's location.
    with pytest.raises((AgentDefinitionError, DocumentError)) as caught:
        load_project(path)

    location = rf"{re.escape(str(path))}:\d+:\d+ /agents/helper/tools/count[/:]"
    assert re.match(location, str(caught.value)), str(caught.value)
