"""Decision validation: untrusted data in, a checked ``Finish`` or ``Continue`` out.

Every decision is checked, typed or not. The envelope must be exactly
``{"kind": "finish", "result": ...}`` or ``{"kind": "continue", "calls": [...]}`` with a
nonempty list of exact ``{"id", "tool", "input"}`` calls whose ids are nonblank, at most 256
characters and unique. Messages name ids and tool names (bounded) but never quote arguments.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

from tubeless.errors import AGENT_INVALID_DECISION, TubelessError, ValidationIssue
from tubeless.frozen import FrozenDict, FrozenTuple

__all__ = ["Call", "Continue", "DecisionError", "Finish", "parse_decision"]

_MAX_CALL_ID = 256
_SHOWN = 128
_PLAIN_DICTS = (dict, FrozenDict)
_PLAIN_LISTS = (list, tuple, FrozenTuple)
_CALL_KEYS = frozenset({"id", "tool", "input"})
_STR_ONLY = frozenset({str})
_SHAPE = "Agent decision must finish(result) or continue with a nonempty calls array"


class DecisionError(TubelessError):
    """An invalid decision; ``issues`` never quote values."""

    code = AGENT_INVALID_DECISION

    def __init__(self, message: str, issues: tuple[ValidationIssue, ...] = ()) -> None:
        super().__init__(self.code, message)
        self.issues = issues


class Call(NamedTuple):
    """One requested call, as the decision gave it (input not yet validated)."""

    id: str
    tool: str
    input: Any


@dataclass(frozen=True, slots=True)
class Finish:
    """A finish decision; ``result`` is the raw result (``None`` is a valid result)."""

    result: Any


@dataclass(frozen=True, slots=True)
class Continue:
    """A continue decision with its batch of calls, in decision order."""

    calls: tuple[Call, ...]


def shown(text: str) -> str:
    """An id or name as it may appear in a message: repr-quoted and bounded."""
    return repr(text if len(text) <= _SHOWN else text[:_SHOWN] + "…")


def parse_decision(value: Any) -> Finish | Continue:
    """Check a decision's envelope and calls; raises :class:`DecisionError`."""
    if type(value) not in _PLAIN_DICTS:
        raise DecisionError("Agent decision must be a plain dict")
    # Keys are looked up only once they are known to be strings: no user code runs here.
    if not _STR_ONLY.issuperset(map(type, value)):
        raise DecisionError(_SHAPE)
    kind = value.get("kind")
    if type(kind) is not str:
        raise DecisionError(_SHAPE)
    if kind == "finish":
        if len(value) != 2 or "result" not in value:
            raise DecisionError(_SHAPE)
        return Finish(value["result"])
    if kind != "continue" or len(value) != 2 or "calls" not in value:
        raise DecisionError(_SHAPE)
    raw_calls = value["calls"]
    if type(raw_calls) not in _PLAIN_LISTS or not raw_calls:
        raise DecisionError(_SHAPE)
    calls: list[Call] = []
    seen: set[str] = set()
    for raw in raw_calls:
        if (
            type(raw) not in _PLAIN_DICTS
            or not _STR_ONLY.issuperset(map(type, raw))
            or raw.keys() != _CALL_KEYS
        ):
            raise DecisionError(
                "Each call requires a nonblank id (up to 256 characters), tool, and input"
            )
        call_id, tool = raw["id"], raw["tool"]
        if (
            type(call_id) is not str
            or not call_id.strip()
            or len(call_id) > _MAX_CALL_ID
            or type(tool) is not str
            or not tool.strip()
        ):
            raise DecisionError(
                "Each call requires a nonblank id (up to 256 characters), tool, and input"
            )
        if call_id in seen:
            raise DecisionError(f"Duplicate agent call id: {shown(call_id)}")
        seen.add(call_id)
        calls.append(Call(call_id, tool, raw["input"]))
    return Continue(tuple(calls))
