"""The batch driver's cheap row factory makes the same row as ``InputRow``'s constructor."""

from __future__ import annotations

import pickle
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tubeless.batch._inputs import InputRow, new_row

_raw = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=3), children, max_size=3)
    ),
    max_leaves=8,
)


@given(
    st.integers(min_value=0),
    st.integers(min_value=1),
    _raw,
    st.none() | _raw.map(lambda value: (value,)),
)
def test_new_row_is_the_constructors_row(
    index: int, line: int, raw: Any, validated: tuple[Any] | None
) -> None:
    made = new_row(index, line, raw, validated)
    built = InputRow(index=index, line=line, raw=raw, validated=validated)
    assert type(made) is InputRow
    assert made == built
    assert repr(made) == repr(built)
    assert made.validated is validated
    assert (made.problem, made.text) == (None, "")
    assert pickle.loads(pickle.dumps(made)) == built


def test_new_row_is_frozen_and_defaults_validated() -> None:
    made = new_row(0, 1, {"a": 1})
    assert made.validated is None
    assert made == InputRow(index=0, line=1, raw={"a": 1})
    with pytest.raises(AttributeError):
        made.raw = 2  # type: ignore[misc]
