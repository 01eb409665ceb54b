"""Command-line flags derived from an entry's input JSON Schema (DESIGN.md §6).

Each top-level property of an object schema becomes a flag: ``max_items`` and ``maxItems`` both
become ``--max-items``; ``anyOf [T, null]`` counts as ``T``; an enum becomes a choice; a boolean
``--x/--no-x``; an array of scalars a repeatable flag. Objects, other shapes, and names that
collide with the built-in flags get no flag (``--input`` still reaches them). Values are kept as
text by click and converted here, so a value the schema's type rejects is an *input* error (exit
4), not a usage error.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

import click

from tubeless._cli._run_options import OPTION_NAMES

__all__ = ["BUILTIN_FLAGS", "DerivedFlag", "InputRejected", "derive_flags", "unflagged"]

#: Built-in flags of ``tubeless run`` (without their ``--``), read from its options: a property
#: with one of these names gets no flag (it would shadow the option, or be shadowed by it).
BUILTIN_FLAGS = frozenset(name[2:] for name in OPTION_NAMES if name.startswith("--"))

Kind = Literal["string", "integer", "number", "boolean", "choice"]


class InputRejected(Exception):
    """A flag value or ``--input`` that cannot become the entry's input (exit 4)."""


@dataclass(frozen=True, slots=True)
class DerivedFlag:
    """One flag for one input property."""

    property: str
    option: str
    kind: Kind
    multiple: bool
    required: bool
    choices: tuple[Any, ...] = ()
    help: str | None = None
    notes: tuple[str, ...] = ()
    """What the schema says beyond the type: its default and range (shown in ``--help``)."""

    def click_option(self) -> click.Option:
        """The click option (never click-required: ``--input`` may supply the value)."""
        marks = [*self.notes]
        if self.multiple:
            marks.append("repeatable")
        if self.required:
            marks.append("required")
        help_text = self.help or ""
        if marks:
            help_text = f"{help_text} [{'; '.join(marks)}]".strip()
        if self.kind == "boolean":
            return click.Option(
                [f"--{self.option}/--no-{self.option}", self.property],
                default=None,
                help=help_text or None,
            )
        choice = click.Choice([str(c) for c in self.choices]) if self.kind == "choice" else None
        return click.Option(
            [f"--{self.option}", self.property],
            type=choice or click.STRING,
            multiple=self.multiple,
            default=None,
            help=help_text or None,
            metavar=None if choice else self.kind.upper(),
        )

    def convert(self, value: Any) -> Any:
        """The typed value of what the user typed; raises :class:`InputRejected`."""
        if self.multiple:
            return [self._scalar(item) for item in value]
        return self._scalar(value)

    def _scalar(self, text: Any) -> Any:
        if self.kind in ("boolean", "string"):
            return text
        if self.kind == "choice":
            for choice in self.choices:
                if str(choice) == text:
                    return choice
            return text
        try:
            return int(text) if self.kind == "integer" else float(text)
        except ValueError:
            expected = "an integer" if self.kind == "integer" else "a number"
            raise InputRejected(f"--{self.option}: expected {expected}, found {text!r}") from None


def kebab(name: str) -> str:
    """``max_items`` / ``maxItems`` → ``max-items``."""
    spaced = re.sub(r"(?<=[a-z0-9])([A-Z])", r"-\1", name)
    return spaced.replace("_", "-").lower()


def _resolve(node: Any, root: Mapping[str, Any]) -> Any:
    """Follow local ``$ref``s (``#/...``) a few levels deep."""
    for _ in range(16):
        if not isinstance(node, Mapping) or "$ref" not in node:
            return node
        ref = node["$ref"]
        if not isinstance(ref, str) or not ref.startswith("#/"):
            return node
        target: Any = root
        for part in ref[2:].split("/"):
            part = part.replace("~1", "/").replace("~0", "~")
            if not isinstance(target, Mapping) or part not in target:
                return node
            target = target[part]
        node = target
    return node


def _unwrap_nullable(node: Any, root: Mapping[str, Any]) -> Any:
    node = _resolve(node, root)
    if isinstance(node, Mapping):
        for key in ("anyOf", "oneOf"):
            branches = node.get(key)
            if isinstance(branches, list):
                kept = [b for b in branches if _resolve(b, root) != {"type": "null"}]
                if len(kept) == 1 and len(kept) < len(branches):
                    merged = dict(_resolve(kept[0], root))
                    for extra in ("description", "default", "title"):
                        if extra in node and extra not in merged:
                            merged[extra] = node[extra]
                    return merged
    return node


def _scalar_kind(node: Any) -> Kind | None:
    if not isinstance(node, Mapping):
        return None
    enum = node.get("enum")
    if isinstance(enum, list) and enum and all(isinstance(v, (str, int, float)) for v in enum):
        return "choice"
    if "const" in node and isinstance(node["const"], (str, int, float)):
        return "choice"
    kind = node.get("type")
    if kind in ("string", "integer", "number"):
        return kind  # type: ignore[no-any-return]
    return None


def _notes(node: Mapping[str, Any], item: Mapping[str, Any]) -> tuple[str, ...]:
    """``default: 3`` and ``1 <= x <= 10`` style notes from the schema, for ``--help``."""
    notes: list[str] = []
    if "default" in node:
        notes.append(f"default: {_shown(node['default'])}")
    low = _bound(item, "minimum", "exclusiveMinimum", "<=", "<")
    high = _bound(item, "maximum", "exclusiveMaximum", "<=", "<")
    if low and high:
        notes.append(f"{low[1]} {low[0]} x {high[0]} {high[1]}")
    elif low:
        notes.append(f"x {low[0].replace('<', '>')} {low[1]}")
    elif high:
        notes.append(f"x {high[0]} {high[1]}")
    lengths = [(key, item[key]) for key in ("minLength", "maxLength") if key in item]
    notes.extend(f"{key}: {_shown(value)}" for key, value in lengths)
    return tuple(notes)


def _bound(
    node: Mapping[str, Any], inclusive: str, exclusive: str, inc_op: str, exc_op: str
) -> tuple[str, str] | None:
    value = node.get(exclusive)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return exc_op, _shown(value)
    value = node.get(inclusive)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return inc_op, _shown(value)
    return None


def _shown(value: Any) -> str:
    import json

    try:
        return json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        return repr(value)


def _properties(schema: Mapping[str, Any] | None) -> tuple[Mapping[str, Any], set[Any]]:
    if not isinstance(schema, Mapping):
        return {}, set()
    root = _resolve(schema, schema)
    if not isinstance(root, Mapping):
        return {}, set()
    properties = root.get("properties")
    if not isinstance(properties, Mapping):
        return {}, set()
    return properties, set(root.get("required") or ())


def _flag(name: Any, raw: Any, schema: Mapping[str, Any], required: bool) -> DerivedFlag | str:
    """The flag of one property, or why it has none."""
    option = kebab(str(name))
    if option in BUILTIN_FLAGS:
        return f"--{option} is a built-in option"
    if not re.fullmatch(r"[a-z0-9][a-z0-9-]*", option):
        return "its name cannot be a flag"
    node = _unwrap_nullable(raw, schema)
    if not isinstance(node, Mapping):
        return "its schema is not a type"
    description = node.get("description") if isinstance(node.get("description"), str) else None
    multiple = False
    kind: Kind | None
    item = node
    if node.get("type") == "boolean":
        kind = "boolean"
    elif node.get("type") == "array":
        item = _unwrap_nullable(node.get("items", {}), schema)
        kind = _scalar_kind(item)
        multiple = True
    else:
        kind = _scalar_kind(node)
    if kind is None:
        shape = node.get("type")
        if shape == "array":
            return "an array of non-scalars"
        return f"an {shape}" if shape == "object" else "not a scalar"
    choices: tuple[Any, ...] = ()
    if kind == "choice":
        assert isinstance(item, Mapping)
        choices = tuple(item["enum"]) if "enum" in item else (item["const"],)
    return DerivedFlag(
        property=str(name),
        option=option,
        kind=kind,
        multiple=multiple,
        required=required,
        choices=choices,
        help=description,
        notes=_notes(node, item if isinstance(item, Mapping) else {}),
    )


def derive_flags(schema: Mapping[str, Any] | None) -> list[DerivedFlag]:
    """The flags of an input schema's top-level properties, in declaration order."""
    properties, required = _properties(schema)
    assert schema is not None or not properties
    flags = [_flag(name, raw, schema or {}, name in required) for name, raw in properties.items()]
    return [flag for flag in flags if isinstance(flag, DerivedFlag)]


def unflagged(schema: Mapping[str, Any] | None) -> list[tuple[str, str]]:
    """The top-level properties that get no flag, each with the reason (for ``--help``)."""
    properties, required = _properties(schema)
    reasons = [
        (str(name), _flag(name, raw, schema or {}, name in required))
        for name, raw in properties.items()
    ]
    return [(name, reason) for name, reason in reasons if isinstance(reason, str)]
