"""Parsed decisions are the very objects their dataclasses' constructors build."""

from __future__ import annotations

import dataclasses

import pytest

from tubeless.agent._decisions import Call, Continue, Finish, parse_decision


def test_a_finish_is_the_constructors_finish() -> None:
    parsed = parse_decision({"kind": "finish", "result": {"answer": 42}})
    assert type(parsed) is Finish
    assert parsed == Finish({"answer": 42})
    assert repr(parsed) == repr(Finish({"answer": 42}))
    assert hash(parse_decision({"kind": "finish", "result": 1})) == hash(Finish(1))
    with pytest.raises(dataclasses.FrozenInstanceError):
        parsed.result = None  # type: ignore[misc]


def test_a_continue_is_the_constructors_continue() -> None:
    parsed = parse_decision(
        {"kind": "continue", "calls": [{"id": "c1", "tool": "upper", "input": "abc"}]}
    )
    expected = Continue((Call("c1", "upper", "abc"),))
    assert type(parsed) is Continue
    assert parsed == expected
    assert repr(parsed) == repr(expected)
    assert hash(parsed) == hash(expected)
    with pytest.raises(dataclasses.FrozenInstanceError):
        parsed.calls = ()  # type: ignore[misc]
