"""Model output is untrusted data: it selects registered tools and supplies their arguments,
nothing else (issue 9, "Untrusted decisions and tool data"; DESIGN.md §3).

Goes deeper than ``tests/agent/test_decisions.py`` and ``tests/agent/test_state.py``: the values
here are hostile Python objects as well as odd JSON (raising ``__eq__``/``__hash__``/``__len__``,
spoofed ``__class__``, dict and str subclasses, recursive and 5,000-deep containers, lone
surrogates, strings up to 1 MB, batches of thousands of calls), and every run has a hang guard.
"""

from __future__ import annotations

import asyncio
import collections
import decimal
import logging
import math
import types
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Annotated, Any

import pydantic
import pytest
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

from tubeless import Pipeline, define_agent, define_tool, frozen, pipeline_tool
from tubeless.errors import AGENT_INVALID_DECISION, AGENT_INVALID_STATE, AGENT_LIMIT_REACHED
from tubeless.frozen import FreezeError, FrozenDict, is_frozen, thaw
from tubeless.pipeline import CancelToken, PipelineRun, StepLogger, define_pipeline, step
from tubeless.testing import call, capture_trace, continue_with, finish, scripted
from tubeless.tracing import NdjsonSink, SqliteSink, read_trace

# ``FrozenTuple`` (outcomes, histories) is a frozen tuple wherever a tuple is.
_FROZEN_TUPLE: type | None = getattr(frozen, "FrozenTuple", None)
TUPLES: tuple[type, ...] = (tuple,) if _FROZEN_TUPLE is None else (tuple, _FROZEN_TUPLE)
HANG_GUARD = 30  # seconds; a guard against hangs, never a timing assertion (DESIGN.md §9)
MAX_CALLS = 40
TOOL_NAMES = ("data", "echo")


# -- hostile objects -------------------------------------------------------------------------------
class Armory:
    """Hostile objects behave until armed, so that hypothesis can build dicts holding them."""

    armed = False


class Boom(Exception):
    """Raised by a hostile object: must never escape as anything but a rejection."""


def _trap(name: str, base: type = object, default: Any = 0) -> Callable[..., Any]:
    """A method that raises once armed and otherwise behaves as ``base``'s (or returns
    ``default`` when ``base`` has no such method)."""
    original = getattr(base, name, None)

    def method(self: Any, *args: Any, **kwargs: Any) -> Any:
        if Armory.armed:
            raise Boom(f"hostile {name}")
        return default if original is None else original(self, *args, **kwargs)

    return method


class HostileKey:
    """A dict key whose hash collides with a decision key and whose ``__eq__`` raises once armed.

    Looking up the colliding name (``d.get("kind")``) in a dict holding it calls ``__eq__``.
    """

    def __init__(self, collides_with: str) -> None:
        self.collides_with = collides_with

    def __hash__(self) -> int:
        if Armory.armed and self.collides_with == "":
            raise Boom("hostile __hash__")
        return hash(self.collides_with)

    def __eq__(self, other: object) -> bool:
        if Armory.armed:
            raise Boom("hostile __eq__")
        return self is other

    def __repr__(self) -> str:
        return f"HostileKey({self.collides_with!r})"


class Hostile:
    """Every protocol method raises once armed."""

    __eq__ = _trap("__eq__")
    __hash__ = _trap("__hash__")  # type: ignore[assignment]
    __len__ = _trap("__len__")
    __iter__ = _trap("__iter__", default=iter(()))
    __bool__ = _trap("__bool__", default=True)
    __getitem__ = _trap("__getitem__")
    __str__ = _trap("__str__")
    __format__ = _trap("__format__")
    keys = _trap("keys", default=())
    items = _trap("items", default=())
    get = _trap("get")

    def __repr__(self) -> str:
        return "Hostile()"


class HostileDict(dict):  # type: ignore[type-arg]
    """A dict subclass whose reading methods raise once armed."""

    __len__ = _trap("__len__", dict)
    __iter__ = _trap("__iter__", dict)
    __getitem__ = _trap("__getitem__", dict)
    __contains__ = _trap("__contains__", dict)
    keys = _trap("keys", dict)
    items = _trap("items", dict)
    values = _trap("values", dict)
    get = _trap("get", dict)

    def __repr__(self) -> str:
        return f"HostileDict({dict.__repr__(self)})"


class HostileList(list):  # type: ignore[type-arg]
    __len__ = _trap("__len__", list)
    __iter__ = _trap("__iter__", list)
    __getitem__ = _trap("__getitem__", list)

    def __repr__(self) -> str:
        return f"HostileList({list.__repr__(self)})"


class HostileStr(str):
    __eq__ = _trap("__eq__", str)
    __hash__ = _trap("__hash__", str)  # type: ignore[assignment]
    __len__ = _trap("__len__", str)
    strip = _trap("strip", str)
    __str__ = _trap("__str__", str)


class SpoofedDict:
    """Claims to be a dict through ``__class__`` (``isinstance`` believes it, ``type`` does not)."""

    @property  # type: ignore[misc]
    def __class__(self) -> type:
        return dict

    def __init__(self, data: dict[str, Any]) -> None:
        self._data = data

    def get(self, key: str, default: Any = None) -> Any:
        return self._data.get(key, default)

    def keys(self) -> Any:
        return self._data.keys()

    def __getitem__(self, key: str) -> Any:
        return self._data[key]

    def __len__(self) -> int:
        return len(self._data)

    def __contains__(self, key: object) -> bool:
        return key in self._data

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)


class Opaque:
    """An ordinary object that is not data."""


def recursive_list() -> list[Any]:
    value: list[Any] = [1]
    value.append(value)
    return value


def recursive_dict() -> dict[str, Any]:
    value: dict[str, Any] = {"a": 1}
    value["self"] = value
    return value


def nested_list(depth: int) -> list[Any]:
    value: list[Any] = []
    for _ in range(depth):
        value = [value]
    return value


def nested_dict(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {}
    for _ in range(depth):
        value = {"n": value}
    return value


# -- strategies ------------------------------------------------------------------------------------
any_text = st.text(st.characters(exclude_categories=[]), max_size=12)  # surrogates included
huge_text = st.builds(
    lambda char, size: char * size,
    st.characters(exclude_categories=[]),
    st.sampled_from([257, 4096, 65_537, 1_000_000]),
)
scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.sampled_from([2**53, -(2**63), 10**400])
    | st.floats(allow_nan=True, allow_infinity=True)
    | any_text
    | huge_text
)
odd_objects = st.one_of(
    st.builds(Opaque),
    st.builds(Hostile),
    st.builds(HostileStr, st.sampled_from(["finish", "continue", "echo", "a"])),
    st.builds(HostileKey, st.sampled_from(["kind", "x"])),
    st.sets(st.integers(), max_size=3),
    st.frozensets(st.text(max_size=3), max_size=3),
    st.binary(max_size=8),
    st.builds(bytearray, st.binary(max_size=4)),
    st.complex_numbers(allow_nan=False, max_magnitude=10),
    st.builds(decimal.Decimal, st.sampled_from(["1.5", "NaN", "-0"])),
    st.sampled_from(
        [
            ...,
            NotImplemented,
            print,
            len,
            int,
            dict,
            Opaque,
            types,
            range(3),
            lambda: None,
            math.nan,
            math.inf,
        ]
    ),
    st.builds(recursive_list),
    st.builds(recursive_dict),
    st.builds(nested_list, st.sampled_from([3, 50, 5_000])),
    st.builds(nested_dict, st.sampled_from([3, 50, 5_000])),
)


def _mapping_variants(data: dict[str, Any]) -> st.SearchStrategy[Any]:
    """``data`` as a dict, a FrozenDict (when freezable), a subclass, a proxy or a spoof."""

    def frozen(value: dict[str, Any]) -> Any:
        try:
            return FrozenDict(value)
        except FreezeError:
            return value

    return st.sampled_from(
        [
            lambda d: d,
            lambda d: d,
            lambda d: d,
            frozen,
            collections.OrderedDict,
            lambda d: collections.defaultdict(list, d),
            HostileDict,
            types.MappingProxyType,
            collections.UserDict,
            SpoofedDict,
        ]
    ).map(lambda wrap: wrap(dict(data)))


def _sequence_variants(items: list[Any]) -> st.SearchStrategy[Any]:
    return st.sampled_from(
        [
            list,
            list,
            list,
            tuple,
            HostileList,
            collections.deque,
            iter,
            lambda x: set(range(len(x))),
        ]
    ).map(lambda wrap: wrap(items))


json_like = st.recursive(
    scalars | any_text,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(any_text, children, max_size=4)
    ),
    max_leaves=10,
)
values = st.recursive(
    scalars | odd_objects,
    lambda children: (
        st.lists(children, max_size=4)
        | st.tuples(children, children)
        | st.dictionaries(any_text | st.integers() | st.none(), children, max_size=4)
        | st.dictionaries(any_text, children, max_size=3).flatmap(_mapping_variants)
    ),
    max_leaves=8,
)
call_ids = st.one_of(
    st.text(min_size=1, max_size=6),
    any_text,
    st.sampled_from(["a", "b", "", " ", "\t\n", "\u3000", "\x00", "i" * 256, "i" * 257]),
    huge_text,
    st.integers(-1, 1),
    st.none(),
    odd_objects,
)
tool_names = st.one_of(
    st.sampled_from(["echo", "echo", "data", "data"]),
    st.sampled_from(
        [
            "Echo",
            "echo ",
            " echo",
            "echo\x00",
            "\uff45\uff43\uff48\uff4f",  # fullwidth "echo"
            "",
            "   ",
            "__class__",
            "__init__",
            "__call__",
            "run",
            "_run",
            "echo.run",
            "echo._run",
            "data._run",
            "tools.echo",
            "registry",
            "decider",
            "decider/turn",
            "decider/tool/echo",
            "get",
            "keys",
        ]
    ),
    any_text,
    huge_text,
    st.integers(0, 3),
    odd_objects,
)
ATTACK_KEYS = ["limits", "tools", "state", "next", "result", "calls", "kind", "reduce", "ID", "run"]


@st.composite
def calls_like(draw: st.DrawFn) -> Any:
    entry: dict[Any, Any] = {
        "id": draw(call_ids),
        "tool": draw(tool_names),
        "input": draw(values),
    }
    mutation = draw(
        st.sampled_from(["none", "none", "none", "drop", "extra", "hostile-key", "not-a-map"])
    )
    if mutation == "drop":
        del entry[draw(st.sampled_from(["id", "tool", "input"]))]
    elif mutation == "extra":
        entry[draw(st.sampled_from(ATTACK_KEYS))] = draw(values)
    elif mutation == "hostile-key":
        entry[HostileKey(draw(st.sampled_from(["id", "tool", "input", ""])))] = draw(scalars)
    elif mutation == "not-a-map":
        return draw(values)
    return draw(_mapping_variants(entry)) if mutation != "hostile-key" else entry


@st.composite
def valid_batches(draw: st.DrawFn) -> Any:
    """A continue decision whose calls are valid (unique ids, known tools), sometimes with one
    bad call, sometimes in FrozenDict / tuple form or another container."""
    size = draw(st.integers(1, 60))
    ids = draw(
        st.lists(
            any_text.filter(lambda text: bool(text.strip())),
            min_size=size,
            max_size=size,
            unique=True,
        )
    )
    calls: list[Any] = []
    for call_id in ids:
        tool = draw(st.sampled_from(TOOL_NAMES))
        argument = draw(any_text | huge_text) if tool == "echo" else draw(values)
        calls.append({"id": call_id, "tool": tool, "input": argument})
    if draw(st.integers(0, 3)) == 0:
        calls[draw(st.integers(0, size - 1))] = draw(calls_like())
    decision = {"kind": "continue", "calls": calls}
    shape = draw(st.sampled_from(["plain", "plain", "plain", "frozen", "odd"]))
    if shape == "frozen":
        try:
            return FrozenDict(decision)
        except FreezeError:
            return decision
    if shape == "odd":
        decision["calls"] = draw(_sequence_variants(calls))
        return draw(_mapping_variants(decision))
    return decision


@st.composite
def huge_batches(draw: st.DrawFn) -> Any:
    """Thousands of well-formed calls (over the budget), sometimes with one bad call."""
    size = draw(st.sampled_from([MAX_CALLS + 1, 1_000, 5_000]))
    calls: list[Any] = [{"id": f"c{i}", "tool": "echo", "input": "x"} for i in range(size)]
    flaw = draw(st.sampled_from(["none", "unknown-tool", "bad-input", "duplicate", "bad-shape"]))
    index = draw(st.integers(0, size - 1))
    if flaw == "unknown-tool":
        calls[index] = {**calls[index], "tool": "nope"}
    elif flaw == "bad-input":
        calls[index] = {**calls[index], "input": 7}
    elif flaw == "duplicate":
        calls[index] = {**calls[index], "id": calls[(index + 1) % size]["id"]}
    elif flaw == "bad-shape":
        calls[index] = {**calls[index], "extra": 1}
    return {"kind": "continue", "calls": calls}


@st.composite
def envelopes(draw: st.DrawFn) -> Any:
    """Decision envelopes: right or wrong kinds, extra or missing keys, odd containers."""
    kind = draw(
        st.sampled_from(["finish", "continue", "next", "Finish", "reduce", "skip"])
        | st.builds(HostileStr, st.sampled_from(["finish", "continue"]))
        | values
    )
    data: dict[Any, Any] = {"kind": kind}
    if draw(st.booleans()):
        data["result"] = draw(values)
    if draw(st.booleans()):
        data["calls"] = draw(
            st.lists(calls_like(), max_size=4).flatmap(_sequence_variants) | values
        )
    for key in draw(st.lists(st.sampled_from(ATTACK_KEYS), max_size=2)):
        data[key] = draw(values)
    if draw(st.integers(0, 9)) == 0:
        data[HostileKey(draw(st.sampled_from(["kind", "result", "calls"])))] = 1
        return data
    return draw(_mapping_variants(data))


decisions = st.one_of(
    values,
    st.builds(finish, values),
    valid_batches(),
    valid_batches(),
    valid_batches(),
    st.builds(finish, values).flatmap(_mapping_variants),
    st.builds(
        lambda calls: {"kind": "continue", "calls": calls}, st.lists(calls_like(), max_size=6)
    ),
    valid_batches(),
    envelopes(),
    huge_batches(),
)


# -- an independent model of what the harness must accept ------------------------------------------
_MAPS = (dict, FrozenDict)
_SEQS = (list, *TUPLES)


def _plain_keys(mapping: Any) -> bool:
    return all(type(key) is str for key in dict.keys(mapping))


def expected_outcome(decision: Any) -> str:
    """``finish``, ``continue``, ``invalid`` or ``limit``: what DESIGN.md §3 calls for.

    Never calls a method of the decision's parts before checking their exact type.
    """
    if type(decision) not in _MAPS or not _plain_keys(decision):
        return "invalid"
    kind = decision.get("kind")
    if type(kind) is not str:
        return "invalid"
    if kind == "finish":
        return "finish" if set(decision) == {"kind", "result"} else "invalid"
    if kind != "continue" or set(decision) != {"kind", "calls"}:
        return "invalid"
    calls = decision["calls"]
    if type(calls) not in _SEQS or not calls:
        return "invalid"
    seen: set[str] = set()
    for entry in calls:
        if type(entry) not in _MAPS or not _plain_keys(entry):
            return "invalid"
        if set(entry) != {"id", "tool", "input"}:
            return "invalid"
        call_id, tool = entry["id"], entry["tool"]
        if type(call_id) is not str or not call_id.strip() or len(call_id) > 256:
            return "invalid"
        if type(tool) is not str or not tool.strip():
            return "invalid"
        if call_id in seen:
            return "invalid"
        seen.add(call_id)
    if len(calls) > MAX_CALLS:
        return "limit"
    for entry in calls:
        if entry["tool"] not in TOOL_NAMES:
            return "invalid"
        if entry["tool"] == "echo" and not isinstance(entry["input"], str):
            return "invalid"
    return "continue"


# -- the agent under test --------------------------------------------------------------------------
class Harness:
    """One agent reused by every example: ``decision`` is what turn 1 returns."""

    def __init__(self) -> None:
        self.decision: Any = None
        self.started: list[tuple[str, str]] = []
        self.decided: list[int] = []

        async def echo(value: str, ctx: Any) -> str:
            self.started.append(("echo", ctx.execution["call_id"]))
            return value

        def data(value: Any, ctx: Any) -> None:  # sync: runs in a worker thread
            self.started.append(("data", ctx.execution["call_id"]))

        def decide(state: Any, ctx: Any) -> Any:
            self.decided.append(ctx.turn)
            return self.decision if ctx.turn == 1 else finish("done")

        self.agent = define_agent(
            id="decider",
            input_schema=dict[str, Any],
            result_schema=Any,
            initial_state=lambda validated: {},
            decide=decide,
            tools={
                "echo": define_tool(
                    description="Echo text.",
                    input_schema=Annotated[str, pydantic.Strict()],
                    output_schema=str,
                    run=echo,
                ),
                "data": define_tool(
                    description="Take anything.", input_schema=Any, output_schema=Any, run=data
                ),
            },
            limits={"max_calls": MAX_CALLS, "max_concurrency": 4},
        )

    def run(self, decision: Any) -> PipelineRun:
        self.decision = decision
        self.started.clear()
        self.decided.clear()
        Armory.armed = True
        try:
            return asyncio.run(asyncio.wait_for(self.agent.run({}), HANG_GUARD))
        finally:
            Armory.armed = False


HARNESS = Harness()


def _codes(run: PipelineRun) -> list[str | None]:
    return [error.source_code for error in run.errors]


def _check(decision: Any, run: PipelineRun, expected: str) -> None:
    # Formatting the errors must work whatever the decision held (no value is quoted).
    Armory.armed = True
    try:
        texts = [error.format() for error in run.errors]
    finally:
        Armory.armed = False
    assert all("Boom" not in text and "hostile" not in text for text in texts), texts
    if expected == "finish":
        assert (run.status, _codes(run)) == ("completed", []), texts
        assert run.value is decision["result"]
        assert HARNESS.started == []
    elif expected == "continue":
        assert (run.status, _codes(run)) == ("completed", []), texts
        assert run.value == "done"
        wanted = sorted((entry["tool"], entry["id"]) for entry in decision["calls"])
        assert sorted(HARNESS.started) == wanted
    else:
        code = AGENT_LIMIT_REACHED if expected == "limit" else AGENT_INVALID_DECISION
        assert (run.status, _codes(run)) == ("failed", [code]), texts
        assert HARNESS.started == [], "a handler started for a rejected decision"
        assert HARNESS.decided == [1]


@pytest.mark.slow
@settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(decision=decisions)
@example(decision={HostileKey("kind"): 1, "result": "x", "z": 2})
def test_any_value_runs_only_when_valid_else_fails_before_any_handler(decision: Any) -> None:
    """Every decision completes as the model says or is rejected with its code; no handler
    starts for a rejected one, nothing hangs, nothing else escapes."""
    expected = expected_outcome(decision)
    event(expected)
    _check(decision, HARNESS.run(decision), expected)


@pytest.mark.parametrize(
    "decision",
    [
        pytest.param({HostileKey("kind"): 1, "result": "x", "z": 2}, id="envelope-key-eq"),
        pytest.param(
            {"kind": "continue", "calls": [{"id": "a", "tool": "echo", HostileKey("input"): 1}]},
            id="call-key-eq",
        ),
        pytest.param(
            {"kind": "continue", "calls": [{"id": "a", "tool": "echo", HostileKey(""): 1}]},
            id="call-key-hash",
        ),
    ],
)
def test_hostile_dict_keys_are_an_invalid_decision(decision: Any) -> None:
    run = HARNESS.run(decision)
    assert (run.status, _codes(run)) == ("failed", [AGENT_INVALID_DECISION])
    assert HARNESS.started == []


def test_thousands_of_valid_calls_within_the_budget_all_run() -> None:
    """A batch of 2,000 calls admitted by a 2,000-call budget: every handler runs once, and the
    outcomes reach the reducer in decision order."""
    size = 2_000
    started: list[str] = []
    seen: list[str] = []

    async def echo(value: str, ctx: Any) -> str:
        started.append(value)
        return value

    def reduce(state: Any, outcomes: Any) -> Any:
        seen.extend(outcome["value"] for outcome in outcomes)
        return state

    agent = define_agent(
        id="wide",
        input_schema=Any,
        result_schema=str,
        initial_state=lambda validated: {},
        decide=scripted(
            continue_with(*(call("echo", f"v{i}", f"c{i}") for i in range(size))), finish("ok")
        ),
        reduce=reduce,
        tools={
            "echo": define_tool(description="E.", input_schema=str, output_schema=str, run=echo)
        },
        limits={"max_calls": size, "max_concurrency": 8},
    )

    run = asyncio.run(asyncio.wait_for(agent.run(None), HANG_GUARD))

    assert (run.status, run.value) == ("completed", "ok")
    assert sorted(started) == sorted(f"v{i}" for i in range(size))
    assert seen == [f"v{i}" for i in range(size)]


# -- state ----------------------------------------------------------------------------------------
def freezable(value: Any) -> bool:
    """What ``freeze`` must accept (DESIGN.md §3), without calling any method of ``value``."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    active: set[int] = set()
    exits: list[Any] = []
    # An explicit depth-first walk with enter/exit markers, to tell cycles from sharing.
    while stack:
        item, depth = stack.pop()
        if item is exits:
            active.discard(depth)
            continue
        kind = type(item)
        if kind in (str, int, bool, type(None), FrozenDict) or kind is _FROZEN_TUPLE:
            continue
        if kind is float:
            if not math.isfinite(item):
                return False
            continue
        if kind not in (list, tuple, dict):
            return False
        if id(item) in active or depth > 1000:
            return False
        if kind is dict:
            if not _plain_keys(item):
                return False
            children = list(dict.values(item))
        else:
            children = list(item)
        active.add(id(item))
        stack.append((exits, id(item)))
        stack.extend((child, depth + 1) for child in children)
    return True


def plain(value: Any) -> Any:
    """``value`` with tuples as lists and FrozenDicts as dicts (freezable values only)."""
    return thaw(value)


def assert_deeply_frozen(value: Any) -> None:
    stack = [value]
    while stack:
        item = stack.pop()
        kind = type(item)
        if kind is FrozenDict:
            stack.extend(dict.values(item))
        elif kind in TUPLES:
            stack.extend(item)
        else:
            assert kind in (str, int, bool, float, type(None)), kind


class StateHarness:
    def __init__(self) -> None:
        self.value: Any = None
        self.seen: list[Any] = []

        async def echo(value: str, ctx: Any) -> str:
            return value

        def decide(state: Any, ctx: Any) -> Any:
            if ctx.turn == 1:
                return continue_with(call("echo", "x"))
            self.seen.append(state)
            return finish("done")

        def reduce(state: Any, outcomes: Any) -> Any:
            return self.value

        self.agent = define_agent(
            id="stateful",
            input_schema=Any,
            result_schema=str,
            initial_state=lambda validated: None,
            decide=decide,
            reduce=reduce,
            tools={
                "echo": define_tool(description="E.", input_schema=str, output_schema=str, run=echo)
            },
        )

    def run(self, value: Any) -> PipelineRun:
        self.value = value
        self.seen.clear()
        Armory.armed = True
        try:
            return asyncio.run(asyncio.wait_for(self.agent.run(None), HANG_GUARD))
        finally:
            Armory.armed = False


STATE = StateHarness()


@settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(value=values | json_like)
def test_any_reducer_result_is_committed_frozen_or_rejected_as_invalid_state(value: Any) -> None:
    accepted = freezable(value)
    event("accepted" if accepted else "rejected")
    run = STATE.run(value)
    if accepted:
        assert (run.status, _codes(run)) == ("completed", [])
        (state,) = STATE.seen
        assert is_frozen(state)
        assert_deeply_frozen(state)
        assert plain(state) == plain(value)
    else:
        assert (run.status, _codes(run)) == ("failed", [AGENT_INVALID_STATE])
        assert STATE.seen == [], "decide saw a state that was never committed"
        message = run.errors[0].format()
        assert "Boom" not in message and "hostile" not in message


def _mutations(target: Any) -> list[tuple[str, Callable[[], Any]]]:
    if type(target) is FrozenDict:
        return [
            ("setitem", lambda: target.__setitem__("k", 1)),
            ("delitem", lambda: target.__delitem__("k")),
            ("update", lambda: target.update(k=1)),
            ("pop", lambda: target.pop("k")),
            ("popitem", lambda: target.popitem()),
            ("setdefault", lambda: target.setdefault("k", 1)),
            ("clear", lambda: target.clear()),
            ("ior", lambda: target.__ior__({"k": 1})),
            ("setattr", lambda: object.__setattr__(target, "k", 1)),
            ("class", lambda: object.__setattr__(target, "__class__", dict)),
            ("dict", lambda: object.__setattr__(target, "__dict__", {})),
        ]
    return [
        ("append", lambda: target.append(1)),
        ("extend", lambda: target.extend([1])),
        ("setitem", lambda: target.__setitem__(0, 1)),
        ("iadd", lambda: target.__iadd__((1,))),
        ("setattr", lambda: object.__setattr__(target, "k", 1)),
    ]


def _containers(value: Any) -> Iterator[Any]:
    stack = [value]
    while stack:
        item = stack.pop()
        if type(item) is FrozenDict:
            yield item
            stack.extend(dict.values(item))
        elif type(item) in TUPLES:
            yield item
            stack.extend(item)


async def test_no_reference_handed_to_reduce_or_decide_can_change_committed_state() -> None:
    """Every mutator on every container of the state and the outcomes raises, and keeping the
    list a reducer returned and changing it afterwards changes nothing either."""
    kept: list[Any] = []
    attempts: list[tuple[str, str]] = []
    states: list[Any] = []

    async def echo(value: str, ctx: Any) -> str:
        return value

    def attack(where: str, value: Any) -> None:
        for container in _containers(value):
            for name, mutate in _mutations(container):
                try:
                    mutate()
                except (TypeError, AttributeError):
                    attempts.append((where, name))
                else:
                    raise AssertionError(f"{where}: {name} changed a frozen {type(container)}")

    def initial_state(validated: Any) -> Any:
        return {"notes": kept, "nested": {"deep": [{"x": [1, 2]}]}}

    def decide(state: Any, ctx: Any) -> Any:
        before = thaw(state)
        attack("decide-state", state)
        attack("decide-ctx", (ctx.capabilities, ctx.execution, ctx.result_json_schema))
        kept.append("added after return")  # the very list initial_state / reduce returned
        kept.insert(0, "and another")
        assert thaw(state) == before
        kept.clear()
        states.append(before)
        if ctx.turn < 3:
            return continue_with(call("echo", f"t{ctx.turn}"))
        return finish("done")

    def reduce(state: Any, outcomes: Any) -> Any:
        attack("reduce-state", state)
        attack("reduce-outcomes", outcomes)
        kept.extend([*state["notes"], outcomes[0]["value"]])
        return {"notes": kept, "nested": state["nested"]}

    agent = define_agent(
        id="attacked",
        input_schema=dict[str, Any],
        result_schema=str,
        initial_state=initial_state,
        decide=decide,
        reduce=reduce,
        tools={
            "echo": define_tool(description="E.", input_schema=str, output_schema=str, run=echo)
        },
    )

    run = await asyncio.wait_for(agent.run({"question": {"a": [1]}}), HANG_GUARD)

    assert (run.status, run.value) == ("completed", "done")
    nested = {"deep": [{"x": [1, 2]}]}
    assert states == [
        {"notes": [], "nested": nested},
        {"notes": ["t1"], "nested": nested},
        {"notes": ["t1", "t2"], "nested": nested},
    ]
    wheres = {where for where, _ in attempts}
    assert wheres == {"decide-state", "decide-ctx", "reduce-state", "reduce-outcomes"}


# -- model data selects names and supplies arguments, nothing else ---------------------------------
def _guarded_agent(started: list[str], **extra: Any) -> Pipeline:
    async def echo(value: str, ctx: Any) -> str:
        started.append(value)
        return value

    child = define_pipeline(
        id="child",
        options_schema=str,
        steps=[step("only", lambda inputs, ctx: ctx.options)],
        finalize="only",
    )
    fields: dict[str, Any] = {
        "id": "guarded",
        "input_schema": Any,
        "result_schema": Any,
        "initial_state": lambda validated: {},
        "tools": {
            "echo": define_tool(description="E.", input_schema=str, output_schema=str, run=echo),
            "child_tool": pipeline_tool(child, description="Run the child."),
        },
        "limits": {"max_turns": 3, "max_calls": 2, "max_decisions": 3, "max_depth": 1},
    }
    fields.update(extra)
    return define_agent(**fields)


VALID = call("echo", "ok", "c1")


def _tool_object() -> Any:
    return define_tool(
        description="Injected.", input_schema=str, output_schema=str, run=lambda value, ctx: value
    )


ESCAPES = [
    pytest.param(
        {"kind": "continue", "calls": [VALID], "limits": {"max_calls": 10**6}}, id="raise-limits"
    ),
    pytest.param({"kind": "continue", "calls": [VALID], "max_calls": 10**6}, id="limit-key"),
    pytest.param(
        {"kind": "finish", "result": "x", "limits": {"max_turns": 100}}, id="finish-with-limits"
    ),
    pytest.param(
        {"kind": "continue", "calls": [{**VALID, "limits": {"max_calls": 9}}]},
        id="call-with-limits",
    ),
    pytest.param(
        {"kind": "continue", "calls": [VALID], "tools": {"shell": "os:system"}},
        id="register-tools-key",
    ),
    pytest.param(
        {"kind": "continue", "calls": [call(print, "x", "c1")]},  # type: ignore[arg-type]
        id="tool-is-a-builtin",
    ),
    pytest.param(
        {"kind": "continue", "calls": [call(lambda v, c: v, "x", "c1")]},  # type: ignore[arg-type]
        id="tool-is-a-lambda",
    ),
    pytest.param(
        {"kind": "continue", "calls": [{"id": "c1", "tool": _tool_object(), "input": "x"}]},
        id="tool-is-a-tool-object",
    ),
    pytest.param(
        {
            "kind": "continue",
            "calls": [
                {
                    "id": "c1",
                    "tool": {"name": "shell", "run": "os:system", "description": "Run a command."},
                    "input": "ls",
                }
            ],
        },
        id="tool-is-a-description",
    ),
    pytest.param(
        {
            "kind": "continue",
            "calls": [{"id": "c1", "tool": "shell", "input": "ls", "run": "os:system"}],
        },
        id="call-with-run",
    ),
    *(
        pytest.param(continue_with(call(name, "x", "c1")), id=f"name-{name}")
        for name in [
            "__class__",
            "__init__",
            "__call__",
            "__getattribute__",
            "run",
            "_run",
            "echo.run",
            "echo._run",
            "echo.__class__",
            "tools",
            "registry",
            "guarded",
            "guarded/turn",
            "guarded/tool/echo",
            "child",
            "os:system",
            "builtins.eval",
            "echo\x00",
            "ECHO",
        ]
    ),
    pytest.param({"kind": "next"}, id="next"),
    pytest.param({"kind": "next", "state": {"a": 1}}, id="next-with-state"),
    pytest.param({"kind": "finish", "result": "x", "state": {"a": 1}}, id="finish-with-state"),
    pytest.param(
        {"kind": "continue", "calls": [VALID], "state": {"a": 1}}, id="continue-with-state"
    ),
    pytest.param({"kind": "continue", "calls": [VALID], "next": {"turn": 99}}, id="next-key"),
    pytest.param({"kind": "reduce", "calls": [VALID]}, id="kind-reduce"),
    pytest.param({"kind": "skip", "result": "x"}, id="kind-skip"),
    pytest.param({"kind": "finish", "result": "x", "turn": 1}, id="finish-with-turn"),
    pytest.param({"kind": "continue", "calls": [VALID], "concurrency": 100}, id="concurrency"),
]


@pytest.mark.parametrize("decision", ESCAPES)
async def test_a_decision_cannot_change_limits_register_tools_reach_handlers_or_the_graph(
    decision: Any,
) -> None:
    started: list[str] = []
    agent = _guarded_agent(started, decide=scripted(decision, finish("never")))

    with capture_trace() as trace:
        run = await asyncio.wait_for(agent.run(None, trace=trace), HANG_GUARD)

    assert (run.status, _codes(run)) == ("failed", [AGENT_INVALID_DECISION])
    assert started == []
    assert not [r for r in trace.records if r["pipelineId"].startswith("guarded/tool/")]


async def test_limits_stay_those_of_the_definition_whatever_the_decisions_said() -> None:
    """The model asks for more; the 2-call budget still refuses the third call."""
    started: list[str] = []
    decide = scripted(
        continue_with(call("echo", "1", "c1"), call("echo", "2", "c2")),
        continue_with(call("echo", "3", "c3")),
        finish("never"),
    )
    agent = _guarded_agent(started, decide=decide)

    run = await asyncio.wait_for(agent.run(None), HANG_GUARD)

    assert (run.status, _codes(run)) == ("failed", [AGENT_LIMIT_REACHED])
    assert started == ["1", "2"]
    assert "max_calls=2" in run.errors[0].format()


# -- nothing callable in the decision context but its own services ---------------------------------
_DATA = (str, int, float, bool, type(None))


def _walk_public(root: Any, services: tuple[Any, ...]) -> tuple[list[str], list[str]]:
    """Callables and foreign objects reachable through public attributes and data items.

    Data containers are walked by their items only; ``root`` and the ``services`` by their
    public attributes. Returns ``(callables that are not a service's own bound method,
    objects that are neither data nor a service)``.
    """
    stray_callables: list[str] = []
    foreign: list[str] = []
    seen: set[int] = set()
    stack: list[tuple[str, Any]] = [("ctx", root)]
    allowed_owners = {id(owner) for owner in (root, *services)}
    while stack:
        path, value = stack.pop()
        if id(value) in seen and not isinstance(value, _DATA):
            continue
        seen.add(id(value))
        if isinstance(value, types.MethodType | types.BuiltinMethodType):
            owner = getattr(value, "__self__", None)
            if id(owner) not in allowed_owners:
                stray_callables.append(path)
            continue
        if callable(value):
            stray_callables.append(path)
            continue
        kind = type(value)
        if kind in _DATA:
            continue
        if kind in (FrozenDict, dict):
            stack.extend((f"{path}[{key!r}]", item) for key, item in dict.items(value))
        elif kind in (*TUPLES, list):
            stack.extend((f"{path}[{index}]", item) for index, item in enumerate(value))
        elif id(value) in allowed_owners:
            for name in dir(value):
                if not name.startswith("_"):
                    stack.append((f"{path}.{name}", getattr(value, name)))
        else:
            foreign.append(f"{path}: {kind.__name__}")
    return stray_callables, foreign


async def test_the_decision_context_offers_no_callable_but_its_own_services() -> None:
    def handler(value: str, ctx: Any) -> str:
        return value

    contexts: list[Any] = []

    def decide(state: Any, ctx: Any) -> Any:
        contexts.append(ctx)
        return finish("done")

    child = define_pipeline(
        id="child", options_schema=str, steps=[step("only", lambda inputs, ctx: ctx.options)]
    )
    agent = define_agent(
        id="inspected",
        input_schema=dict[str, Any],
        result_schema=Any,
        initial_state=lambda validated: {},
        decide=decide,
        dry_run=decide,
        tools={
            "secret": define_tool(
                description="Has a handler.",
                input_schema=str,
                output_schema=str,
                run=handler,
                preview=handler,
            ),
            "child": pipeline_tool(child, description="A pipeline tool."),
        },
    )

    await asyncio.wait_for(agent.run({"nested": {"list": [1, "two"]}}), HANG_GUARD)
    await asyncio.wait_for(agent.run({}, dry_run=True), HANG_GUARD)

    assert len(contexts) == 2
    for ctx in contexts:
        assert isinstance(ctx.signal, CancelToken)
        assert isinstance(ctx.log, StepLogger)
        strays, foreign = _walk_public(ctx, (ctx.signal, ctx.log, ctx.usage))
        assert strays == []
        assert foreign == []
        with pytest.raises(AttributeError):
            ctx.registry = {}


# -- tool data in traces ---------------------------------------------------------------------------
async def test_a_call_id_with_a_lone_surrogate_gets_the_same_outcome_traced_or_not() -> None:
    decision = continue_with(call("echo", "x", "id-\ud800-end"))

    def agent() -> Pipeline:
        return _guarded_agent([], decide=scripted(decision, finish("done")))

    untraced = await asyncio.wait_for(agent().run(None), HANG_GUARD)
    with capture_trace() as trace:
        traced = await asyncio.wait_for(agent().run(None, trace=trace), HANG_GUARD)

    assert (traced.status, _codes(traced)) == (untraced.status, _codes(untraced))
    assert untraced.status == "completed" or _codes(untraced) == [AGENT_INVALID_DECISION]


async def test_tool_data_with_lone_surrogates_never_retires_a_file_sink(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Handlers log, report and raise what a tool returned (untrusted), surrogates included;
    the run completes and both stored traces hold it all, with no sink warning."""
    fetched = "page \ud83d text \udfff end\x1b[2J"

    async def fetch(value: str, ctx: Any) -> str:
        ctx.log.info("fetched %s", fetched)
        ctx.report_progress(1, 2, fetched)
        return "ok"

    async def broken(value: str, ctx: Any) -> str:
        raise RuntimeError(fetched)

    def agent(tools: dict[str, Any], decision: Any) -> Pipeline:
        return define_agent(
            id="fetching",
            input_schema=Any,
            result_schema=Any,
            initial_state=lambda validated: {},
            decide=scripted(decision, finish("done")),
            tools=tools,
        )

    tool = define_tool(description="Fetch.", input_schema=str, output_schema=str, run=fetch)
    failing = define_tool(description="Fail.", input_schema=str, output_schema=str, run=broken)
    ndjson, sqlite = tmp_path / "t.ndjson", tmp_path / "t.sqlite"
    with caplog.at_level(logging.WARNING), NdjsonSink(ndjson) as a, SqliteSink(sqlite) as b:
        ok = await agent({"fetch": tool}, continue_with(call("fetch", "u"))).run(None, trace=[a, b])
        bad = await agent({"fail": failing}, continue_with(call("fail", "u"))).run(
            None, trace=[a, b]
        )

    assert ok.status == "completed"
    assert bad.status == "failed"
    assert [r for r in caplog.records if r.name == "tubeless.trace"] == []
    for path in (ndjson, sqlite):
        records = read_trace(path)
        roots = [r for r in records if r["name"] == "pipeline.completed" and "parentRunId" not in r]
        assert [r["payload"]["status"] for r in roots] == ["completed", "failed"]


# -- deeply nested model data ----------------------------------------------------------------------
RECURSIVE = {"anyOf": [{"type": "string"}, {"type": "array", "items": {"$ref": "#"}}]}


def _nested(depth: int) -> Any:
    value: Any = "leaf"
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize(
    ("schema", "depth"),
    [
        pytest.param(
            RECURSIVE,
            200,
            id="json-schema-200",
        ),
        pytest.param(
            RECURSIVE,
            5_000,
            id="json-schema-5000",
        ),
        pytest.param(list[Any], 5_000, id="pydantic-list-5000"),
        pytest.param(dict[str, Any], 5_000, id="pydantic-dict-5000"),
    ],
)
@pytest.mark.parametrize("where", ["argument", "finish-result"])
async def test_deeply_nested_model_data_is_accepted_or_an_invalid_decision(
    schema: Any, depth: int, where: str
) -> None:
    """JSON from a model can nest as deep as ``json.loads`` allows: validating it either
    accepts it or rejects the decision, never anything else."""
    from tubeless import Schema

    started: list[Any] = []

    async def take(value: Any, ctx: Any) -> str:
        started.append(1)
        return "ok"

    data = _nested(depth) if schema is not dict[str, Any] else {"a": _nested(depth)}
    built = Schema.json(schema) if isinstance(schema, dict) else schema
    decision = continue_with(call("take", data)) if where == "argument" else finish(data)
    agent = define_agent(
        id="deep",
        input_schema=Any,
        result_schema=built if where == "finish-result" else Any,
        initial_state=lambda validated: {},
        decide=scripted(decision, finish("done")),
        tools={
            "take": define_tool(
                description="Take.", input_schema=built, output_schema=str, run=take
            )
        },
    )

    run = await asyncio.wait_for(agent.run(None), HANG_GUARD)

    if run.status != "completed":
        assert (run.status, _codes(run)) == ("failed", [AGENT_INVALID_DECISION])
        assert started == []


def test_a_deeply_nested_cli_input_is_rejected_input(capsys: pytest.CaptureFixture[str]) -> None:
    from tubeless._cli import main

    project = Path(__file__).resolve().parents[2] / "projects" / "scripted-agent.yaml"
    code = main(["run", str(project), "--input", "[" * 100_000 + "]" * 100_000, "-q"])
    err = capsys.readouterr().err
    assert code == 4, err
    assert err.startswith("error: --input")
