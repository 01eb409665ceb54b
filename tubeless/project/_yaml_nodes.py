"""A project document's node graph as plain data and a source map, every problem collected.

:class:`Converter` turns the nodes :mod:`tubeless.project._yaml` composed into dict, list, str,
int, float, bool and None, records where each value and key came from, and collects the problems
of single values and keys (a YAML 1.1 form, a tag, a duplicate or non-string key, a number too
long) while reading on, with the pointers of what it could not read.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import yaml
from yaml.constructor import SafeConstructor
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from tubeless.project._issues import DocumentIssue, join_pointer
from tubeless.project._yaml12 import Ambiguous, core_scalar
from tubeless.project._yaml_events import at

__all__ = ["MAX_NUMBER_CHARS", "NULL_TAG", "Converter", "kind", "mark"]

#: Characters of a number (YAML converts sexagesimal ``1:0:0:...`` in quadratic time, and an
#: integer of more than 4,300 digits cannot even be printed in a message).
MAX_NUMBER_CHARS = 100

_CORE = "tag:yaml.org,2002:"
_STR, _INT, _FLOAT = _CORE + "str", _CORE + "int", _CORE + "float"
_BOOL, _NULL, _MAP, _SEQ = _CORE + "bool", _CORE + "null", _CORE + "map", _CORE + "seq"
_MERGE = _CORE + "merge"
NULL_TAG = _NULL
_SCALAR_KINDS = {
    _STR: "a string",
    _INT: "an integer",
    _FLOAT: "a number",
    _BOOL: "a boolean",
    _NULL: "null",
}
# Messages name the rule and the fix; "{0}"/"{1}" are filled in where they are used.
_MERGE_KEY = "YAML merge keys are not supported; repeat the keys (or use a factory {use, with})"
_DUPLICATE = "duplicate key {0!r} (first defined at line {1}); remove one of them"
_KEY_NOT_TEXT = "mapping keys must be strings, found {0} used as a key; "
_NOT_FINITE = "{0} is not a finite number (JSON has no NaN or infinity); quote it for text"
_LONG_NUMBER = (
    f"{{0}} is a number of {{1:,}} characters; numbers may have at most {MAX_NUMBER_CHARS} "
    "(digits, signs, separators): shorten it, or quote it for text"
)
_BAD_VALUE = "{0} is not {1}; fix the value or remove the {2} tag"
_BAD_TAG = (
    "the tag {0} is not allowed{1}; project files use plain YAML (strings, numbers, booleans, "
    "null, mappings, lists): remove the tag"
)

#: PyYAML's YAML 1.1 resolver: a plain scalar whose tag is the one it would pick got that tag
#: implicitly, and is read again by the YAML 1.2 core schema (:mod:`._yaml12`).
_RESOLVER = yaml.resolver.Resolver()
_UNSET = object()


def _plain_core(node: ScalarNode) -> object:
    """The YAML 1.2 value of an implicitly tagged plain scalar, else ``_UNSET``.

    Raises:
        Ambiguous: When YAML 1.1 and YAML 1.2 read the scalar differently.
    """
    if node.style or len(node.value) > 2 * MAX_NUMBER_CHARS:  # None or "" (libyaml) is plain
        return _UNSET
    implicit = _RESOLVER.resolve(ScalarNode, node.value, (True, False))  # type: ignore[no-untyped-call]
    if node.tag != implicit or node.tag not in _SCALAR_KINDS:
        return _UNSET  # an explicit tag (the author said what it is), or a timestamp
    return core_scalar(node.value)


_SCALARS: dict[str, Callable[[SafeConstructor, ScalarNode], Any]] = {
    _INT: SafeConstructor.construct_yaml_int,
    _FLOAT: SafeConstructor.construct_yaml_float,
    _BOOL: SafeConstructor.construct_yaml_bool,
}


def mark(node: Node) -> tuple[int, int]:
    return node.start_mark.line + 1, node.start_mark.column + 1


def kind(node: Node) -> str:
    if isinstance(node, MappingNode):
        return "a mapping"
    if isinstance(node, SequenceNode):
        return "a list"
    return _SCALAR_KINDS.get(node.tag, "a tagged value") + f" {_short(node.value)}"


def _short(text: str, limit: int = 60) -> str:
    return repr(text if len(text) <= limit else text[: limit - 3] + "...")


def _tag_name(tag: str) -> str:
    return "!!" + tag.removeprefix(_CORE) if tag.startswith(_CORE) else tag


class Converter:
    """Node graph → plain data + source map, collecting every problem on the way.

    Aliased nodes are converted once per use (the pre-pass bounded the expanded size) but
    their problems are reported once, at their first use.
    """

    def __init__(self, file: str) -> None:
        self.file = file
        self.issues: list[DocumentIssue] = []
        self.values: dict[str, tuple[int, int]] = {}
        self.keys: dict[str, tuple[int, int]] = {}
        # Recorded for every use of an aliased node, reported or not: each use is unreadable.
        self.unread_values: set[str] = set()
        self.unread_keys: set[str] = set()
        self._seen: set[int] = set()
        self._constructor = SafeConstructor()

    def convert(self, node: Node, pointer: str, *, report: bool) -> Any:
        report = report and id(node) not in self._seen
        self._seen.add(id(node))
        self.values.setdefault(pointer, mark(node))
        if isinstance(node, MappingNode):
            if node.tag != _MAP:
                self._bad_tag(node, pointer, report, self.unread_values)
            return self._mapping(node, pointer, report)
        if isinstance(node, SequenceNode):
            if node.tag != _SEQ:
                self._bad_tag(node, pointer, report, self.unread_values)
            items = enumerate(node.value)
            return [
                self.convert(item, join_pointer(pointer, i), report=report) for i, item in items
            ]
        assert isinstance(node, ScalarNode)
        return self._scalar(node, pointer, report)

    def _problem(
        self, report: bool, node: Node, pointer: str, message: str, unread: set[str] | None
    ) -> None:
        """A problem with ``node``; ``unread`` records ``pointer`` as a refused value (or a
        mapping with a refused key), ``None`` when the data is whole (a duplicate key)."""
        if unread is not None:
            unread.add(pointer)
        if report:
            self.issues.append(at(self.file, *mark(node), pointer, message))

    def _mapping(self, node: MappingNode, pointer: str, report: bool) -> dict[str, Any]:
        result: dict[str, Any] = {}
        first_seen: dict[str, int] = {}
        for key_node, value_node in node.value:
            if key_node.tag == _MERGE:
                self._problem(report, key_node, pointer, _MERGE_KEY, self.unread_keys)
                continue
            key = self._key(key_node, pointer, report)
            if key is None:
                continue
            child = join_pointer(pointer, key)
            if key in first_seen:
                message = _DUPLICATE.format(key, first_seen[key])
                self._problem(report, key_node, child, message, None)
                continue
            first_seen[key] = key_node.start_mark.line + 1
            self.keys.setdefault(child, mark(key_node))
            result[key] = self.convert(value_node, child, report=report)
        return result

    def _key(self, node: Node, pointer: str, report: bool) -> str | None:
        if isinstance(node, ScalarNode):
            try:
                core = _plain_core(node)
            except Ambiguous as exc:
                self._problem(report, node, pointer, str(exc), self.unread_keys)
                return None
            if isinstance(core, str):
                return core
        if isinstance(node, ScalarNode) and node.tag == _STR:
            value: str = node.value
            return value
        if not isinstance(node, ScalarNode):
            fix = "use a plain string key"
        elif node.tag in _SCALAR_KINDS:
            fix = f"quote it: '{node.value}': ..."
        else:
            self._bad_tag(node, pointer, report, self.unread_keys)
            return None
        message = _KEY_NOT_TEXT.format(kind(node)) + fix
        self._problem(report, node, pointer, message, self.unread_keys)
        return None

    def _scalar(self, node: ScalarNode, pointer: str, report: bool) -> Any:
        try:
            core = _plain_core(node)
        except Ambiguous as exc:
            self._problem(report, node, pointer, str(exc), self.unread_values)
            return None
        if core is not _UNSET and (isinstance(core, (str, bool)) or core is None):
            return core
        if isinstance(core, (int, float)):
            node = ScalarNode(
                _FLOAT if isinstance(core, float) else _INT,
                node.value,
                node.start_mark,
                node.end_mark,
            )
            if len(node.value) > MAX_NUMBER_CHARS:
                message = _LONG_NUMBER.format(_short(node.value), len(node.value))
                self._problem(report, node, pointer, message, self.unread_values)
                return None
            if isinstance(core, float) and not math.isfinite(core):
                message = _NOT_FINITE.format(_short(node.value))
                self._problem(report, node, pointer, message, self.unread_values)
                return None
            return core
        if node.tag == _STR:
            return node.value
        if node.tag == _NULL:
            return None
        construct = _SCALARS.get(node.tag)
        if construct is None:
            self._bad_tag(node, pointer, report, self.unread_values)
            return None
        if node.tag != _BOOL and len(node.value) > MAX_NUMBER_CHARS:
            message = _LONG_NUMBER.format(_short(node.value), len(node.value))
            self._problem(report, node, pointer, message, self.unread_values)
            return None
        try:
            value = construct(self._constructor, node)
        except (ValueError, KeyError, OverflowError, yaml.YAMLError):
            kind, tag = _SCALAR_KINDS[node.tag], _tag_name(node.tag)
            message = _BAD_VALUE.format(_short(node.value), kind, tag)
            self._problem(report, node, pointer, message, self.unread_values)
            return None
        if isinstance(value, float) and not math.isfinite(value):
            message = _NOT_FINITE.format(_short(node.value))
            self._problem(report, node, pointer, message, self.unread_values)
            return None
        return value

    def _bad_tag(self, node: Node, pointer: str, report: bool, unread: set[str]) -> None:
        name = _tag_name(node.tag)
        if node.tag in _SCALAR_KINDS or node.tag in {_MAP, _SEQ}:
            message = f"the tag {name} does not fit {kind(node)}; remove the tag"
        else:
            danger = " (such tags can run code when loaded)" if "python/" in node.tag else ""
            message = _BAD_TAG.format(name, danger)
        self._problem(report, node, pointer, message, unread)
