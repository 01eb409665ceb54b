"""Plain scalars are read by the YAML 1.2 core schema, as editors read them (issue 15), and the
forms YAML 1.1 reads differently are refused with a located error that says how to write them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tubeless.errors import DocumentError
from tubeless.project import check_project
from tubeless.project._yaml import parse_document
from tubeless.project._yaml12 import Ambiguous, core_scalar


def _data(text: str) -> Any:
    return parse_document(text, file="p.yaml").data


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("x: 0o10\n", {"x": 8}, id="yaml-1.2-octal"),
        pytest.param("x: 0x1F\n", {"x": 31}, id="hex"),
        pytest.param("x: 1e3\n", {"x": 1000.0}, id="exponent-without-a-dot"),
        pytest.param("x: 10\n", {"x": 10}, id="decimal"),
        pytest.param("x: 0\n", {"x": 0}, id="zero"),
        pytest.param("x: -1.5\n", {"x": -1.5}, id="float"),
        pytest.param("x: TRUE\n", {"x": True}, id="true"),
        pytest.param("x: ~\n", {"x": None}, id="null"),
        pytest.param("x: '010'\n", {"x": "010"}, id="quoted-leading-zero"),
        pytest.param("x: 'yes'\n", {"x": "yes"}, id="quoted-yes"),
        pytest.param('x: "1:30"\n', {"x": "1:30"}, id="quoted-sexagesimal"),
        pytest.param("'on': a\n", {"on": "a"}, id="quoted-key"),
        pytest.param("x: y\ny: n\n", {"x": "y", "y": "n"}, id="one-letter-words-are-text"),
        pytest.param("x: !!int 10\n", {"x": 10}, id="explicit-tag"),
    ],
)
def test_plain_scalars_follow_yaml_1_2(text: str, expected: Any) -> None:
    """What an editor shows is what tubeless reads."""
    assert _data(text) == expected


@pytest.mark.parametrize(
    ("text", "column", "message"),
    [
        pytest.param(
            "max_calls: 010\n",
            12,
            "'010' is octal in YAML 1.1 but decimal in YAML 1.2: write it without the "
            "leading zero (or 0o... for octal), or quote it ('010') for text",
            id="leading-zero-octal",
        ),
        pytest.param(
            "max_turns: 1:30\n",
            12,
            "'1:30' is a base-60 number in YAML 1.1 but a string in YAML 1.2: quote it "
            "('1:30') for text, or write the number itself",
            id="sexagesimal",
        ),
        pytest.param(
            "name: yes\n",
            7,
            "'yes' is a boolean in YAML 1.1 but a string in YAML 1.2 (what editors "
            "read): write true or false, or quote it ('yes') for text",
            id="yes",
        ),
        pytest.param("name: Off\n", 7, "'Off' is a boolean in YAML 1.1", id="off"),
        pytest.param("on: a\n", 1, "'on' is a boolean in YAML 1.1", id="key-on"),
        pytest.param("x: 0b101\n", 4, "'0b101' is a binary number in YAML 1.1", id="binary"),
        pytest.param(
            "x: 1_000\n",
            4,
            "'1_000' is a number in YAML 1.1 but a string in YAML 1.2",
            id="underscores",
        ),
    ],
)
def test_forms_yaml_1_1_reads_differently_are_refused_where_they_stand(
    text: str, column: int, message: str
) -> None:
    """Each refusal names the line and column and how to write the value unambiguously."""
    with pytest.raises(DocumentError) as caught:
        _data(text)
    (issue,) = caught.value.issues
    assert (issue.line, issue.column) == (1, column)
    assert issue.message.startswith(message)


@given(st.integers(min_value=-(10**30), max_value=10**30))
def test_every_decimal_integer_reads_as_itself(number: int) -> None:
    """Plain decimal integers (no leading zero) are integers in both versions."""
    assert core_scalar(str(number)) == number


@given(st.floats(allow_nan=False, allow_infinity=False))
def test_every_finite_float_repr_reads_as_itself(number: float) -> None:
    """Python's shortest float form is a YAML 1.2 float of the same value."""
    text = repr(number)
    try:
        assert core_scalar(text) == number
    except Ambiguous:  # e.g. 1e-05 has a leading-zero exponent only, never a leading-zero number
        raise AssertionError(text) from None


@given(st.text(alphabet=st.characters(codec="utf-8"), max_size=20))
def test_core_scalar_either_reads_or_explains(text: str) -> None:
    """Any plain text gives a value, or an Ambiguous error whose message quotes it."""
    try:
        core_scalar(text)
    except Ambiguous as exc:
        assert repr(text) in str(exc)


# -- refusals join the other problems (issue 28, item 15) ---------------------------------------
MIXED = """\
version: 1
project: {id: demo}
agents:
  helper:
    name: yes
    input: {schema: examples.text:Question}
    result: {schema: {type: string}}
    initial_state: examples.scripted_agent:initial_state
    decide: examples.scripted_agent:decide
    limits: {max_turns: 0, max_calls: 010}
    tool: {}
    tools:
      on: examples.text:count
      count: examples.text.count
"""
MIXED_ISSUES = [
    (5, 11, "/agents/helper/name", "'yes' is a boolean in YAML 1.1 but a string in YAML 1.2"),
    (10, 25, "/agents/helper/limits/max_turns", "expected an integer >= 1, found 0"),
    (10, 39, "/agents/helper/limits/max_calls", "'010' is octal in YAML 1.1"),
    (11, 5, "/agents/helper/tool", "unknown key 'tool'; did you mean 'tools'?"),
    (13, 7, "/agents/helper/tools", "'on' is a boolean in YAML 1.1"),
    (14, 14, "/agents/helper/tools/count", "expected a string matching 'package.module:attr"),
]


def test_yaml_1_1_refusals_are_reported_with_every_other_problem_in_file_order(
    tmp_path: Path,
) -> None:
    """A refused value is not judged again by the meta-schema (no "found null" for it)."""
    path = tmp_path / "p.yaml"
    path.write_text(MIXED, encoding="utf-8")

    with pytest.raises(DocumentError) as caught:
        check_project(path)

    found = [(i.line, i.column, i.pointer, i.message) for i in caught.value.issues]
    assert len(found) == len(MIXED_ISSUES), found
    for (line, column, pointer, message), expected in zip(found, MIXED_ISSUES, strict=True):
        assert (line, column, pointer) == expected[:3]
        assert message.startswith(expected[3]), message
    assert str(caught.value).endswith(" (and 5 more problems)")


def test_a_refused_key_leaves_its_mapping_s_other_entries_judged(tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    path.write_text(
        "version: 1\nproject: {id: demo}\nagents:\n  yes: {}\n  helper: {decide: 1}\n",
        encoding="utf-8",
    )

    with pytest.raises(DocumentError) as caught:
        check_project(path)

    pointers = [(i.line, i.pointer) for i in caught.value.issues]
    assert pointers[0] == (4, "/agents")
    assert (5, "/agents/helper") in pointers  # its missing required keys
    assert (5, "/agents/helper/decide") in pointers
