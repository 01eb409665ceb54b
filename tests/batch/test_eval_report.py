"""What ``tubeless eval`` reports about a case that did not pass: the expected and actual values
at the first difference (bounded, hidden by ``--hide-values``), failures apart from errors, and
JUnit XML that an XML parser reads whatever the messages, values and names hold."""

from __future__ import annotations

import textwrap
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from tests.fixtures.batch import rows_project
from tests.fixtures.cli import tubeless
from tests.fixtures.processes import write_project

PROJECT = """\
    version: 1
    project: {id: echo}
    python_path: [.]
    agents:
      echo:
        input:
          schema: {type: object, properties: {text: {type: string}}, required: [text]}
        result: {schema: {}}
        initial_state: "helpers:initial"
        decide: "helpers:decide"
    """

MODULE = """\
    def initial(raw):
        return {"text": raw["text"]}


    def decide(state, ctx):
        text = state["text"]
        items = [{"name": "a"}, {"name": text}]
        return {"kind": "finish", "result": {"echo": text, "items": items}}


    def assertion(result, summary):
        raise AssertionError("bad \\x01 \\x1b[31mred\\x1b[0m \\ud800 \\ufffe end")


    def crash(result, summary):
        raise KeyError("gone \\x1b")


    def fine(result, summary):
        pass
    """


def _eval(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    cases: str,
    *args: str,
    name: str = "cases.yaml",
) -> tuple[int, list[str], ET.Element]:
    """Run ``cases`` on the echo project: exit code, table lines and the JUnit root."""
    project = write_project(tmp_path, PROJECT, MODULE)
    path = tmp_path / name
    path.write_text(textwrap.dedent(cases).replace("helpers:", f"{project_module(tmp_path)}:"))
    junit = tmp_path / "report.xml"
    outcome = tubeless(capsys, "eval", project, path, "--junit", junit, *args)
    assert junit.exists(), outcome.out + outcome.err
    return outcome.code, outcome.out.splitlines(), ET.parse(junit).getroot()


def project_module(tmp_path: Path) -> str:
    return next(tmp_path.glob("helpers_*.py")).stem


def _line(table: list[str], case: str) -> list[str]:
    """The case's table lines: its first line's detail, then its further details."""
    start = next(i for i, line in enumerate(table) if line.split()[:1] == [case])
    lines = [table[start]]
    for line in table[start + 1 : -1]:
        if line[:1] != " ":
            break
        lines.append(line)
    return [line.split("  ")[-1].strip() for line in lines]


def _testcase(root: ET.Element, case: str) -> ET.Element:
    found = root.find(f"./testsuite/testcase[@name='{case}']")
    assert found is not None
    return found


VALUES = """\
    version: 1
    cases:
      - id: nested
        input: {text: b}
        expect: {result: {echo: b, items: [{name: a}, {name: c}]}}
      - id: missing-key
        input: {text: b}
        expect: {result_contains: {items: [{name: a}, {name: b}], extra: {deep: 1}}}
      - id: substring
        input: {text: hello}
        expect: {result_contains: {echo: bye}}
      - id: slash-key
        input: {text: b}
        expect: {result: {echo: b, items: [{name: a}, {name: b}], "a/b~c": 1}}
      - id: long
        input: {text: "X300"}
        expect: {result_contains: {echo: "Y300"}}
    """.replace("X300", "x" * 300).replace("Y300", "y" * 300)

SHOWN = {
    "nested": 'result: differs at /items/1/name: expected "c", got "b"',
    "missing-key": 'result_contains: differs at /extra: expected {"deep": 1}, got (absent)',
    "substring": 'result_contains: differs at /echo: expected "bye", got "hello"',
    "slash-key": "result: differs at /a~1b~0c: expected 1, got (absent)",
    "long": 'result_contains: differs at /echo: expected "'
    + "y" * 199
    + '…, got "'
    + "x" * 199
    + "…",
}


def test_a_failed_result_shows_expected_and_actual_at_the_first_difference(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """In the table and as the JUnit failure; each value bounded to 200 characters of JSON."""
    code, table, root = _eval(tmp_path, capsys, VALUES)
    assert code == 6
    for case, shown in SHOWN.items():
        assert _line(table, case) == [shown], case
        failure = _testcase(root, case).find("failure")
        assert failure is not None
        assert (failure.get("message"), failure.text) == (shown, shown)


def test_hide_values_keeps_the_pointer_and_drops_the_values(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, table, root = _eval(tmp_path, capsys, VALUES, "--hide-values")
    assert code == 6
    for case, shown in SHOWN.items():
        hidden = shown.split(": expected ")[0]
        assert _line(table, case) == [hidden], case
        failure = _testcase(root, case).find("failure")
        assert failure is not None
        assert (failure.get("message"), failure.text) == (hidden, hidden)
    text = "\n".join(table) + ET.tostring(root, encoding="unicode")
    assert "hello" not in text and "xxx" not in text and "expected" not in text


def test_a_check_exception_is_an_error_and_an_assertion_a_failure(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """DESIGN.md §24: AssertionError or an unmet expectation is a <failure>; any other exception
    in a check is an <error>, counted in ``errors`` and not in ``failures``."""
    cases = """\
        version: 1
        python_path: [.]
        cases:
          - id: passes
            input: {text: a}
            expect: {check: "helpers:fine"}
          - id: asserts
            input: {text: a}
            expect: {check: "helpers:assertion"}
          - id: crashes
            input: {text: a}
            expect: {check: "helpers:crash", result_contains: {echo: b}}
          - id: wrong-status
            input: {text: a}
            expect: {status: failed}
        """
    code, table, root = _eval(tmp_path, capsys, cases)
    assert code == 6
    verdicts = {line.split()[0]: line.split()[1] for line in table[1:-1] if line[:1] != " "}
    assert verdicts == {
        "passes": "pass",
        "asserts": "FAIL",
        "crashes": "ERROR",
        "wrong-status": "FAIL",
    }
    assert table[-1] == "1 passed, 2 failed, 1 error"
    assert _line(table, "crashes") == [
        "check raised KeyError: 'gone \\x1b'",
        'result_contains: differs at /echo: expected "b", got "a"',
    ]
    suite = root.find("testsuite")
    assert suite is not None
    counts = [(e.get("tests"), e.get("failures"), e.get("errors")) for e in (root, suite)]
    assert counts == [("4", "2", "1")] * 2
    crashed = _testcase(root, "crashes")
    assert crashed.find("failure") is None
    error = crashed.find("error")
    assert error is not None
    assert (error.get("type"), error.get("message")) == (
        "KeyError",
        "check raised KeyError: 'gone \\x1b'",
    )
    assert error.text == (
        "check raised KeyError: 'gone \\x1b'\n"
        'result_contains: differs at /echo: expected "b", got "a"'
    )
    failure = _testcase(root, "wrong-status").find("failure")
    assert failure is not None
    assert (failure.get("type"), failure.get("message")) == (
        "expectation",
        "status: expected failed, got completed",
    )
    assert _testcase(root, "passes").find("failure") is None
    assert _testcase(root, "passes").find("error") is None


def test_a_worker_that_dies_is_an_error_of_the_harness(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The case's run never finished, so no expectation was judged; a run that failed where
    success was expected stays a failure."""
    project = rows_project(tmp_path)
    cases = tmp_path / "cases.yaml"
    cases.write_text(
        textwrap.dedent("""\
        version: 1
        cases:
          - {id: fine, input: {n: 2}, expect: {result: {n: 2, square: 4}}}
          - {id: dies, input: {n: -1}, expect: {result: {n: -1, square: 1}}}
          - {id: fails, input: {n: "x"}}
        """)
    )
    junit = tmp_path / "report.xml"
    outcome = tubeless(capsys, "eval", project, cases, "--engine", "process", "--junit", junit)
    assert outcome.code == 6
    table = outcome.out.splitlines()
    assert table[-1] == "1 passed, 1 failed, 1 error"
    assert _line(table, "dies")[0].startswith(
        "TUBELESS_BATCH_WORKER_DIED: the worker process running the row died"
    )
    assert _line(table, "fails")[0].startswith(
        "status: expected completed, got failed (TUBELESS_OPTIONS_VALIDATION_FAILED: "
    )
    root = ET.parse(junit).getroot()
    error = _testcase(root, "dies").find("error")
    assert error is not None and error.get("type") == "TUBELESS_BATCH_WORKER_DIED"
    assert _testcase(root, "fails").find("failure") is not None
    assert root.get("errors") == "1" and root.get("failures") == "1"


CONTROLS = "\x01\x1b[31m\x7f\x85\u202e\ufffe\uffff\U0001f600"


def test_junit_is_well_formed_whatever_messages_values_and_names_hold(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Characters XML 1.0 forbids (controls, ESC, lone surrogates, U+FFFE) reach the report as
    visible escapes; the table on stdout holds no control character either."""
    cases = """\
        version: 1
        python_path: [.]
        cases:
          - id: controls
            input: {text: "a\\x01\\e\\ud800"}
            expect:
              check: "helpers:assertion"
              result: {echo: "b\\x02\\e[0m\\udfff", items: []}
        """
    code, table, root = _eval(tmp_path, capsys, cases, name=f"cases{CONTROLS}.yaml")
    assert code == 6
    text = "\n".join(table)
    assert not set(text) & set("\x01\x02\x1b\x7f\x85\u202e\ud800\udfff\ufffe\uffff")
    assert _line(table, "controls") == [
        'result: differs at /echo: expected "b\\u0002\\u001b[0m\\udfff", '
        'got "a\\u0001\\u001b\\ud800"',
        "check: bad \\x01 \\x1b[31mred\\x1b[0m \\ud800 \\ufffe end",
    ]
    suite = root.find("testsuite")
    assert suite is not None
    assert suite.get("name") == "cases\\x01\\x1b[31m\x7f\x85\u202e\\ufffe\\uffff\U0001f600"
    failure = _testcase(root, "controls").find("failure")
    assert failure is not None
    assert failure.get("message") == _line(table, "controls")[0]
    assert failure.text is not None
    assert failure.text.splitlines() == _line(table, "controls")


def test_run_eval_gives_findings_with_values_and_verdicts(tmp_path: Path) -> None:
    """The Python API: each result's findings carry the bounded values the CLI shows."""
    import asyncio

    from tubeless.batch import Finding, run_eval

    project = write_project(tmp_path, PROJECT, MODULE)
    cases = tmp_path / "cases.yaml"
    cases.write_text(
        textwrap.dedent("""\
        version: 1
        python_path: [.]
        cases:
          - {id: ok, input: {text: a}, expect: {result_contains: {echo: a}}}
          - {id: differs, input: {text: a}, expect: {result: {echo: b}}}
          - {id: raises, input: {text: a}, expect: {check: "helpers:crash"}}
        """).replace("helpers:", f"{project_module(tmp_path)}:")
    )
    results = asyncio.run(run_eval(project, cases))
    assert [(r.id, r.verdict, r.passed) for r in results] == [
        ("ok", "pass", True),
        ("differs", "fail", False),
        ("raises", "error", False),
    ]
    assert results[1].findings == (
        Finding(message="result: differs at /echo", expected='"b"', actual='"a"'),
    )
    assert results[1].failures == ('result: differs at /echo: expected "b", got "a"',)
    assert results[2].errors == ("check raised KeyError: 'gone \\x1b'",)
    assert results[2].findings[0].type == "KeyError"
