"""Templates against an inline input schema: a template that reads ``input.qestion`` where the
schema declares ``question`` fails on its first render (templates are strict about undefined
names); it is reported when the project is checked, with the closest declared name.

Only what the schema closes is checked: an object with ``properties`` and neither
``additionalProperties`` (other than ``false``), ``patternProperties``, ``unevaluatedProperties``
nor a combinator (``anyOf``, ``oneOf``, ``allOf``, ``if``) that could admit other names. Local
``$ref``s (``#/$defs/...``) are followed. Names of ``dict`` methods (``input.items()``) pass.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from tubeless.project._issues import did_you_mean
from tubeless.project._template_check import input_reads

__all__ = ["undeclared_reads"]

_OPEN = (
    "additionalProperties",
    "patternProperties",
    "unevaluatedProperties",
    "anyOf",
    "oneOf",
    "allOf",
    "if",
    "dependentSchemas",
)
_DICT_NAMES = frozenset(dir(dict))


def _escape(part: str) -> str:
    return part.replace("~", "~0").replace("/", "~1")


def undeclared_reads(value: Any, pointer: str, schema: Mapping[str, Any]) -> list[tuple[str, str]]:
    """``(pointer, message)`` for each template string of ``value`` that reads a property the
    input ``schema`` does not declare (the first such read of each string)."""
    found: list[tuple[str, str]] = []
    for where, text in _strings(value, pointer):
        for path in input_reads(text):
            message = _undeclared(schema, path)
            if message is not None:
                found.append((where, message))
                break
    return found


def _strings(value: Any, pointer: str) -> Iterator[tuple[str, str]]:
    stack = [(value, pointer)]
    while stack:
        current, where = stack.pop()
        if isinstance(current, str):
            yield where, current
        elif isinstance(current, Mapping):
            stack.extend((item, f"{where}/{_escape(str(key))}") for key, item in current.items())
        elif isinstance(current, list):
            stack.extend((item, f"{where}/{index}") for index, item in enumerate(current))


def _resolve(root: Mapping[str, Any], node: Any) -> Any:
    for _ in range(32):  # a chain of references, bounded
        reference = node.get("$ref") if isinstance(node, Mapping) else None
        if not isinstance(reference, str) or not reference.startswith("#/$defs/"):
            return node
        node = root.get("$defs", {}).get(reference.removeprefix("#/$defs/"))
    return None


def _undeclared(root: Mapping[str, Any], path: tuple[str, ...]) -> str | None:
    current: Any = root
    for depth, name in enumerate(path):
        current = _resolve(root, current)
        if not isinstance(current, Mapping):
            return None
        properties = current.get("properties")
        closed = all(current.get(key, False) is False for key in _OPEN)
        if not isinstance(properties, Mapping) or not closed or set(current) & {"$ref"}:
            return None
        if name not in properties:
            if name in _DICT_NAMES:
                return None
            hint = did_you_mean(name, [str(key) for key in properties])
            listed = ", ".join(repr(str(key)) for key in properties) or "none"
            read = ".".join(("input", *path[: depth + 1]))
            return (
                f"the template reads {read}, which the input schema does not declare; "
                f"{hint or 'its properties: ' + listed}"
            )
        current = properties[name]
    return None
