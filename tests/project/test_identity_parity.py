"""A project compiles to exactly the objects the Python API builds (same definition ids)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from examples.agent_delegation import delegating_agent, summary_pipeline
from examples.scripted_agent import scripted_agent
from examples.text_pipeline import pipeline as text_pipeline
from examples.text_pipeline import uppercase_word
from tubeless import Pipeline
from tubeless.project import load_project

ROOT = Path(__file__).resolve().parents[2]
PROJECTS = ROOT / "projects"


@pytest.mark.parametrize(
    ("file", "entry", "twin"),
    [
        pytest.param("scripted-agent.yaml", "scripted-agent", scripted_agent, id="scripted"),
        pytest.param("delegation.yaml", "delegating-agent", delegating_agent, id="delegating"),
        pytest.param("delegation.yaml", "scripted-agent", scripted_agent, id="delegate-child"),
        pytest.param("delegation.yaml", "agent-summary", summary_pipeline, id="summary"),
        pytest.param("text-pipeline.yaml", "text-pipeline", text_pipeline, id="text-pipeline"),
        pytest.param("text-pipeline.yaml", "uppercase-word", uppercase_word, id="fan-out-child"),
    ],
)
def test_yaml_entries_match_their_python_twins(file: str, entry: str, twin: Pipeline) -> None:
    """Same structure, same definition id, same plan as the Python definition."""
    compiled = load_project(PROJECTS / file).get(entry)
    assert compiled.identity == twin.identity
    assert compiled.step_ids == twin.step_ids
    assert compiled.plan().to_dict() == twin.plan().to_dict()


@pytest.fixture
def projects(tmp_path: Path) -> Path:
    """A copy of the shipped projects next to a copy of their python_path root."""
    folder = tmp_path / "projects"
    folder.mkdir()
    for source in PROJECTS.glob("*.yaml"):
        text = source.read_text(encoding="utf-8")
        text = text.replace("python_path: [..]", f"python_path: [{ROOT}]")
        (folder / source.name).write_text(text, encoding="utf-8")
    return folder


def _scripted_id(path: Path) -> str:
    return load_project(path).get("scripted-agent").identity.definition_id


@pytest.mark.parametrize(
    ("old", "new"),
    [
        pytest.param("max_turns: 3", "max_turns: 4", id="limit"),
        pytest.param("max_concurrency: 2}", "max_concurrency: 1}", id="concurrency-limit"),
        pytest.param(
            "implementation_version: scripted-v1",
            "implementation_version: scripted-v2",
            id="implementation-version",
        ),
        pytest.param(
            "result_json_schema: {type: string, description: The final answer text.}",
            "result_json_schema: {type: string, description: The answer.}",
            id="result-descriptor",
        ),
        pytest.param("      count: examples.text:count\n", "", id="tool-removed"),
        pytest.param(
            "input: {schema: examples.text:Question}",
            "input: {schema: {type: object}}",
            id="input-schema",
        ),
    ],
)
def test_behavioural_changes_change_the_definition_id(projects: Path, old: str, new: str) -> None:
    """Limits, descriptors, tools, schemas and implementation_version all feed the id."""
    path = projects / "scripted-agent.yaml"
    before = _scripted_id(path)
    path.write_text(path.read_text(encoding="utf-8").replace(old, new, 1), encoding="utf-8")
    assert _scripted_id(path) != before


def test_a_tool_description_change_changes_the_definition_id(projects: Path) -> None:
    """An inline tool's description is part of the capability the model sees."""
    path = projects / "scripted-agent.yaml"
    text = path.read_text(encoding="utf-8").replace(
        "      count: examples.text:count\n",
        "      count:\n"
        "        run: examples.counting:count_characters\n"
        "        description: Count characters.\n"
        "        input: {schema: builtins:str}\n"
        "        output: {schema: builtins:int}\n",
    )
    (projects / "examples_counting").mkdir()
    (projects / "examples_counting" / "counting.py").write_text(
        "def count_characters(text, ctx):\n    return len(text)\n", encoding="utf-8"
    )
    text = text.replace("examples.counting:", "counting:").replace(
        f"python_path: [{ROOT}]", f"python_path: [{ROOT}, examples_counting]"
    )
    path.write_text(text, encoding="utf-8")
    first = _scripted_id(path)
    path.write_text(text.replace("Count characters.", "Count the characters."), encoding="utf-8")
    assert _scripted_id(path) != first


@pytest.mark.parametrize(
    ("old", "new"),
    [
        pytest.param("    name: Scripted agent\n", "    name: Another name\n", id="agent-name"),
        pytest.param(
            "    description: Counts characters and uppercases words with scripted decisions.\n",
            "    description: Something else entirely.\n",
            id="agent-description",
        ),
        pytest.param(
            "limits: {max_turns: 3, max_calls: 100, max_decisions: 3, max_concurrency: 2}",
            "limits:\n      max_concurrency: 2\n      max_decisions: 3\n"
            "      max_calls: 100\n      max_turns: 3",
            id="reformatted-and-reordered",
        ),
        pytest.param(
            "    tools:\n      uppercase: examples.text:uppercase\n"
            "      count: examples.text:count\n",
            "    tools: {count: examples.text:count, uppercase: examples.text:uppercase}\n",
            id="tools-flow-style",
        ),
        pytest.param(
            "# The scripted recipe",
            "# A comment that changed.\n# The scripted recipe",
            id="comments",
        ),
    ],
)
def test_presentation_changes_keep_the_definition_id(projects: Path, old: str, new: str) -> None:
    """Names, descriptions, formatting, key order and comments never change the id."""
    path = projects / "scripted-agent.yaml"
    before = _scripted_id(path)
    text = path.read_text(encoding="utf-8")
    assert old in text
    path.write_text(text.replace(old, new, 1), encoding="utf-8")
    assert _scripted_id(path) == before


def test_a_reference_path_change_keeps_the_definition_id(projects: Path, tmp_path: Path) -> None:
    """The same callables reached through another module path compile to the same identity."""
    path = projects / "scripted-agent.yaml"
    before = _scripted_id(path)
    alias = tmp_path / "aliases"
    alias.mkdir()
    (alias / "scripted_alias.py").write_text(
        "from examples.scripted_agent import decide as choose, initial_state, reduce\n",
        encoding="utf-8",
    )
    text = path.read_text(encoding="utf-8")
    text = text.replace("decide: examples.scripted_agent:decide", "decide: scripted_alias:choose")
    text = text.replace(f"python_path: [{ROOT}]", f"python_path: [{ROOT}, {alias}]")
    path.write_text(text, encoding="utf-8")
    assert _scripted_id(path) == before


def test_the_identity_is_stable_across_loads() -> None:
    """Loading the same file twice gives equal identities (and structural fingerprints)."""
    first = load_project(PROJECTS / "delegation.yaml").get("delegating-agent").identity
    second = load_project(PROJECTS / "delegation.yaml").get("delegating-agent").identity
    assert first == second
    assert re.fullmatch(r"sha256:[0-9a-f]{64}", first.definition_id)


def test_a_child_change_changes_the_parents_id(projects: Path) -> None:
    """The delegating agent's id covers the identity of the agent it uses as a tool."""
    path = projects / "delegation.yaml"
    before = load_project(path).get("delegating-agent").identity.definition_id
    text = path.read_text(encoding="utf-8")
    marker = "  scripted-agent:\n    name: Scripted agent\n    implementation_version: scripted-v1"
    assert marker in text
    path.write_text(text.replace(marker, marker[:-1] + "2"), encoding="utf-8")
    assert load_project(path).get("delegating-agent").identity.definition_id != before
