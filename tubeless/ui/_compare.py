"""Two runs side by side: each run flattened into lines (turns and calls, nested agents
included), aligned by their place in the run, the first line where they differ marked."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from tubeless.tracing import RunTree
from tubeless.ui._traces import Snapshot

__all__ = ["MAX_LINES", "Line", "compare_page", "flatten"]

#: Lines per run on the compare page (the bound on what one response sends).
MAX_LINES: Final = 400
_MAX_DEPTH: Final = 8


@dataclass(frozen=True, kw_only=True, slots=True)
class Line:
    """One turn or call of a run, at its place (``turn 2 / call c1``)."""

    place: str
    kind: str
    depth: int
    facts: tuple[tuple[str, str], ...]
    """What is compared, as ``(name, value)`` pairs."""

    def value(self, name: str) -> str:
        """The value of fact ``name`` (empty when absent)."""
        return next((v for k, v in self.facts if k == name), "")


def flatten(snapshot: Snapshot, tree: RunTree, *, limit: int = MAX_LINES) -> list[Line]:
    """The lines of ``tree``: its status, then each turn and its calls, nested agents below
    the call that ran them, at most ``limit`` lines."""
    lines = [
        Line(
            place="run",
            kind="run",
            depth=0,
            facts=(
                ("entry", tree.pipeline_id),
                ("status", tree.status),
                ("error", tree.error_code or ""),
            ),
        )
    ]
    _agent(snapshot, tree, "", 0, lines, limit)
    return lines[:limit]


def _agent(
    snapshot: Snapshot, tree: RunTree, prefix: str, depth: int, lines: list[Line], limit: int
) -> None:
    if tree.agent is None or depth > _MAX_DEPTH:
        return
    for turn in tree.agent.turns:
        if len(lines) >= limit:
            return
        place = f"{prefix}turn {turn.index}"
        run = snapshot.trees.get(turn.run_id)
        failed = None if run is None else next((s for s in run.steps if s.source_code), None)
        lines.append(
            Line(
                place=place,
                kind="turn",
                depth=depth,
                facts=(
                    ("decision", turn.decision or ""),
                    ("calls", "" if turn.call_count is None else str(turn.call_count)),
                    ("status", turn.status),
                    ("error", turn.error_code or ""),
                    ("source", "" if failed is None else failed.source_code or ""),
                    ("message", "" if run is None else run.error_message or ""),
                ),
            )
        )
        for call in turn.calls:
            if len(lines) >= limit:
                return
            call_place = f"{place} / call {call.call_id}"
            lines.append(
                Line(
                    place=call_place,
                    kind="call",
                    depth=depth + 1,
                    facts=(
                        ("tool", call.tool or ""),
                        ("status", call.status),
                        ("error", call.error_code or ""),
                        ("source", call.source_code or ""),
                    ),
                )
            )
            for child_id in call.child_agent_run_ids:
                child = snapshot.trees.get(child_id)
                if child is not None:
                    _agent(snapshot, child, f"{call_place} / ", depth + 2, lines, limit)


def compare_page(snapshot: Snapshot, a: str, b: str) -> dict[str, Any]:
    """``{a, b, rows, first, missing}``: aligned rows ``{place, kind, depth, left, right,
    differs, changed, first}``; ``first`` is the index of the first turn or call that differs
    (the run line itself only when nothing below it does; ``None``: no difference)."""
    left_tree, right_tree = snapshot.trees.get(a), snapshot.trees.get(b)
    missing = [run_id for run_id, tree in ((a, left_tree), (b, right_tree)) if tree is None]
    if left_tree is None or right_tree is None:
        return {"a": a, "b": b, "rows": [], "first": None, "missing": missing}
    left = flatten(snapshot, left_tree)
    right = flatten(snapshot, right_tree)
    by_place = {line.place: line for line in right}
    order = [line.place for line in left]
    seen = set(order)
    order += [line.place for line in right if line.place not in seen]
    left_by_place = {line.place: line for line in left}
    rows: list[dict[str, Any]] = []
    for place in order:
        one, other = left_by_place.get(place), by_place.get(place)
        differs = one is None or other is None or one.facts != other.facts
        shape = one or other
        assert shape is not None
        names = [name for name, _ in shape.facts]
        changed = [
            n for n in names if one is None or other is None or one.value(n) != other.value(n)
        ]
        rows.append(
            {
                "place": place,
                "kind": shape.kind,
                "depth": shape.depth,
                "left": one,
                "right": other,
                "differs": differs,
                "changed": changed,
                "first": False,
            }
        )
    first = _first(rows)
    if first is not None:
        rows[first]["first"] = True
    return {
        "a": a,
        "b": b,
        "left": left_tree,
        "right": right_tree,
        "rows": rows,
        "first": first,
        "first_row": None if first is None else rows[first],
        "missing": [],
    }


_OUTCOME: Final = frozenset({"status", "error", "source", "message"})


def _first(rows: list[dict[str, Any]]) -> int | None:
    """The first differing row; a run or turn that differs only in its outcome gives way to
    the first differing row below it (the call whose outcome changed it)."""
    index = next((i for i, row in enumerate(rows) if row["differs"]), None)
    while index is not None:
        row = rows[index]
        if not (row["left"] and row["right"] and set(row["changed"]) <= _OUTCOME):
            return index
        prefix = "" if row["kind"] == "run" else row["place"] + " / "
        below = next(
            (
                j
                for j in range(index + 1, len(rows))
                if rows[j]["differs"] and rows[j]["place"].startswith(prefix)
            ),
            None,
        )
        if below is None:
            return index
        index = below
    return None
