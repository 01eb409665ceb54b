"""Freeze and thaw plain data: ``FrozenDict``, tuples and JSON scalars.

Agent state, decisions and outcomes are plain data that many parties read and nobody may change
behind the harness's back. :func:`freeze` turns JSON-like data into a deeply immutable copy
(``dict`` → :class:`FrozenDict`, ``list`` → ``tuple``) and :func:`thaw` turns it back into
plain mutable containers for users who want to edit.

Frozen values are cheap to freeze again. Every :class:`FrozenDict` is deeply frozen when it is
built, so it is reused as is; a tuple whose items are scalars or ``FrozenDict`` instances is
checked in one C-level pass over the item types and reused; any other already-frozen value is
returned unchanged (the same object), never copied. Large containers are scanned at C speed so
that only items needing work take a Python-level step. This matters because the agent loop
freezes its whole, growing state once per turn.

Errors never quote the rejected value: :class:`FreezeError` carries a JSON pointer to the
offending place and a reason that names the *type* (``unsupported type set``, ``non-finite
float``), so no secret in the data can leak into messages, logs or traces.
"""

from __future__ import annotations

import hashlib
import json
import json.encoder
import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from itertools import compress, repeat
from operator import is_
from types import NoneType
from typing import Any, NoReturn, Self, final

__all__ = [
    "FreezeError",
    "FrozenDict",
    "FrozenTuple",
    "canonical_json",
    "digest",
    "fingerprint",
    "freeze",
    "is_flat_json",
    "is_frozen",
    "thaw",
]

#: The deepest container nesting :func:`freeze` walks; deeper values raise a ``FreezeError``.
#: A ``FrozenDict`` it reuses is not walked again: its own depth was bounded when it was built.
MAX_DEPTH = 1000

# Pointers longer than this many parts are shortened in messages (``path`` keeps every part).
_MAX_MESSAGE_PARTS = 16


class FreezeError(ValueError):
    """A value cannot be frozen; never quotes the value itself.

    The message reads ``<JSON pointer>: <reason>``, e.g. ``/observations/2: non-finite float``
    (just the reason when the root itself is the problem).
    """

    path: tuple[str | int, ...]
    """Where in the value, from the root (empty for the root itself)."""
    reason: str
    """What is wrong, naming types only: ``unsupported type set``, ``non-string key of type
    int``, ``cycle``, ``non-finite float`` or ``nesting deeper than 1000``."""

    def __init__(self, path: Iterable[str | int], reason: str) -> None:
        self.path = tuple(path)
        self.reason = reason
        super().__init__(_message(self.path, reason))

    @property
    def pointer(self) -> str:
        """The RFC 6901 JSON pointer of :attr:`path` (``""`` for the root)."""
        return _pointer(self.path)


def _pointer(path: tuple[str | int, ...]) -> str:
    return "".join("/" + str(part).replace("~", "~0").replace("/", "~1") for part in path)


def _message(path: tuple[str | int, ...], reason: str) -> str:
    if not path:
        return reason
    if len(path) <= _MAX_MESSAGE_PARTS:
        return f"{_pointer(path)}: {reason}"
    half = _MAX_MESSAGE_PARTS // 2
    skipped = len(path) - 2 * half
    head, tail = _pointer(path[:half]), _pointer(path[-half:])
    return f"{head}/…({skipped} more)…{tail}: {reason}"


@final
class FrozenDict(dict[str, Any]):
    """A deeply immutable ``dict`` with string keys.

    A real ``dict`` subclass, so ``json.dumps``, ``==``, ``{**d}`` and ``isinstance(d, dict)``
    work; every mutator raises ``TypeError``. Building one freezes the given values deeply
    (``FrozenDict({"a": [1]})["a"] == (1,)``), so every instance can be trusted as frozen.
    Hashable; ``d | other`` returns a new ``FrozenDict``; ``copy()`` returns ``d`` itself.
    """

    __slots__ = ("_hash",)

    _hash: int

    def __new__(
        cls, mapping: Mapping[str, Any] | Iterable[tuple[str, Any]] = (), /, **kwargs: Any
    ) -> Self:
        if type(mapping) is FrozenDict and not kwargs:
            return mapping
        frozen = _freeze_container(dict(mapping, **kwargs))
        assert type(frozen) is cls
        return frozen

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # ``__new__`` did all the work; calling ``__init__`` again must not refill the dict.
        pass

    def __init_subclass__(cls, **kwargs: Any) -> None:
        # Subclasses could override the guarded methods, so ``freeze`` could not trust them.
        raise TypeError("FrozenDict cannot be subclassed")

    @classmethod
    def _trusted(cls, items: dict[str, Any]) -> FrozenDict:
        """Wrap a plain dict whose values are already frozen, without checking them."""
        new = dict.__new__(cls)
        dict.update(new, items)
        return new

    @classmethod
    def fromkeys(  # type: ignore[override]  # dict's overloads allow any key type
        cls, iterable: Iterable[str], value: Any = None, /
    ) -> FrozenDict:
        """A ``FrozenDict`` mapping every key in ``iterable`` to ``freeze(value)``."""
        return cls(dict.fromkeys(iterable, value))

    def _immutable(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise TypeError("FrozenDict is immutable; use tubeless.frozen.thaw() for a mutable copy")

    __setitem__ = _immutable
    __delitem__ = _immutable
    __ior__ = _immutable
    clear = _immutable
    pop = _immutable
    popitem = _immutable
    setdefault = _immutable
    update = _immutable

    def __hash__(self) -> int:  # type: ignore[override]  # dict sets __hash__ = None
        try:
            return self._hash
        except AttributeError:
            # Values are frozen, hence hashable; a benign race computes the same number twice.
            self._hash = hash(frozenset(dict.items(self)))
            return self._hash

    def __repr__(self) -> str:
        return f"FrozenDict({dict.__repr__(self)})"

    def __reduce__(self) -> tuple[type[FrozenDict], tuple[dict[str, Any]]]:
        return (FrozenDict, (dict(self),))

    def copy(self) -> Self:
        """``self``: a frozen value needs no copy (``thaw`` gives a mutable one)."""
        return self

    def __copy__(self) -> Self:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> Self:
        return self

    def __or__(self, other: Any) -> FrozenDict:  # type: ignore[override]  # always frozen
        if not isinstance(other, dict):
            return NotImplemented
        return FrozenDict({**self, **other})

    def __ror__(self, other: Any) -> FrozenDict:  # type: ignore[override]  # always frozen
        if not isinstance(other, dict):
            return NotImplemented
        return FrozenDict({**other, **self})


@final
class FrozenTuple(tuple[Any, ...]):
    """A tuple whose items are deeply frozen, so ``freeze`` reuses it without a look.

    Plain tuples are frozen values too; a ``FrozenTuple`` adds that concatenating two of them
    (``history + outcomes``) yields another one at the cost of the copy alone, so an agent's
    history can grow by one batch per turn without re-checking what it already holds. The
    harness hands reducers their outcomes as a ``FrozenTuple``.
    """

    __slots__ = ()

    def __new__(cls, iterable: Iterable[Any] = (), /) -> Self:
        if type(iterable) is cls:
            return iterable
        return tuple.__new__(cls, _frozen_items(iterable))

    def __init_subclass__(cls, **kwargs: Any) -> None:
        raise TypeError("FrozenTuple cannot be subclassed")

    @classmethod
    def _trusted(cls, items: Iterable[Any]) -> FrozenTuple:
        """Wrap items that are already frozen, without checking them."""
        return tuple.__new__(cls, items)

    def __add__(self, other: Any) -> Any:
        if type(other) is FrozenTuple:
            return tuple.__new__(FrozenTuple, tuple.__add__(self, other))
        if type(other) is tuple or type(other) is list:
            return tuple.__new__(FrozenTuple, tuple.__add__(self, _frozen_items(other)))
        return NotImplemented

    def __radd__(self, other: Any) -> Any:
        if type(other) is tuple or type(other) is list:
            return tuple.__new__(FrozenTuple, tuple.__add__(_frozen_items(other), self))
        return NotImplemented

    def __reduce__(self) -> tuple[type[FrozenTuple], tuple[tuple[Any, ...]]]:
        return (FrozenTuple, (tuple(self),))

    def __copy__(self) -> Self:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> Self:
        return self


def _frozen_items(items: Iterable[Any]) -> tuple[Any, ...]:
    """The items as a tuple of frozen values (raises ``FreezeError``)."""
    frozen = freeze(tuple(items))
    return frozen if type(frozen) is tuple else tuple(frozen)


# Exact types that are frozen as they are. Subclasses (IntEnum, StrEnum, ...) are rejected:
# they can carry behaviour and do not round-trip through JSON as themselves.
_SCALARS = frozenset({str, int, bool, NoneType})
# Items a container can hold without a Python-level look (floats only once checked finite).
_TRUSTED_ITEMS = frozenset({str, int, bool, NoneType, FrozenDict, FrozenTuple})
_TRUSTED_ITEMS_AND_FLOAT = _TRUSTED_ITEMS | {float}
_isfinite = math.isfinite
_STR_ONLY = frozenset({str})
_new_dict = dict.__new__
_fill_dict = dict.update


def freeze(value: Any) -> Any:
    """A deeply immutable copy of plain data.

    Allowed: ``None``, ``bool``, ``int``, finite ``float``, ``str``, ``list``/``tuple``
    (frozen to ``tuple``) and ``dict`` with ``str`` keys (frozen to :class:`FrozenDict`, key
    order kept). Exact types only: subclasses such as ``IntEnum`` or namedtuples are rejected.
    Values that are already frozen are returned as they are (``freeze(x) is x``), and repeated
    references to one container become one frozen object.

    Args:
        value: The data to freeze.

    Returns:
        The frozen value.

    Raises:
        FreezeError: For cycles, sets, bytes, callables, other objects, non-string keys,
            NaN or infinities, and nesting deeper than ``MAX_DEPTH``; with the path of the
            first problem and a reason that never quotes the value.
    """
    kind = type(value)
    if kind in _SCALARS or kind is FrozenDict or kind is FrozenTuple:
        return value
    if kind is float:
        if _isfinite(value):
            return value
        raise FreezeError((), "non-finite float")
    if kind is tuple:
        # The hot path: a tuple of scalars and FrozenDicts, checked in one C-level pass.
        if _TRUSTED_ITEMS.issuperset(map(type, value)):
            return value
    elif kind is dict:
        # The other hot path: a dict of string keys whose values are already frozen.
        if _STR_ONLY.issuperset(map(type, value)) and _TRUSTED_ITEMS.issuperset(
            map(type, value.values())
        ):
            frozen = _new_dict(FrozenDict)  # FrozenDict._trusted, without its call
            _fill_dict(frozen, value)
            return frozen
    elif kind is not list:
        _reject(value, ())
    return _freeze_container(value)


def is_flat_json(value: Any) -> bool:
    """Whether ``value`` is a ``dict`` of string keys whose values are all ``str``, ``int``,
    ``bool`` or ``None`` (exact types): JSON data as it is, whose :func:`canonical_json` and
    :func:`digest` are its frozen copy's, so a digest need not make the copy (a batch keys every
    row by its validated input)."""
    return (
        type(value) is dict
        and _STR_ONLY.issuperset(map(type, value))
        and _SCALARS.issuperset(map(type, value.values()))
    )


def growable(value: Any) -> Any:
    """``value`` (already frozen) with its top-level plain tuples as :class:`FrozenTuple`.

    For state that grows by concatenation: ``state["history"] + tuple(outcomes)`` on a
    ``FrozenTuple`` checks only the new items and yields a ``FrozenTuple`` again, which
    :func:`freeze` reuses without a look, where a plain tuple would be walked whole on every
    commit. Only a ``FrozenDict``'s own values are converted (one C-level pass over their
    types); each conversion copies the tuple once, without looking at its items. Anything
    else is returned as it is.
    """
    if type(value) is not FrozenDict or tuple not in map(type, dict.values(value)):
        return value
    return FrozenDict._trusted(
        {
            key: tuple.__new__(FrozenTuple, item) if type(item) is tuple else item
            for key, item in dict.items(value)
        }
    )


def _reject(value: Any, path: tuple[str | int, ...]) -> NoReturn:
    raise FreezeError(path, f"unsupported type {type(value).__name__}")


def is_frozen(value: Any) -> bool:
    """True if ``value`` is already frozen, i.e. ``freeze(value) is value``.

    Scalars (finite floats only), :class:`FrozenDict` instances and tuples of frozen values
    (nested at most ``MAX_DEPTH`` deep) are frozen; ``list``, ``dict`` and anything
    :func:`freeze` rejects are not.
    """
    kind = type(value)
    if kind in _SCALARS or kind is FrozenDict or kind is FrozenTuple:
        return True
    if kind is float:
        return _isfinite(value)
    if kind is not tuple:
        return False
    stack = [(value, iter(_needs_look(value)))]
    while stack:
        parent, indices = stack[-1]
        for index in indices:
            item = parent[index]
            if type(item) is not tuple:
                return False  # a non-finite float or anything freeze would copy or reject
            if len(stack) >= MAX_DEPTH:
                return False
            stack.append((item, iter(_needs_look(item))))
            break
        else:
            stack.pop()
    return True


def thaw(value: Any) -> Any:
    """A plain, mutable deep copy: dicts (frozen or not) → ``dict``, tuples/lists → ``list``.

    Other values (scalars and any other object) are returned as they are. Shared containers
    become independent copies, so editing one place never changes another.

    Args:
        value: Frozen (or plain) data.

    Returns:
        The mutable copy.

    Raises:
        FreezeError: If a plain ``dict`` or ``list`` in ``value`` contains itself (reason
            ``cycle``); frozen values never do.
    """
    root = _thaw_open(value)
    if root is None:
        return value
    stack: list[_ThawFrame] = [root]
    path: list[str | int] = []
    active = {id(value)}
    while stack:
        _, items, out = stack[-1]
        for key, child in items:
            opened = _thaw_open(child)
            if opened is None:
                _thaw_put(out, key, child)
                continue
            if id(child) in active:
                raise FreezeError((*path, key), "cycle")
            # The (still empty) copy is placed now and filled once the child frame is done.
            _thaw_put(out, key, opened[2])
            path.append(key)
            active.add(id(child))
            stack.append(opened)
            break
        else:
            source, _, _ = stack.pop()
            active.discard(id(source))
            if stack:
                path.pop()
    return root[2]


def canonical_json(value: Any, *, ensure_ascii: bool = False) -> str:
    """The canonical JSON text of ``value``: sorted keys, no spaces.

    The one canonical form behind every key, digest and fingerprint, so equal data always gives
    equal text whatever its key order. Non-ASCII characters are kept as they are, or with
    ``ensure_ascii`` escaped as ``\\uXXXX`` (lone surrogates included, so the text is ASCII).

    Raises:
        ValueError: For NaN or infinities (not JSON).
        TypeError: For values JSON cannot represent.
    """
    try:
        return "".join((_ENCODE_ASCII if ensure_ascii else _ENCODE)(value, 0))
    except RecursionError:
        # A cycle (the prebuilt encoders keep no markers) or nesting too deep for the encoder:
        # the full encoder raises what ``json.dumps`` raises (``ValueError`` for a cycle).
        return (_CANONICAL_ASCII if ensure_ascii else _CANONICAL).encode(value)


# What ``json.dumps`` would build at every call (keys sorted, no spaces, no NaN), made once.
_CANONICAL = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), allow_nan=False, ensure_ascii=False
)
_CANONICAL_ASCII = json.JSONEncoder(sort_keys=True, separators=(",", ":"), allow_nan=False)


def _prebuilt(encoder: json.JSONEncoder) -> Callable[[Any, int], Sequence[str]]:
    """The C-level encoder ``encoder.encode`` builds afresh at every call, built once.

    ``JSONEncoder.encode`` makes one (``c_make_encoder``) per call with the same options; made
    once, the text is the same and the build's cost (a third of a small key's JSON) is gone. It
    keeps no markers (a dict shared by every call would not be safe across threads), so a cycle
    ends in ``RecursionError``, which :func:`canonical_json` hands to the full encoder. Without
    the C accelerator, the full encoder's own ``encode`` (in a list) stands in.
    """
    make = getattr(json.encoder, "c_make_encoder", None)  # not in the stubs
    if make is None:  # pragma: no cover - CPython always has _json
        return lambda value, _level: [encoder.encode(value)]
    strings = (
        json.encoder.encode_basestring_ascii
        if encoder.ensure_ascii
        else json.encoder.encode_basestring
    )
    built: Callable[[Any, int], Sequence[str]] = make(
        None,
        encoder.default,
        strings,
        None,
        encoder.key_separator,
        encoder.item_separator,
        encoder.sort_keys,
        encoder.skipkeys,
        encoder.allow_nan,
    )
    return built


_ENCODE = _prebuilt(_CANONICAL)
_ENCODE_ASCII = _prebuilt(_CANONICAL_ASCII)


def digest(value: Any, *, ensure_ascii: bool = True) -> str:
    """``"sha256:<hex>"`` of :func:`canonical_json` of ``value``.

    Two forms, one per kind of persisted value (pinned by ``tests/test_persisted_formats.py``):

    - escaped (the default): checkpoint keys and approval call digests (DESIGN.md §24); the text
      is ASCII, so every value that validates has a digest;
    - ``ensure_ascii=False``: the text as UTF-8, the form of definition fingerprints, cassette and
      checkpoint input digests, and of keys and call digests written before round 3. A lone
      surrogate is hashed as its own three bytes (``surrogatepass``), which no valid text has.

    For data whose strings are all ASCII, both forms are the same.

    Raises:
        ValueError: For NaN or infinities (not JSON).
        TypeError: For values JSON cannot represent.
    """
    # canonical_json's body, without its call (a key's digest is made once per batch row).
    try:
        text = "".join((_ENCODE_ASCII if ensure_ascii else _ENCODE)(value, 0))
    except RecursionError:
        text = canonical_json(value, ensure_ascii=ensure_ascii)
    data = text.encode("ascii") if ensure_ascii else text.encode("utf-8", "surrogatepass")
    return f"sha256:{hashlib.sha256(data).hexdigest()}"


def fingerprint(value: Any) -> str:
    """``"sha256:<hex>"`` of the UTF-8 :func:`canonical_json` of ``value`` (definitions and
    schemas; ``digest(value, ensure_ascii=False)``)."""
    return digest(value, ensure_ascii=False)


# -- the walkers behind freeze and thaw ---------------------------------------------------------
# The container walk the fast checks above fall back on (each container scanned at C speed, only
# the children that need work taking a Python-level step) and the frames ``thaw`` copies with.
# Both walk with an explicit stack, so nesting depth is bounded by the data, not by recursion.
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
