"""YAML inputs, read under the project loader's bounds (DESIGN.md §5), a list item at a time.

The project loader's event pre-pass (:func:`tubeless.project._yaml_events.checked_events`)
checks every event before it is used, so an alias fan-out or a deep nest is refused after a few
hundred events, naming file and line, instead of hanging or overflowing the stack. Inputs files
are datasets, so their node bound is larger than a project's (:data:`INPUT_BOUNDS`); depth and
aliases keep the project's bounds. Each item is composed and converted as soon as its events
are read (by the project's converter: YAML 1.2 scalars, no tags, finite numbers), so what is in
memory is the text and one item, not the whole document's nodes.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import yaml

from tubeless.errors import BATCH_INPUT_INVALID, BatchError, DocumentError
from tubeless.project._spi import (
    FAST_LOADER,
    MAX_ALIASES,
    MAX_DEPTH,
    Bounds,
    Converter,
    Loader,
    Replay,
    checked_events,
    fast_path_agrees,
)

__all__ = ["INPUT_BOUNDS", "MAX_INPUT_NODES", "yaml_items", "yaml_loader", "yaml_value"]

#: Values in a YAML inputs file (an alias counted as all the values it stands for).
MAX_INPUT_NODES = 1_000_000
INPUT_BOUNDS = Bounds(
    max_depth=MAX_DEPTH,
    max_aliases=MAX_ALIASES,
    max_nodes=MAX_INPUT_NODES,
    document="an inputs file",
)
_SEQ_TAGS = (None, "!", "tag:yaml.org,2002:seq")


class _Stream(Replay):
    """A composer that reads checked events as they come (not from a recorded list)."""

    def __init__(self, source: Iterator[yaml.Event]) -> None:
        super().__init__([])
        self._source = source
        self._peeked: yaml.Event | None = None

    def _peek(self) -> yaml.Event | None:
        if self._peeked is None:
            self._peeked = next(self._source, None)
        return self._peeked

    def check_event(self, *choices: type[yaml.Event]) -> bool:
        event = self._peek()
        return event is not None and (not choices or isinstance(event, choices))

    def peek_event(self) -> yaml.Event:
        event = self._peek()
        assert event is not None, "past the end of the stream"
        return event

    def get_event(self) -> yaml.Event:
        event = self.peek_event()
        self._peeked = None
        return event


def yaml_loader(text: str, file: str) -> type[Any]:
    """The parser that reads ``text`` (libyaml when it agrees with PyYAML's own, as for
    projects), checked by reading every item once; raises as :func:`yaml_items` does."""
    if FAST_LOADER is not None and fast_path_agrees(text):
        try:
            for _ in yaml_items(text, file, FAST_LOADER):
                pass
        except yaml.YAMLError:
            pass  # read again by the pure-Python parser, which words the message
        else:
            return FAST_LOADER
    for _ in yaml_items(text, file, Loader):
        pass
    return Loader


def yaml_items(
    text: str, file: str, loader: type[Any] = Loader
) -> Iterator[tuple[int, Any, str | None]]:
    """Each item of the YAML list ``text``: its 1-based line, its value, and why it is not a
    JSON value (``None`` when it is one).

    Raises:
        BatchError: ``TUBELESS_BATCH_INPUT_INVALID`` naming file and line, when the document is
            past a bound, not YAML, or not one list.
        yaml.YAMLError: A syntax error found by libyaml (``loader`` is not :class:`Loader`).
    """
    try:
        stream = _Stream(checked_events(text, file, loader, INPUT_BOUNDS))
        stream.get_event()  # the stream's start
        if not stream.check_event(yaml.DocumentStartEvent):
            raise BatchError(BATCH_INPUT_INVALID, f"{file}: expected a YAML list of inputs")
        stream.get_event()
        start = stream.peek_event()
        if not isinstance(start, yaml.SequenceStartEvent) or start.tag not in _SEQ_TAGS:
            line = start.start_mark.line + 1 if start.start_mark else 1
            raise BatchError(BATCH_INPUT_INVALID, f"{file}:{line}: expected a YAML list of inputs")
        stream.get_event()
        while not stream.check_event(yaml.SequenceEndEvent):
            node = stream.compose_node(None, None)  # type: ignore[arg-type]
            assert node is not None, "an item's events make a node"
            converter = Converter(file)
            value = converter.convert(node, "", report=True)
            line = node.start_mark.line + 1
            if converter.issues:
                issue = converter.issues[0]
                yield line, None, f"not a JSON value at {issue.pointer or '/'}: {issue.message}"
            else:
                yield line, value, None
        while stream.check_event():
            stream.get_event()  # the rest: a second document is refused here
    except DocumentError as exc:
        issue = exc.issues[0]
        raise BatchError(BATCH_INPUT_INVALID, issue.format()) from None
    except yaml.YAMLError as exc:
        if loader is not Loader and isinstance(exc, yaml.MarkedYAMLError):
            raise
        mark = getattr(exc, "problem_mark", None)
        where = f":{mark.line + 1}" if mark is not None else ""
        reason = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise BatchError(BATCH_INPUT_INVALID, f"{file}{where}: invalid YAML: {reason}") from None


def yaml_value(text: str, file: str) -> Any:
    """One YAML value (``run --input-file F.yaml``) under :data:`INPUT_BOUNDS`.

    Raises:
        ValueError: The problem, as ``<file>:<line>:<col> <pointer>: <message>``.
    """
    from tubeless.project._spi import events

    try:
        recorded = events(text, file, INPUT_BOUNDS)
    except DocumentError as exc:
        raise ValueError(exc.issues[0].format()) from None
    root = Replay(recorded).get_single_node()
    if root is None:
        return None
    converter = Converter(file)
    value = converter.convert(root, "", report=True)
    if converter.issues:
        raise ValueError(converter.issues[0].format())
    return value
