"""Schema patterns that always end: a bounded engine, one budget per validation.

A ``pattern`` that backtracks catastrophically on a value (``^(a|a)*$`` against forty ``a`` and
a ``!``) must end validation with an issue naming the property, never hang it; every ordinary
pattern must still agree with :func:`re.search`, which is what JSON Schema validators use.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tubeless import Schema
from tubeless.schema import SchemaValidationError

ROOT = Path(__file__).resolve().parents[1]

#: Catastrophic for a backtracking engine (the bounded one needs its timeout for these).
HOSTILE = r"^(a|a)*$"
HOSTILE_VALUE = "a" * 41 + "!"

SAFE_PATTERNS = [
    r"^[a-z]+(-[a-z]+)*$",
    r"^\d{3}-\d{4}$",
    r"ab",
    r"^$",
    r"a|b",
    r"^\s*\S",
    r"[^x]y?$",
    r"^(?:ab)+c?",
    r"\bword\b",
    r"^.{2,5}$",
    r"é+",
    r"a$",
]


def _issues(schema: dict[str, Any], value: Any) -> list[tuple[tuple[Any, ...], str]]:
    try:
        Schema.json(schema).validate(value)
    except SchemaValidationError as err:
        return [(issue.path, issue.message) for issue in err.issues]
    return []


@settings(max_examples=300, deadline=None)
@given(
    pattern=st.sampled_from(SAFE_PATTERNS),
    text=st.text(alphabet="abcdxyz-é \n0123456789w", max_size=12)
    | st.sampled_from(["word", "a word b", "abc", "123-4567", "ab-cd", "é", "aa"]),
)
def test_patterns_agree_with_re_search(pattern: str, text: str) -> None:
    expected = re.search(pattern, text) is not None
    assert (_issues({"type": "string", "pattern": pattern}, text) == []) is expected
    keyed = {"type": "object", "patternProperties": {pattern: {"type": "integer"}}}
    assert (_issues(keyed, {text: "x"}) == []) is not expected
    closed = {"type": "object", "patternProperties": {pattern: True}, "additionalProperties": False}
    assert (_issues(closed, {text: 1}) == []) is expected
    unevaluated = {"type": "object", "patternProperties": {pattern: True}}
    unevaluated["unevaluatedProperties"] = False
    assert (_issues(unevaluated, {text: 1}) == []) is expected


def test_a_value_that_matches_too_slowly_is_an_issue_naming_the_property() -> None:
    schema = {"type": "object", "properties": {"name": {"type": "string", "pattern": HOSTILE}}}

    issues = _issues(schema, {"name": HOSTILE_VALUE})

    assert issues == [
        (
            ("name",),
            f"the value could not be checked: pattern {HOSTILE!r} did not finish matching "
            "within the 1 s that pattern matching has per validation",
        )
    ]
    assert HOSTILE_VALUE not in repr(issues)


def test_one_budget_per_validation_refuses_every_later_match_at_once() -> None:
    schema = {"type": "array", "items": {"type": "string", "pattern": HOSTILE}}

    issues = _issues(schema, [HOSTILE_VALUE] * 50)

    assert len(issues) == 50
    assert all("could not be checked" in message for _, message in issues)
    # The budget is per validation: the next one starts afresh and finishes.
    assert _issues(schema, ["aaaa"]) == []


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "object", "patternProperties": {HOSTILE: {"type": "integer"}}},
        {"type": "object", "patternProperties": {HOSTILE: True}, "additionalProperties": False},
        {"type": "object", "patternProperties": {HOSTILE: True}, "unevaluatedProperties": False},
        {"type": "object", "propertyNames": {"pattern": HOSTILE}},
    ],
    ids=["patternProperties", "additionalProperties", "unevaluatedProperties", "propertyNames"],
)
def test_a_property_name_that_matches_too_slowly_is_an_issue(schema: dict[str, Any]) -> None:
    issues = _issues(schema, {HOSTILE_VALUE: 1})

    assert len(issues) == 1
    path, message = issues[0]
    assert "could not be checked: pattern" in message
    assert path in ((HOSTILE_VALUE,), ())  # propertyNames reports at the object itself
    assert HOSTILE_VALUE not in message


PROJECT = """\
version: 1
project: {id: patterns}
python_path: [.]
pipelines:
  greet:
    input:
      schema:
        type: object
        properties:
          name: {type: string, pattern: "PATTERN"}
        required: [name]
    steps:
      - {id: hello, run: "patterns_steps:hello"}
"""


@pytest.mark.parametrize("pattern", [r"^(a+)+$", pytest.param(HOSTILE, marks=pytest.mark.slow)])
def test_the_cli_ends_a_hostile_pattern_with_an_input_error_naming_the_property(
    tmp_path: Path, pattern: str
) -> None:
    (tmp_path / "patterns_steps.py").write_text(
        "def hello(inputs, ctx):\n    return 'hello'\n", encoding="utf-8"
    )
    project = tmp_path / "patterns.yaml"
    project.write_text(PROJECT.replace("PATTERN", pattern.replace("\\", "\\\\")), "utf-8")
    paths = [str(ROOT), os.environ.get("PYTHONPATH", "")]

    done = subprocess.run(
        [sys.executable, "-m", "tubeless", "run", str(project), "-q", "--name", HOSTILE_VALUE],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(paths)},
        timeout=120,  # a hang guard: the unbounded engine takes hours here
        stdin=subprocess.DEVNULL,
    )

    assert done.returncode == 4, done.stderr
    assert done.stderr.startswith(
        "error: TUBELESS_OPTIONS_VALIDATION_FAILED: input rejected: name: "
    ), done.stderr
    assert repr(pattern) in done.stderr
    assert HOSTILE_VALUE not in done.stderr
