"""Decisions are untrusted data: every one is checked before any handler of its batch starts.

Seed "Decisions and state", DESIGN §3 (decisions, validation messages), UPSTREAM §4.4. Tools
here record every handler start, so "before any handler starts" is an empty list.
"""

from __future__ import annotations

import asyncio
import json
from collections import OrderedDict
from collections.abc import Iterator
from typing import Annotated, Any

import pydantic
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from pydantic import BeforeValidator

from tubeless import Pipeline, PipelineError, PipelineExecutionError, define_agent, define_tool
from tubeless.agent import DecisionError
from tubeless.errors import AGENT_INVALID_DECISION, AGENT_LIMIT_REACHED
from tubeless.pipeline import PipelineRun
from tubeless.testing import call, capture_trace, continue_with, finish, scripted

SECRET = "hunter2-SECRET-do-not-leak"


def _recording_tools(started: list[tuple[str, Any]]) -> dict[str, Any]:
    """``echo`` (str → str) and ``number`` (int → int); both record every handler start."""

    async def echo(value: str, ctx: Any) -> str:
        started.append(("echo", value))
        return value

    async def number(value: int, ctx: Any) -> int:
        started.append(("number", value))
        return value

    return {
        "echo": define_tool(
            description="Echo text.", input_schema=str, output_schema=str, run=echo
        ),
        "number": define_tool(
            description="Echo an integer.", input_schema=int, output_schema=int, run=number
        ),
    }


def _agent(decide: Any, *, tools: dict[str, Any], **extra: Any) -> Pipeline:
    fields: dict[str, Any] = {
        "id": "decider",
        "input_schema": dict[str, Any],
        "result_schema": str | None,
        "initial_state": lambda validated: {},
        "decide": decide,
        "tools": tools,
    }
    fields.update(extra)
    return define_agent(**fields)


def _runs(run: PipelineRun) -> Iterator[PipelineRun]:
    """``run`` and every child run reachable from its errors."""
    yield run
    for error in run.errors:
        yield from _exception_runs(error.exception)


def _exception_runs(exc: BaseException | None) -> Iterator[PipelineRun]:
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        inner = getattr(exc, "run", None)
        if isinstance(inner, PipelineRun):
            yield from _runs(inner)
        exc = exc.__cause__ or exc.__context__


def _errors(run: PipelineRun) -> list[PipelineError]:
    return [error for child in _runs(run) for error in child.errors]


def _original(run: PipelineRun, kind: type[BaseException]) -> BaseException:
    """The first exception of type ``kind`` anywhere in the run tree's error chains."""
    for error in _errors(run):
        exc: BaseException | None = error.exception
        while exc is not None:
            if isinstance(exc, kind):
                return exc
            exc = exc.__cause__ or exc.__context__
    raise AssertionError(f"no {kind.__name__} in the run's errors")


def _assert_invalid_decision(run: PipelineRun) -> None:
    assert run.status == "failed"
    assert run.errors[0].source_code == AGENT_INVALID_DECISION
    assert isinstance(_original(run, DecisionError), DecisionError)


class _Opaque:
    """An arbitrary object: not a decision."""


VALID_CALL = call("echo", "fine", id="first")


def _batch(*calls: Any) -> dict[str, Any]:
    """A continue decision holding ``calls`` exactly as given (``continue_with`` copies them)."""
    return {"kind": "continue", "calls": list(calls)}


INVALID_DECISIONS = [
    pytest.param(None, id="none"),
    pytest.param([finish("x")], id="list"),
    pytest.param("finish", id="string"),
    pytest.param(42, id="int"),
    pytest.param(OrderedDict(kind="finish", result="x"), id="dict-subclass"),
    pytest.param(_Opaque(), id="object"),
    pytest.param({}, id="empty-dict"),
    pytest.param({"result": "x"}, id="missing-kind"),
    pytest.param({"kind": "stop", "result": "x"}, id="unknown-kind"),
    pytest.param({"kind": "Finish", "result": "x"}, id="kind-wrong-case"),
    pytest.param({"kind": None, "result": "x"}, id="kind-none"),
    pytest.param({"kind": "finish"}, id="finish-missing-result"),
    pytest.param({"kind": "finish", "result": "x", "reason": "y"}, id="finish-extra-key"),
    pytest.param({"kind": "finish", "result": "x", "calls": [VALID_CALL]}, id="finish-with-calls"),
    pytest.param({"kind": "continue"}, id="continue-missing-calls"),
    pytest.param({"kind": "continue", "calls": []}, id="continue-empty-calls"),
    pytest.param({"kind": "continue", "calls": None}, id="calls-none"),
    pytest.param({"kind": "continue", "calls": VALID_CALL}, id="calls-a-dict"),
    pytest.param({"kind": "continue", "calls": "echo"}, id="calls-a-string"),
    pytest.param(
        {"kind": "continue", "calls": [VALID_CALL], "result": "x"}, id="continue-with-result"
    ),
    pytest.param({"kind": "continue", "calls": [VALID_CALL], "note": "x"}, id="continue-extra-key"),
    pytest.param(_batch(VALID_CALL, None), id="call-none"),
    pytest.param(_batch(VALID_CALL, ["id", "echo", "x"]), id="call-a-list"),
    pytest.param(
        _batch(VALID_CALL, OrderedDict(id="b", tool="echo", input="x")),
        id="call-dict-subclass",
    ),
    pytest.param(
        {"kind": "continue", "calls": [VALID_CALL, {"id": "b", "tool": "echo"}]},
        id="call-missing-input",
    ),
    pytest.param(
        {"kind": "continue", "calls": [VALID_CALL, {"tool": "echo", "input": "x"}]},
        id="call-missing-id",
    ),
    pytest.param(
        {"kind": "continue", "calls": [VALID_CALL, {"id": "b", "input": "x"}]},
        id="call-missing-tool",
    ),
    pytest.param(
        continue_with(VALID_CALL, {**call("echo", "x", id="b"), "timeout": 3}),
        id="call-extra-key",
    ),
    pytest.param(continue_with(VALID_CALL, call("echo", "x", id="")), id="id-empty"),
    pytest.param(continue_with(VALID_CALL, call("echo", "x", id=" \t\n")), id="id-whitespace"),
    pytest.param(continue_with(VALID_CALL, call("echo", "x", id="i" * 257)), id="id-257-chars"),
    pytest.param(
        {"kind": "continue", "calls": [VALID_CALL, {"id": 2, "tool": "echo", "input": "x"}]},
        id="id-int",
    ),
    pytest.param(
        {"kind": "continue", "calls": [VALID_CALL, {"id": None, "tool": "echo", "input": "x"}]},
        id="id-none",
    ),
    pytest.param(continue_with(VALID_CALL, call("echo", "x", id="first")), id="id-duplicate"),
    pytest.param(continue_with(VALID_CALL, call("", "x", id="b")), id="tool-empty"),
    pytest.param(continue_with(VALID_CALL, call("  ", "x", id="b")), id="tool-blank"),
    pytest.param(
        {"kind": "continue", "calls": [VALID_CALL, {"id": "b", "tool": 1, "input": "x"}]},
        id="tool-int",
    ),
    pytest.param(
        {"kind": "continue", "calls": [VALID_CALL, {"id": "b", "tool": None, "input": "x"}]},
        id="tool-none",
    ),
    pytest.param(continue_with(VALID_CALL, call("lookup", "x", id="b")), id="tool-unknown"),
    pytest.param(continue_with(VALID_CALL, call("Echo", "x", id="b")), id="tool-wrong-case"),
    pytest.param(continue_with(VALID_CALL, call("number", "seven", id="b")), id="input-rejected"),
    pytest.param(continue_with(VALID_CALL, call("echo", 7, id="b")), id="input-wrong-type"),
    pytest.param(finish(7), id="finish-result-rejected"),
]


@pytest.mark.parametrize("decision", INVALID_DECISIONS)
async def test_invalid_decision_fails_the_run_before_any_handler_starts(decision: Any) -> None:
    started: list[tuple[str, Any]] = []
    agent = _agent(scripted(decision), tools=_recording_tools(started))

    run = await agent.run({})

    _assert_invalid_decision(run)
    assert started == []


async def test_invalid_decision_surfaces_its_source_code_from_run_or_raise() -> None:
    agent = _agent(scripted({"kind": "finish"}), tools={})

    with pytest.raises(PipelineExecutionError) as caught:
        await agent.run_or_raise({})

    assert caught.value.source_code == AGENT_INVALID_DECISION


async def test_invalid_decision_on_a_later_turn_runs_no_handler_of_that_turn() -> None:
    started: list[tuple[str, Any]] = []
    agent = _agent(
        scripted(
            continue_with(call("echo", "turn-1")),
            continue_with(call("echo", "turn-2", id="a"), call("lookup", "x", id="b")),
        ),
        tools=_recording_tools(started),
    )

    run = await agent.run({})

    _assert_invalid_decision(run)
    assert started == [("echo", "turn-1")]


@pytest.mark.parametrize(
    "call_id",
    [
        pytest.param("i" * 256, id="256-chars"),
        pytest.param("x", id="one-char"),
        pytest.param(" padded ", id="surrounding-spaces"),
        pytest.param("call/1:ünïcode", id="punctuation-and-unicode"),
    ],
)
async def test_call_ids_up_to_256_characters_are_accepted(call_id: str) -> None:
    started: list[tuple[str, Any]] = []
    seen_ids: list[str] = []

    def reduce(state: Any, outcomes: Any) -> Any:
        seen_ids.extend(outcome["id"] for outcome in outcomes)
        return state

    agent = _agent(
        scripted(continue_with(call("echo", "x", id=call_id)), finish("done")),
        tools=_recording_tools(started),
        reduce=reduce,
    )

    assert await agent.run_or_raise({}) == "done"
    assert seen_ids == [call_id]


async def test_call_ids_may_repeat_across_turns() -> None:
    started: list[tuple[str, Any]] = []
    agent = _agent(
        scripted(
            continue_with(call("echo", "a", id="same")),
            continue_with(call("echo", "b", id="same")),
            finish("done"),
        ),
        tools=_recording_tools(started),
    )

    assert await agent.run_or_raise({}) == "done"
    assert started == [("echo", "a"), ("echo", "b")]


# -- what an invalid decision says it found ----------------------------------------------------
_FIX = "Agent decision must finish(result) or continue with a nonempty calls array"
_CALL = "Each call requires a nonblank id (up to 256 characters), tool, and input"


@pytest.mark.parametrize(
    ("decision", "message"),
    [
        pytest.param(
            None,
            "Agent decision must be a plain dict; decide returned None (missing return?)",
            id="none",
        ),
        pytest.param(
            "finish", "Agent decision must be a plain dict; decide returned str", id="str"
        ),
        pytest.param(
            OrderedDict(kind="finish", result="x"),
            "Agent decision must be a plain dict; decide returned OrderedDict",
            id="dict-subclass",
        ),
        pytest.param({1: "x"}, f"{_FIX}; found a key of type int", id="int-key"),
        pytest.param({"result": "x"}, f"{_FIX}; 'kind' is missing", id="missing-kind"),
        pytest.param(
            {"kind": None, "result": "x"}, f"{_FIX}; 'kind' is None, not a string", id="kind-none"
        ),
        pytest.param(
            {"kind": "Finish", "result": "x"},
            f"{_FIX}; 'kind' must be 'finish' or 'continue'",
            id="kind-unknown",
        ),
        pytest.param(
            {"kind": "finish"},
            f"{_FIX}; a finish decision needs 'result' (None is a valid result)",
            id="finish-missing-result",
        ),
        pytest.param(
            {"kind": "finish", "result": "x", "reason": SECRET},
            f"{_FIX}; a finish decision has only 'kind' and 'result', found the extra key 'reason'",
            id="finish-extra-key",
        ),
        pytest.param(
            {"kind": "finish", "result": "x", "reason": "r", "calls": [], "note": "n", "why": "w"},
            f"{_FIX}; a finish decision has only 'kind' and 'result', found the extra keys "
            "'calls', 'note', 'reason' and 1 more",
            id="finish-extra-keys",
        ),
        pytest.param(
            {"kind": "continue"}, f"{_FIX}; a continue decision needs 'calls'", id="no-calls"
        ),
        pytest.param(
            {"kind": "continue", "calls": [VALID_CALL], "result": "x"},
            f"{_FIX}; a continue decision has only 'kind' and 'calls', found the extra key "
            "'result'",
            id="continue-extra-key",
        ),
        pytest.param(
            {"kind": "continue", "calls": VALID_CALL},
            f"{_FIX}; 'calls' is dict, not a list",
            id="calls-a-dict",
        ),
        pytest.param(
            {"kind": "continue", "calls": []}, f"{_FIX}; 'calls' is empty", id="calls-empty"
        ),
        pytest.param(_batch(VALID_CALL, None), f"{_CALL}; call 2 is None", id="call-none"),
        pytest.param(
            _batch(VALID_CALL, {"id": "b", "tool": "echo"}),
            f"{_CALL}; call 2 lacks 'input'",
            id="call-missing-input",
        ),
        pytest.param(
            _batch({**VALID_CALL, "timeout": SECRET}),
            f"{_CALL}; call 1 has the extra key 'timeout'",
            id="call-extra-key",
        ),
        pytest.param(
            _batch(VALID_CALL, {"id": 2, "tool": "echo", "input": "x"}),
            f"{_CALL}; the id of call 2 is int",
            id="id-int",
        ),
        pytest.param(
            _batch(call("echo", "x", id=" ")), f"{_CALL}; the id of call 1 is blank", id="id-blank"
        ),
        pytest.param(
            _batch(call("echo", "x", id="i" * 257)),
            f"{_CALL}; the id of call 1 has 257 characters",
            id="id-long",
        ),
        pytest.param(
            _batch(VALID_CALL, {"id": "b", "tool": None, "input": "x"}),
            f"{_CALL}; the tool of call 2 is None",
            id="tool-none",
        ),
        pytest.param(
            _batch(call("", "x", id="b")), f"{_CALL}; the tool of call 1 is blank", id="tool-blank"
        ),
        pytest.param(
            _batch(VALID_CALL, call("Echo", "x", id="b")),
            "Unknown agent tool: 'Echo'; did you mean 'echo'? (tools: echo, number)",
            id="tool-wrong-case",
        ),
        pytest.param(
            _batch(call("lookup", "x", id="b")),
            "Unknown agent tool: 'lookup' (tools: echo, number)",
            id="tool-unknown",
        ),
    ],
)
async def test_an_invalid_decision_says_what_it_found_without_values(
    decision: Any, message: str
) -> None:
    """The type found (never the value), the missing or extra keys by name, the closest tool."""
    agent = _agent(scripted(decision), tools=_recording_tools([]))

    run = await agent.run({})

    _assert_invalid_decision(run)
    assert _message(run) == message
    assert SECRET not in run.errors[0].format()


async def test_the_message_names_dry_run_when_the_dry_run_source_returned_it() -> None:
    agent = _agent(scripted(finish("live")), tools={}, dry_run=lambda state, ctx: None)

    run = await agent.run({}, dry_run=True)

    _assert_invalid_decision(run)
    assert _message(run) == (
        "Agent decision must be a plain dict; dry_run returned None (missing return?)"
    )


async def test_an_unknown_tool_of_an_agent_without_tools_says_it_has_none() -> None:
    agent = _agent(scripted(_batch(call("lookup", "x", id="b"))), tools={})

    run = await agent.run({})

    assert _message(run) == ("Unknown agent tool: 'lookup' (the agent has no tools)")


async def test_the_tool_list_of_an_unknown_tool_is_bounded() -> None:
    tools = {f"tool_{index:02}": tool for index in range(30) for tool in [_echo_tool()]}
    agent = _agent(scripted(_batch(call("nothing_alike", "x", id="b"))), tools=tools)

    run = await agent.run({})

    message = _message(run)
    shown = ", ".join(f"tool_{index:02}" for index in range(20))
    assert message == f"Unknown agent tool: 'nothing_alike' (tools: {shown} and 10 more)"


def _message(run: PipelineRun) -> str:
    error = _original(run, DecisionError)
    assert isinstance(error, DecisionError)
    return error.message


def _echo_tool() -> Any:
    return _recording_tools([])["echo"]


# -- ordering: names first, then arguments, once each ----------------------------------------


def _counting_query_tool(validated: list[Any], started: list[Any]) -> Any:
    def count(value: Any) -> Any:
        validated.append(value)
        return {"text": value} if isinstance(value, str) else value

    class Query(pydantic.BaseModel):
        text: str

    async def run(query: Query, ctx: Any) -> str:
        started.append(query)
        return query.text.upper()

    return Query, define_tool(
        description="Look something up.",
        input_schema=Annotated[Query, BeforeValidator(count)],
        output_schema=str,
        run=run,
    )


async def test_every_tool_name_is_resolved_before_any_argument_validator_runs() -> None:
    validated: list[Any] = []
    started: list[Any] = []
    _, query = _counting_query_tool(validated, started)
    agent = _agent(
        scripted(continue_with(call("query", "fine", id="a"), call("missing", "x", id="b"))),
        tools={"query": query},
    )

    run = await agent.run({})

    _assert_invalid_decision(run)
    assert validated == []
    assert started == []


async def test_a_rejected_argument_stops_the_batch_after_validating_only_earlier_calls() -> None:
    validated: list[Any] = []
    started: list[Any] = []
    _, query = _counting_query_tool(validated, started)
    agent = _agent(
        scripted(continue_with(call("query", "first", id="a"), call("query", 7, id="b"))),
        tools={"query": query},
    )

    run = await agent.run({})

    _assert_invalid_decision(run)
    assert validated == ["first", 7]
    assert started == []


async def test_arguments_are_validated_once_and_handlers_see_the_transformed_value() -> None:
    validated: list[Any] = []
    started: list[Any] = []
    query_type, query = _counting_query_tool(validated, started)
    agent = _agent(
        scripted(
            continue_with(call("query", "red", id="a"), call("query", "blue", id="b")),
            finish("done"),
        ),
        tools={"query": query},
    )

    assert await agent.run_or_raise({}) == "done"
    assert validated == ["red", "blue"]
    assert started == [query_type(text="red"), query_type(text="blue")]


# -- finish results -----------------------------------------------------------------------------


async def test_finish_with_a_none_result_is_a_valid_finish() -> None:
    agent = _agent(scripted({"kind": "finish", "result": None}), tools={})

    run = await agent.run({})

    assert run.status == "completed"
    assert run.value is None


async def test_finish_result_rejected_by_the_result_schema_is_an_invalid_decision() -> None:
    agent = _agent(scripted(finish({"answer": 1})), tools={}, result_schema=int)

    run = await agent.run({})

    _assert_invalid_decision(run)


class Answer(pydantic.BaseModel):
    text: str


async def test_finish_result_is_validated_once_and_the_run_value_is_the_transformed_result() -> (
    None
):
    validated: list[Any] = []

    def wrap(value: Any) -> Any:
        validated.append(value)
        return {"text": value} if isinstance(value, str) else value

    agent = _agent(
        scripted(finish("the answer")),
        tools={},
        result_schema=Annotated[Answer, BeforeValidator(wrap)],
    )

    run = await agent.run({})

    assert run.status == "completed"
    assert run.value == Answer(text="the answer")
    assert validated == ["the answer"]


# -- no values in messages ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "decision",
    [
        pytest.param(continue_with(call("number", SECRET, id="a")), id="argument"),
        pytest.param(finish({"text": SECRET}), id="finish-result"),
    ],
)
async def test_rejection_messages_never_contain_the_rejected_value(decision: Any) -> None:
    started: list[tuple[str, Any]] = []
    agent = _agent(scripted(decision), tools=_recording_tools(started), result_schema=int)

    with capture_trace() as trace:
        run = await agent.run({}, trace=trace)

    _assert_invalid_decision(run)
    error = _original(run, DecisionError)
    assert isinstance(error, DecisionError)
    assert error.issues, "the cause keeps the issues (without values)"
    assert SECRET not in str(error)
    assert SECRET not in repr(error)
    assert all(SECRET not in issue.format() for issue in error.issues)
    for recorded in _errors(run):
        assert SECRET not in recorded.message
        assert SECRET not in recorded.format()
        assert SECRET not in json.dumps(recorded.to_wire())
    assert SECRET not in json.dumps(trace.records)
    again = _agent(scripted(decision), tools=_recording_tools(started), result_schema=int)
    with pytest.raises(PipelineExecutionError) as caught:
        await again.run_or_raise({})
    assert SECRET not in str(caught.value)


# -- property: arbitrary decision-like values --------------------------------------------------


MAX_CALLS = 40

json_like = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=8),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=6), children, max_size=4)
    ),
    max_leaves=12,
)
call_ids = (
    st.text(max_size=4)
    | st.sampled_from(["a", "b", "", " ", "\t"])
    | st.text(alphabet="i", min_size=255, max_size=258)
    | st.integers(-2, 2)
    | st.none()
)
tool_names = (
    st.sampled_from(["echo", "echo", "echo", "Echo", "lookup", "", " "])
    | st.text(max_size=5)
    | st.integers(0, 3)
)
call_inputs = st.text(max_size=6) | json_like


@st.composite
def calls_like(draw: st.DrawFn) -> Any:
    entry = draw(st.fixed_dictionaries({"id": call_ids, "tool": tool_names, "input": call_inputs}))
    mutation = draw(st.sampled_from(["none", "none", "none", "drop", "extra", "not-a-dict"]))
    if mutation == "drop":
        entry.pop(draw(st.sampled_from(["id", "tool", "input"])))
    elif mutation == "extra":
        entry[draw(st.sampled_from(["kind", "timeout", "ID"]))] = draw(json_like)
    elif mutation == "not-a-dict":
        return draw(json_like)
    return entry


@st.composite
def well_formed_continue(draw: st.DrawFn) -> Any:
    """A continue whose calls are mostly valid: unique ids, the one tool, string inputs."""
    size = draw(st.integers(1, 50))
    ids = draw(
        st.lists(
            st.text(min_size=1, max_size=6).filter(str.strip),
            min_size=size,
            max_size=size,
            unique=True,
        )
    )
    inputs = draw(st.lists(st.text(max_size=6), min_size=size, max_size=size))
    calls: list[Any] = [
        {"id": call_id, "tool": "echo", "input": value}
        for call_id, value in zip(ids, inputs, strict=True)
    ]
    if draw(st.booleans()):
        index = draw(st.integers(0, size - 1))
        calls[index] = draw(calls_like())
    return {"kind": "continue", "calls": calls}


decisions_like = st.one_of(
    json_like,
    st.builds(finish, json_like),
    st.builds(finish, st.none() | st.text(max_size=8)),
    st.builds(
        lambda calls: {"kind": "continue", "calls": calls}, st.lists(calls_like(), max_size=8)
    ),
    well_formed_continue(),
    st.dictionaries(
        st.sampled_from(["kind", "result", "calls", "extra"]),
        st.sampled_from(["finish", "continue"]) | json_like,
        max_size=3,
    ),
    st.builds(OrderedDict, st.builds(finish, st.text(max_size=3))),
)


def _valid_call(entry: Any) -> bool:
    return (
        type(entry) is dict
        and entry.keys() == {"id", "tool", "input"}
        and type(entry["id"]) is str
        and bool(entry["id"].strip())
        and len(entry["id"]) <= 256
        and type(entry["tool"]) is str
        and bool(entry["tool"].strip())
    )


def _classify(decision: Any) -> str:
    """``finish``, ``continue``, ``invalid``, or ``maybe-limit`` (too many calls)."""
    if type(decision) is not dict:
        return "invalid"
    if decision.keys() == {"kind", "result"} and decision["kind"] == "finish":
        result = decision["result"]
        return "finish" if result is None or type(result) is str else "invalid"
    if decision.keys() != {"kind", "calls"} or decision["kind"] != "continue":
        return "invalid"
    calls = decision["calls"]
    if type(calls) is not list or not calls or not all(_valid_call(c) for c in calls):
        return "invalid"
    if len({c["id"] for c in calls}) != len(calls):
        return "invalid"
    if len(calls) > MAX_CALLS:
        return "maybe-limit"
    if any(c["tool"] != "echo" for c in calls) or any(type(c["input"]) is not str for c in calls):
        return "invalid"
    return "continue"


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(decision=decisions_like)
def test_any_decision_like_value_completes_or_fails_as_an_invalid_decision(decision: Any) -> None:
    """Never another exception, and no handler starts for an invalid decision."""
    expectation = _classify(decision)
    event(expectation)
    started: list[tuple[str, Any]] = []
    agent = _agent(
        scripted(decision, finish("done")),
        tools=_recording_tools(started),
        limits={"max_calls": MAX_CALLS},
    )

    run = asyncio.run(agent.run({}))

    if expectation == "finish":
        assert run.status == "completed", [e.format() for e in run.errors]
        assert run.value == decision["result"]
        assert started == []
    elif expectation == "continue":
        assert run.status == "completed", [e.format() for e in run.errors]
        assert run.value == "done"
        assert sorted(started) == sorted(("echo", c["input"]) for c in decision["calls"])
    else:
        assert run.status == "failed"
        allowed = {AGENT_INVALID_DECISION}
        if expectation == "maybe-limit":
            allowed.add(AGENT_LIMIT_REACHED)
        assert [e.source_code for e in run.errors] in [[code] for code in allowed]
        assert started == []
