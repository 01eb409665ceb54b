"""The text renderers of a :class:`~tubeless.reporting.graph.Graph`: Mermaid, DOT and JSON.

:mod:`tubeless.reporting.graph` re-exports :func:`to_mermaid`, :func:`to_dot` and
:func:`to_json`; its docstring says what the diagrams show.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tubeless.reporting.graph import Graph, GraphEdge, GraphNode

__all__ = ["to_dot", "to_json", "to_mermaid"]

# Newlines and the C0/C1 control characters become spaces (as upstream's escapeMermaidLabel).
_CONTROL = re.compile("\r\n?|[\x00-\x1f\x7f-\x9f]")
_MERMAID_ENTITIES = str.maketrans(
    {"#": "#35;", "&": "#38;", '"': "#quot;", "<": "#60;", ">": "#62;"}
)


def _clean(text: str) -> str:
    return _CONTROL.sub(" ", text)


def _mermaid_text(text: str) -> str:
    return _clean(text).translate(_MERMAID_ENTITIES)


def _members(graph: Graph) -> dict[str, list[GraphNode]]:
    members: dict[str, list[GraphNode]] = {}
    for node in graph.nodes:
        if node.parent is not None:
            members.setdefault(node.parent, []).append(node)
    return members


def to_mermaid(graph: Graph) -> str:
    """Mermaid ``flowchart`` source, ending in exactly one newline."""
    members = _members(graph)
    lines = [f"flowchart {graph.direction}"]
    for node in graph.nodes:
        if node.parent is not None:
            continue
        if node.id in members:
            lines.append(f'  subgraph {node.id}["{_mermaid_text(node.label)}"]')
            lines.extend(f"    {_mermaid_node(member)}" for member in members[node.id])
            lines.append("  end")
        else:
            lines.append(f"  {_mermaid_node(node)}")
    if graph.edges:
        lines.append("")
        lines.extend(_mermaid_edge(edge) for edge in graph.edges)
    return "\n".join(lines) + "\n"


def _mermaid_node(node: GraphNode) -> str:
    label = _mermaid_text(node.label)
    if node.tool is not None:
        return f'{node.id}(["{label}"])'
    return f'{node.id}["{label}"]'


def _mermaid_edge(edge: GraphEdge) -> str:
    if edge.label is None:
        return f"  {edge.source} --> {edge.target}"
    return f"  {edge.source} -. {_mermaid_text(edge.label)} .-> {edge.target}"


def _dot_id(text: str) -> str:
    escaped = _clean(text).replace("\\", "\\\\").replace('"', '\\"')
    return f'"{escaped}"'


def to_dot(graph: Graph) -> str:
    """Graphviz DOT source (``digraph``), ending in exactly one newline.

    An agent step becomes ``subgraph "cluster_stepN"``; edges from or to it attach to its last
    or first turn step and are clipped at the cluster (``compound=true`` with ``ltail``/``lhead``).
    """
    members = _members(graph)
    rankdir = "TB" if graph.direction == "TD" else graph.direction
    lines = [f"digraph {_dot_id(graph.id)} {{", f"  rankdir={rankdir};"]
    if members:
        lines.append("  compound=true;")
    lines.append("  node [shape=box];")
    for node in graph.nodes:
        if node.parent is not None:
            continue
        if node.id in members:
            lines.append(f"  subgraph {_dot_id('cluster_' + node.id)} {{")
            lines.append(f"    label={_dot_id(node.label)};")
            lines.extend(f"    {_dot_node(member)}" for member in members[node.id])
            lines.append("  }")
        else:
            lines.append(f"  {_dot_node(node)}")
    lines.extend(_dot_edge(edge, members) for edge in graph.edges)
    lines.append("}")
    return "\n".join(lines) + "\n"


def _dot_node(node: GraphNode) -> str:
    style = ", style=rounded" if node.tool is not None else ""
    return f"{_dot_id(node.id)} [label={_dot_id(node.label)}{style}];"


def _dot_edge(edge: GraphEdge, members: Mapping[str, Sequence[GraphNode]]) -> str:
    attributes: list[str] = []
    source, target = edge.source, edge.target
    if source in members:
        attributes.append(f"ltail={_dot_id('cluster_' + source)}")
        source = _turn_steps(members[source])[-1].id
    if target in members:
        attributes.append(f"lhead={_dot_id('cluster_' + target)}")
        target = _turn_steps(members[target])[0].id
    if edge.label is not None:
        style = "dotted" if edge.kind == "tool" else "dashed"
        attributes[:0] = [f"style={style}", f"label={_dot_id(edge.label)}"]
    tail = f" [{', '.join(attributes)}]" if attributes else ""
    return f"  {_dot_id(source)} -> {_dot_id(target)}{tail};"


def _turn_steps(nodes: Iterable[GraphNode]) -> list[GraphNode]:
    return [node for node in nodes if node.tool is None]


def to_json(graph: Graph) -> str:
    """``{id, direction, nodes, edges}`` as pretty-printed JSON, ending in one newline."""
    return json.dumps(graph.to_dict(), indent=2, ensure_ascii=False) + "\n"
