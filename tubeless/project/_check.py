"""The meta-schema check: every violation as a located, actionable :class:`DocumentIssue`.

jsonschema finds the problems; this module says them the way a person fixing a YAML file needs
them: what was expected, what was found, at which line, with the closest valid key for a typo.
For ``anyOf``/``oneOf`` it does not dump every branch: it picks the branch the value was meant
to be (by type, then by the key only that branch requires) and reports that branch's problems.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from jsonschema import Draft202012Validator, ValidationError
from jsonschema.protocols import Validator
from jsonschema.validators import extend

from tubeless.project._issues import DocumentIssue, join_pointer, sort_issues
from tubeless.project._yaml import LoadedDocument
from tubeless.project.spec import ID_PATTERN, REFERENCE_PATTERN, STEP_ID_PATTERN, TOOL_NAME_PATTERN

__all__ = ["check_schema"]

_CHARS = "at most 128 characters"
#: Human names for the patterns the meta-schema uses.
_PATTERNS = {
    REFERENCE_PATTERN: "a string matching 'package.module:attribute'",
    ID_PATTERN: f"an id (a letter, then letters, digits, '_', '.' or '-'; {_CHARS})",
    STEP_ID_PATTERN: f"a step id (a letter, digit or '_', then also '.' or '-'; {_CHARS})",
    TOOL_NAME_PATTERN: f"a tool name (a letter, then letters, digits, '_' or '-'; {_CHARS})",
    r"\S": "non-blank text",
}
#: JSON's safe-integer bound is noise in messages ("an integer >= 1" says enough).
_SAFE_INTEGER = 2**53 - 1
_FOUND_LIMIT = 60
_BOUNDS = (
    ("minimum", ">="),
    ("exclusiveMinimum", ">"),
    ("maximum", "<="),
    ("exclusiveMaximum", "<"),
)


def _closed_pattern_properties(
    validator: Validator, patterns: Mapping[str, Any], instance: Any, schema: Mapping[str, Any]
) -> Iterator[ValidationError]:
    """``patternProperties``, plus: keys matching no pattern are errors when nothing else
    (``properties``, ``additionalProperties``, ``propertyNames``) says what they may be.

    pydantic writes ``dict[Annotated[str, Field(pattern=...)], X]`` as ``patternProperties``
    alone, which JSON Schema reads as "other keys allowed", while the model rejects them; this
    keeps the check as strict as the models (an agent named ``1bad`` is reported here, located).
    """
    yield from _PATTERN_PROPERTIES(validator, patterns, instance, schema)
    if not isinstance(instance, dict) or schema.keys() & {
        "additionalProperties",
        "propertyNames",
        "unevaluatedProperties",
    }:
        return
    if _stray_keys(instance, schema):
        yield ValidationError("keys match none of the patterns")


#: What cannot be judged of a mapping one of whose keys the loader refused: the entry is left
#: out of the data, so a required key or the branch it would have chosen may be missing (a
#: ``<<: *defaults`` merge key, say). Its other keys and values are still checked.
_WHOLE_MAPPING = frozenset({"required", "dependentRequired", "minProperties", "anyOf", "oneOf"})
_PATTERN_PROPERTIES = Draft202012Validator.VALIDATORS["patternProperties"]
_Validator = extend(  # type: ignore[no-untyped-call]  # jsonschema's stubs leave extend untyped
    Draft202012Validator, {"patternProperties": _closed_pattern_properties}
)


def check_schema(doc: LoadedDocument, schema: Mapping[str, Any]) -> list[DocumentIssue]:
    """Every meta-schema violation in ``doc``, located, in file order, without duplicates.

    Values the loader refused (:attr:`LoadedDocument.unread_values`) are not judged again: the
    loader's problem (in :attr:`LoadedDocument.issues`) already says how to write them.
    """
    explainer = _Explainer(doc, schema)
    issues: list[DocumentIssue] = []
    for error in _Validator(dict(schema)).iter_errors(doc.data):
        issues.extend(explainer.explain(error))
    return sort_issues(issues)


def _stray_keys(instance: Mapping[str, Any], schema: Mapping[str, Any]) -> list[str]:
    """Keys of ``instance`` named by neither ``properties`` nor ``patternProperties``."""
    known = schema.get("properties", {})
    patterns = schema.get("patternProperties", {})
    return [
        key for key in instance if key not in known and not any(re.search(p, key) for p in patterns)
    ]


def _quote(value: Any) -> str:
    if isinstance(value, str):
        text = value if len(value) <= _FOUND_LIMIT else value[: _FOUND_LIMIT - 3] + "..."
        return repr(text)
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    return repr(value)


def _found(value: Any) -> str:
    """The found value for a message: scalars quoted (bounded), collections described."""
    if isinstance(value, dict):
        if not value:
            return "an empty mapping"
        keys = ", ".join(_quote(key) for key in list(value)[:5])
        return f"a mapping with {keys}" + (", ..." if len(value) > 5 else "")
    if isinstance(value, list):
        count = len(value)
        return f"a list of {count} item{'s' * (count != 1)}" if value else "an empty list"
    if isinstance(value, str) and len(value) > _FOUND_LIMIT:
        return f"{_quote(value)} ({len(value)} characters)"
    return _quote(value)


def _colon_hint(reference: str) -> str:
    """For ``pkg.module.attr`` written where ``pkg.module:attr`` was meant: how to write it."""
    head, dot, tail = reference.strip().rpartition(".")
    if ":" in reference or not dot or not re.fullmatch(REFERENCE_PATTERN, f"{head}:{tail}"):
        return ""
    return (
        f"; did you mean {head + ':' + tail!r}? (a colon separates the module from the attribute)"
    )


def _one_of(texts: Sequence[str]) -> str:
    return texts[0] if len(texts) == 1 else ", ".join(texts[:-1]) + " or " + texts[-1]


def _words(name: str) -> str:
    """``PipelineToolSpec`` → ``a pipeline tool``."""
    words = re.findall(r"[A-Z][a-z]*", name.removesuffix("Spec")) or [name]
    text = " ".join(word.lower() for word in words)
    return ("an " if text[0] in "aeiou" else "a ") + text


class _Explainer:
    """Turns jsonschema errors into issues (one error may become several, or none)."""

    def __init__(self, doc: LoadedDocument, schema: Mapping[str, Any]) -> None:
        self.doc = doc
        self.defs: Mapping[str, Any] = schema.get("$defs", {})

    def explain(self, error: ValidationError) -> list[DocumentIssue]:
        pointer = join_pointer("", *error.absolute_path)
        kind = error.validator
        if self.doc.was_refused(pointer) or (
            pointer in self.doc.unread_keys and kind in _WHOLE_MAPPING
        ):
            return []  # the loader's own problem says what is wrong there
        instance: Any = error.instance
        value: Any = error.validator_value
        schema = self._resolve(error.schema)
        if len(error.relative_schema_path) >= 2 and error.relative_schema_path[-2] == (
            "propertyNames"
        ):
            key_pointer = join_pointer(pointer, instance)
            return [
                self._issue(
                    key_pointer,
                    f"invalid key {instance!r}: expected {self._describe(schema)}",
                    key=True,
                )
            ]
        if kind == "additionalProperties" and isinstance(instance, dict):
            return [
                self._unknown_key(pointer, key, schema) for key in _stray_keys(instance, schema)
            ]
        if kind == "patternProperties" and isinstance(instance, dict):
            expected = _one_of(
                [
                    self._describe({"type": "string", "pattern": pattern})
                    for pattern in schema.get("patternProperties", {})
                ]
            )
            return [
                self._issue(
                    join_pointer(pointer, key),
                    f"invalid key {key!r}: expected {expected}",
                    key=True,
                )
                for key in _stray_keys(instance, schema)
            ]
        if kind == "required" and isinstance(instance, dict):
            return [
                self._issue(pointer, self._missing(name, schema))
                for name in value
                if name not in instance
            ]
        if kind == "dependentRequired" and isinstance(instance, dict):
            return [
                self._issue(
                    pointer,
                    f"{name} and {', '.join(needs)} go together: add "
                    f"{', '.join(n for n in needs if n not in instance)}",
                )
                for name, needs in value.items()
                if name in instance and any(n not in instance for n in needs)
            ]
        if kind in {"anyOf", "oneOf"}:
            return self._union(error, pointer, schema)
        return [self._issue(pointer, self._message(error, schema))]

    # -- messages ---------------------------------------------------------------------------

    def _message(self, error: ValidationError, schema: Mapping[str, Any]) -> str:
        kind, instance = error.validator, error.instance
        value: Any = error.validator_value
        if kind is None:
            return f"{_found(instance)} is not allowed here; remove it"
        if kind == "not":
            return f"{_found(instance)} is not allowed here"
        if kind == "maxLength":
            message = f"expected at most {value} characters, found {_found(instance)}"
        elif kind == "maxProperties" and isinstance(instance, dict):
            message = f"expected a mapping of at most {value} entries, found {len(instance):,}"
        elif kind == "minItems":
            items = f"{value} item{'s' * (value != 1)}"
            message = f"expected a list of at least {items}, found {_found(instance)}"
        elif kind in {
            "type",
            "pattern",
            "minLength",
            "const",
            "enum",
            "minimum",
            "maximum",
            "exclusiveMinimum",
            "exclusiveMaximum",
            "minProperties",
        }:
            focus = kind if kind in {"maximum", "exclusiveMaximum"} else None
            message = f"expected {self._describe(schema, focus)}, found {_found(instance)}"
        else:
            text = error.message
            message = text if len(text) <= 200 else text[:197] + "..."
        if kind == "pattern" and value == REFERENCE_PATTERN and isinstance(instance, str):
            message += _colon_hint(instance)
        if instance is None:
            message += " (to leave an optional key unset, remove it)"
        return message

    def _missing(self, name: str, schema: Mapping[str, Any]) -> str:
        described = self._resolve(schema.get("properties", {}).get(name, {})).get("description")
        help_text = f" ({described.rstrip('.')})" if isinstance(described, str) else ""
        return f"missing required property {name!r}{help_text}"

    def _unknown_key(self, pointer: str, key: str, schema: Mapping[str, Any]) -> DocumentIssue:
        valid = list(schema.get("properties", {}))
        close = difflib.get_close_matches(key, valid, n=1)
        if close:
            hint = f"did you mean {close[0]!r}?"
        elif valid:
            hint = "valid keys: " + ", ".join(valid)
        else:
            hint = "no keys are allowed here"
        return self._issue(join_pointer(pointer, key), f"unknown key {key!r}; {hint}", key=True)

    def _describe(self, schema: Mapping[str, Any], focus: str | None = None) -> str:
        """What a schema accepts, in words (``focus`` names the bound that was broken)."""
        schema = self._resolve(schema)
        if "const" in schema:
            return _quote(schema["const"])
        if "enum" in schema:
            return "one of " + ", ".join(_quote(value) for value in schema["enum"])
        for key in ("anyOf", "oneOf"):
            if key in schema:
                return _one_of([self._describe(branch) for branch in schema[key]])
        kind = schema.get("type")
        if kind is None and "pattern" in schema:
            kind = "string"
        if kind is None and schema.keys() & {"required", "properties", "minProperties"}:
            kind = "object"
        if kind == "string":
            pattern = schema.get("pattern")
            if isinstance(pattern, str):
                text = _PATTERNS.get(pattern, f"a string matching {pattern!r}")
            else:
                text = "non-empty text" if schema.get("minLength", 0) >= 1 else "a string"
            limit = schema.get("maxLength")
            return text + (f" of at most {limit} characters" if limit is not None else "")
        if kind in {"integer", "number"}:
            bounds = [
                f"{sign} {schema[name]}"
                for name, sign in _BOUNDS
                if name in schema and (schema[name] != _SAFE_INTEGER or focus == name)
            ]
            text = "an integer" if kind == "integer" else "a number"
            return " ".join([text, " and ".join(bounds)]) if bounds else text
        if kind == "object":
            keys = ", ".join(repr(key) for key in schema.get("properties", {}))
            if schema.get("minProperties", 0) >= 1 and keys:
                return f"a mapping with at least one of {keys}"
            required = schema.get("required", [])
            return f"a mapping with {', '.join(map(repr, required))}" if required else "a mapping"
        if kind == "array":
            return "a list"
        if kind == "boolean":
            return "true or false"
        return "null" if kind == "null" else "a valid value"

    # -- anyOf / oneOf ------------------------------------------------------------------------

    def _union(
        self, error: ValidationError, pointer: str, schema: Mapping[str, Any]
    ) -> list[DocumentIssue]:
        listed: Any = error.validator_value
        branches: list[Mapping[str, Any]] = [self._resolve(b) for b in listed]
        instance: Any = error.instance
        if all(list(b) == ["required"] and len(b["required"]) == 1 for b in branches):
            names = [b["required"][0] for b in branches]
            present = [name for name in names if name in instance]
            found = f"found: {', '.join(present)}" if present else "found none"
            what = self._def_name(schema)
            return [
                self._issue(pointer, f"{what} needs exactly one of {', '.join(names)} ({found})")
            ]
        if error.validator == "oneOf" and not error.context:
            several = _one_of([self._describe(branch) for branch in branches])
            return [
                self._issue(
                    pointer,
                    f"expected exactly one of {several}, found "
                    f"{_found(instance)}, which is valid under each of several; "
                    "make it match only one",
                )
            ]
        typed = [i for i, branch in enumerate(branches) if self._fits(branch, instance)]
        fitting = typed
        if len(typed) > 1 and isinstance(instance, dict):
            fitting = self._by_required_key(branches, typed, instance)
        if len(fitting) != 1 or not error.context:
            shown = typed or range(len(branches))
            expected = _one_of([self._describe(branches[i]) for i in shown])
            return [self._issue(pointer, f"expected {expected}, found {_found(instance)}")]
        issues: list[DocumentIssue] = []
        for sub in error.context:
            if sub.relative_schema_path and sub.relative_schema_path[0] == fitting[0]:
                issues.extend(self.explain(sub))
        return issues

    @staticmethod
    def _fits(branch: Mapping[str, Any], instance: Any) -> bool:
        kind = branch.get("type")
        if kind is None:
            return True
        kinds = kind if isinstance(kind, list) else [kind]
        checker = Draft202012Validator.TYPE_CHECKER
        return any(checker.is_type(instance, k) for k in kinds)

    @staticmethod
    def _by_required_key(
        branches: Sequence[Mapping[str, Any]], fitting: Iterable[int], instance: Mapping[str, Any]
    ) -> list[int]:
        """The mapping branch the value was meant to be, as a one-item list (empty if unclear).

        A branch is a candidate when the value has a key only that branch requires (``run``,
        ``pipeline``, ``agent`` for tools); ties go to the branch that knows more of the keys,
        then to the one with more of its own required keys present.
        """
        fitting = list(fitting)
        required = {i: set(branches[i].get("required", [])) for i in fitting}
        scores: dict[int, tuple[int, int]] = {}
        for i in fitting:
            own = required[i].difference(*(required[j] for j in fitting if j != i))
            if own & instance.keys():
                unknown = len(instance.keys() - set(branches[i].get("properties", {})))
                scores[i] = (-unknown, len(own & instance.keys()))
        best = [i for i, score in scores.items() if score == max(scores.values())]
        return best if len(best) == 1 else []

    def _def_name(self, schema: Mapping[str, Any]) -> str:
        for name, definition in self.defs.items():
            if definition is schema or definition == schema:
                return _words(name)
        return "this mapping"

    # -- plumbing -----------------------------------------------------------------------------

    def _resolve(self, node: Any) -> Mapping[str, Any]:
        """Follow local ``#/$defs/...`` references (sibling keywords are kept)."""
        if not isinstance(node, Mapping):
            return {}
        schema: Mapping[str, Any] = node
        seen = 0
        while isinstance(schema.get("$ref"), str) and schema["$ref"].startswith("#/$defs/"):
            target = self.defs.get(schema["$ref"].removeprefix("#/$defs/"))
            if not isinstance(target, Mapping) or seen > 32:
                break
            siblings = {k: v for k, v in schema.items() if k not in {"$ref", "description"}}
            schema = {**target, **siblings}
            seen += 1
        return schema

    def _issue(self, pointer: str, message: str, *, key: bool = False) -> DocumentIssue:
        return self.doc.issue(pointer, message, key=key)
