"""Schema ``pattern`` matching that always ends: the regex keywords of tubeless's validators.

jsonschema matches ``pattern`` and ``patternProperties`` with :func:`re.search`, a backtracking
engine: ``^(a+)+$`` against forty ``a`` and a ``!`` runs for hours, and no signal stops it (the
match never returns to Python code). For an MCP tool the server writes the pattern and the model
the argument, so neither side alone can keep validation bounded.

Here every such match runs on the ``regex`` engine (a drop-in for :mod:`re`'s syntax and
``search`` semantics) with a timeout, drawn from one budget per validation:
:data:`PATTERN_BUDGET_S` seconds of pattern matching in all (:func:`bounded`). A match that
does not finish within what is left is refused with :class:`PatternRefused`; the keywords below
turn that into a validation error at the path of the value (or of the property name) that was
being matched, so the issue names the property and never quotes the value. Once the budget is
spent, every later match of the same validation is refused at once, so one validation costs at
most the budget, however many strings it holds.

The keywords replaced are every place jsonschema matches a regex against instance data:
``pattern`` (also reached through ``propertyNames``), ``patternProperties``,
``additionalProperties`` and ``unevaluatedProperties`` (both look for the keys that
``patternProperties`` covers).
"""

from __future__ import annotations

import contextlib
import functools
import time
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from typing import Any, Final

import jsonschema
import jsonschema.exceptions
import jsonschema.validators
import regex

__all__ = [
    "PATTERN_BUDGET_S",
    "PATTERN_KEYWORDS",
    "PatternRefused",
    "bounded",
    "search",
]

#: Seconds of pattern matching one validation may spend, over all its ``pattern`` and
#: ``patternProperties`` matches (the engine notices the end of the budget within a few
#: seconds more).
PATTERN_BUDGET_S: Final = 1.0

# The moment (time.monotonic) the current validation's budget ends; None outside bounded().
_DEADLINE: ContextVar[float | None] = ContextVar("tubeless_pattern_deadline", default=None)

ValidationError = jsonschema.exceptions.ValidationError


class PatternRefused(Exception):
    """A pattern that could not be matched within the budget (or not by the engine at all)."""

    def __init__(self, pattern: str, reason: str) -> None:
        super().__init__(f"pattern {pattern!r} {reason}")
        self.pattern = pattern
        self.reason = reason


@contextlib.contextmanager
def bounded() -> Iterator[None]:
    """One validation's pattern budget: matches inside share :data:`PATTERN_BUDGET_S`."""
    token = _DEADLINE.set(time.monotonic() + PATTERN_BUDGET_S)
    try:
        yield
    finally:
        _DEADLINE.reset(token)


@functools.lru_cache(maxsize=512)
def _compiled(pattern: str) -> Any:
    return regex.compile(pattern)


def search(pattern: str, text: str) -> bool:
    """Whether ``pattern`` is found in ``text`` (:func:`re.search`), within the budget.

    Raises:
        PatternRefused: The budget ran out before the match finished, or the pattern is not
            one the engine can compile.
    """
    deadline = _DEADLINE.get()
    remaining = PATTERN_BUDGET_S if deadline is None else deadline - time.monotonic()
    if remaining <= 0:
        raise PatternRefused(pattern, _TOO_SLOW)
    try:
        compiled = _compiled(pattern)
    except (regex.error, RecursionError, OverflowError, ValueError) as exc:
        raise PatternRefused(pattern, f"cannot be used ({exc})") from None
    try:
        return compiled.search(text, timeout=remaining) is not None
    except TimeoutError:
        raise PatternRefused(pattern, _TOO_SLOW) from None


_TOO_SLOW: Final = (
    f"did not finish matching within the {PATTERN_BUDGET_S:g} s that pattern matching has per"
    " validation"
)


def _refusal(refused: PatternRefused, path: tuple[str, ...] = ()) -> Any:
    return ValidationError(str(refused), path=path, cause=refused)


def _pattern(validator: Any, pattern: str, instance: Any, schema: Any) -> Iterator[Any]:
    if not validator.is_type(instance, "string"):
        return
    try:
        found = search(pattern, instance)
    except PatternRefused as refused:
        yield _refusal(refused)
        return
    if not found:
        yield ValidationError("does not match the pattern")


def _pattern_properties(
    validator: Any, pattern_properties: Any, instance: Any, schema: Any
) -> Iterator[Any]:
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in pattern_properties.items():
        for key, value in instance.items():
            try:
                found = search(pattern, key)
            except PatternRefused as refused:
                yield _refusal(refused, (key,))
                continue
            if found:
                yield from validator.descend(value, subschema, path=key, schema_path=pattern)


def _additional(instance: Any, schema: Any, refusals: list[Any]) -> list[str]:
    """jsonschema's ``find_additional_properties``, matching keys within the budget."""
    properties = schema.get("properties", {})
    patterns = list(schema.get("patternProperties", {}))
    extras: list[str] = []
    for key in instance:
        if key in properties:
            continue
        covered = False
        for pattern in patterns:
            try:
                covered = search(pattern, key)
            except PatternRefused as refused:
                refusals.append(_refusal(refused, (key,)))
                covered = True  # refused already: not also an extra
            if covered:
                break
        if not covered:
            extras.append(key)
    return extras


def _additional_properties(
    validator: Any, additional: Any, instance: Any, schema: Any
) -> Iterator[Any]:
    if not validator.is_type(instance, "object"):
        return
    refusals: list[Any] = []
    extras = _additional(instance, schema, refusals)
    yield from refusals
    if validator.is_type(additional, "object"):
        for extra in extras:
            yield from validator.descend(instance[extra], additional, path=extra)
    elif not additional and extras:
        yield ValidationError("additional properties are not allowed")


def _is_valid(errors: Iterator[Any]) -> bool:
    return next(errors, None) is None


def _evaluated_keys(validator: Any, instance: Any, schema: Any) -> list[str]:
    """jsonschema's ``find_evaluated_property_keys_by_schema`` (4.26), matching keys within the
    budget; a refused match raises :class:`PatternRefused` with the key in ``args``."""
    if validator.is_type(schema, "boolean"):
        return []
    keys: list[str] = []
    for keyword in ("$ref", "$dynamicRef"):
        reference = schema.get(keyword)
        if reference is not None:
            resolved = validator._resolver.lookup(reference)
            keys += _evaluated_keys(
                validator.evolve(schema=resolved.contents, _resolver=resolved.resolver),
                instance,
                resolved.contents,
            )
    properties = schema.get("properties")
    if validator.is_type(properties, "object"):
        keys += properties.keys() & instance.keys()
    for keyword in ("additionalProperties", "unevaluatedProperties"):
        subschema = schema.get(keyword)
        if subschema is not None:
            keys += (
                key
                for key, value in instance.items()
                if _is_valid(validator.descend(value, subschema))
            )
    for key in instance:
        for pattern in schema.get("patternProperties", {}):
            try:
                if search(pattern, key):
                    keys.append(key)
            except PatternRefused as refused:
                raise _KeyRefused(refused, key) from None
    for name, subschema in schema.get("dependentSchemas", {}).items():
        if name in instance:
            keys += _evaluated_keys(validator, instance, subschema)
    for keyword in ("allOf", "oneOf", "anyOf"):
        for subschema in schema.get(keyword, []):
            if _is_valid(validator.descend(instance, subschema)):
                keys += _evaluated_keys(validator, instance, subschema)
    if "if" in schema:
        if validator.evolve(schema=schema["if"]).is_valid(instance):
            keys += _evaluated_keys(validator, instance, schema["if"])
            if "then" in schema:
                keys += _evaluated_keys(validator, instance, schema["then"])
        elif "else" in schema:
            keys += _evaluated_keys(validator, instance, schema["else"])
    return keys


class _KeyRefused(Exception):
    def __init__(self, refused: PatternRefused, key: str) -> None:
        super().__init__(refused, key)
        self.refused = refused
        self.key = key


def _unevaluated_properties(
    validator: Any, unevaluated: Any, instance: Any, schema: Any
) -> Iterator[Any]:
    if not validator.is_type(instance, "object"):
        return
    try:
        evaluated = _evaluated_keys(validator, instance, schema)
    except _KeyRefused as failed:
        yield _refusal(failed.refused, (failed.key,))
        return
    invalid = [
        key
        for key in instance
        if key not in evaluated
        and not _is_valid(validator.descend(instance[key], unevaluated, path=key))
    ]
    if invalid:
        yield ValidationError("unevaluated properties are not allowed")


#: The keyword implementations that replace jsonschema's (``validators.extend``).
PATTERN_KEYWORDS: Final[dict[str, Callable[..., Iterator[Any]]]] = {
    "pattern": _pattern,
    "patternProperties": _pattern_properties,
    "additionalProperties": _additional_properties,
    "unevaluatedProperties": _unevaluated_properties,
}
