"""Freezing and thawing plain data (``tubeless.frozen``)."""

from __future__ import annotations

import collections
import copy
import enum
import json
import math
import pickle
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tubeless.frozen import (
    MAX_DEPTH,
    FreezeError,
    FrozenDict,
    canonical_json,
    digest,
    fingerprint,
    freeze,
    is_flat_json,
    is_frozen,
    thaw,
)

# -- strategies -----------------------------------------------------------------------------------

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text()
)
json_values = st.recursive(
    json_scalars,
    lambda children: (
        st.lists(children, max_size=5)
        | st.tuples(children, children)
        | st.dictionaries(st.text(max_size=8), children, max_size=5)
    ),
    max_leaves=30,
)


class _Opaque:
    pass


anything = st.recursive(
    json_scalars
    | st.just(math.nan)
    | st.just(math.inf)
    | st.binary(max_size=4)
    | st.sets(st.integers(), max_size=3)
    | st.builds(_Opaque)
    | st.just(len),
    lambda children: (
        st.lists(children, max_size=4)
        | st.tuples(children)
        | st.dictionaries(st.text(max_size=4) | st.integers(), children, max_size=4)
    ),
    max_leaves=20,
)


# Wide containers: large ones are scanned at C speed before any item gets a Python-level step.
wide_items = (
    json_scalars
    | st.lists(json_scalars, max_size=3)
    | st.builds(FrozenDict, st.dictionaries(st.text(max_size=3), json_scalars, max_size=3))
)
wide_json_values = st.one_of(
    st.lists(wide_items, min_size=40, max_size=60),
    st.lists(wide_items, min_size=40, max_size=60).map(tuple),
    st.dictionaries(st.text(max_size=6), wide_items, min_size=40, max_size=60),
)


def as_lists(value: Any) -> Any:
    """``value`` with every tuple turned into a list (what a thaw round trip gives back)."""
    if isinstance(value, (list, tuple)):
        return [as_lists(item) for item in value]
    if isinstance(value, dict):
        return {key: as_lists(item) for key, item in value.items()}
    return value


def containers(value: Any) -> list[Any]:
    """Every tuple and dict inside ``value``, itself included."""
    found: list[Any] = []
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            found.append(item)
            stack.extend(item.values())
        elif isinstance(item, tuple):
            found.append(item)
            stack.extend(item)
    return found


def nested_lists(depth: int) -> list[Any]:
    """``[[...[1]...]]`` with ``depth`` lists, built without recursion."""
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value  # type: ignore[no-any-return]  # always a list for depth >= 1


# -- FrozenDict -----------------------------------------------------------------------------------

MUTATIONS = [
    pytest.param(lambda d: d.__setitem__("a", 2), id="setitem"),
    pytest.param(lambda d: d.__delitem__("a"), id="delitem"),
    pytest.param(lambda d: d.clear(), id="clear"),
    pytest.param(lambda d: d.pop("a"), id="pop"),
    pytest.param(lambda d: d.pop("missing", None), id="pop-default"),
    pytest.param(lambda d: d.popitem(), id="popitem"),
    pytest.param(lambda d: d.setdefault("b", 1), id="setdefault"),
    pytest.param(lambda d: d.update({"b": 1}), id="update"),
    pytest.param(lambda d: d.update(b=1), id="update-kwargs"),
    pytest.param(lambda d: d.__ior__({"b": 1}), id="ior"),
]


@pytest.mark.parametrize("mutate", MUTATIONS)
def test_every_frozendict_mutator_raises_type_error(mutate: Callable[[Any], Any]) -> None:
    frozen = FrozenDict({"a": 1})
    with pytest.raises(TypeError, match="FrozenDict is immutable"):
        mutate(frozen)
    assert frozen == {"a": 1}


def test_frozendict_in_place_or_operator_raises() -> None:
    frozen = FrozenDict({"a": 1})
    with pytest.raises(TypeError, match="immutable"):
        frozen |= {"b": 2}
    assert frozen == {"a": 1}


def test_calling_init_again_does_not_refill_a_frozendict() -> None:
    frozen = FrozenDict({"a": 1})
    frozen.__init__({"b": 2})  # deliberately calling __init__ again
    assert frozen == {"a": 1}


def test_frozendict_works_as_a_dict() -> None:
    frozen = FrozenDict({"b": [1, {"c": None}], "a": 1.5})
    assert isinstance(frozen, dict)
    assert frozen == {"b": (1, {"c": None}), "a": 1.5}
    assert {**frozen} == dict(frozen)
    assert json.dumps(frozen) == '{"b": [1, {"c": null}], "a": 1.5}'
    assert list(frozen) == ["b", "a"]


def test_frozendict_construction_deep_freezes_values() -> None:
    frozen = FrozenDict({"a": [1, {"b": [2]}]}, c={"d": []})
    assert frozen == {"a": (1, {"b": (2,)}), "c": {"d": ()}}
    assert type(frozen["a"][1]) is FrozenDict
    assert type(frozen["c"]) is FrozenDict
    assert is_frozen(frozen)


def test_frozendict_construction_rejects_what_freeze_rejects() -> None:
    with pytest.raises(FreezeError, match=r"^/a/0: unsupported type set$"):
        FrozenDict({"a": [set()]})


def test_frozendict_is_hashable_and_equal_frozendicts_hash_equal() -> None:
    one = FrozenDict({"a": [1, 2], "b": {"c": "x"}})
    two = FrozenDict({"b": {"c": "x"}, "a": (1, 2)})
    assert one == two
    assert hash(one) == hash(two)
    assert {one: "found"}[two] == "found"


def test_frozendict_repr_names_the_type() -> None:
    assert repr(FrozenDict({"a": {"b": 1}})) == "FrozenDict({'a': FrozenDict({'b': 1})})"


def test_frozendict_copies_are_itself() -> None:
    frozen = FrozenDict({"a": [1]})
    assert frozen.copy() is frozen
    assert copy.copy(frozen) is frozen
    assert copy.deepcopy(frozen) is frozen
    assert FrozenDict(frozen) is frozen


@pytest.mark.parametrize("protocol", range(pickle.HIGHEST_PROTOCOL + 1))
def test_frozendict_pickles_to_an_equal_frozendict(protocol: int) -> None:
    frozen = FrozenDict({"a": [1, {"b": "c"}]})
    loaded = pickle.loads(pickle.dumps(frozen, protocol=protocol))
    assert type(loaded) is FrozenDict
    assert type(loaded["a"][1]) is FrozenDict
    assert loaded == frozen


def test_frozendict_merge_operators_return_new_frozendicts() -> None:
    frozen = FrozenDict({"a": 1})
    merged = frozen | {"b": [2]}
    assert type(merged) is FrozenDict
    assert merged == {"a": 1, "b": (2,)}
    reflected = {"b": [2], "a": 0} | frozen
    assert type(reflected) is FrozenDict
    assert reflected == {"b": (2,), "a": 1}
    assert frozen == {"a": 1}


def test_frozendict_fromkeys_freezes_the_value() -> None:
    frozen = FrozenDict.fromkeys(["a", "b"], [1])
    assert type(frozen) is FrozenDict
    assert frozen == {"a": (1,), "b": (1,)}


def test_frozendict_cannot_be_subclassed() -> None:
    with pytest.raises(TypeError, match="cannot be subclassed"):
        type("Sub", (FrozenDict,), {})


# -- freeze: accepted values ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        pytest.param(None, None, id="none"),
        pytest.param(True, True, id="bool"),
        pytest.param(7, 7, id="int"),
        pytest.param(-0.5, -0.5, id="float"),
        pytest.param("text", "text", id="str"),
        pytest.param([1, [2]], (1, (2,)), id="list"),
        pytest.param((1, [2]), (1, (2,)), id="tuple-with-list"),
        pytest.param({"b": 1, "a": [2]}, {"b": 1, "a": (2,)}, id="dict"),
    ],
)
def test_freeze_accepts_plain_data(value: Any, expected: Any) -> None:
    frozen = freeze(value)
    assert frozen == expected
    assert type(frozen) is type(expected) or type(frozen) is FrozenDict


def test_freeze_keeps_key_order() -> None:
    assert list(freeze({"z": 1, "a": 2, "m": 3})) == ["z", "a", "m"]


def test_freeze_keeps_bool_distinct_from_int() -> None:
    frozen = freeze([True, 1, False, 0])
    assert [type(item) for item in frozen] == [bool, int, bool, int]


def test_freeze_accepts_repeated_references_to_one_container() -> None:
    shared = {"x": [1, 2]}
    frozen = freeze({"a": shared, "b": shared, "c": [shared, shared]})
    assert frozen == {"a": {"x": (1, 2)}, "b": {"x": (1, 2)}, "c": ({"x": (1, 2)},) * 2}


def test_freeze_does_not_modify_its_input() -> None:
    value = {"a": [1, {"b": [2]}]}
    freeze(value)
    assert value == {"a": [1, {"b": [2]}]}
    assert type(value["a"]) is list


def test_freeze_accepts_exactly_max_depth_levels_of_nesting() -> None:
    assert is_frozen(freeze(nested_lists(MAX_DEPTH)))


# -- freeze: reuse of frozen values ---------------------------------------------------------------


@pytest.mark.parametrize(
    "value",
    [
        pytest.param(FrozenDict({"a": [1]}), id="frozendict"),
        pytest.param((1, "a", None, True, 2.5), id="tuple-of-scalars"),
        pytest.param(tuple(FrozenDict({"i": i}) for i in range(100)), id="tuple-of-frozendicts"),
        pytest.param(((1, 2), (3, (4,))), id="nested-tuples"),
        pytest.param((FrozenDict({"a": 1}), (2.5, "x")), id="mixed"),
        pytest.param((), id="empty-tuple"),
    ],
)
def test_freeze_returns_already_frozen_values_as_they_are(value: Any) -> None:
    assert freeze(value) is value
    assert is_frozen(value)


def test_freeze_reuses_frozen_children_inside_a_new_container() -> None:
    observations = tuple(FrozenDict({"turn": i, "text": "x"}) for i in range(4000))
    nested = FrozenDict({"a": 1})
    frozen = freeze({"observations": observations, "nested": nested, "new": [1]})
    assert frozen["observations"] is observations
    assert frozen["nested"] is nested


def test_freeze_keeps_frozen_items_of_a_large_container_and_converts_the_rest() -> None:
    frozen_items = [FrozenDict({"i": i}) for i in range(100)]
    nested = (1, (2.5, "x"))
    value = (*frozen_items, nested, [1, [2]], {"a": [3]}, 0.5, True)
    frozen = freeze(value)
    assert frozen == (*frozen_items, nested, (1, (2,)), {"a": (3,)}, 0.5, True)
    assert all(a is b for a, b in zip(frozen, value[:101], strict=False))
    assert type(frozen[102]) is FrozenDict


def test_freeze_returns_a_large_already_frozen_tuple_with_nested_tuples_as_is() -> None:
    value = tuple((i, (float(i), FrozenDict({"i": i}))) for i in range(200))
    assert freeze(value) is value
    assert is_frozen(value)


# -- freeze: rejected values ----------------------------------------------------------------------


class Colour(enum.IntEnum):
    RED = 1


Point = collections.namedtuple("Point", ["x", "y"])


class MyDict(dict[str, Any]):
    pass


class MyList(list[Any]):
    pass


def _self_containing_dict() -> dict[str, Any]:
    value: dict[str, Any] = {"a": 1}
    value["self"] = value
    return value


def _self_containing_list() -> list[Any]:
    value: list[Any] = [1]
    value.append(value)
    return value


def _deep_cycle() -> dict[str, Any]:
    inner: dict[str, Any] = {}
    outer = {"a": [{"b": inner}]}
    inner["back"] = outer
    return outer


def _cycle_through_tuple() -> list[Any]:
    outer: list[Any] = []
    outer.append((outer,))
    return outer


@pytest.mark.parametrize(
    ("value", "path", "reason"),
    [
        pytest.param(_self_containing_dict(), ("self",), "cycle", id="dict-in-itself"),
        pytest.param(_self_containing_list(), (1,), "cycle", id="list-in-itself"),
        pytest.param(_deep_cycle(), ("a", 0, "b", "back"), "cycle", id="nested-cycle"),
        pytest.param(_cycle_through_tuple(), (0, 0), "cycle", id="cycle-through-tuple"),
        pytest.param({"a": {1, 2}}, ("a",), "unsupported type set", id="set"),
        pytest.param({"a": frozenset()}, ("a",), "unsupported type frozenset", id="frozenset"),
        pytest.param([b"x"], (0,), "unsupported type bytes", id="bytes"),
        pytest.param([object()], (0,), "unsupported type object", id="object"),
        pytest.param([lambda: 1], (0,), "unsupported type function", id="lambda"),
        pytest.param([print], (0,), "unsupported type builtin_function_or_method", id="builtin"),
        pytest.param({"x": math.nan}, ("x",), "non-finite float", id="nan"),
        pytest.param({"x": math.inf}, ("x",), "non-finite float", id="inf"),
        pytest.param({"x": -math.inf}, ("x",), "non-finite float", id="-inf"),
        pytest.param((1.0, math.nan), (1,), "non-finite float", id="nan-in-tuple"),
        pytest.param({"a": {1: "x"}}, ("a",), "non-string key of type int", id="int-key"),
        pytest.param({("a",): 1}, (), "non-string key of type tuple", id="tuple-key"),
        pytest.param({"a": MyDict()}, ("a",), "unsupported type MyDict", id="dict-subclass"),
        pytest.param([MyList()], (0,), "unsupported type MyList", id="list-subclass"),
        pytest.param([Point(1, 2)], (0,), "unsupported type Point", id="namedtuple"),
        pytest.param([Colour.RED], (0,), "unsupported type Colour", id="int-enum"),
        pytest.param({1, 2}, (), "unsupported type set", id="root-set"),
        pytest.param(math.nan, (), "non-finite float", id="root-nan"),
    ],
)
def test_freeze_rejects_non_plain_data_with_path_and_reason(
    value: Any, path: tuple[str | int, ...], reason: str
) -> None:
    with pytest.raises(FreezeError) as caught:
        freeze(value)
    assert caught.value.path == path
    assert caught.value.reason == reason
    pointer = "".join(f"/{part}" for part in path)
    assert str(caught.value) == (f"{pointer}: {reason}" if path else reason)
    assert isinstance(caught.value, ValueError)


def _large_with(index: int, item: Any) -> list[Any]:
    value: list[Any] = [FrozenDict({"i": i}) if i % 2 else float(i) for i in range(100)]
    value[index] = item
    return value


def _large_self_containing_dict() -> dict[str, Any]:
    value: dict[str, Any] = {f"k{i}": i for i in range(100)}
    value["k50"] = [value]
    return value


@pytest.mark.parametrize(
    ("value", "path", "reason"),
    [
        pytest.param(_large_with(70, math.nan), (70,), "non-finite float", id="nan"),
        pytest.param(_large_with(99, {1, 2}), (99,), "unsupported type set", id="set"),
        pytest.param(
            {"big": _large_with(3, [0, {"a": math.inf}])},
            ("big", 3, 1, "a"),
            "non-finite float",
            id="nested-inf",
        ),
        pytest.param(_large_self_containing_dict(), ("k50", 0), "cycle", id="cycle"),
        pytest.param(
            tuple(_large_with(10, {"a": {2: "b"}})),
            (10, "a"),
            "non-string key of type int",
            id="int-key",
        ),
    ],
)
def test_freeze_reports_problems_inside_large_containers(
    value: Any, path: tuple[str | int, ...], reason: str
) -> None:
    with pytest.raises(FreezeError) as caught:
        freeze(value)
    assert (caught.value.path, caught.value.reason) == (path, reason)


def test_freeze_error_pointer_escapes_slash_and_tilde() -> None:
    with pytest.raises(FreezeError) as caught:
        freeze({"a/b": {"c~d": [None, math.nan]}})
    assert caught.value.pointer == "/a~1b/c~0d/1"
    assert str(caught.value) == "/a~1b/c~0d/1: non-finite float"


def test_freeze_error_never_quotes_values() -> None:
    secret = "hunter2-secret-token"
    state = {"api_key": secret, "observations": [0.5, 1.5, math.nan], "note": secret}
    with pytest.raises(FreezeError) as caught:
        freeze(state)
    message = str(caught.value)
    assert message == "/observations/2: non-finite float"
    assert secret not in message
    assert "nan" not in message.lower().replace("non-finite", "")


def test_freeze_error_for_an_object_names_only_its_type() -> None:
    class Leaky:
        def __repr__(self) -> str:
            return "password=swordfish"

    with pytest.raises(FreezeError) as caught:
        freeze({"a": Leaky()})
    assert str(caught.value) == "/a: unsupported type Leaky"


@pytest.mark.parametrize("depth", [MAX_DEPTH + 1, 10_000])
def test_freeze_rejects_deep_nesting_without_recursion_error(depth: int) -> None:
    with pytest.raises(FreezeError) as caught:
        freeze(nested_lists(depth))
    assert caught.value.reason == f"nesting deeper than {MAX_DEPTH}"
    assert caught.value.path == (0,) * MAX_DEPTH
    assert len(str(caught.value)) < 200


def test_freeze_rejects_deeply_nested_dicts_without_recursion_error() -> None:
    value: dict[str, Any] = {}
    for _ in range(10_000):
        value = {"k": value}
    with pytest.raises(FreezeError, match=f"nesting deeper than {MAX_DEPTH}$"):
        freeze(value)


# -- thaw -----------------------------------------------------------------------------------------


def test_thaw_returns_plain_mutable_containers() -> None:
    thawed = thaw(FrozenDict({"a": [1, {"b": (2,)}]}))
    assert thawed == {"a": [1, {"b": [2]}]}
    assert type(thawed) is dict
    assert type(thawed["a"]) is list
    assert type(thawed["a"][1]) is dict
    thawed["a"][1]["b"].append(3)


def test_thaw_gives_independent_copies_of_shared_values() -> None:
    shared = FrozenDict({"x": 1})
    thawed = thaw(FrozenDict({"a": shared, "b": shared}))
    thawed["a"]["x"] = 2
    assert thawed["b"] == {"x": 1}


def test_thaw_copies_plain_input_without_touching_it() -> None:
    value = {"a": [1, {"b": 2}]}
    thawed = thaw(value)
    thawed["a"][1]["b"] = 3
    assert value == {"a": [1, {"b": 2}]}


def test_thaw_rejects_a_cycle_in_plain_input() -> None:
    with pytest.raises(FreezeError) as caught:
        thaw({"x": [_self_containing_list()]})
    assert caught.value.path == ("x", 0, 1)


def test_thaw_handles_nesting_deeper_than_the_recursion_limit() -> None:
    value: Any = ()
    for _ in range(10_000):
        value = (value,)
    thawed = thaw(value)
    for _ in range(10_000):
        assert type(thawed) is list
        (thawed,) = thawed
    assert thawed == []


# -- canonical JSON -------------------------------------------------------------------------------


def test_canonical_json_sorts_keys_and_drops_spaces() -> None:
    assert canonical_json({"b": [1, "é"], "a": None}) == '{"a":null,"b":[1,"é"]}'


def test_fingerprint_ignores_key_order() -> None:
    one = fingerprint({"a": 1, "b": {"c": 2, "d": 3}})
    two = fingerprint(FrozenDict({"b": {"d": 3, "c": 2}, "a": 1}))
    assert one == two
    assert one.startswith("sha256:")
    assert len(one) == len("sha256:") + 64


def test_canonical_json_rejects_nan() -> None:
    with pytest.raises(ValueError, match="Out of range float"):
        canonical_json([math.nan])


def _dumps_outcome(value: Any, *, ensure_ascii: bool) -> tuple[str, str]:
    """What ``json.dumps`` with the canonical options gives: ("text", ...) or the error."""
    try:
        text = json.dumps(
            value, sort_keys=True, separators=(",", ":"), allow_nan=False, ensure_ascii=ensure_ascii
        )
    except (TypeError, ValueError, RecursionError) as exc:
        return type(exc).__name__, str(exc)
    return "text", text


def _canonical_outcome(value: Any, *, ensure_ascii: bool) -> tuple[str, str]:
    try:
        text = canonical_json(value, ensure_ascii=ensure_ascii)
    except (TypeError, ValueError, RecursionError) as exc:
        return type(exc).__name__, str(exc)
    return "text", text


# Lone surrogates, astral and control characters, quotes and backslashes in keys and strings.
_awkward_text = st.text(
    st.characters(blacklist_categories=()) | st.sampled_from(["\ud800", '"', "\\", "\n", "😀"]),
    max_size=6,
)
_canonical_inputs = st.recursive(
    json_scalars
    | _awkward_text
    | st.just(math.nan)
    | st.just(-math.inf)
    | st.floats()
    | st.integers(min_value=-(2**80), max_value=2**80)
    | st.builds(_Opaque)
    | st.binary(max_size=2),
    lambda children: (
        st.lists(children, max_size=4)
        | st.tuples(children, children)
        | st.dictionaries(_awkward_text, children, max_size=4)
        | st.builds(FrozenDict, st.dictionaries(_awkward_text, json_values, max_size=4))
    ),
    max_leaves=25,
)


@given(_canonical_inputs, st.booleans())
def test_canonical_json_is_json_dumps_with_the_canonical_options(
    value: Any, ensure_ascii: bool
) -> None:
    # The prebuilt encoder must give json.dumps's text, or its error, for every value.
    outcome = _canonical_outcome(value, ensure_ascii=ensure_ascii)
    assert outcome == _dumps_outcome(value, ensure_ascii=ensure_ascii)


@pytest.mark.parametrize("ensure_ascii", [False, True])
def test_canonical_json_reports_a_cycle_as_json_dumps_does(ensure_ascii: bool) -> None:
    looped: list[Any] = [1]
    looped.append({"a": looped})
    with pytest.raises(ValueError, match="Circular reference detected"):
        canonical_json(looped, ensure_ascii=ensure_ascii)
    # The encoder is usable again afterwards.
    assert (
        canonical_json({"b": 1, "a": [looped[0]]}, ensure_ascii=ensure_ascii) == '{"a":[1],"b":1}'
    )


# -- properties -----------------------------------------------------------------------------------


@given(json_values | wide_json_values)
def test_thaw_of_freeze_round_trips_json_values(value: Any) -> None:
    assert thaw(freeze(value)) == as_lists(value)


@given(json_values | wide_json_values)
def test_freezing_a_frozen_value_returns_the_same_object(value: Any) -> None:
    frozen = freeze(value)
    assert freeze(frozen) is frozen
    assert is_frozen(frozen)


@given(json_values | wide_json_values)
def test_frozen_values_contain_only_tuples_and_frozendicts(value: Any) -> None:
    for container in containers(freeze(value)):
        assert type(container) in (tuple, FrozenDict)
        if type(container) is FrozenDict:
            with pytest.raises(TypeError):
                container["new"] = 1
            with pytest.raises(TypeError):
                container.clear()


@given(json_values)
def test_frozen_values_are_hashable_and_serialise_like_the_original(value: Any) -> None:
    frozen = freeze(value)
    hash(frozen)
    assert canonical_json(frozen) == canonical_json(value)


@given(anything | st.lists(json_scalars | anything, min_size=40, max_size=60))
def test_freeze_either_returns_or_raises_freeze_error(value: Any) -> None:
    try:
        frozen = freeze(value)
    except FreezeError as err:
        assert err.reason
        assert not is_frozen(value)
    else:
        assert is_frozen(frozen)


# -- is_flat_json ----------------------------------------------------------------------------------


@given(anything)
def test_a_flat_json_object_digests_as_its_frozen_copy(value: Any) -> None:
    """``is_flat_json`` says yes only where the digest needs no frozen copy: where freezing
    succeeds and the copy's canonical text is the value's own."""
    if is_flat_json(value):
        assert canonical_json(freeze(value)) == canonical_json(value)
        assert digest(freeze(value)) == digest(value)
        assert digest(freeze(value), ensure_ascii=False) == digest(value, ensure_ascii=False)


@pytest.mark.parametrize(
    ("value", "flat"),
    [
        ({"i": 1, "s": "x", "b": True, "n": None}, True),
        ({}, True),
        ({"f": 1.5}, False),  # a float may be non-finite: freeze checks it
        ({"d": {}}, False),
        ({1: "a"}, False),
        (FrozenDict({"i": 1}), False),
        ({"e": enum.IntEnum("E", "A").A}, False),
        ([1, 2], False),
        ("text", False),
    ],
)
def test_is_flat_json(value: Any, flat: bool) -> None:
    assert is_flat_json(value) is flat
