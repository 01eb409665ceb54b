"""UTF-8 byte budgets and the YAML-usable state helpers ``question_state`` and
``append_outcomes`` (UPSTREAM.md §5.2, DESIGN.md §8)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel

from tubeless import PipelineExecutionError
from tubeless import errors as codes
from tubeless.errors import TubelessError
from tubeless.frozen import FrozenTuple, freeze
from tubeless.project import load_project
from tubeless.providers import (
    PROVIDER_BUDGET_EXCEEDED,
    PROVIDER_INVALID_INPUT,
    ProviderError,
    append_outcomes,
    question_state,
)
from tubeless.providers._budgets import encode_body, json_size, json_text, utf8_size
from tubeless.testing import call, continue_with, finish, scripted

ROOT = Path(__file__).resolve().parents[2]
E_ACUTE = "\N{LATIN SMALL LETTER E WITH ACUTE}"
EMOJI = "\N{GRINNING FACE}"


# -- measuring ------------------------------------------------------------------------------------
def test_sizes_count_utf8_bytes_of_compact_json_with_escapes() -> None:
    assert [utf8_size(text) for text in ("a", E_ACUTE, EMOJI)] == [1, 2, 4]
    assert json_text({"a": [1, E_ACUTE], "b": "\\"}) == '{"a":[1,"é"],"b":"\\\\"}'
    assert json_size("\\" * 10) == 22
    frozen = freeze({"observations": [{"ok": True}]})
    assert json_size(frozen) == len('{"observations":[{"ok":true}]}')


def test_json_text_refuses_nan() -> None:
    with pytest.raises(ValueError):
        json_text(float("nan"))


def test_encode_body_accepts_exactly_the_limit_and_names_the_provider_over_it() -> None:
    body = {"input": E_ACUTE * 10}
    size = len(json_text(body).encode())

    assert encode_body(body, size, "OpenAI") == json_text(body).encode()
    with pytest.raises(ProviderError) as caught:
        encode_body(body, size - 1, "OpenAI")
    assert (caught.value.code, caught.value.message) == (
        PROVIDER_BUDGET_EXCEEDED,
        f"OpenAI request exceeds {size - 1} UTF-8 bytes",
    )


# -- question_state -------------------------------------------------------------------------------
class QuestionModel(BaseModel):
    question: str


@pytest.mark.parametrize(
    "validated",
    [
        pytest.param({"question": "hi"}, id="mapping"),
        pytest.param(freeze({"question": "hi"}), id="frozen-mapping"),
        pytest.param(QuestionModel(question="hi"), id="model"),
    ],
)
def test_question_state_reads_the_question_from_a_mapping_or_a_model(validated: Any) -> None:
    assert question_state()(validated) == {"question": "hi", "observations": []}


@pytest.mark.parametrize(
    ("question", "accepted"),
    [
        pytest.param("x" * 4096, True, id="4096-ascii"),
        pytest.param("x" * 4097, False, id="4097-ascii"),
        pytest.param(EMOJI * 1024, True, id="1024-emoji"),
        pytest.param(EMOJI * 1025, False, id="1025-emoji"),
        pytest.param(E_ACUTE * 2048, True, id="2048-e-acute"),
        pytest.param(E_ACUTE * 2048 + "x", False, id="2048-e-acute-and-1"),
    ],
)
def test_question_state_allows_4096_utf8_bytes_by_default(question: str, accepted: bool) -> None:
    initial_state = question_state()
    if accepted:
        assert initial_state({"question": question})["question"] == question
        return
    with pytest.raises(ProviderError) as caught:
        initial_state({"question": question})
    assert (caught.value.code, str(caught.value)) == (
        PROVIDER_BUDGET_EXCEEDED,
        "Question exceeds 4096 UTF-8 bytes",
    )
    assert question not in str(caught.value)


@given(st.text(max_size=40), st.integers(min_value=1, max_value=80))
def test_question_state_accepts_exactly_the_texts_within_the_budget(text: str, limit: int) -> None:
    initial_state = question_state(max_bytes=limit)
    if len(text.encode("utf-8")) <= limit:
        assert initial_state({"question": text}) == {"question": text, "observations": []}
    else:
        with pytest.raises(ProviderError):
            initial_state({"question": text})


def test_question_state_uses_the_default_only_when_the_input_has_no_text() -> None:
    initial_state = question_state(default="hello tubeless")
    assert initial_state({})["question"] == "hello tubeless"
    assert initial_state({"question": "own"})["question"] == "own"


@pytest.mark.parametrize("validated", [{}, {"question": 42}, {"question": None}, object()])
def test_question_state_without_a_string_question_fails_without_quoting_it(validated: Any) -> None:
    with pytest.raises(ProviderError) as caught:
        question_state()(validated)
    assert caught.value.code == PROVIDER_INVALID_INPUT
    assert str(caught.value) == "Agent input needs a string 'question' field"


def test_question_state_field_names_the_input_field_the_state_key_and_the_message() -> None:
    initial_state = question_state(max_bytes=3, field="prompt")
    assert initial_state({"prompt": "abc"}) == {"prompt": "abc", "observations": []}
    with pytest.raises(ProviderError, match=r"^Prompt exceeds 3 UTF-8 bytes$"):
        initial_state({"prompt": "abcd"})


# -- append_outcomes ------------------------------------------------------------------------------
def success(call_id: str, value: Any, tool: str = "t") -> dict[str, Any]:
    return {"id": call_id, "tool": tool, "ok": True, "value": value}


def test_append_outcomes_appends_the_raw_outcomes_in_order_and_keeps_other_keys() -> None:
    reduce = append_outcomes()
    failed = {"id": "b", "tool": "t", "ok": False, "error": {"code": "X", "message": "m"}}
    state = freeze({"question": "q", "observations": [success("a", 1)], "extra": True})

    following = reduce(state, freeze([failed, success("c", "C")]))

    assert json.loads(json_text(following)) == {
        "question": "q",
        "observations": [success("a", 1), failed, success("c", "C")],
        "extra": True,
    }
    assert state["observations"] == (freeze(success("a", 1)),)


def test_append_outcomes_accepts_a_history_of_exactly_the_budget() -> None:
    overhead = json_size([success("a", "")])
    at_limit = [success("a", "x" * (16384 - overhead))]
    assert json_size(at_limit) == 16384

    assert len(append_outcomes()({"observations": []}, at_limit)["observations"]) == 1
    over = [success("a", "x" * (16384 - overhead + 1))]
    with pytest.raises(ProviderError) as caught:
        append_outcomes()({"observations": []}, over)
    assert (caught.value.code, str(caught.value)) == (
        PROVIDER_BUDGET_EXCEEDED,
        "Observation history exceeds 16384 UTF-8 bytes",
    )


def test_append_outcomes_counts_the_whole_history_across_batches() -> None:
    reduce = append_outcomes(max_bytes=16384)
    state: Any = {"observations": []}
    word = E_ACUTE * 2800
    for index in range(2):
        state = reduce(state, [success(f"b{index}", word.upper())])
    with pytest.raises(ProviderError, match="Observation history exceeds 16384 UTF-8 bytes"):
        reduce(state, [success("b2", word.upper())])


def test_append_outcomes_treats_a_missing_history_as_empty_and_rejects_a_non_list() -> None:
    reduce = append_outcomes()
    assert reduce({"question": "q"}, [success("a", 1)])["observations"] == (success("a", 1),)
    with pytest.raises(TubelessError) as caught:
        reduce({"observations": "text"}, [success("a", 1)])
    assert caught.value.code == codes.AGENT_INVALID_STATE
    with pytest.raises(TubelessError) as caught:
        reduce({"observations": []}, [success("a", {1, 2})])
    assert caught.value.code == codes.AGENT_INVALID_STATE
    assert "/0/value: unsupported type set" in str(caught.value)


def test_append_outcomes_builds_a_frozen_history_without_copying_old_items() -> None:
    state = freeze({"observations": [success("a", "A")]})
    following = append_outcomes()(state, freeze([success("b", "B")]))
    assert type(following["observations"]) is FrozenTuple
    assert following["observations"][0] is state["observations"][0]


# -- factory arguments ----------------------------------------------------------------------------
@pytest.mark.parametrize("bad", [0, -1, True, 1.5, "4096", None])
def test_budgets_must_be_positive_integers(bad: Any) -> None:
    with pytest.raises(ValueError, match=r"question_state\(max_bytes=\.\.\.\) must be an integer"):
        question_state(max_bytes=bad)
    with pytest.raises(ValueError, match=r"append_outcomes\(max_bytes=\.\.\.\) must be an integer"):
        append_outcomes(max_bytes=bad)


# -- from YAML ------------------------------------------------------------------------------------
PROJECT = """\
version: 1
project: {id: budgets}
python_path: [REPO]
agents:
  bounded:
    input: {schema: examples.text:Question}
    result: {schema: examples.text:Answer}
    result_json_schema: {type: string}
    initial_state: {use: tubeless.providers:question_state, with: {max_bytes: QUESTION_BYTES}}
    reduce: {use: tubeless.providers:append_outcomes, with: {max_bytes: HISTORY_BYTES}}
    decide: examples.scripted_agent:decide
    tools:
      uppercase: examples.text:uppercase
"""


def write_project(tmp_path: Path, question_bytes: Any = 8, history_bytes: Any = 200) -> Path:
    path = tmp_path / "budgets.yaml"
    text = PROJECT.replace("REPO", str(ROOT))
    text = text.replace("QUESTION_BYTES", str(question_bytes))
    text = text.replace("HISTORY_BYTES", str(history_bytes))
    path.write_text(text, encoding="utf-8")
    return path


def test_the_helpers_work_from_yaml_with_their_budgets(tmp_path: Path) -> None:
    decide = scripted(continue_with(call("uppercase", "abc", "a")), finish("done"))
    project = load_project(write_project(tmp_path), overrides={"bounded": {"decide": decide}})
    agent = project.entry()

    assert agent.run_sync({"question": "12345678"}) == {"answer": "done"}
    assert decide.seen[1][2]["observations"] == (freeze(success("a", "ABC", "uppercase")),)
    with pytest.raises(PipelineExecutionError) as caught:
        agent.run_sync({"question": "123456789"})
    assert caught.value.source_code == PROVIDER_BUDGET_EXCEEDED
    assert "Question exceeds 8 UTF-8 bytes" in str(caught.value)


def test_the_history_budget_from_yaml_fails_before_the_next_decision(tmp_path: Path) -> None:
    decide = scripted(continue_with(call("uppercase", "x" * 300, "a")), finish("never"))
    project = load_project(write_project(tmp_path), overrides={"bounded": {"decide": decide}})

    run = project.entry().run_sync
    with pytest.raises(PipelineExecutionError) as caught:
        run({"question": "q"})

    assert caught.value.source_code == PROVIDER_BUDGET_EXCEEDED
    assert "Observation history exceeds 200 UTF-8 bytes" in str(caught.value)
    assert decide.remaining == 1


def test_an_invalid_budget_in_yaml_fails_to_load_naming_the_factory(tmp_path: Path) -> None:
    with pytest.raises(TubelessError) as caught:
        load_project(write_project(tmp_path, question_bytes=0))
    assert caught.value.code == codes.REFERENCE_INVALID
    assert "question_state(max_bytes=...) must be an integer >= 1, got 0" in str(caught.value)
