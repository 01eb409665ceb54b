"""``tubeless eval --record DIR / --replay DIR`` and a case's ``cassette:``: cases replay their
recorded decisions without a model, and a case whose replay diverges fails with the divergence
in the table and the JUnit report, whatever else it expects."""

from __future__ import annotations

import textwrap
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from tests.fixtures.batch import rows_project
from tests.fixtures.cli import tubeless

CASES = """\
    version: 1
    cases:
      - id: three
        input: {n: 3}
        expect: {result: {n: 3, square: 9}}
      - id: four
        input: {n: 4}
        expect: {status: completed}
    """

DIVERGED = (
    "TUBELESS_REPLAY_DIVERGED: replay diverged at route 'rows' turn 1 call 'c1': "
    "the outcome differs at /value"
)


def _no_model(project: Path) -> None:
    """Make the project's decide fail: a replay must never call it."""
    helpers = next(project.parent.glob("helpers_*.py"))
    helpers.write_text(
        helpers.read_text().replace(
            "def decide(state, ctx):",
            "def decide(state, ctx):\n    raise RuntimeError('no model')"
            "\n\n\ndef _unused(state, ctx):",
        )
    )


@pytest.fixture
def recorded(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[Path, Path, Path]:
    project = rows_project(tmp_path)
    cases = tmp_path / "cases.yaml"
    cases.write_text(textwrap.dedent(CASES), encoding="utf-8")
    folder = tmp_path / "cassettes"
    outcome = tubeless(capsys, "eval", project, cases, "--record", folder)
    assert outcome.code == 0, outcome.out + outcome.err
    assert sorted(p.name for p in folder.iterdir()) == [
        "four.cassette.jsonl",
        "three.cassette.jsonl",
    ]
    _no_model(project)
    return project, cases, folder


def test_recorded_cases_replay_without_a_model(
    recorded: tuple[Path, Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    project, cases, folder = recorded
    outcome = tubeless(capsys, "eval", project, cases, "--replay", folder)
    assert outcome.code == 0, outcome.out + outcome.err
    assert outcome.out.splitlines()[-1] == "2 passed, 0 failed"


def test_a_diverged_case_fails_with_the_divergence_in_the_table_and_junit(
    recorded: tuple[Path, Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    project, cases, folder = recorded
    cassette = folder / "four.cassette.jsonl"
    cassette.write_text(cassette.read_text().replace('"input":4}', '"input":5}'))
    junit = folder.parent / "report.xml"
    outcome = tubeless(capsys, "eval", project, cases, "--replay", folder, "--junit", junit)
    assert outcome.code == 6
    four = next(line for line in outcome.out.splitlines() if line.startswith("four"))
    assert "FAIL" in four and four.endswith(DIVERGED)
    failure = ET.parse(junit).getroot().find("./testsuite/testcase[@name='four']/failure")
    assert failure is not None and failure.get("message") == DIVERGED


def test_a_case_names_its_cassette_relative_to_the_cases_file(
    recorded: tuple[Path, Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """A divergence fails a case even when it expects a failure."""
    project, _, folder = recorded
    (folder / "four.cassette.jsonl").write_text(
        (folder / "four.cassette.jsonl").read_text().replace('"input":4}', '"input":5}')
    )
    sub = folder.parent / "evals"
    sub.mkdir()
    cases = sub / "named.cases.yaml"
    cases.write_text(
        textwrap.dedent("""\
        version: 1
        cases:
          - id: three-again
            input: {n: 3}
            cassette: ../cassettes/three.cassette.jsonl
            expect: {result: {n: 3, square: 9}}
          - id: four-again
            input: {n: 4}
            cassette: ../cassettes/four.cassette.jsonl
            expect: {status: failed}
        """),
        encoding="utf-8",
    )
    outcome = tubeless(capsys, "eval", project, cases)
    assert outcome.code == 6
    lines = outcome.out.splitlines()
    assert next(line for line in lines if line.startswith("three-again")).split()[1] == "pass"
    assert next(line for line in lines if line.startswith("four-again")).endswith(DIVERGED)


def test_a_case_cassette_must_be_a_nonblank_path(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    project = rows_project(tmp_path)
    cases = tmp_path / "cases.yaml"
    cases.write_text("version: 1\ncases:\n  - {id: a, input: {n: 1}, cassette: ''}\n")
    outcome = tubeless(capsys, "eval", project, cases)
    assert outcome.code == 4
    assert outcome.err.startswith(f"error: {cases}:3:")
    assert "/cases/0/cassette" in outcome.err


def test_the_shipped_openai_cases_replay_without_a_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """projects/evals/openai-agent.cases.yaml replays the recipe's cassette: no key, and a
    base URL nothing listens on."""
    from tests.fixtures.cli import ROOT

    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    junit = tmp_path / "report.xml"
    outcome = tubeless(
        capsys,
        "eval",
        ROOT / "projects/openai-agent.yaml",
        ROOT / "projects/evals/openai-agent.cases.yaml",
        "--junit",
        junit,
    )
    assert outcome.code == 0, outcome.out + outcome.err
    assert outcome.out.splitlines()[-1] == "1 passed, 0 failed"
    assert ET.parse(junit).getroot().get("failures") == "0"
