"""What a checkpoint document must be before a run trusts it (DESIGN.md §11).

Nothing protects a data file from someone who edits it, but what no writer produces is refused
rather than acted on: a budget counter below zero or below what the entry's own turns, calls
and child agents consumed (a counter set back would refill the budget), a call whose outcome is
recorded but whose status is not ``completed`` (it would run again), a result or a failure in an
entry whose phase is not ``completed`` or ``failed``, or a part of the wrong shape. The error is
``TUBELESS_CHECKPOINT_INVALID`` naming the key and the JSON path (``$.agents['orders'].turn``).

Invariants the writer keeps (``_durable``): a decision is charged (``budget.decisions``) before
its turn's entry says ``calls``; a batch is charged (``budget.calls``) before ``admitted`` is
true and before any of its calls is ``running``; ``calls`` counts the calls of finished turns;
a child agent's charges are charged to every agent above it too, so an agent's counters are at
least its own plus those of the agents its calls started (routes ``<route>/<turn>/<call>/<id>``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tubeless.errors import CHECKPOINT_INVALID, CheckpointError

__all__ = ["check_document"]

_PHASES = ("decide", "calls", "completed", "failed")
_STATUSES = ("running", "waiting", "completed", "failed")
_CALL_STATUSES = ("pending", "running", "completed")
_RESTART = "start it over with --restart (restart=True in Python), or use another key"


class _Refused(Exception):
    def __init__(self, path: str, problem: str) -> None:
        super().__init__(path, problem)
        self.path = path
        self.problem = problem


def _count(value: Any, path: str, least: int = 0) -> int:
    if type(value) is not int:
        raise _Refused(path, f"is {_said(value)}, not a whole number")
    if value < least:
        raise _Refused(path, f"is {value}, below {least}")
    return value


def _said(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else f"{text[:37]}..."


def _of(value: Any, kind: type, path: str, what: str) -> Any:
    if not isinstance(value, kind) or (kind is int and type(value) is not int):
        raise _Refused(path, f"is {_said(value)}, not {what}")
    return value


def _calls(entry: Mapping[str, Any], at: str) -> int:
    """Check a saved decision's calls; how many the batch charged (0 before its admission)."""
    decision = _of(entry.get("decision"), dict, f"{at}.decision", "an object")
    admitted = _of(decision.get("admitted"), bool, f"{at}.decision.admitted", "true or false")
    calls = _of(decision.get("calls"), list, f"{at}.decision.calls", "a list")
    for index, call in enumerate(calls):
        here = f"{at}.decision.calls[{index}]"
        _of(call, dict, here, "an object")
        _of(call.get("id"), str, f"{here}.id", "a string")
        _of(call.get("tool"), str, f"{here}.tool", "a string")
        status = call.get("status")
        if status not in _CALL_STATUSES:
            raise _Refused(f"{here}.status", f"is {_said(status)}, not one of {_CALL_STATUSES}")
        if "outcome" in call and status != "completed":
            raise _Refused(
                f"{here}.status",
                f"is {status!r} though the call's outcome is recorded (it would run again)",
            )
        if status == "completed":
            _of(call.get("outcome"), dict, f"{here}.outcome", "an object")
        if status != "pending" and not admitted:
            raise _Refused(
                f"{here}.status", f"is {status!r} though the batch was never admitted (charged)"
            )
    return len(calls) if admitted else 0


def _entry(entry: Any, at: str) -> tuple[int, int]:
    """Check one agent's entry; the least its own calls and decisions consumed."""
    _of(entry, dict, at, "an object")
    phase = entry.get("phase")
    if phase not in _PHASES:
        raise _Refused(f"{at}.phase", f"is {_said(phase)}, not one of {_PHASES}")
    _of(entry.get("definition"), dict, f"{at}.definition", "an object")
    budget = _of(entry.get("budget"), dict, f"{at}.budget", "an object")
    for name in ("depth", "calls", "decisions"):
        _count(budget.get(name), f"{at}.budget.{name}")
    turn = _count(entry.get("turn"), f"{at}.turn", 1)
    calls = _count(entry.get("calls"), f"{at}.calls")
    _count(entry.get("state_version"), f"{at}.state_version")
    if "result" in entry and phase != "completed":
        raise _Refused(f"{at}.phase", f"is {phase!r} though a result is recorded")
    if "failure" in entry and phase != "failed":
        raise _Refused(f"{at}.phase", f"is {phase!r} though a failure is recorded")
    if phase == "failed":
        failure = _of(entry.get("failure"), dict, f"{at}.failure", "an object")
        _of(failure.get("code"), str, f"{at}.failure.code", "a string")
        _of(failure.get("message"), str, f"{at}.failure.message", "a string")
    if phase == "calls":
        return calls + _calls(entry, at), turn  # this turn's decision was charged
    return calls, turn - 1  # the finishing decision may be the uncharged final one


def _parent(route: str, routes: Mapping[str, Any]) -> str | None:
    """The route of the agent whose call started ``route`` (``<parent>/<turn>/<call>/<id>``)."""
    cut = route
    while "/" in cut:
        cut = cut.rsplit("/", 1)[0]
        if cut in routes:
            return cut
    return None


def _approvals(approvals: Any) -> None:
    _of(approvals, dict, "$.approvals", "an object")
    for part in ("pending", "decisions"):
        items = _of(approvals.get(part, []), list, f"$.approvals.{part}", "a list")
        for index, item in enumerate(items):
            here = f"$.approvals.{part}[{index}]"
            _of(item, dict, here, "an object")
            _of(item.get("route"), str, f"{here}.route", "a string")
            _count(item.get("turn"), f"{here}.turn", 1)
            _of(item.get("call_id"), str, f"{here}.call_id", "a string")
            if part == "decisions":
                _of(item.get("approved"), bool, f"{here}.approved", "true or false")


def _document(document: Mapping[str, Any]) -> None:
    status = document.get("status")
    if status is not None and status not in _STATUSES:
        raise _Refused("$.status", f"is {_said(status)}, not one of {_STATUSES}")
    agents = _of(document.get("agents"), dict, "$.agents", "an object")
    if "approvals" in document:
        _approvals(document["approvals"])
    least: dict[str, list[int]] = {}
    for route, entry in agents.items():
        least[route] = list(_entry(entry, f"$.agents[{route!r}]"))
    for route in sorted(agents, key=len, reverse=True):  # children before their parents
        parent = _parent(route, agents)
        if parent is not None:
            budget = agents[route]["budget"]
            least[parent][0] += budget["calls"]
            least[parent][1] += budget["decisions"]
    for route, (calls, decisions) in least.items():
        budget = agents[route]["budget"]
        at = f"$.agents[{route!r}].budget"
        for name, floor in (("calls", calls), ("decisions", decisions)):
            used = budget[name]
            if used < floor:
                raise _Refused(
                    f"{at}.{name}",
                    f"is {used}, below the {floor} its turns, calls and child agents consumed "
                    "(a budget is never refilled)",
                )


def check_document(document: Mapping[str, Any], key: str) -> None:
    """Refuse a checkpoint document no writer produces (``TUBELESS_CHECKPOINT_INVALID``)."""
    try:
        _document(document)
    except _Refused as refused:
        raise CheckpointError(
            CHECKPOINT_INVALID,
            f"checkpoint {key!r}: {refused.path} {refused.problem}; no run writes that (was the "
            f"file edited?); {_RESTART}",
        ) from None
