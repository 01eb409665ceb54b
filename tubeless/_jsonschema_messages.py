"""Validation issues from jsonschema errors, described without quoting the rejected value.

The machinery behind :meth:`tubeless.schema.Schema.json`: a draft 2020-12 validator that fills
``default`` values of missing object properties, and the translation of its errors into
:class:`~tubeless.errors.ValidationIssue` objects. ``error.message`` quotes the instance, so
messages are built from the schema side only (the keyword, its value and the path); property
names are identifiers and may be shown, values never are.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any, cast

import jsonschema
import jsonschema.exceptions
import jsonschema.protocols
import jsonschema.validators
import referencing
import referencing.exceptions

from tubeless._jsonschema_patterns import PATTERN_KEYWORDS, PatternRefused, bounded, search
from tubeless.errors import ValidationIssue
from tubeless.frozen import canonical_json, thaw

# The longest schema-side value (as canonical JSON) quoted in an ``enum`` / ``const`` message.
from tubeless.schema import _MAX_QUOTED_SCHEMA_VALUE

# What ``tubeless.schema`` needs from jsonschema and referencing, imported with this module.
bounded_patterns = bounded
SchemaError = jsonschema.exceptions.SchemaError
Registry = referencing.Registry
Unresolvable = referencing.exceptions.Unresolvable


def _properties_filling_defaults(
    validator: Any, properties: Any, instance: Any, schema: Any
) -> Iterator[jsonschema.exceptions.ValidationError]:
    """The ``properties`` keyword, first filling missing properties that have a ``default``.

    jsonschema's documented recipe (``validators.extend`` on ``properties``); ``instance`` is
    always validation's private copy, and each default is copied so no two results share it.
    The keyword itself is jsonschema's own few lines, plus the path of a property whose
    subschema is ``false`` (jsonschema's ``descend`` leaves that path empty).
    """
    if not validator.is_type(instance, "object"):
        return
    for name, subschema in properties.items():
        if isinstance(subschema, dict) and "default" in subschema and name not in instance:
            instance[name] = thaw(subschema["default"])
    for name, subschema in properties.items():
        if name not in instance:
            continue
        for error in validator.descend(instance[name], subschema, path=name, schema_path=name):
            if subschema is False:
                error.path.appendleft(name)
            yield error


# ``validators.extend`` is untyped in the stubs; it returns a validator class.
_extend: Callable[..., type[jsonschema.Draft202012Validator]] = jsonschema.validators.extend
#: Fills defaults, and matches patterns within one budget per validation (:func:`bounded`).
_DefaultFillingValidator = _extend(
    jsonschema.Draft202012Validator,
    {"properties": _properties_filling_defaults, **PATTERN_KEYWORDS},
)


def _declared_validator(schema: Any) -> type[jsonschema.protocols.Validator] | None:
    """The validator of the dialect ``schema``'s ``$schema`` names (draft 2020-12 without one),
    or None for a ``$schema`` that names no dialect jsonschema knows."""
    if isinstance(schema, dict) and "$schema" in schema and not isinstance(schema["$schema"], str):
        return None
    found: type[jsonschema.protocols.Validator] | None = jsonschema.validators.validator_for(
        schema, default=cast(Any, None)
    )
    if found is None and not (isinstance(schema, dict) and "$schema" in schema):
        return jsonschema.Draft202012Validator
    return found


def _jsonschema_issues(
    errors: Iterable[jsonschema.exceptions.ValidationError],
) -> list[ValidationIssue]:
    """Issues sorted by path, described from the schema side, duplicates dropped."""
    ordered = sorted(errors, key=lambda error: _path_key(error.absolute_path))
    issues: list[ValidationIssue] = []
    for error in ordered:
        issue = ValidationIssue(message=_describe_error(error), path=tuple(error.absolute_path))
        if issue not in issues:
            issues.append(issue)
    return issues


def _path_key(path: Iterable[str | int]) -> tuple[tuple[int, int, str], ...]:
    # Indices sort numerically and before names, so mixed paths compare without TypeError.
    return tuple((0, part, "") if isinstance(part, int) else (1, 0, part) for part in path)


def _describe_error(error: jsonschema.exceptions.ValidationError) -> str:
    """What the schema expected, built from ``validator`` and ``validator_value`` only.

    ``error.message`` quotes the instance, so it is never used. Property names taken from the
    instance (missing or extra keys) are identifiers, and are shown.
    """
    keyword = error.validator
    if isinstance(error.cause, PatternRefused):
        # A value (or a property name) the pattern could not be matched against in time:
        # refused, and named by the issue's path, never quoted.
        subject = "the property name" if keyword != "pattern" else "the value"
        return f"{subject} could not be checked: {error.cause}"
    expected: Any = error.validator_value
    instance = error.instance
    schema = error.schema if isinstance(error.schema, dict) else {}
    match keyword:
        case None:
            return "no value is allowed here"
        case "type":
            if isinstance(expected, list):
                return "expected one of types " + ", ".join(repr(t) for t in expected)
            return f"expected type {expected!r}"
        case "required":
            names = instance.keys() if isinstance(instance, dict) else ()
            missing = [name for name in expected if name not in names]
            if len(missing) == 1:
                return f"required property {missing[0]!r} is missing"
            return "required properties " + ", ".join(map(repr, missing)) + " are missing"
        case "dependentRequired":
            names = instance.keys() if isinstance(instance, dict) else ()
            parts = [
                f"property {name!r} requires {', '.join(repr(d) for d in deps if d not in names)}"
                for name, deps in expected.items()
                if name in names and any(d not in names for d in deps)
            ]
            return "; ".join(parts) or "dependent required properties are missing"
        case "additionalProperties":
            extras = _extra_properties(instance, schema)
            if extras:
                return f"additional properties are not allowed ({', '.join(map(repr, extras))})"
            return "additional properties are not allowed"
        case "unevaluatedProperties":
            return "unevaluated properties are not allowed"
        case "unevaluatedItems":
            return "unevaluated items are not allowed"
        case "items":
            return "no items are allowed beyond the prefix items"
        case "enum":
            quoted = _quote_schema_value(expected)
            suffix = f": {quoted}" if quoted else ""
            return f"must be one of the enumerated values{suffix}"
        case "const":
            quoted = _quote_schema_value(expected)
            return f"must equal the constant {quoted}" if quoted else "must equal the constant"
        case "pattern":
            return f"does not match pattern {expected!r}"
        case "format":
            return f"does not match format {expected!r}"
        case "minLength":
            return f"should have at least {expected} character{_plural(expected)}"
        case "maxLength":
            return f"should have at most {expected} character{_plural(expected)}"
        case "minItems":
            return f"should have at least {expected} item{_plural(expected)}"
        case "maxItems":
            return f"should have at most {expected} item{_plural(expected)}"
        case "uniqueItems":
            return "items must be unique"
        case "minProperties":
            return f"should have at least {expected} propert{'y' if expected == 1 else 'ies'}"
        case "maxProperties":
            return f"should have at most {expected} propert{'y' if expected == 1 else 'ies'}"
        case "minimum" if schema.get("exclusiveMinimum") is True:  # draft-04's spelling
            return f"must be greater than {expected}"
        case "maximum" if schema.get("exclusiveMaximum") is True:
            return f"must be less than {expected}"
        case "minimum":
            return f"must be greater than or equal to {expected}"
        case "maximum":
            return f"must be less than or equal to {expected}"
        case "exclusiveMinimum":
            return f"must be greater than {expected}"
        case "exclusiveMaximum":
            return f"must be less than {expected}"
        case "multipleOf":
            return f"must be a multiple of {expected}"
        case "contains":
            low, high = schema.get("minContains", 1), schema.get("maxContains")
            bound = f"at least {low}" if high is None else f"between {low} and {high}"
            return f"must contain {bound} matching item{_plural(high or low)}"
        case "anyOf":
            return "must match at least one of the allowed schemas"
        case "oneOf":
            return "must match exactly one of the allowed schemas"
        case "not":
            return "must not match the disallowed schema"
        case _:
            return f"does not satisfy the {keyword!r} keyword"


def _extra_properties(instance: Any, schema: dict[str, Any]) -> list[str]:
    if not isinstance(instance, dict):
        return []
    declared = schema.get("properties", {})
    patterns = list(schema.get("patternProperties", {}))
    return [
        name
        for name in instance
        if name not in declared and not any(_found(pattern, name) for pattern in patterns)
    ]


def _found(pattern: str, name: str) -> bool:
    try:
        return search(pattern, name)
    except PatternRefused:
        return True  # reported as its own issue, not as an extra property


def _quote_schema_value(value: Any) -> str | None:
    """Canonical JSON of a schema-side value, or None when too long to be helpful."""
    try:
        text = canonical_json(value)
    except (TypeError, ValueError):
        return None
    return text if len(text) <= _MAX_QUOTED_SCHEMA_VALUE else None


def _plural(count: Any) -> str:
    return "" if count == 1 else "s"


def _pointer(path: Iterable[str | int]) -> str:
    return "".join("/" + str(part).replace("~", "~0").replace("/", "~1") for part in path)
