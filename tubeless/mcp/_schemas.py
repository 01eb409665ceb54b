"""An MCP tool's schemas, read as the server wrote them: in the dialect their ``$schema`` names
(draft 2020-12 without one), never fetching a remote ``$ref``, never filling defaults (what the
server receives is what ``decide`` chose).

An input schema tubeless cannot use (not an object schema, a ``$schema`` naming no known
dialect, invalid under its own dialect, a ``$ref`` outside itself) makes its tool unusable: an
included one fails the run at connect, naming it (DESIGN.md §24).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

from tubeless.schema import Schema, SchemaDefinitionError, SchemaValidationError

__all__ = ["input_validator", "output_problem", "output_validator"]

#: What messages call each dialect.
_DIALECTS = {
    "Draft3Validator": "draft-03",
    "Draft4Validator": "draft-04",
    "Draft6Validator": "draft-06",
    "Draft7Validator": "draft-07",
    "Draft201909Validator": "draft 2019-09",
    "Draft202012Validator": "draft 2020-12",
}
_REF_KEYWORDS = ("$ref", "$dynamicRef")


def _dialect(schema: Mapping[str, Any]) -> Any:
    """The jsonschema validator class of ``schema``'s dialect, or why there is none."""
    from jsonschema import Draft202012Validator
    from jsonschema.validators import validator_for

    if "$schema" not in schema:
        return Draft202012Validator
    declared = schema["$schema"]
    kind = (
        validator_for(dict(schema), default=cast(Any, None)) if isinstance(declared, str) else None
    )
    if kind is None:
        shown = declared if isinstance(declared, str) else type(declared).__name__
        return f"its input schema's $schema ({shown!r}) names no dialect tubeless knows"
    return kind


def _outside_ref(schema: Mapping[str, Any]) -> str | None:
    """The first ``$ref`` of ``schema`` that does not resolve within it (or to a metaschema).

    The registry has no way to retrieve anything, so looking a reference up never fetches it.
    """
    from jsonschema_specifications import (  # type: ignore[import-untyped]
        REGISTRY as METASCHEMAS,
    )
    from referencing import Registry, Resource
    from referencing.exceptions import Unresolvable
    from referencing.jsonschema import DRAFT202012

    root = Resource.from_contents(dict(schema), default_specification=DRAFT202012)
    base = root.id() or ""
    registry: Registry[Any] = METASCHEMAS.combine(Registry().with_resource(base, root).crawl())
    pending = [(registry.resolver(base_uri=base), root)]
    while pending:
        resolver, resource = pending.pop()
        contents = resource.contents
        if isinstance(contents, dict):
            for keyword in _REF_KEYWORDS:
                ref = contents.get(keyword)
                if not isinstance(ref, str):
                    continue
                try:
                    resolver.lookup(ref)
                except Unresolvable:
                    return ref
        pending.extend((resolver.in_subresource(sub), sub) for sub in resource.subresources())
    return None


def input_validator(schema: Any) -> Schema | str:
    """The validator of a tool's arguments, or why there is none (a clause: ``its input
    schema has no type ...``)."""
    from jsonschema.exceptions import SchemaError

    if not isinstance(schema, Mapping):
        return "its input schema is not a JSON object"
    if schema.get("type") != "object":
        return "its input schema has no type 'object' at its root"
    kind = _dialect(schema)
    if isinstance(kind, str):
        return kind
    try:
        kind.check_schema(dict(schema))
        ref = _outside_ref(schema)
    except SchemaError as err:
        where = "".join(f"/{part}" for part in err.absolute_path)
        name = _DIALECTS.get(kind.__name__, kind.__name__)
        return f"its input schema is not valid under its own dialect ({name})" + (
            f" at {where}" if where else ""
        )
    except RecursionError:
        return "its input schema is nested too deeply"
    except Exception as err:  # referencing refusing an odd schema: still this tool's problem
        return f"its input schema's references cannot be followed ({type(err).__name__})"
    if ref is not None and ref.startswith("#"):
        return f"its input schema has a $ref that does not resolve ({ref!r})"
    if ref is not None:
        return (
            f"its input schema has a $ref outside itself ({ref!r}), and remote schemas are "
            "never fetched"
        )
    try:
        return Schema.json(dict(schema), dialect="declared", defaults=False)
    except SchemaDefinitionError as err:
        return f"its input schema cannot be used ({err})"


def output_validator(name: str, schema: Any) -> Schema | str:
    """The validator of a tool's structured content, or why its output schema cannot be used."""
    try:
        if not isinstance(schema, Mapping):
            raise SchemaDefinitionError("not a JSON object")
        return Schema.json(dict(schema), dialect="declared", defaults=False)
    except SchemaDefinitionError as err:
        return f"Tool {name!r} has an output schema tubeless cannot use ({err})."


def output_problem(name: str, validator: Schema | str, structured: Any) -> str | None:
    """Why a result's structured content breaks the tool's output schema (None: it does not).

    The reason names the schema's expectations and the paths, never the value.
    """
    if isinstance(validator, str):
        return validator
    if structured is None:
        return f"Tool {name!r} has an output schema but its result has no structured content."
    try:
        validator.validate(structured)
    except SchemaValidationError as err:
        return (
            f"The structured content of tool {name!r} does not match its output schema: "
            + "; ".join(issue.format() for issue in err.issues)
        )
    except SchemaDefinitionError as err:
        return f"Tool {name!r} has an output schema tubeless cannot use ({err})."
    return None
