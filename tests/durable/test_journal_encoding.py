"""The durable journal writes what changed and commits no more than its guarantees need
(issue 32, item 2).

The encoder reuses the text of values it encoded before (by identity) and of the tuple a new
tuple extends; whatever it reuses, its text must be exactly ``json.dumps`` of the value
(sorted keys, compact). A checkpointed turn of one call commits twice: the reservation (with
the turn before's outcome and reduced state), then the decision, admission and intent.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from tubeless import define_agent, define_tool
from tubeless.durable import MemoryCheckpoints
from tubeless.durable._encode import Fragments
from tubeless.frozen import FrozenTuple, freeze

scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=6)
)
values = st.recursive(
    scalars,
    lambda children: (
        st.lists(children, max_size=6) | st.dictionaries(st.text(max_size=6), children, max_size=5)
    ),
    max_leaves=12,
)


def dumps(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(values, st.lists(values, max_size=12)), min_size=1, max_size=4))
def test_reused_text_is_exactly_what_json_dumps_writes(steps: list[Any]) -> None:
    """A state grown like a reducer grows it (the old history plus new items, the other keys
    kept or replaced), each written after the last with the same fragments."""
    fragments = Fragments()
    history: Any = FrozenTuple()
    state: Any = freeze({"history": history})
    for other, added in steps:
        history = history + FrozenTuple(freeze(added))
        state = freeze({"history": history, "other": other, "kept": state["history"]})
        assert fragments.text(state) == dumps(state)
        assert fragments.text(history) == dumps(history)


def test_equal_items_that_encode_differently_are_never_reused() -> None:
    """``1``, ``1.0`` and ``True`` are equal: only the same objects share a text."""
    fragments = Fragments()
    ones = FrozenTuple([1] * 10)
    assert fragments.text(ones) == "[" + ",".join(["1"] * 10) + "]"
    for other in (FrozenTuple([1.0] * 10 + [2]), FrozenTuple([True] * 10), (0, *ones[1:], 3)):
        assert other[1:10] == ones[1:10]
        assert fragments.text(other) == dumps(other)


def test_a_tuple_extending_another_reuses_its_prefix_and_stays_exact() -> None:
    fragments = Fragments()
    first = FrozenTuple(freeze([{"id": f"c{i}", "ok": True, "value": i / 3} for i in range(20)]))
    assert fragments.text(first) == dumps(first)
    longer = first + FrozenTuple(freeze([{"id": "next", "nested": [1, {"b": 2, "a": 1.5}]}]))
    assert fragments.text(longer) == dumps(longer)
    shorter = FrozenTuple(longer[:5])
    assert fragments.text(shorter) == dumps(shorter)


def test_a_value_that_does_not_round_trip_is_refused() -> None:
    """Plain (not frozen) values are still checked: a tuple key cannot be written."""
    fragments = Fragments()
    try:
        fragments.text({(1, 2): "x"})
    except (TypeError, ValueError):
        pass
    else:  # pragma: no cover - the assertion says what went wrong
        raise AssertionError("a dict with a tuple key was encoded")


class _Counting:
    """A store counting its durable writes."""

    def __init__(self) -> None:
        self.store = MemoryCheckpoints()
        self.writes = 0

    def acquire(self, key: str) -> Any:
        lease = self.store.acquire(key)
        outer = self

        class Counted:
            def read(self) -> str | None:
                return lease.read()

            def write(self, document: str) -> None:
                outer.writes += 1
                lease.write(document)

            def close(self) -> None:
                lease.close()

        return Counted()

    def list(self) -> Any:
        return self.store.list()

    def delete(self, key: str) -> bool:
        return self.store.delete(key)

    def close(self) -> None:
        self.store.close()


def _agent(turns: int, width: int) -> Any:
    def decide(state: Any, ctx: Any) -> dict[str, Any]:
        if ctx.turn > turns:
            return {"kind": "finish", "result": len(state["history"])}
        calls = [{"id": f"c{i}", "tool": "upper", "input": "abc"} for i in range(width)]
        return {"kind": "continue", "calls": calls}

    return define_agent(
        id="counted",
        input_schema=dict,
        result_schema=int,
        initial_state=lambda _: {"history": ()},
        decide=decide,
        reduce=lambda state, outcomes: {"history": state["history"] + outcomes},
        tools={
            "upper": define_tool(
                description="Uppercase.", input_schema=str, output_schema=str, run=_upper
            )
        },
        limits={"max_turns": turns + 1, "max_decisions": turns + 1, "max_calls": turns * width},
    )


def _upper(text: str, ctx: Any) -> str:
    return text.upper()


def test_a_one_call_turn_commits_twice() -> None:
    """Turn by turn: the reservation, then decision + admission + intent; the outcome goes
    with the next reservation. A run of n one-call turns: 2n, plus the finishing decision's
    reservation and its result."""
    for turns in (1, 5, 20):
        store = _Counting()
        run = asyncio.run(_agent(turns, 1).run({}, checkpoints=store, checkpoint_key="k"))
        assert (run.status, run.value) == ("completed", turns)
        assert store.writes == 2 * turns + 2


def test_each_outcome_of_a_batch_is_committed_as_it_arrives() -> None:
    """A batch of three calls: reservation, then per call its intent and its outcome."""
    store = _Counting()
    run = asyncio.run(_agent(2, 3).run({}, checkpoints=store, checkpoint_key="k"))
    assert (run.status, run.value) == ("completed", 6)
    assert store.writes == 2 * (1 + 3 + 3) + 2
    [saved] = store.store.list()
    entry = json.loads(saved.document)["agents"]["counted"]
    assert (entry["phase"], entry["result"], len(entry["state"]["history"])) == (
        "completed",
        6,
        6,
    )
