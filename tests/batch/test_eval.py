"""``tubeless eval``: cases validated by schemas/cases.schema.json with located errors, every
expectation of DESIGN.md §13, a results table, JUnit XML and exit 0/6."""

from __future__ import annotations

import json
import textwrap
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from tests.fixtures.batch import rows_project
from tests.fixtures.cli import ROOT, tubeless
from tubeless.project import metaschema

CASES = """\
    version: 1
    python_path: [.]
    cases:
      - id: exact
        input: {n: 3}
        expect: {result: {n: 3, square: 9}, max_turns: 2, max_calls: 1, tools: {square: 1}}
      - id: contains
        input: {n: 4}
        expect: {result_contains: {square: 16}}
      - id: wrong-result
        input: {n: 5}
        expect: {result: {n: 5, square: 24}}
      - id: too-many-calls
        input: {n: 6}
        expect: {max_calls: 0, tools: {square: 2}}
      - id: rejected
        input: {m: 1}
        expect: {error_code: TUBELESS_OPTIONS_VALIDATION_FAILED}
      - id: unexpected-failure
        input: {n: -2}
      - id: checked
        input: {n: 7}
        expect: {check: "checks:odd_square"}
    """

CHECKS = """\
    def odd_square(result, summary):
        assert result["square"] % 2 == 0, f"square {result['square']} is odd"
    """


def _project_and_cases(tmp_path: Path, cases: str = CASES) -> tuple[Path, Path]:
    project = rows_project(tmp_path)
    (tmp_path / "checks.py").write_text(textwrap.dedent(CHECKS), encoding="utf-8")
    path = tmp_path / "cases.yaml"
    path.write_text(textwrap.dedent(cases), encoding="utf-8")
    return project, path


def test_cases_pass_and_fail_with_a_table_and_junit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    project, cases = _project_and_cases(tmp_path)
    junit = tmp_path / "report.xml"
    outcome = tubeless(capsys, "eval", project, cases, "--junit", junit, "-c", "2")
    assert outcome.code == 6
    table = outcome.out.splitlines()
    verdicts = {line.split()[0]: line.split()[1] for line in table[1:-1] if line[:1] != " "}
    assert verdicts == {
        "exact": "pass",
        "contains": "pass",
        "wrong-result": "FAIL",
        "too-many-calls": "FAIL",
        "rejected": "pass",
        "unexpected-failure": "FAIL",
        "checked": "FAIL",
    }
    assert table[-1] == "3 passed, 4 failed"
    assert "max_calls: expected at most 0, got 1" in outcome.out
    assert "tools.square: expected 2 calls, got 1" in outcome.out
    assert "check: square 49 is odd" in outcome.out
    suite = ET.parse(junit).getroot().find("testsuite")
    assert suite is not None
    assert (suite.get("name"), suite.get("tests"), suite.get("failures")) == ("cases", "7", "4")
    failures = {case.get("name"): case.find("failure") for case in suite.iter("testcase")}
    assert failures["exact"] is None
    failed = failures["unexpected-failure"]
    assert failed is not None
    assert failed.get("message", "").startswith("status: expected completed, got failed (")
    assert failures["wrong-result"] is not None
    assert (
        failures["wrong-result"].get("message") == "result: differs at /square: expected 24, got 25"
    )


def test_the_shipped_cases_pass(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    junit = tmp_path / "report.xml"
    outcome = tubeless(
        capsys,
        "eval",
        ROOT / "projects/scripted-agent.yaml",
        ROOT / "projects/evals/scripted-agent.cases.yaml",
        "--junit",
        junit,
    )
    assert (outcome.code, outcome.out.splitlines()[-1]) == (0, "4 passed, 0 failed")
    assert ET.parse(junit).getroot().get("failures") == "0"


def test_the_shipped_dataset_runs(capsys: pytest.CaptureFixture[str]) -> None:
    outcome = tubeless(
        capsys,
        "batch",
        ROOT / "projects/scripted-agent.yaml",
        ROOT / "projects/data/questions.jsonl",
        "-c",
        "4",
    )
    rows = [json.loads(line) for line in outcome.out.splitlines()]
    assert (outcome.code, len(rows)) == (0, 8)
    assert rows[0]["result"] == {"answer": "14 characters; HELLO; TUBELESS"}


@pytest.mark.parametrize(
    "body, line",
    [
        pytest.param(
            "version: 1\ncases:\n  - id: a\n    expect: {max_turn: 2}\n",
            "4:14 /cases/0/expect/max_turn: unknown key 'max_turn'; did you mean 'max_turns'?",
            id="key",
        ),
        pytest.param(
            "version: 1\ncases:\n  - id: a\n    expect: {max_turns: -1}\n",
            "4:25 /cases/0/expect/max_turns: expected an integer >= 0, found -1",
            id="bound",
        ),
        pytest.param(
            "version: 1\ncases:\n  - id: a\n  - id: a\n",
            "4:9 /cases/1/id: duplicate case id 'a'",
            id="duplicate",
        ),
    ],
)
def test_an_invalid_cases_file_is_reported_with_line_and_column(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], body: str, line: str
) -> None:
    project, cases = _project_and_cases(tmp_path, body)
    outcome = tubeless(capsys, "eval", project, cases)
    assert outcome.code == 4
    assert outcome.err.splitlines()[0] == f"error: {cases}:{line}"


def test_the_committed_cases_schema_matches_the_models() -> None:
    committed = (ROOT / "schemas" / "cases.schema.json").read_text(encoding="utf-8")
    assert committed == metaschema.render(metaschema.generate_cases())
