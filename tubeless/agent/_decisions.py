"""Decision validation: untrusted data in, a checked ``Finish`` or ``Continue`` out.

Every decision is checked, typed or not. The envelope must be exactly
``{"kind": "finish", "result": ...}`` or ``{"kind": "continue", "calls": [...]}`` with a
nonempty list of exact ``{"id", "tool", "input"}`` calls whose ids are nonblank, at most 256
characters and unique. Messages name ids, tool names and key names (bounded) and say the type
of what was found instead of a well-formed part, but never quote a value.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, NamedTuple

from tubeless.errors import AGENT_INVALID_DECISION, TubelessError, ValidationIssue
from tubeless.frozen import FrozenDict, FrozenTuple

__all__ = ["Call", "Continue", "DecisionError", "Finish", "parse_decision", "unknown_tool"]

_MAX_CALL_ID = 256
_SHOWN = 128
_PLAIN_DICTS = (dict, FrozenDict)
_PLAIN_LISTS = (list, tuple, FrozenTuple)
_CALL_KEYS = frozenset({"id", "tool", "input"})
_STR_ONLY = frozenset({str})
_SHAPE = "Agent decision must finish(result) or continue with a nonempty calls array"
_CALL = "Each call requires a nonblank id (up to 256 characters), tool, and input"
#: Extra key names shown in a message, and tool names listed for an unknown tool, at most.
_KEYS_SHOWN = 3
_LISTED = 20


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


# Every decision makes one of these. A frozen dataclass's ``__init__`` is a class call plus an
# ``object.__setattr__``; ``parse_decision`` builds the same objects with the slot's own setter
# (about a third of the instructions; ``tests/agent/test_decisions.py`` compares them).
_new = object.__new__
_set_result = Finish.__dict__["result"].__set__
_set_calls = Continue.__dict__["calls"].__set__


def shown(text: str) -> str:
    """An id or name as it may appear in a message: repr-quoted and bounded."""
    return repr(text if len(text) <= _SHOWN else text[:_SHOWN] + "…")


def parse_decision(value: Any, *, source: str = "decide") -> Finish | Continue:
    """Check a decision's envelope and calls; raises :class:`DecisionError`.

    ``source`` names the callable that returned ``value`` (``decide``, or ``dry_run`` in a dry
    run) in the message of a value that is not a dict at all.
    """
    if type(value) not in _PLAIN_DICTS:
        found = "None (missing return?)" if value is None else _type_name(value)
        raise DecisionError(f"Agent decision must be a plain dict; {source} returned {found}")
    # Keys are looked up only once they are known to be strings: no user code runs here.
    if not _STR_ONLY.issuperset(map(type, value)):
        raise _shape(f"found a key of type {_odd_key_type(value)}")
    kind = value.get("kind")
    if type(kind) is not str:
        if "kind" not in value:
            raise _shape("'kind' is missing")
        raise _shape(f"'kind' is {_type_name(kind)}, not a string")
    if kind == "finish":
        if len(value) != 2 or "result" not in value:
            raise _shape(_envelope_keys(value, "finish", "result"))
        finish: Finish = _new(Finish)
        _set_result(finish, value["result"])
        return finish
    if kind != "continue":
        raise _shape("'kind' must be 'finish' or 'continue'")
    if len(value) != 2 or "calls" not in value:
        raise _shape(_envelope_keys(value, "continue", "calls"))
    raw_calls = value["calls"]
    if type(raw_calls) not in _PLAIN_LISTS:
        raise _shape(f"'calls' is {_type_name(raw_calls)}, not a list")
    if not raw_calls:
        raise _shape("'calls' is empty")
    calls: list[Call] = []
    seen: set[str] = set()
    for raw in raw_calls:
        if (
            type(raw) not in _PLAIN_DICTS
            or not _STR_ONLY.issuperset(map(type, raw))
            or raw.keys() != _CALL_KEYS
        ):
            raise _call_problem(f"call {len(calls) + 1} {_call_shape(raw)}")
        call_id, tool = raw["id"], raw["tool"]
        if (
            type(call_id) is not str
            or not call_id.strip()
            or len(call_id) > _MAX_CALL_ID
            or type(tool) is not str
            or not tool.strip()
        ):
            raise _call_problem(_call_fields(call_id, tool, len(calls) + 1))
        if call_id in seen:
            raise DecisionError(f"Duplicate agent call id: {shown(call_id)}")
        seen.add(call_id)
        calls.append(Call(call_id, tool, raw["input"]))
    batch: Continue = _new(Continue)
    _set_calls(batch, tuple(calls))
    return batch


def unknown_tool(name: str, tools: Iterable[str]) -> DecisionError:
    """The error for a call to a tool the agent does not have: the closest name, if one is
    close, and the agent's tools (at most :data:`_LISTED`). Tool names are identifiers, not
    values, so they may be named."""
    names = sorted(tools)
    message = f"Unknown agent tool: {shown(name)}"
    import difflib  # here: only a decision naming an unknown tool needs it

    # difflib is quadratic: a name far longer than any tool's is compared with nothing.
    close = difflib.get_close_matches(name, names, n=1) if len(name) <= _SHOWN else []
    if close:
        message += f"; did you mean {shown(close[0])}?"
    if not names:
        return DecisionError(f"{message} (the agent has no tools)")
    listed = ", ".join(names[:_LISTED])
    more = f" and {len(names) - _LISTED} more" if len(names) > _LISTED else ""
    return DecisionError(f"{message} (tools: {listed}{more})")


# -- what an invalid decision is found to hold (type and key names only, never values) --------
def _shape(found: str) -> DecisionError:
    return DecisionError(f"{_SHAPE}; {found}")


def _call_problem(found: str) -> DecisionError:
    return DecisionError(f"{_CALL}; {found}")


def _type_name(value: Any) -> str:
    """What a message says was found: the type's name (``None`` for None), never the value."""
    return "None" if value is None else type(value).__name__


def _odd_key_type(mapping: Any) -> str:
    return next(_type_name(key) for key in mapping if type(key) is not str)


def _key_names(keys: list[str]) -> str:
    """``key 'a'`` or ``keys 'a', 'b', 'c' and 2 more``: bounded, each name bounded."""
    shown_keys = ", ".join(shown(key) for key in keys[:_KEYS_SHOWN])
    more = f" and {len(keys) - _KEYS_SHOWN} more" if len(keys) > _KEYS_SHOWN else ""
    return f"{'key' if len(keys) == 1 else 'keys'} {shown_keys}{more}"


def _envelope_keys(value: Any, kind: str, needed: str) -> str:
    problems: list[str] = []
    if needed not in value:
        valid = " (None is a valid result)" if needed == "result" else ""
        problems.append(f"a {kind} decision needs {needed!r}{valid}")
    extra = sorted(key for key in value if key not in ("kind", needed))
    if extra:
        problems.append(
            f"a {kind} decision has only 'kind' and {needed!r}, found the extra {_key_names(extra)}"
        )
    return "; ".join(problems)


def _call_shape(raw: Any) -> str:
    if type(raw) not in _PLAIN_DICTS:
        return f"is {_type_name(raw)}"
    if not _STR_ONLY.issuperset(map(type, raw)):
        return f"has a key of type {_odd_key_type(raw)}"
    problems: list[str] = []
    missing = [key for key in ("id", "tool", "input") if key not in raw]
    if missing:
        problems.append(f"lacks {', '.join(map(repr, missing))}")
    extra = sorted(key for key in raw if key not in _CALL_KEYS)
    if extra:
        problems.append(f"has the extra {_key_names(extra)}")
    return " and ".join(problems)


def _call_fields(call_id: Any, tool: Any, position: int) -> str:
    if type(call_id) is not str:
        return f"the id of call {position} is {_type_name(call_id)}"
    if not call_id.strip():
        return f"the id of call {position} is blank"
    if len(call_id) > _MAX_CALL_ID:
        return f"the id of call {position} has {len(call_id)} characters"
    if type(tool) is not str:
        return f"the tool of call {position} is {_type_name(tool)}"
    return f"the tool of call {position} is blank"
