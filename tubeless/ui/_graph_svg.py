"""An entry's graph as SVG, drawn on the server from the model ``tubeless graph`` renders.

:func:`graph_svg` lays out :class:`~tubeless.reporting.graph.Graph` in rows: top-level steps
are ranked by their dependencies (a step sits one row below the lowest step it depends on); an
agent is a box holding its turn steps (decide → calls → reduce, left to right) with its tools in
a row below, and a dotted arc from reduce back to decide for the next turn. Every label is
escaped; a long one is cut, with the whole text in the node's ``<title>``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from html import escape
from typing import Final

from tubeless.reporting.graph import Graph, GraphEdge, GraphNode

__all__ = ["graph_svg"]

_CHAR: Final = 7.2
_NODE_H: Final = 36
_GAP_X: Final = 28
_GAP_Y: Final = 48
#: Between an agent's turn steps and its tools: room for the arc under the steps and labels.
_TOOL_GAP: Final = 72
_PAD: Final = 16
_MAX_LABEL: Final = 34
_MAX_TITLE: Final = 64
#: An agent box's title and the arc of its next-turn edge sit above its turn steps.
_TITLE_H: Final = 64


@dataclass(slots=True)
class _Box:
    node: GraphNode
    w: float
    h: float = _NODE_H
    x: float = 0.0
    y: float = 0.0
    members: list[_Box] = field(default_factory=list)
    tools: list[_Box] = field(default_factory=list)


def _cut(label: str, most: int = _MAX_LABEL) -> str:
    return label if len(label) <= most else label[: most - 1] + "…"


def _leaf(node: GraphNode) -> _Box:
    return _Box(node, max(90.0, len(_cut(node.label)) * _CHAR + 24))


def _agent(node: GraphNode, members: list[GraphNode], tools: list[GraphNode]) -> _Box:
    box = _Box(node, 0.0)
    box.members = [_leaf(m) for m in members]
    box.tools = [_leaf(t) for t in tools]
    row1 = sum(b.w for b in box.members) + _GAP_X * max(0, len(box.members) - 1)
    row2 = sum(b.w for b in box.tools) + _GAP_X * max(0, len(box.tools) - 1)
    title = len(_cut(node.label, _MAX_TITLE)) * _CHAR + 24
    box.w = max(row1, row2, title) + 2 * _PAD
    box.h = _TITLE_H + _NODE_H + (_TOOL_GAP + _NODE_H if box.tools else 0) + _PAD + 18
    return box


def _place_row(boxes: list[_Box], x0: float, y: float, width: float) -> None:
    total = sum(b.w for b in boxes) + _GAP_X * max(0, len(boxes) - 1)
    x = x0 + (width - total) / 2
    for box in boxes:
        box.x, box.y = x, y
        x += box.w + _GAP_X


def _layout(graph: Graph) -> tuple[list[_Box], float, float]:
    children: dict[str, list[GraphNode]] = {}
    for node in graph.nodes:
        if node.parent is not None:
            children.setdefault(node.parent, []).append(node)
    tops: list[_Box] = []
    for node in graph.nodes:
        if node.parent is not None:
            continue
        if node.kind == "agent":
            kids = children.get(node.id, [])
            members = [k for k in kids if k.kind not in ("tool", "pipeline-tool", "agent-tool")]
            tools = [k for k in kids if k.kind in ("tool", "pipeline-tool", "agent-tool")]
            tops.append(_agent(node, members, tools))
        else:
            tops.append(_leaf(node))
    top_of = {box.node.id: box.node.id for box in tops}
    for box in tops:
        for inner in (*box.members, *box.tools):
            top_of[inner.node.id] = box.node.id
    rank = {box.node.id: 0 for box in tops}
    for _ in range(len(tops)):  # longest path over a DAG given in execution order
        for edge in graph.edges:
            a, b = top_of.get(edge.source), top_of.get(edge.target)
            if a is not None and b is not None and a != b and rank[b] < rank[a] + 1:
                rank[b] = rank[a] + 1
    rows: dict[int, list[_Box]] = {}
    for box in tops:
        rows.setdefault(rank[box.node.id], []).append(box)
    width = max(
        (sum(b.w for b in row) + _GAP_X * (len(row) - 1) for row in rows.values()), default=100.0
    )
    width += 2 * _PAD
    y = _PAD + 20.0
    for index in sorted(rows):
        row = rows[index]
        _place_row(row, 0, y, width)
        for box in row:
            if box.members or box.tools:
                inner_width = box.w - 2 * _PAD
                top = box.y + _TITLE_H
                _place_row(box.members, box.x + _PAD, top, inner_width)
                _place_row(box.tools, box.x + _PAD, top + _NODE_H + _TOOL_GAP, inner_width)
        y += max(b.h for b in row) + _GAP_Y
    return tops, width, y - _GAP_Y + _PAD


def _rect(box: _Box, css: str) -> str:
    label = box.node.label
    return (
        f'<g class="node {css}"><title>{escape(label)}</title>'
        f'<rect x="{box.x:.1f}" y="{box.y:.1f}" width="{box.w:.1f}" height="{box.h:.1f}" '
        f'rx="{14 if css.startswith("tool") else 6}"/>'
        f'<text x="{box.x + box.w / 2:.1f}" y="{box.y + 23:.1f}" text-anchor="middle">'
        f"{escape(_cut(label))}</text></g>"
    )


def _edge(edge: GraphEdge, boxes: dict[str, _Box]) -> str:
    a, b = boxes.get(edge.source), boxes.get(edge.target)
    if a is None or b is None:
        return ""
    dashed = edge.kind != "required"
    css = f"edge {edge.kind}" + (" dashed" if dashed else "")
    label = escape(edge.label or "")
    if edge.kind == "next-turn":  # an arc above the turn row, from reduce back to decide
        x1, x2, y = a.x + a.w / 2, b.x + b.w / 2, a.y
        path = f"M{x1:.1f},{y:.1f} C{x1:.1f},{y - 30:.1f} {x2:.1f},{y - 30:.1f} {x2:.1f},{y:.1f}"
        mid = f'x="{(x1 + x2) / 2:.1f}" y="{y - 26:.1f}"'
    elif abs(a.y - b.y) < 1 and _between(a, b, boxes):  # same row, over a node: arc below
        x1, x2, y = a.x + a.w / 2, b.x + b.w / 2, a.y + a.h
        path = f"M{x1:.1f},{y:.1f} C{x1:.1f},{y + 26:.1f} {x2:.1f},{y + 26:.1f} {x2:.1f},{y:.1f}"
        mid = f'x="{(x1 + x2) / 2:.1f}" y="{y + 30:.1f}"'
    elif abs(a.y - b.y) < 1:  # same row: left to right
        x1, x2, y = a.x + a.w, b.x, a.y + a.h / 2
        path = f"M{x1:.1f},{y:.1f} L{x2:.1f},{y:.1f}"
        mid = f'x="{(x1 + x2) / 2:.1f}" y="{y - 4:.1f}"'
    else:
        x1, y1, x2, y2 = a.x + a.w / 2, a.y + a.h, b.x + b.w / 2, b.y
        if y2 < y1:
            y1, y2 = a.y, b.y + b.h
        path = f"M{x1:.1f},{y1:.1f} L{x2:.1f},{y2:.1f}"
        mid = f'x="{x1 + (x2 - x1) * 0.75:.1f}" y="{y1 + (y2 - y1) * 0.75 - 4:.1f}"'
    text = f'<text class="edge-label" {mid} text-anchor="middle">{label}</text>' if label else ""
    return f'<g class="{css}"><path d="{path}" marker-end="url(#arrow)"/>{text}</g>'


def _between(a: _Box, b: _Box, boxes: dict[str, _Box]) -> bool:
    low, high = sorted((a.x, b.x))
    return any(
        abs(o.y - a.y) < 1 and low < o.x < high for o in boxes.values() if o is not a and o is not b
    )


def graph_svg(graph: Graph) -> str:
    """The SVG markup of ``graph`` (safe to put in a page as is: every text is escaped)."""
    tops, width, height = _layout(graph)
    boxes: dict[str, _Box] = {}
    parts: list[str] = []
    for box in tops:
        boxes[box.node.id] = box
        if box.members or box.tools:
            parts.append(
                f'<g class="agent"><title>{escape(box.node.label)}</title>'
                f'<rect x="{box.x:.1f}" y="{box.y:.1f}" width="{box.w:.1f}" '
                f'height="{box.h:.1f}" rx="10"/>'
                f'<text x="{box.x + _PAD:.1f}" y="{box.y + 20:.1f}">'
                f"{escape(_cut(box.node.label, _MAX_TITLE))}</text></g>"
            )
            for inner in box.members:
                boxes[inner.node.id] = inner
                parts.append(_rect(inner, "turn-step"))
            for inner in box.tools:
                boxes[inner.node.id] = inner
                parts.append(_rect(inner, f"tool {inner.node.kind}"))
        else:
            parts.append(_rect(box, box.node.kind))
    edges = [_edge(edge, boxes) for edge in graph.edges]
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" class="graph" role="img" '
        f'viewBox="0 0 {width:.0f} {height:.0f}" width="{width:.0f}" height="{height:.0f}" '
        f'aria-label="{escape(graph.id)}">'
        '<defs><marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" '
        'markerHeight="7" orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z"/></marker>'
        "</defs>" + "".join(parts) + "".join(edges) + "</svg>"
    )
