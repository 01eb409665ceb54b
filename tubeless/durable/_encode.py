"""Encoding checkpoint documents quickly: what did not change since the last commit is not
encoded again.

A document is written whole at every commit, but between two commits only a few small fields
change (a call's status, a budget counter), and the large values are the same objects as
before (an agent's definition, call inputs, outcomes) or built from them (the next state holds
the previous state's values, a history tuple the previous history plus a batch's outcomes).
:class:`Fragments` keeps the checked JSON text of each such value by identity, and encodes a
new value from the texts of the parts it shares with values it already encoded:

- a value it encoded before (the same object) costs one dictionary look-up;
- a small ``FrozenDict`` (at most :data:`_SPLIT_KEYS` keys) is written key by key, each value
  through the same look-up, so a new state whose unchanged values are the old ones costs only
  its new values;
- a tuple that begins with every item (the same objects) of a tuple encoded recently (the
  history a reducer extended) reuses that tuple's text and encodes only the items after it;
- anything else is encoded by the C encoder at once and checked to survive a JSON round trip.

So a commit costs what changed, not the length of the run. The output is exactly
``json.dumps(document, sort_keys=True, separators=(",", ":"), allow_nan=False)``: each text was
checked to round-trip when it was first encoded, and joining checked texts into an array or an
object of string keys keeps that (what ``json.loads`` reads back from the joined text is the
parts it read back from each). Identity is what lets a text be reused: an equal value is not
enough (``1``, ``1.0`` and ``True`` are equal and encode differently).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from itertools import islice
from operator import is_
from typing import Any

from tubeless.frozen import FrozenDict, FrozenTuple

__all__ = ["Fragments", "checked_json", "frozen_json", "plain", "string"]

_dumps = json.JSONEncoder(sort_keys=True, separators=(",", ":"), allow_nan=False).encode
_string: Any = json.encoder.encode_basestring_ascii  # what _dumps does for a str (ensure_ascii)
#: A ``str`` as ``_dumps`` writes it (the C function itself: no Python frame per call).
string: Callable[[str], str] = _string


def plain(value: Any) -> str:
    """``_dumps(value)``, without the encoder's set-up for the scalars documents are made of."""
    kind = type(value)
    if kind is str:
        return _string(value)  # type: ignore[no-any-return]
    if kind is int:
        return int.__repr__(value)
    if value is None:
        return "null"
    if kind is bool:
        return "true" if value else "false"
    return _dumps(value)


def checked_json(value: Any) -> str:
    """``value`` as sorted compact JSON, checked to survive a round trip unchanged."""
    text = _dumps(value)
    if _dumps(json.loads(text)) != text:
        raise ValueError("a value does not survive a JSON round trip")
    return text


def _unencodable(value: Any) -> Any:
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def _frozen_encoder() -> Callable[[Any], str]:
    """``_dumps`` for deeply frozen values: the C encoder called directly, without the set-up
    ``JSONEncoder.encode`` repeats at every call and without its cycle check (a frozen value
    has no cycle)."""
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:  # an interpreter without the C accelerator
        return _dumps
    encode = make(None, _unencodable, _string, None, ":", ",", True, False, False)

    def frozen_json(value: Any) -> str:
        return "".join(encode(value, 0))

    return frozen_json


#: ``_dumps`` of a ``FrozenDict`` or ``FrozenTuple``. Such a value needs no round-trip check:
#: it holds only string keys, exact ``str``/``int``/``bool``/``None`` values, finite floats
#: and tuples and ``FrozenDict``s of them (``tubeless.frozen``), all of which JSON reads back
#: as the same text.
frozen_json = _frozen_encoder()

#: How many values' texts are kept (then the cache starts over; prefixes are kept apart).
_MAX_CACHED = 256
#: A ``FrozenDict`` with at most this many keys, some of them containers, is written key by key
#: (a larger one, or one of scalars only, whole).
_SPLIT_KEYS = 32
#: How deep key-by-key writing goes (deeper values are written whole by the C encoder).
_SPLIT_DEPTH = 8
#: Tuples shorter than this are written whole (reusing a prefix would save nothing).
_PREFIX_MIN = 8
#: How many recently written tuples are kept as prefixes a new tuple may extend.
_PREFIXES = 4

_SCALAR = frozenset({str, int, bool, type(None), float})


class Fragments:
    """The checked text of values, kept by identity between commits.

    Values given to :meth:`text` must not be mutated once encoded (frozen data, or plain data
    the caller never changes): the document's state, definition, inputs, outcomes and result.
    """

    __slots__ = ("_cache", "_prefixes")

    def __init__(self) -> None:
        self._cache: dict[int, tuple[Any, str]] = {}
        self._prefixes: list[tuple[tuple[Any, ...], str]] = []

    def text(self, value: Any) -> str:
        """``value`` as sorted compact JSON (checked to round-trip when first encoded)."""
        if type(value) in _SCALAR:
            return plain(value)
        return self._text(value, 0)

    def _text(self, value: Any, depth: int) -> str:
        found = self._cache.get(id(value))
        if found is not None and found[0] is value:
            return found[1]
        kind = type(value)
        if kind is FrozenDict:
            if (
                depth < _SPLIT_DEPTH
                and len(value) <= _SPLIT_KEYS
                and not _SCALAR.issuperset(map(type, dict.values(value)))
            ):
                text = self._object(value, depth + 1)
            else:
                text = frozen_json(value)
        elif kind is FrozenTuple or kind is tuple:
            if depth < _SPLIT_DEPTH and len(value) >= _PREFIX_MIN:
                text = self._extended(value, depth + 1)
            else:
                text = frozen_json(value) if kind is FrozenTuple else checked_json(value)
        else:
            text = checked_json(value)
        cache = self._cache
        if len(cache) >= _MAX_CACHED:
            cache.clear()
        cache[id(value)] = (value, text)
        return text

    def _object(self, value: FrozenDict, depth: int) -> str:
        """A ``FrozenDict`` (string keys, frozen values) from the texts of its values."""
        parts = ["{"]
        for key in sorted(value):
            item = value[key]
            parts.append(f"{',' if len(parts) > 1 else ''}{_string(key)}:")
            parts.append(plain(item) if type(item) in _SCALAR else self._text(item, depth))
        parts.append("}")
        return "".join(parts)  # one copy of each value's text, however large

    def _extended(self, value: tuple[Any, ...], depth: int) -> str:
        """A tuple, from the text of a tuple written recently that it extends, if one."""
        known = self._prefix_of(value)
        if known is None:
            text = frozen_json(value) if type(value) is FrozenTuple else checked_json(value)
        else:
            count, known_text = known
            if count == len(value):
                return known_text
            text_of = self._text
            tail = ",".join(
                [
                    plain(item) if type(item) in _SCALAR else text_of(item, depth)
                    for item in islice(value, count, None)
                ]
            )
            text = f"{known_text[:-1]},{tail}]"  # a known tuple is never empty (_PREFIX_MIN)
        self._remember(value, text)
        return text

    def _prefix_of(self, value: tuple[Any, ...]) -> tuple[int, str] | None:
        """The length and text of a recent tuple whose items begin ``value``, if one."""
        size = len(value)
        for known, known_text in self._prefixes:
            count = len(known)
            if (
                count <= size
                and value[count - 1] is known[count - 1]
                and all(map(is_, known, value))
            ):
                return count, known_text
        return None

    def _remember(self, value: tuple[Any, ...], text: str) -> None:
        prefixes = self._prefixes
        prefixes.insert(0, (value, text))
        del prefixes[_PREFIXES:]
