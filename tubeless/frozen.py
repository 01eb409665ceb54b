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
import math
from collections.abc import Iterable, Mapping
from types import NoneType
from typing import Any, NoReturn, Self, final

__all__ = [
    "FreezeError",
    "FrozenDict",
    "FrozenTuple",
    "canonical_json",
    "fingerprint",
    "freeze",
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
            return FrozenDict._trusted(value)
    elif kind is not list:
        _reject(value, ())
    return _freeze_container(value)


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


def canonical_json(value: Any) -> str:
    """The canonical JSON text of ``value``: sorted keys, no spaces, UTF-8 kept as is.

    Used for fingerprints, so equal data always gives equal text whatever its key order.

    Raises:
        ValueError: For NaN or infinities (not JSON).
        TypeError: For values JSON cannot represent.
    """
    return json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )


def fingerprint(value: Any) -> str:
    """``"sha256:<hex>"`` of :func:`canonical_json` of ``value``."""
    digest = hashlib.sha256(canonical_json(value).encode("utf-8")).hexdigest()
    return f"sha256:{digest}"


# Imported last: the walkers build and recognise the classes above, and read ``_TRUSTED_ITEMS``.
# Module-level names keep ``freeze`` and ``thaw`` free of any extra lookup per call.
from tubeless._frozen_walk import (  # noqa: E402
    _freeze_container,
    _needs_look,
    _thaw_open,
    _thaw_put,
    _ThawFrame,
)
