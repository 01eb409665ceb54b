"""YAML ``approval:`` and ``limits.on_limit`` compile to what the Python API builds (same
definition id), and a bad approval reference is located (DESIGN §5, §12)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tubeless import define_agent, define_tool
from tubeless.errors import DocumentError, ReferenceResolutionError
from tubeless.project import load_project

ROOT = Path(__file__).resolve().parents[2]

PROJECT = """\
version: 1
project: {id: gated}
python_path: [REPO]
agents:
  gated:
    input: {schema: {type: object}}
    result: {schema: {}}
    initial_state: examples.approvals:initial_state
    decide: examples.approvals:decide
    limits: {on_limit: finish}
    tools:
      draft:
        run: examples.approvals:draft
        description: Draft a note from its title.
        input: {schema: {type: string}}
        output: {schema: {type: string}}
        approval: APPROVAL
"""


def _write(tmp_path: Path, approval: str) -> Path:
    path = tmp_path / "gated.yaml"
    path.write_text(PROJECT.replace("REPO", str(ROOT)).replace("APPROVAL", approval), "utf-8")
    return path


def _python(approval: Any) -> Any:
    from examples import approvals
    from tubeless import Schema

    return define_agent(
        id="gated",
        input_schema=Schema.json({"type": "object"}),
        result_schema=Schema.json({}),
        initial_state=approvals.initial_state,
        decide=approvals.decide,
        limits={"on_limit": "finish"},
        tools={
            "draft": define_tool(
                description="Draft a note from its title.",
                input_schema=Schema.json({"type": "string"}),
                output_schema=Schema.json({"type": "string"}),
                run=approvals.draft,
                approval=approval,
            )
        },
    )


@pytest.mark.parametrize(
    ("yaml_value", "python_value"),
    [
        pytest.param("always", "always", id="always"),
        pytest.param("never", "never", id="never"),
        pytest.param("examples.approvals:outside_example_com", "predicate", id="predicate"),
    ],
)
def test_yaml_approval_gives_the_python_definition_id(
    tmp_path: Path, yaml_value: str, python_value: str
) -> None:
    from examples.approvals import outside_example_com

    agent = load_project(_write(tmp_path, yaml_value)).entry()
    expected = _python(outside_example_com if python_value == "predicate" else python_value)

    assert agent.identity == expected.identity


def test_an_approval_reference_that_does_not_resolve_is_located(tmp_path: Path) -> None:
    with pytest.raises(ReferenceResolutionError) as caught:
        load_project(_write(tmp_path, "examples.approvals:nobody"))
    assert "/agents/gated/tools/draft/approval" in str(caught.value)


def test_an_unknown_on_limit_is_a_document_error(tmp_path: Path) -> None:
    path = _write(tmp_path, "always")
    path.write_text(path.read_text("utf-8").replace("on_limit: finish", "on_limit: stop"), "utf-8")
    with pytest.raises(DocumentError) as caught:
        load_project(path)
    assert "/agents/gated/limits/on_limit" in str(caught.value)


def test_the_shipped_project_is_the_python_example_agent() -> None:
    from examples.approvals import approvals_agent

    shipped = load_project(ROOT / "projects" / "approvals.yaml").entry()

    assert shipped.identity == approvals_agent.identity


def test_the_python_example_runs_as_a_module(capsys: pytest.CaptureFixture[str]) -> None:
    from examples.approvals import main

    assert main(["--to", "ops@elsewhere.org", "--deny-all"]) == 0
    assert capsys.readouterr().out == (
        '{"drafted": "RELEASE NOTES", "published": false, "mailed": false, '
        '"denied": ["publish", "mail"]}\n'
    )
