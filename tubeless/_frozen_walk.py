"""The explicit-stack walkers behind :func:`tubeless.frozen.freeze` and ``thaw``.

``tubeless.frozen`` keeps the public classes and functions and the fast checks that return an
already-frozen value at once; this module holds the container walk they fall back on (each
container scanned at C speed, only the children that need work taking a Python-level step)
and the frames ``thaw`` copies with. Both walk with an explicit stack, so nesting depth is
bounded by the data, not by recursion.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from itertools import compress, repeat
from operator import is_
from typing import Any

_STR_ONLY = frozenset({str})

# Containers up to this size are walked item by item rather than scanned first.
_SCAN_THRESHOLD = 32

# A container being frozen: (source, iterator of the (key, child) pairs that need a look,
# output pre-filled with every child as it is, indices of those children or None for all).
_Frame = tuple[Any, Iterator[tuple[Any, Any]], Any, list[int] | None]


def _freeze_container(root: dict[str, Any] | list[Any] | tuple[Any, ...]) -> Any:
    """Freeze a container with an explicit stack, so depth is bounded by data, not recursion.

    Each container is scanned at C speed first (see ``_open``); only its children that are
    not scalars or ``FrozenDict`` instances take a Python-level step. ``path`` holds the key
    of each open container within its parent.
    """
    root_frame = _open(root)
    if root_frame[3] == []:
        return _close(root_frame)
    stack = [root_frame]
    path: list[str | int] = []
    active = {id(root)}  # containers on the current path, to tell cycles from shared values
    done: dict[int, Any] = {}  # frozen result per container id, so shared values stay shared
    while True:
        _, items, out, _ = stack[-1]
        for key, child in items:
            kind = type(child)
            if kind in _TRUSTED_ITEMS:
                continue  # already in ``out`` as it is
            if kind is float:
                if not _isfinite(child):
                    raise FreezeError((*path, key), "non-finite float")
                continue
            if kind is not dict and kind is not list and kind is not tuple:
                _reject(child, (*path, key))
            ident = id(child)
            if ident in done:
                out[key] = done[ident]
                continue
            if ident in active:
                raise FreezeError((*path, key), "cycle")
            if len(stack) >= MAX_DEPTH:
                raise FreezeError((*path, key), f"nesting deeper than {MAX_DEPTH}")
            try:
                frame = _open(child)
            except FreezeError as err:
                raise FreezeError((*path, key), err.reason) from None
            if frame[3] == []:  # nothing inside needs a look: done without a stack frame
                out[key] = done[ident] = _close(frame)
                continue
            path.append(key)
            stack.append(frame)
            active.add(ident)
            break
        else:
            frame = stack.pop()
            source = frame[0]
            active.discard(id(source))
            result = done[id(source)] = _close(frame)
            if not stack:
                return result
            stack[-1][2][path.pop()] = result


def _needs_look(values: Sequence[Any]) -> list[int]:
    """Indices of the items that are not scalars, finite floats or FrozenDicts, in order.

    A few C-level passes: the item types, their set, and ``list.index`` searches (identity
    comparisons) for each kind of item that needs a look.
    """
    types = list(map(type, values))
    extra = set(types)
    extra -= _TRUSTED_ITEMS
    if not extra:
        return []
    if float in extra and all(map(_isfinite, compress(values, map(is_, types, repeat(float))))):
        extra.discard(float)
        if not extra:
            return []
    indices: list[int] = []
    for kind in extra:
        index = types.index(kind)
        while True:
            indices.append(index)
            try:
                index = types.index(kind, index + 1)
            except ValueError:
                break
    if len(extra) > 1:
        indices.sort()
    return indices


def _open(source: Any) -> _Frame:
    """Scan one container; raises ``FreezeError`` (without a path) for a non-string key.

    Small containers are walked item by item (``indices`` is None), which is cheaper than
    setting up the C-level scan that large ones get.
    """
    if type(source) is dict:
        if not _STR_ONLY.issuperset(map(type, source)):
            bad = next(key for key in source if type(key) is not str)
            raise FreezeError((), f"non-string key of type {type(bad).__name__}")
        if len(source) <= _SCAN_THRESHOLD:
            return source, iter(source.items()), dict(source), None
        values = list(source.values())
        indices = _needs_look(values)
        if not indices:
            return source, iter(()), source, indices
        keys = list(source)
        pairs = zip(map(keys.__getitem__, indices), map(values.__getitem__, indices), strict=True)
        return source, pairs, dict(source), indices
    if len(source) <= _SCAN_THRESHOLD:
        return source, enumerate(source), list(source), None
    indices = _needs_look(source)
    if not indices:
        return source, iter(()), source, indices
    pairs = zip(indices, map(source.__getitem__, indices), strict=True)
    return source, pairs, list(source), indices


def _close(frame: _Frame) -> Any:
    source, _, out, indices = frame
    if type(source) is dict:
        return FrozenDict._trusted(out)
    if type(source) is tuple:
        if indices is None:
            unchanged = map(is_, out, source)
        else:
            unchanged = map(is_, map(out.__getitem__, indices), map(source.__getitem__, indices))
        if all(unchanged):
            return source  # already frozen: keep the very same object
    return tuple(out)


# A container being thawed: (source, iterator of (key, child), the copy being filled).
_ThawFrame = tuple[Any, Iterator[tuple[Any, Any]], Any]


def _thaw_open(value: Any) -> _ThawFrame | None:
    kind = type(value)
    if kind is FrozenDict or kind is dict:
        return value, iter(dict.items(value)), {}
    if kind is tuple or kind is list or kind is FrozenTuple:
        return value, enumerate(value), []
    return None


def _thaw_put(out: Any, key: Any, value: Any) -> None:
    if type(out) is list:
        out.append(value)
    else:
        out[key] = value


# Imported last: ``tubeless.frozen`` imports this module once its classes exist, so either
# module may be imported first. The walkers above only read these names when called.
from tubeless.frozen import (  # noqa: E402
    _TRUSTED_ITEMS,
    MAX_DEPTH,
    FreezeError,
    FrozenDict,
    FrozenTuple,
    _isfinite,
    _reject,
)
