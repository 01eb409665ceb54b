"""Agent state is owned by each invocation: copied, frozen, plain data only.

Seed "Decisions and state", DESIGN §3 (frozen data, decision ctx), UPSTREAM §4.5 and §4.7.
"""

from __future__ import annotations

import asyncio
import gc
import math
import operator
import types
from collections.abc import Callable
from typing import Any

import pydantic
import pytest

from tubeless import Pipeline, PipelineExecutionError, define_agent, define_tool
from tubeless.agent import StateError
from tubeless.errors import AGENT_INVALID_STATE
from tubeless.frozen import FrozenDict
from tubeless.pipeline import PipelineRun
from tubeless.testing import call, continue_with, finish, scripted


async def _echo(value: str, ctx: Any) -> str:
    return value


ECHO = define_tool(description="Echo text.", input_schema=str, output_schema=str, run=_echo)


class Question(pydantic.BaseModel):
    question: str
    depth: int = 1


def _agent(decide: Any, **extra: Any) -> Pipeline:
    fields: dict[str, Any] = {
        "id": "stateful",
        "input_schema": dict[str, Any],
        "result_schema": Any,
        "initial_state": lambda validated: {"notes": []},
        "decide": decide,
        "tools": {"echo": ECHO},
    }
    fields.update(extra)
    return define_agent(**fields)


def _original(run: PipelineRun, kind: type[BaseException]) -> BaseException | None:
    """The first exception of type ``kind`` in the run tree's error chains."""
    pending: list[PipelineRun] = [run]
    while pending:
        current = pending.pop(0)
        for error in current.errors:
            exc: BaseException | None = error.exception
            seen: set[int] = set()
            while exc is not None and id(exc) not in seen:
                seen.add(id(exc))
                if isinstance(exc, kind):
                    return exc
                inner = getattr(exc, "run", None)
                if isinstance(inner, PipelineRun):
                    pending.append(inner)
                exc = exc.__cause__ or exc.__context__
    return None


def _assert_deeply_frozen(value: Any) -> None:
    if isinstance(value, dict):
        assert type(value) is FrozenDict
        for item in value.values():
            _assert_deeply_frozen(item)
    elif isinstance(value, list | tuple):
        assert isinstance(value, tuple)
        for item in value:
            _assert_deeply_frozen(item)
    else:
        assert value is None or type(value) in (str, int, float, bool)


# -- copied and frozen --------------------------------------------------------------------------


async def test_initial_state_is_copied_so_later_changes_to_it_are_not_seen() -> None:
    returned: dict[str, Any] = {"notes": ["first"], "nested": {"count": 1}}

    def initial_state(validated: Any) -> dict[str, Any]:
        return returned

    def mutate_then_finish(state: Any, ctx: Any) -> Any:
        returned["notes"].append("sneaky")
        returned["nested"]["count"] = 99
        returned["added"] = True
        return continue_with(call("echo", "x"))

    decide = scripted(mutate_then_finish, finish("done"))
    await _agent(decide, initial_state=initial_state).run_or_raise({})

    first, second = decide.seen[0][2], decide.seen[1][2]
    assert first == {"notes": ("first",), "nested": {"count": 1}}
    assert second == {"notes": ("first",), "nested": {"count": 1}}


async def test_reducer_result_is_copied_so_later_changes_to_it_are_not_seen() -> None:
    kept: list[dict[str, Any]] = []

    def reduce(state: Any, outcomes: Any) -> dict[str, Any]:
        next_state = {"notes": [o["value"] for o in outcomes], "meta": {"turns": len(kept) + 1}}
        kept.append(next_state)
        return next_state

    def mutate(state: Any, ctx: Any) -> Any:
        kept[0]["notes"].append("sneaky")
        kept[0]["meta"]["turns"] = 99
        return finish("done")

    decide = scripted(continue_with(call("echo", "seen")), mutate)
    await _agent(decide, reduce=reduce).run_or_raise({})

    assert decide.seen[1][2] == {"notes": ("seen",), "meta": {"turns": 1}}


async def test_decide_receives_deeply_frozen_state() -> None:
    def initial_state(validated: Any) -> dict[str, Any]:
        return {"list": [1, [2, {"deep": [3]}]], "record": {"a": {"b": None}}, "x": 1.5}

    attempts: dict[str, type[BaseException] | None] = {}

    def poke(state: Any, ctx: Any) -> Any:
        _assert_deeply_frozen(state)
        assert not hasattr(state["list"], "append")
        for label, action in {
            "set-item": lambda: state.__setitem__("x", 1),
            "del-item": lambda: state.__delitem__("x"),
            "update": lambda: state.update({"x": 2}),
            "pop": lambda: state.pop("x"),
            "setdefault": lambda: state.setdefault("y", 1),
            "clear": lambda: state.clear(),
            "nested-set": lambda: state["record"]["a"].__setitem__("b", 1),
            "list-item": lambda: operator.setitem(state["list"], 0, 5),
        }.items():
            try:
                action()
            except TypeError as exc:
                attempts[label] = type(exc)
            else:
                attempts[label] = None
        return finish("done")

    decide = scripted(poke)
    await _agent(decide, initial_state=initial_state).run_or_raise({})

    assert attempts == dict.fromkeys(attempts, TypeError)
    assert len(attempts) == 8
    assert decide.seen[0][2] == {
        "list": (1, (2, {"deep": (3,)})),
        "record": {"a": {"b": None}},
        "x": 1.5,
    }


async def test_reducer_receives_frozen_state_and_frozen_outcomes_in_decision_order() -> None:
    seen: list[tuple[Any, Any]] = []

    def reduce(state: Any, outcomes: Any) -> Any:
        seen.append((state, outcomes))
        return {"notes": [*state["notes"], *(o["value"] for o in outcomes)]}

    decide = scripted(
        continue_with(call("echo", "b", id="2"), call("echo", "a", id="1")),
        finish("done"),
    )
    await _agent(decide, reduce=reduce).run_or_raise({})

    ((state, outcomes),) = seen
    _assert_deeply_frozen(state)
    _assert_deeply_frozen(outcomes)
    assert outcomes == (
        {"id": "2", "tool": "echo", "ok": True, "value": "b"},
        {"id": "1", "tool": "echo", "ok": True, "value": "a"},
    )
    assert decide.seen[1][2] == {"notes": ("b", "a")}


# -- what state may contain ---------------------------------------------------------------------


def _cycle() -> dict[str, Any]:
    value: dict[str, Any] = {"name": "loop"}
    value["self"] = value
    return value


def _list_cycle() -> dict[str, Any]:
    items: list[Any] = []
    items.append(items)
    return {"items": items}


class _Instance:
    pass


INVALID_STATES: list[Any] = [
    pytest.param(_cycle, id="dict-cycle"),
    pytest.param(_list_cycle, id="list-cycle"),
    pytest.param(lambda: {"x": math.nan}, id="nan"),
    pytest.param(lambda: {"x": [math.inf]}, id="inf"),
    pytest.param(lambda: {"x": -math.inf}, id="negative-inf"),
    pytest.param(lambda: {"x": {1, 2}}, id="set"),
    pytest.param(lambda: {"x": b"bytes"}, id="bytes"),
    pytest.param(lambda: {"x": _Instance()}, id="object-instance"),
    pytest.param(lambda: {"x": len}, id="builtin-function"),
    pytest.param(lambda: {"x": lambda: None}, id="function"),
    pytest.param(lambda: {1: "one"}, id="int-key"),
    pytest.param(lambda: {"nested": {("a",): 1}}, id="tuple-key"),
    pytest.param(lambda: {"nested": {None: 1}}, id="none-key"),
    pytest.param(lambda: _Instance(), id="object-at-root"),
    pytest.param(lambda: {"x": 1 + 2j}, id="complex"),
]


@pytest.mark.parametrize("make_state", INVALID_STATES)
async def test_initial_state_that_is_not_plain_data_fails_before_any_decision(
    make_state: Callable[[], Any],
) -> None:
    decide = scripted(finish("never"))
    agent = _agent(decide, initial_state=lambda validated: make_state())

    run = await agent.run({})

    assert run.status == "failed"
    assert run.errors[0].source_code == AGENT_INVALID_STATE
    assert isinstance(_original(run, StateError), StateError)
    assert decide.seen == []


@pytest.mark.parametrize("make_state", INVALID_STATES)
async def test_reducer_result_that_is_not_plain_data_is_never_committed(
    make_state: Callable[[], Any],
) -> None:
    decide = scripted(continue_with(call("echo", "x")), finish("never"))
    agent = _agent(decide, reduce=lambda state, outcomes: make_state())

    run = await agent.run({})

    assert run.status == "failed"
    assert run.errors[0].source_code == AGENT_INVALID_STATE
    assert [turn for turn, _, _ in decide.seen] == [1]


async def test_invalid_state_surfaces_its_source_code_from_run_or_raise() -> None:
    agent = _agent(scripted(finish("never")), initial_state=lambda validated: {"x": {1}})

    with pytest.raises(PipelineExecutionError) as caught:
        await agent.run_or_raise({})

    assert caught.value.source_code == AGENT_INVALID_STATE


@pytest.mark.parametrize(
    ("state", "frozen"),
    [
        pytest.param(None, None, id="none"),
        pytest.param("text", "text", id="string"),
        pytest.param(0, 0, id="int"),
        pytest.param(-0.5, -0.5, id="float"),
        pytest.param(True, True, id="bool"),
        pytest.param([1, "a", None], (1, "a", None), id="list"),
        pytest.param((1, 2), (1, 2), id="tuple"),
        pytest.param(
            {"a": {"b": [{"c": 1.0}]}, "": None},
            {"a": {"b": ({"c": 1.0},)}, "": None},
            id="nested-records",
        ),
        pytest.param({}, {}, id="empty-record"),
    ],
)
async def test_plain_data_of_every_allowed_kind_is_accepted_as_state(
    state: Any, frozen: Any
) -> None:
    decide = scripted(finish("done"))
    await _agent(decide, initial_state=lambda validated: state).run_or_raise({})
    assert decide.seen[0][2] == frozen
    assert type(decide.seen[0][2]) is type(frozen) or isinstance(frozen, dict)


async def test_repeated_references_are_copied_rather_than_rejected() -> None:
    shared = {"k": [1, 2]}
    decide = scripted(finish("done"))
    agent = _agent(decide, initial_state=lambda validated: {"a": shared, "b": shared})

    await agent.run_or_raise({})

    assert decide.seen[0][2] == {"a": {"k": (1, 2)}, "b": {"k": (1, 2)}}


async def test_initial_state_receives_the_validated_input() -> None:
    received: list[Any] = []

    def initial_state(validated: Question) -> dict[str, Any]:
        received.append(validated)
        return {"question": validated.question}

    decide = scripted(finish("done"))
    agent = _agent(decide, input_schema=Question, initial_state=initial_state)

    await agent.run_or_raise({"question": "why", "depth": "2"})

    assert received == [Question(question="why", depth=2)]
    assert decide.seen[0][2] == {"question": "why"}


# -- counters and reduction -----------------------------------------------------------------------


async def test_turn_starts_at_1_and_state_version_at_0_and_each_advances_per_batch() -> None:
    decide = scripted(
        continue_with(call("echo", "a")),
        continue_with(call("echo", "b"), call("echo", "c")),
        finish("done"),
    )
    await _agent(decide, reduce=lambda state, outcomes: state).run_or_raise({})

    assert [(turn, version) for turn, version, _ in decide.seen] == [(1, 0), (2, 1), (3, 2)]


async def test_without_a_reducer_state_is_kept_outcomes_dropped_and_state_version_advances() -> (
    None
):
    decide = scripted(
        continue_with(call("echo", "a")),
        continue_with(call("echo", "b")),
        finish("done"),
    )
    agent = _agent(decide, initial_state=lambda validated: {"notes": ["start"]})

    assert await agent.run_or_raise({}) == "done"

    assert decide.seen == [
        (1, 0, {"notes": ("start",)}),
        (2, 1, {"notes": ("start",)}),
        (3, 2, {"notes": ("start",)}),
    ]


async def test_reducer_runs_once_per_batch_and_never_on_finish() -> None:
    batches: list[int] = []

    def reduce(state: Any, outcomes: Any) -> Any:
        batches.append(len(outcomes))
        return state

    decide = scripted(
        continue_with(call("echo", "a"), call("echo", "b"), call("echo", "c")),
        continue_with(call("echo", "d")),
        finish("done"),
    )
    await _agent(decide, reduce=reduce).run_or_raise({})

    assert batches == [3, 1]


# -- the decision context -----------------------------------------------------------------------


class Lookup(pydantic.BaseModel):
    query: str
    limit: int = 3


async def test_decision_context_describes_tools_result_input_and_execution() -> None:
    async def lookup(value: Lookup, ctx: Any) -> str:
        return value.query

    tools = {
        "zeta": define_tool(
            description="Last by name.", input_schema=str, output_schema=str, run=_echo
        ),
        "Alpha": define_tool(
            description="Uppercase sorts first.",
            input_schema=Lookup,
            output_schema=str,
            run=lookup,
        ),
        "beta": define_tool(
            description="Middle.",
            input_schema=str,
            output_schema=str,
            run=_echo,
            input_json_schema={"type": "string", "maxLength": 9},
        ),
    }
    contexts: list[Any] = []

    def decide(state: Any, ctx: Any) -> Any:
        contexts.append(ctx)
        return finish({"answer": "done"}) if ctx.turn == 2 else continue_with(call("zeta", "x"))

    agent = _agent(
        decide,
        tools=tools,
        input_schema=Question,
        result_schema=dict[str, str],
        result_json_schema={"type": "object", "additionalProperties": {"type": "string"}},
    )

    run = await agent.run({"question": "q", "depth": "4"}, run_id="agent-run-7")

    assert run.status == "completed"
    first, second = contexts
    assert type(first.capabilities) is tuple
    assert all(type(c) is FrozenDict for c in first.capabilities)
    assert first.capabilities == (
        {
            "name": "Alpha",
            "description": "Uppercase sorts first.",
            "input_json_schema": FrozenDict(Lookup.model_json_schema()),
        },
        {
            "name": "beta",
            "description": "Middle.",
            "input_json_schema": {"maxLength": 9, "type": "string"},
        },
        {"name": "zeta", "description": "Last by name.", "input_json_schema": {"type": "string"}},
    )
    assert first.result_json_schema == {
        "additionalProperties": {"type": "string"},
        "type": "object",
    }
    assert type(first.result_json_schema) is FrozenDict
    assert first.input == Question(question="q", depth=4)
    assert first.execution == {
        "agent_run_id": "agent-run-7",
        "turn": 1,
        "idempotency_key": "agent-run-7/1",
    }
    assert second.execution == {
        "agent_run_id": run.run_id,
        "turn": 2,
        "idempotency_key": f"{run.run_id}/2",
    }
    assert (first.turn, first.state_version, second.turn, second.state_version) == (1, 0, 2, 1)
    assert first.dry_run is False
    assert first.signal.cancelled is False


def _callables_in(value: Any, path: str) -> list[str]:
    """Paths of every callable reachable through plain data (dict values, list items)."""
    found: list[str] = []
    if callable(value):
        found.append(path)
    if isinstance(value, dict):
        for key, item in value.items():
            found.extend(_callables_in(item, f"{path}[{key!r}]"))
    elif isinstance(value, list | tuple):
        for index, item in enumerate(value):
            found.extend(_callables_in(item, f"{path}[{index}]"))
    return found


async def test_decision_context_exposes_no_handler() -> None:
    def handler(value: str, ctx: Any) -> str:
        return value

    tool = define_tool(
        description="Has a handler.",
        input_schema=str,
        output_schema=str,
        run=handler,
        preview=handler,
    )
    contexts: list[Any] = []

    def decide(state: Any, ctx: Any) -> Any:
        contexts.append(ctx)
        return finish("done")

    await _agent(decide, tools={"secret": tool}).run_or_raise({})

    ctx = contexts[0]
    public = {name for name in dir(ctx) if not name.startswith("_")}
    assert public >= {
        "turn",
        "state_version",
        "capabilities",
        "result_json_schema",
        "input",
        "signal",
        "log",
        "dry_run",
        "execution",
    }
    leaks: list[str] = []
    for name in sorted(public - {"log", "signal", "report_model_request"}):
        leaks.extend(_callables_in(getattr(ctx, name), f"ctx.{name}"))
    assert leaks == []
    # The one method records a model request in the trace; it is the context's own.
    assert ctx.report_model_request.__self__ is ctx
    for service in ("log", "signal"):
        value = getattr(ctx, service)
        assert value is not handler
        attributes = [getattr(value, n, None) for n in dir(value) if not n.startswith("__")]
        assert handler not in attributes
    assert ctx.capabilities[0].keys() == {"name", "description", "input_json_schema"}


async def test_no_handler_is_reachable_from_the_decision_context_object_graph() -> None:
    """Walks every object the context refers to (modules and classes excluded)."""

    def handler(value: str, ctx: Any) -> str:
        return value

    tool = define_tool(
        description="Has a handler.", input_schema=str, output_schema=str, run=handler
    )
    reachable: list[bool] = []

    def decide(state: Any, ctx: Any) -> Any:
        seen = {id(ctx)}
        queue: list[Any] = [ctx]
        found = False
        while queue and not found:
            current = queue.pop()
            if isinstance(current, types.ModuleType | type):
                continue
            for referent in gc.get_referents(current):
                if referent is handler:
                    found = True
                if id(referent) not in seen:
                    seen.add(id(referent))
                    queue.append(referent)
        reachable.append(found)
        return finish("done")

    await _agent(decide, tools={"secret": tool}).run_or_raise({})

    assert reachable == [False]


async def test_decision_context_cannot_be_given_new_attributes() -> None:
    contexts: list[Any] = []

    def decide(state: Any, ctx: Any) -> Any:
        contexts.append(ctx)
        return finish("done")

    await _agent(decide).run_or_raise({})

    with pytest.raises(AttributeError):
        contexts[0].tools = {}


# -- isolation ------------------------------------------------------------------------------------


async def test_two_concurrent_runs_of_one_agent_keep_separate_state() -> None:
    both_started = asyncio.Event()
    active = 0

    async def wait_for_sibling(value: str, ctx: Any) -> str:
        nonlocal active
        active += 1
        if active == 2:
            both_started.set()
        await asyncio.wait_for(both_started.wait(), timeout=60)  # hang guard only
        return value

    tool = define_tool(
        description="Wait for the other run.",
        input_schema=str,
        output_schema=str,
        run=wait_for_sibling,
    )

    def initial_state(validated: dict[str, Any]) -> dict[str, Any]:
        return {"owner": validated["name"], "notes": []}

    def decide(state: Any, ctx: Any) -> Any:
        if state["notes"]:
            return finish(f"{state['owner']}:{','.join(state['notes'])}")
        return continue_with(call("wait", f"{state['owner']}-note"))

    def reduce(state: Any, outcomes: Any) -> Any:
        return {**state, "notes": [*state["notes"], *(o["value"] for o in outcomes)]}

    agent = _agent(
        decide,
        tools={"wait": tool},
        initial_state=initial_state,
        reduce=reduce,
        result_schema=str,
    )

    red, blue = await asyncio.gather(
        agent.run_or_raise({"name": "red"}), agent.run_or_raise({"name": "blue"})
    )

    assert both_started.is_set()
    assert (red, blue) == ("red:red-note", "blue:blue-note")


async def test_a_second_run_starts_from_a_fresh_initial_state() -> None:
    def decide(state: Any, ctx: Any) -> Any:
        if len(state["notes"]) < 2:
            return continue_with(call("echo", f"n{len(state['notes'])}"))
        return finish(list(state["notes"]))

    def reduce(state: Any, outcomes: Any) -> Any:
        return {"notes": [*state["notes"], outcomes[0]["value"]]}

    agent = _agent(decide, reduce=reduce)

    assert await agent.run_or_raise({}) == ["n0", "n1"]
    assert await agent.run_or_raise({}) == ["n0", "n1"]


async def test_turns_leave_no_reference_cycles_holding_old_states() -> None:
    """Each turn's state is freed when the next one replaces it, without the collector.

    A cycle through a turn's context (say, a logger pointing back at it) would keep every
    intermediate history alive until a collection and make long runs slower per turn.
    """
    from tubeless.frozen import FrozenTuple

    def decide(state: Any, ctx: Any) -> Any:
        ctx.log.debug("turn %s", ctx.turn)  # the logger exists on every turn
        if ctx.turn > 40:
            return finish(len(state["history"]))
        return continue_with(call("echo", "x", id=f"c{ctx.turn}"))

    async def echo(text: str, ctx: Any) -> str:
        ctx.log.debug("echo")
        return text

    agent = define_agent(
        id="history",
        input_schema=dict,
        result_schema=int,
        initial_state=lambda _: {"history": ()},
        decide=decide,
        reduce=lambda state, outcomes: {"history": state["history"] + outcomes},
        tools={
            "echo": define_tool(description="Echo.", input_schema=str, output_schema=str, run=echo)
        },
        limits={"max_turns": 50},
    )
    gc.collect()
    gc.disable()
    try:
        run = await agent.run({})
        histories = [o for o in gc.get_objects() if type(o) is FrozenTuple and len(o) > 1]
    finally:
        gc.enable()
    assert run.value == 40
    assert len(histories) <= 2


async def test_a_tuple_history_grown_with_a_plain_tuple_is_never_walked_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``state["history"] + tuple(outcomes)``: the committed history is a ``FrozenTuple``, so
    freezing the next state looks at no item of what the history already held."""
    import tubeless.frozen as frozen_module
    from tubeless.frozen import FrozenTuple

    looked = [0]
    real_needs_look, real_container = frozen_module._needs_look, frozen_module._freeze_container

    def counting_needs_look(values: Any) -> list[int]:
        looked[0] += len(values)
        return real_needs_look(values)

    def counting_container(root: Any) -> Any:
        looked[0] += len(root)
        return real_container(root)

    monkeypatch.setattr(frozen_module, "_needs_look", counting_needs_look)
    monkeypatch.setattr(frozen_module, "_freeze_container", counting_container)
    kinds: list[type] = []

    def reduce(state: Any, outcomes: Any) -> Any:
        kinds.append(type(state["history"]))
        return {"history": state["history"] + tuple(outcomes)}

    turns = 120
    agent = _agent(
        lambda state, ctx: (
            finish(len(state["history"]))
            if ctx.turn > turns
            else continue_with(call("echo", "x", id=f"c{ctx.turn}"))
        ),
        initial_state=lambda _: {"history": ()},
        reduce=reduce,
        limits={"max_turns": turns + 1, "max_decisions": turns + 1, "max_calls": turns},
    )
    run = await agent.run({})
    assert run.status == "completed", run.errors
    assert run.value == turns
    assert set(kinds) == {FrozenTuple}
    # Each commit looks at its own new items, never the whole history (60 items on average).
    assert looked[0] <= 4 * turns


def test_freezing_a_frozen_tuple_looks_at_none_of_its_items() -> None:
    """A ``FrozenTuple`` is trusted as it is: even a smuggled list inside is not looked at."""
    from tubeless.frozen import FrozenTuple, freeze

    smuggled = FrozenTuple._trusted([[1], {"a": 2}])
    assert freeze(smuggled) is smuggled
