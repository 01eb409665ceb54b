"""The start-a-run form of an entry (serve only): fields from the input schema's top-level
properties, and the input a posted form stands for."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Final

__all__ = ["MAX_FIELDS", "form_fields", "form_input"]

#: Fields a form shows; the JSON box takes any input beyond them.
MAX_FIELDS: Final = 50


def _kind(schema: Mapping[str, Any]) -> str:
    if isinstance(schema.get("enum"), list) and all(isinstance(v, str) for v in schema["enum"]):
        return "choice"
    kind = schema.get("type")
    if isinstance(kind, list):
        kinds = [k for k in kind if k != "null"]
        kind = kinds[0] if len(kinds) == 1 else None
    if kind is None and isinstance(schema.get("anyOf"), list):
        options = [o for o in schema["anyOf"] if isinstance(o, Mapping) and o.get("type") != "null"]
        if len(options) == 1:
            return _kind(options[0])
    return kind if kind in ("string", "integer", "number", "boolean") else "json"


def form_fields(schema: Mapping[str, Any]) -> list[dict[str, Any]]:
    """``{name, kind, required, description, default, choices}`` per top-level property;
    ``kind`` is ``string``, ``integer``, ``number``, ``boolean``, ``choice`` or ``json``."""
    properties = schema.get("properties")
    if not isinstance(properties, Mapping):
        return []
    listed = schema.get("required")
    required: list[Any] = listed if isinstance(listed, list) else []
    fields = []
    for name, raw in list(properties.items())[:MAX_FIELDS]:
        prop = raw if isinstance(raw, Mapping) else {}
        kind = _kind(prop)
        default = prop.get("default")
        fields.append(
            {
                "name": str(name),
                "kind": kind,
                "required": name in required,
                "description": prop.get("description") or prop.get("title"),
                "default": json.dumps(default)
                if kind == "json" and default is not None
                else default,
                "choices": prop.get("enum") if kind == "choice" else None,
            }
        )
    return fields


def form_input(schema: Mapping[str, Any], form: Mapping[str, str]) -> Any:
    """The input of a posted form: the ``__json`` box when filled (its top-level keys
    overridden by filled fields), else the filled fields; empty fields inject nothing.

    Raises:
        ValueError: A field's value cannot stand for its type (the message names it).
    """
    text = form.get("__json", "").strip()
    base: Any = {}
    if text:
        try:
            base = json.loads(text)
        except ValueError as exc:
            raise ValueError(f"the JSON input is not valid JSON ({exc.args[0]})") from None
    fields = form_fields(schema)
    if not fields:
        return base
    if not isinstance(base, dict):
        raise ValueError("the JSON input must be an object for this entry")
    for field in fields:
        name, kind = field["name"], field["kind"]
        if kind == "boolean":
            if f"{name}__present" in form:
                base[name] = form.get(name) == "on"
            continue
        value = form.get(name, "")
        if value == "":
            continue
        base[name] = _convert(name, kind, value)
    return base


def _convert(name: str, kind: str, value: str) -> Any:
    try:
        if kind == "integer":
            return int(value)
        if kind == "number":
            return float(value)
        if kind == "json":
            return json.loads(value)
    except ValueError:
        raise ValueError(f"field {name!r}: expected {kind}") from None
    return value
