"""A run page's data: ids, limits and meters, the turn timeline, calls, nested agents, errors.

Everything is plain data for the template (and for tests), computed from one
:class:`~tubeless.ui._traces.Snapshot`. The timeline is windowed: one page shows at most
:data:`TURNS_PER_PAGE` turns of the run's agent and :data:`CALLS_PER_TURN` calls of a turn;
agents nested under a call show their first :data:`NESTED_TURNS` turns, down to
:data:`MAX_NESTING` levels, each linking to its own page for the rest.
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal, InvalidOperation
from typing import Any, Final

from tubeless.tracing import RunTree
from tubeless.tracing.projection import CallNode, TurnNode
from tubeless.ui._traces import Snapshot

__all__ = [
    "CALLS_PER_TURN",
    "MAX_NESTING",
    "NESTED_TURNS",
    "TURNS_PER_PAGE",
    "attempts",
    "cause_chain",
    "run_page",
]

TURNS_PER_PAGE: Final = 50
CALLS_PER_TURN: Final = 50
NESTED_TURNS: Final = 10
MAX_NESTING: Final = 4
_MAX_LINKS: Final = 16
_METERS: Final = (
    ("maxTurns", "turns"),
    ("maxCalls", "calls"),
    ("maxInputTokens", "input tokens"),
    ("maxOutputTokens", "output tokens"),
    ("maxTotalTokens", "total tokens"),
    ("maxCostUsd", "cost (USD)"),
)


def cause_chain(error: Mapping[str, Any] | None) -> list[dict[str, str | None]]:
    """The links of a wire error, outermost first: ``{code, source_code, name, message}``."""
    links: list[dict[str, str | None]] = []
    node: Any = error
    while isinstance(node, Mapping) and len(links) < _MAX_LINKS:
        links.append(
            {
                "code": _text(node.get("code")),
                "source_code": _text(node.get("sourceCode")),
                "name": _text(node.get("name")),
                "message": _text(node.get("message")),
            }
        )
        node = node.get("cause")
    return links


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _amount(value: Any) -> Decimal | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float | str):
        try:
            amount = Decimal(str(value))
        except InvalidOperation:
            return None
        return amount if amount.is_finite() else None
    return None


def attempts(snapshot: Snapshot, run_id: str) -> list[str]:
    """The root runs that are attempts of ``run_id``, oldest first (``[run_id]`` when none
    continues it).

    A run served by ``tubeless serve`` is started with its run id as its correlation id; when
    it resumes (after an approval, or after a crash) the resumed attempt is a new root run
    with a run id of its own and the same correlation id. Only a root run whose correlation id
    is its own run id is followed this way, so other traces are never regrouped.
    """
    facts = snapshot.facts.get(run_id)
    tree = snapshot.trees.get(run_id)
    if facts is None or facts.correlation_id != run_id or tree is None or tree.parent_run_id:
        return [run_id]
    found = [
        row
        for row in snapshot.rows
        if row.run_id == run_id
        or getattr(snapshot.facts.get(row.run_id), "correlation_id", None) == run_id
    ]
    found.sort(key=lambda row: (row.run_id != run_id, row.started_at_ms or 0))
    return [row.run_id for row in found]


def run_page(snapshot: Snapshot, run_id: str, *, turn_page: int = 1) -> dict[str, Any] | None:
    """The run page of ``run_id`` (``None`` when no store holds it)."""
    tree = snapshot.trees.get(run_id)
    if tree is None:
        return None
    root = snapshot.roots[run_id]
    facts = snapshot.facts.get(run_id)
    turns = () if tree.agent is None else tree.agent.turns
    pages = max(1, -(-len(turns) // TURNS_PER_PAGE))
    page = max(1, min(turn_page, pages))
    start = (page - 1) * TURNS_PER_PAGE
    shown = turns[start : start + TURNS_PER_PAGE]
    return {
        "run": tree,
        "root": root,
        "parent": snapshot.trees.get(tree.parent_run_id or ""),
        "correlation_id": None if facts is None else facts.correlation_id,
        "definition_id": None if facts is None else facts.definition_id,
        "limits": None if facts is None else facts.limits,
        "meters": _meters(snapshot, tree),
        "usage": snapshot.usage(tree),
        "errors": cause_chain(None if facts is None else facts.error),
        "timeline": _timeline(snapshot, shown, depth=0, over=root.status != "running"),
        "turn_count": len(turns),
        "turn_page": page,
        "turn_pages": pages,
        "first_turn": start + 1,
        "children": [] if tree.agent is not None else list(tree.children[:TURNS_PER_PAGE]),
        "child_count": len(tree.children),
    }


def _meters(snapshot: Snapshot, tree: RunTree) -> list[dict[str, Any]]:
    """``{label, value, bound}`` for each recorded limit whose use the trace shows."""
    facts = snapshot.facts.get(tree.run_id)
    if facts is None or facts.limits is None or tree.agent is None:
        return []
    turns = tree.agent.turns
    admitted = next((t.calls_admitted for t in reversed(turns) if t.calls_admitted), None)
    used: dict[str, Decimal | None] = {
        "maxTurns": Decimal(len(turns)),
        "maxCalls": Decimal(admitted if admitted is not None else sum(len(t.calls) for t in turns)),
    }
    usage = snapshot.usage(tree)
    if usage is not None:
        used["maxInputTokens"] = Decimal(usage[0])
        used["maxOutputTokens"] = Decimal(usage[1])
        used["maxTotalTokens"] = Decimal(usage[0] + usage[1])
        used["maxCostUsd"] = None if usage[2] is None else Decimal(str(round(usage[2], 6)))
    meters = []
    for key, label in _METERS:
        bound = _amount(facts.limits.get(key))
        value = used.get(key)
        if bound is None or value is None:
            continue
        meters.append(
            {
                "label": label,
                "value": value,
                "bound": bound,
                "high": bound * Decimal("0.8"),
                "money": key == "maxCostUsd",
                "full": bound > 0 and value >= bound,
            }
        )
    return meters


def _timeline(
    snapshot: Snapshot, turns: tuple[TurnNode, ...], *, depth: int, over: bool
) -> dict[str, Any]:
    """The turns' rows; ``over``: the root run ended, so a call still running is in doubt."""
    rows = [_turn(snapshot, turn, depth=depth, over=over) for turn in turns]
    longest = max((row["total_ms"] for row in rows), default=0.0)
    for row in rows:
        x = 0.0
        for segment in row["segments"]:
            width = 0.0 if longest <= 0 else 100.0 * segment["duration_ms"] / longest
            segment["x"] = round(x, 3)
            segment["width"] = round(max(width, 0.4 if segment["duration_ms"] else 0.0), 3)
            x += width
    return {"turns": rows, "longest_ms": longest}


def _turn(snapshot: Snapshot, turn: TurnNode, *, depth: int, over: bool) -> dict[str, Any]:
    run = snapshot.trees.get(turn.run_id)
    segments = []
    if run is not None:
        for step in run.steps:
            segments.append(
                {
                    "id": step.id,
                    "status": step.status,
                    "duration_ms": step.duration_ms or 0.0,
                    "error_code": step.error_code,
                    "source_code": step.source_code,
                }
            )
    calls = turn.calls[:CALLS_PER_TURN]
    return {
        "turn": turn,
        "run": run,
        "segments": segments,
        "total_ms": sum(s["duration_ms"] for s in segments),
        "duration_ms": None if run is None else run.duration_ms,
        "calls": [_call(snapshot, call, depth=depth, over=over) for call in calls],
        "more_calls": len(turn.calls) - len(calls),
    }


def _call(snapshot: Snapshot, call: CallNode, *, depth: int, over: bool) -> dict[str, Any]:
    agents = []
    if depth < MAX_NESTING:
        for child_id in call.child_agent_run_ids:
            child = snapshot.trees.get(child_id)
            if child is None or child.agent is None:
                continue
            turns = child.agent.turns
            agents.append(
                {
                    "run": child,
                    "timeline": _timeline(
                        snapshot, turns[:NESTED_TURNS], depth=depth + 1, over=over
                    ),
                    "more_turns": max(0, len(turns) - NESTED_TURNS),
                }
            )
    run = snapshot.trees.get(call.run_id or "")
    at_step = None
    if run is not None and run.status == "running":
        at_step = next((s.id for s in run.steps if s.status == "running"), None)
    doubtful = call.status == "unknown" or (call.status == "running" and over)
    return {
        "call": call,
        "status": "in doubt" if doubtful else call.status,
        "agents": agents,
        "progress": at_step,
        "report": _report(call),
    }


def _report(call: CallNode) -> dict[str, Any] | None:
    """The call's last progress report as the page shows it: ``{message, count, fraction}``.

    ``count`` is ``completed of total`` (or ``completed`` alone without a total); ``fraction``
    drives a ``<progress>`` bar when both numbers are known. A running call's report is its
    latest, a finished call's its last.
    """
    report = call.progress
    if report is None or (report.completed is None and report.message is None):
        return None
    count = None
    if report.completed is not None:
        count = _figure(report.completed)
        if report.total is not None:
            count = f"{count} of {_figure(report.total)}"
    return {"message": report.message, "count": count, "fraction": report.fraction}


def _figure(value: float) -> str:
    """A recorded number as people write it: ``3`` rather than ``3.0``."""
    return str(int(value)) if float(value).is_integer() else f"{value:g}"
