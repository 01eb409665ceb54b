"""Reading a checkpoint document: what no writer produces is refused (DESIGN.md §11).

Nothing protects a data file from someone who edits it, but what no writer produces is refused
rather than acted on: a budget counter below zero or below what the entry's own turns, calls
and child agents consumed (a counter set back would refill the budget), a call whose outcome is
recorded but whose status is not ``completed`` (it would run again), a result or a failure in an
entry whose phase is not ``completed`` or ``failed``, or a part of the wrong shape. The error is
``TUBELESS_CHECKPOINT_INVALID`` naming the key and the JSON path (``$.agents['orders'].turn``).

Invariants the writer keeps (``agent/_durable``): a decision is charged (``budget.decisions``)
before its turn's entry says ``calls``; a batch is charged (``budget.calls``) before
``admitted`` is true and before any of its calls is ``running``; ``calls`` counts the calls of
finished turns; a child agent's charges are charged to every agent above it too, so an agent's
counters are at least its own plus those of the agents its calls started (routes
``<route>/<turn>/<call>/<id>``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tubeless.durable._document import (
    ABSENT,
    AgentEntry,
    Approvals,
    CheckpointDocument,
    Failure,
    SavedBudget,
    SavedCall,
    SavedDecision,
)
from tubeless.errors import CHECKPOINT_INVALID, CheckpointError

__all__ = ["check_document", "parse"]

_PHASES = ("decide", "calls", "completed", "failed")
_STATUSES = ("running", "waiting", "completed", "failed")
_CALL_STATUSES = ("pending", "running", "completed")
_RESTART = "start it over with --restart (restart=True in Python), or use another key"

_DOCUMENT_KEYS = frozenset(
    {"agents", "approvals", "entry", "key", "status", "updated_at_ms", "version"}
)
_ENTRY_KEYS = frozenset(
    {"agent", "budget", "calls", "definition", "failure", "input", "phase", "result", "state"}
    | {"state_version", "turn"}
)
_CALLS_ENTRY_KEYS = _ENTRY_KEYS | {"decision"}
_CALL_KEYS = frozenset({"id", "input", "outcome", "replay", "status", "tool"})


class _Refused(Exception):
    def __init__(self, path: str, problem: str) -> None:
        super().__init__(path, problem)
        self.path = path
        self.problem = problem


def _said(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else f"{text[:37]}..."


def _count(value: Any, path: str, least: int = 0) -> int:
    if type(value) is not int:
        raise _Refused(path, f"is {_said(value)}, not a whole number")
    if value < least:
        raise _Refused(path, f"is {value}, below {least}")
    return value


def _of(value: Any, kind: type, path: str, what: str) -> Any:
    if not isinstance(value, kind):
        raise _Refused(path, f"is {_said(value)}, not {what}")
    return value


def _extra(data: Mapping[str, Any], known: frozenset[str]) -> dict[str, Any] | None:
    """The keys of ``data`` this release does not know, kept so they are written back."""
    if len(data) <= len(known) and all(key in known for key in data):
        return None
    return {key: value for key, value in data.items() if key not in known} or None


def _decision(data: Any, at: str) -> SavedDecision:
    """A saved decision's calls (each ``running`` or ``completed`` one only once admitted)."""
    _of(data, dict, at, "an object")
    admitted = _of(data.get("admitted"), bool, f"{at}.admitted", "true or false")
    listed = _of(data.get("calls"), list, f"{at}.calls", "a list")
    calls = []
    for index, call in enumerate(listed):
        here = f"{at}.calls[{index}]"
        _of(call, dict, here, "an object")
        call_id = _of(call.get("id"), str, f"{here}.id", "a string")
        tool = _of(call.get("tool"), str, f"{here}.tool", "a string")
        status = call.get("status")
        if status not in _CALL_STATUSES:
            raise _Refused(f"{here}.status", f"is {_said(status)}, not one of {_CALL_STATUSES}")
        if "outcome" in call and status != "completed":
            raise _Refused(
                f"{here}.status",
                f"is {status!r} though the call's outcome is recorded (it would run again)",
            )
        outcome = None
        if status == "completed":
            outcome = _of(call.get("outcome"), dict, f"{here}.outcome", "an object")
        if status != "pending" and not admitted:
            raise _Refused(
                f"{here}.status", f"is {status!r} though the batch was never admitted (charged)"
            )
        calls.append(
            SavedCall(
                call_id,
                tool,
                status,
                call.get("input", ABSENT),
                call.get("replay", ABSENT),
                outcome,
                _extra(call, _CALL_KEYS),
            )
        )
    return SavedDecision(admitted, calls, _extra(data, frozenset({"admitted", "calls"})))


def _entry(data: Any, at: str) -> AgentEntry:
    _of(data, dict, at, "an object")
    phase = data.get("phase")
    if phase not in _PHASES:
        raise _Refused(f"{at}.phase", f"is {_said(phase)}, not one of {_PHASES}")
    definition = _of(data.get("definition"), dict, f"{at}.definition", "an object")
    saved = _of(data.get("budget"), dict, f"{at}.budget", "an object")
    depth, calls, decisions = (
        _count(saved.get(name), f"{at}.budget.{name}") for name in ("depth", "calls", "decisions")
    )
    budget = SavedBudget(
        depth, calls, decisions, _extra(saved, frozenset({"depth", "calls", "decisions"}))
    )
    turn = _count(data.get("turn"), f"{at}.turn", 1)
    finished = _count(data.get("calls"), f"{at}.calls")
    state_version = _count(data.get("state_version"), f"{at}.state_version")
    if "result" in data and phase != "completed":
        raise _Refused(f"{at}.phase", f"is {phase!r} though a result is recorded")
    if "failure" in data and phase != "failed":
        raise _Refused(f"{at}.phase", f"is {phase!r} though a failure is recorded")
    failure = None
    if phase == "failed":
        saved = _of(data.get("failure"), dict, f"{at}.failure", "an object")
        failure = Failure(
            _of(saved.get("code"), str, f"{at}.failure.code", "a string"),
            _of(saved.get("message"), str, f"{at}.failure.message", "a string"),
            _extra(saved, frozenset({"code", "message"})),
        )
    # Only the ``calls`` phase holds a decision; another phase's is kept as it is, unread.
    decision = _decision(data.get("decision"), f"{at}.decision") if phase == "calls" else None
    return AgentEntry(
        definition,
        budget,
        phase,
        turn,
        state_version,
        finished,
        agent=data.get("agent", ABSENT),
        input=data.get("input", ABSENT),
        state=data.get("state", ABSENT),
        decision=decision,
        result=data.get("result", ABSENT),
        failure=failure,
        extra=_extra(data, _CALLS_ENTRY_KEYS if phase == "calls" else _ENTRY_KEYS),
    )


def _least(entry: AgentEntry) -> list[int]:
    """The calls and decisions ``entry``'s own turns consumed at least."""
    if entry.phase == "calls":  # this turn's decision was charged, and its batch once admitted
        assert entry.decision is not None
        charged = len(entry.decision.calls) if entry.decision.admitted else 0
        return [entry.calls + charged, entry.turn]
    return [entry.calls, entry.turn - 1]  # the finishing decision may be the uncharged final one


def _parent(route: str, routes: Mapping[str, Any]) -> str | None:
    """The route of the agent whose call started ``route`` (``<parent>/<turn>/<call>/<id>``)."""
    cut = route
    while "/" in cut:
        cut = cut.rsplit("/", 1)[0]
        if cut in routes:
            return cut
    return None


def _approvals(data: Any) -> Approvals:
    _of(data, dict, "$.approvals", "an object")
    lists: dict[str, list[dict[str, Any]] | None] = {}
    for part in ("pending", "decisions"):
        items = _of(data.get(part, []), list, f"$.approvals.{part}", "a list")
        for index, item in enumerate(items):
            here = f"$.approvals.{part}[{index}]"
            _of(item, dict, here, "an object")
            _of(item.get("route"), str, f"{here}.route", "a string")
            _count(item.get("turn"), f"{here}.turn", 1)
            _of(item.get("call_id"), str, f"{here}.call_id", "a string")
            if part == "decisions":
                _of(item.get("approved"), bool, f"{here}.approved", "true or false")
        lists[part] = items if part in data else None
    extra = _extra(data, frozenset({"pending", "decisions"}))
    return Approvals(lists["pending"], lists["decisions"], extra)


def _document(data: Mapping[str, Any]) -> CheckpointDocument:
    status = data.get("status", ABSENT)
    if status is not ABSENT and status is not None and status not in _STATUSES:
        raise _Refused("$.status", f"is {_said(status)}, not one of {_STATUSES}")
    listed = _of(data.get("agents"), dict, "$.agents", "an object")
    approvals = _approvals(data["approvals"]) if "approvals" in data else None
    agents = {route: _entry(entry, f"$.agents[{route!r}]") for route, entry in listed.items()}
    least = {route: _least(entry) for route, entry in agents.items()}
    for route in sorted(agents, key=len, reverse=True):  # children before their parents
        parent = _parent(route, agents)
        if parent is not None:
            budget = agents[route].budget
            least[parent][0] += budget.calls
            least[parent][1] += budget.decisions
    for route, (calls, decisions) in least.items():
        budget = agents[route].budget
        at = f"$.agents[{route!r}].budget"
        for name, used, floor in (
            ("calls", budget.calls, calls),
            ("decisions", budget.decisions, decisions),
        ):
            if used < floor:
                raise _Refused(
                    f"{at}.{name}",
                    f"is {used}, below the {floor} its turns, calls and child agents consumed "
                    "(a budget is never refilled)",
                )
    return CheckpointDocument(
        agents,
        version=data.get("version", ABSENT),
        key=data.get("key", ABSENT),
        entry=data.get("entry", ABSENT),
        status=status,
        approvals=approvals,
        updated_at_ms=data.get("updated_at_ms", ABSENT),
        extra=_extra(data, _DOCUMENT_KEYS),
    )


def parse(data: Mapping[str, Any], key: str) -> CheckpointDocument:
    """The typed document of ``data`` (a decoded document of checkpoint ``key``).

    Raises:
        CheckpointError: ``TUBELESS_CHECKPOINT_INVALID`` for a document no writer produces.
    """
    try:
        return _document(data)
    except _Refused as refused:
        raise CheckpointError(
            CHECKPOINT_INVALID,
            f"checkpoint {key!r}: {refused.path} {refused.problem}; no run writes that (was the "
            f"file edited?); {_RESTART}",
        ) from None


def check_document(data: Mapping[str, Any], key: str) -> None:
    """Refuse a checkpoint document no writer produces (``TUBELESS_CHECKPOINT_INVALID``)."""
    parse(data, key)
