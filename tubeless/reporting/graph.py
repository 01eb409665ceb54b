"""Diagrams of a pipeline or an agent, as ``tubeless graph`` prints them.

:func:`build_graph` turns a :class:`~tubeless.pipeline.Pipeline` into a small node/edge model
(:class:`Graph`) without running anything; :func:`to_mermaid`, :func:`to_dot` and
:func:`to_json` render that model. :func:`render_graph` does both in one call.

Pipelines render exactly as UPSTREAM §3.6 describes: one node per step in execution order with
the synthetic ids ``step0, step1, ...``, then, per step and per distinct upstream step (required,
then optional, then failure-gate dependencies, first mention wins), one edge::

    a --> b                                   required input
    a -. optional input + failure gate .-> b  optional input that is also a failure gate
    a -. optional input .-> b                 optional input
    a -. failure gate .-> b                   failure gate only

A composed step names its child in its label: ``(child: x)``, ``(fan-out: x)`` or
``(iteration: x, at most N)``.

An agent step (a step carrying agent metadata, as every agent's single ``agent`` step does)
becomes a subgraph ``stepN`` labelled ``<name or id> (agent: <id>/turn)``. Inside it are the turn
pipeline's steps (``stepN_0`` decide, ``stepN_1`` calls, ``stepN_2`` reduce, with their ordinary
dependency edges), a dotted loop edge from reduce back to decide labelled
``next turn (at most <max_turns>)``, and one rounded node per tool (``stepN_tool0, ...``, in tool
name order) reached from calls by a dotted edge labelled with the tool name. A function tool's
node shows the tool name; a pipeline or agent tool's node shows ``pipeline: <child id>`` or
``agent: <child id>``. Edges from or to the agent step attach to the whole subgraph.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from tubeless.pipeline import Pipeline, Step
from tubeless.reporting._graph_render import to_dot, to_json, to_mermaid

__all__ = [
    "DIRECTIONS",
    "FORMATS",
    "AgentTool",
    "Direction",
    "EdgeKind",
    "Graph",
    "GraphEdge",
    "GraphFormat",
    "GraphNode",
    "NodeKind",
    "agent_tools",
    "build_graph",
    "render_graph",
    "to_dot",
    "to_json",
    "to_mermaid",
]

Direction = Literal["TB", "TD", "BT", "LR", "RL"]
#: Mermaid's flowchart directions (``TD`` and ``TB`` are the same, top to bottom).
DIRECTIONS: tuple[Direction, ...] = ("TB", "TD", "BT", "LR", "RL")
GraphFormat = Literal["mermaid", "dot", "json"]
#: The output formats of :func:`render_graph`.
FORMATS: tuple[GraphFormat, ...] = ("mermaid", "dot", "json")

NodeKind = Literal[
    "step",
    "child",
    "fan-out",
    "iteration",
    "agent",
    "turn-step",
    "tool",
    "pipeline-tool",
    "agent-tool",
]
EdgeKind = Literal[
    "required",
    "optional",
    "failure-gate",
    "optional+failure-gate",
    "next-turn",
    "tool",
]

_NESTED_KINDS: dict[str, NodeKind] = {
    "single": "child",
    "for-each": "fan-out",
    "iterate": "iteration",
}
_TOOL_KINDS: dict[str, NodeKind] = {
    "function": "tool",
    "pipeline": "pipeline-tool",
    "agent": "agent-tool",
}
_EDGE_TEXT: dict[EdgeKind, str] = {
    "optional": "optional input",
    "failure-gate": "failure gate",
    "optional+failure-gate": "optional input + failure gate",
}


@dataclass(frozen=True, kw_only=True, slots=True)
class AgentTool:
    """One tool of an agent step, as plans, ``inspect`` and ``graph`` show it."""

    name: str
    """The name models call it by."""
    description: str
    """What the tool does, for the model."""
    input_json_schema: Any
    """The JSON Schema of the tool's argument."""
    kind: Literal["function", "pipeline", "agent"]
    """A Python handler, a pipeline run as a tool, or another agent run as a tool."""
    pipeline_id: str
    """The pipeline a call runs: ``<agent>/tool/<name>`` for a function, else the child's id."""
    approval: str = "never"
    """Whether a call needs approval first: ``never``, ``always`` or ``predicate``."""
    replay: str = "unsafe"
    """Whether a call cut short by a crash may run again on resume (``safe``) or not."""


@dataclass(frozen=True, kw_only=True, slots=True)
class GraphNode:
    """One node of a diagram."""

    id: str
    """The synthetic id: ``step<i>``, ``step<i>_<j>`` (turn steps), ``step<i>_tool<k>``."""
    step_id: str | None
    """The step the node stands for (in its own pipeline); ``None`` for a tool."""
    label: str
    """The display text, unescaped."""
    kind: NodeKind
    parent: str | None = None
    """The agent node (subgraph) that holds this node."""
    pipeline_id: str | None = None
    """The child pipeline of a composed step, agent (its turn pipeline) or tool."""
    tool: str | None = None
    """The tool name, for tool nodes."""

    def to_dict(self) -> dict[str, Any]:
        """``{id, step_id, label, kind}`` plus ``parent``, ``pipeline_id``, ``tool`` when set."""
        out: dict[str, Any] = {
            "id": self.id,
            "step_id": self.step_id,
            "label": self.label,
            "kind": self.kind,
        }
        if self.parent is not None:
            out["parent"] = self.parent
        if self.pipeline_id is not None:
            out["pipeline_id"] = self.pipeline_id
        if self.tool is not None:
            out["tool"] = self.tool
        return out


@dataclass(frozen=True, kw_only=True, slots=True)
class GraphEdge:
    """One edge of a diagram; only required edges have no label."""

    source: str
    target: str
    kind: EdgeKind
    label: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """``{from, to, kind}`` plus ``label`` when set."""
        out: dict[str, Any] = {"from": self.source, "to": self.target, "kind": self.kind}
        if self.label is not None:
            out["label"] = self.label
        return out


@dataclass(frozen=True, kw_only=True, slots=True)
class Graph:
    """A pipeline's diagram: nodes in execution order (an agent's members right after it)."""

    id: str
    """The pipeline id."""
    direction: Direction
    nodes: tuple[GraphNode, ...]
    edges: tuple[GraphEdge, ...]

    def to_dict(self) -> dict[str, Any]:
        """``{id, direction, nodes, edges}`` (``tubeless graph --format json``)."""
        return {
            "id": self.id,
            "direction": self.direction,
            "nodes": [node.to_dict() for node in self.nodes],
            "edges": [edge.to_dict() for edge in self.edges],
        }


# -- model ------------------------------------------------------------------------------------
def agent_tools(step: Step) -> tuple[AgentTool, ...]:
    """The tools of an agent step, in the order its metadata lists them (by name).

    Args:
        step: A step with agent metadata; any other step has no tools.
    """
    agent = step.agent
    if agent is None:
        return ()
    agent_id = str(agent.get("turnPipelineId", "")).removesuffix("/turn")
    tools: list[AgentTool] = []
    for index, capability in enumerate(agent.get("capabilities", ())):
        name = str(capability["name"])
        function_id = f"{agent_id}/tool/{name}"
        # The agent layer lists the tool pipelines in the same order as the capabilities.
        child = step.capabilities[index] if index < len(step.capabilities) else None
        kind: Literal["function", "pipeline", "agent"]
        if child is None or child.id == function_id:
            kind = "function"
        else:
            kind = "agent" if child.has_agent else "pipeline"
        tools.append(
            AgentTool(
                name=name,
                description=str(capability.get("description", "")),
                input_json_schema=capability.get("inputJsonSchema"),
                kind=kind,
                pipeline_id=function_id if child is None else child.id,
                approval=str(capability.get("approval", "never")),
                replay=str(capability.get("replay", "unsafe")),
            )
        )
    return tuple(tools)


def build_graph(pipeline: Pipeline, *, direction: str = "TD", descriptions: bool = False) -> Graph:
    """The diagram of ``pipeline`` (nothing is run, validated or imported).

    Args:
        pipeline: A pipeline or an agent.
        direction: One of :data:`DIRECTIONS`.
        descriptions: Add `` — <description>`` to the labels of steps and tools that have one.

    Raises:
        ValueError: For an unknown direction.
    """
    checked = _direction(direction)
    ids = {s.id: f"step{index}" for index, s in enumerate(pipeline.order)}
    nodes: list[GraphNode] = []
    edges: list[GraphEdge] = []
    for s in pipeline.order:
        node_id = ids[s.id]
        edges.extend(_dependency_edges(s, ids))
        if s.agent is not None and s.nested is not None:
            _add_agent(s, node_id, nodes, edges, descriptions=descriptions)
        else:
            nodes.append(_step_node(s, node_id, descriptions=descriptions))
    return Graph(
        id=pipeline.id,
        direction=checked,
        nodes=tuple(nodes),
        edges=tuple(edges),
    )


def _direction(direction: str) -> Direction:
    for known in DIRECTIONS:
        if known == direction:
            return known
    choices = ", ".join(DIRECTIONS)
    raise ValueError(f"Invalid flowchart direction {direction!r}; choose from {choices}.")


def _label(display: str, suffix: str, description: str | None, descriptions: bool) -> str:
    label = display + suffix
    if descriptions and description:
        label += f" — {description}"
    return label


def _step_node(
    s: Step, node_id: str, *, descriptions: bool, parent: str | None = None
) -> GraphNode:
    kind: NodeKind = "turn-step" if parent is not None else "step"
    suffix = ""
    child_id = None
    if s.nested is not None:
        kind = _NESTED_KINDS[s.nested.mode]
        child_id = s.nested.pipeline.id
        suffix = f" ({kind}: {child_id})"
        if s.nested.mode == "iterate":
            suffix = f" (iteration: {child_id}, at most {s.nested.max_iterations})"
    return GraphNode(
        id=node_id,
        step_id=s.id,
        label=_label(s.name or s.id, suffix, s.description, descriptions),
        kind=kind,
        parent=parent,
        pipeline_id=child_id,
    )


def _dependency_edges(s: Step, ids: Mapping[str, str]) -> list[GraphEdge]:
    """One edge per distinct upstream step of ``s``, styled as UPSTREAM §3.6."""
    required = set(s.depends_on)
    optional = set(s.optional_depends_on)
    gates = set(s.skip_after_failure_of)
    edges: list[GraphEdge] = []
    for upstream in dict.fromkeys(s.dependency_ids):
        kind: EdgeKind
        if upstream in required:
            kind = "required"
        elif upstream in optional and upstream in gates:
            kind = "optional+failure-gate"
        elif upstream in optional:
            kind = "optional"
        else:
            kind = "failure-gate"
        edges.append(
            GraphEdge(source=ids[upstream], target=ids[s.id], kind=kind, label=_EDGE_TEXT.get(kind))
        )
    return edges


def _add_agent(
    s: Step,
    node_id: str,
    nodes: list[GraphNode],
    edges: list[GraphEdge],
    *,
    descriptions: bool,
) -> None:
    assert s.agent is not None and s.nested is not None
    turn = s.nested.pipeline
    nodes.append(
        GraphNode(
            id=node_id,
            step_id=s.id,
            label=_label(s.name or s.id, f" (agent: {turn.id})", s.description, descriptions),
            kind="agent",
            pipeline_id=turn.id,
        )
    )
    member_ids = {t.id: f"{node_id}_{index}" for index, t in enumerate(turn.order)}
    for t in turn.order:
        nodes.append(_step_node(t, member_ids[t.id], descriptions=descriptions, parent=node_id))
        edges.extend(_dependency_edges(t, member_ids))
    if not member_ids:
        return
    order = list(member_ids)
    first = member_ids.get("decide", member_ids[order[0]])
    last = member_ids.get("reduce", member_ids[order[-1]])
    calls = member_ids.get("calls", first)
    limit = s.agent.get("limits", {}).get("maxTurns", s.nested.max_iterations)
    edges.append(
        GraphEdge(source=last, target=first, kind="next-turn", label=f"next turn (at most {limit})")
    )
    for index, tool in enumerate(agent_tools(s)):
        tool_id = f"{node_id}_tool{index}"
        display = tool.name if tool.kind == "function" else f"{tool.kind}: {tool.pipeline_id}"
        nodes.append(
            GraphNode(
                id=tool_id,
                step_id=None,
                label=_label(display, "", tool.description, descriptions),
                kind=_TOOL_KINDS[tool.kind],
                parent=node_id,
                pipeline_id=tool.pipeline_id,
                tool=tool.name,
            )
        )
        edges.append(GraphEdge(source=calls, target=tool_id, kind="tool", label=tool.name))


# -- renderers --------------------------------------------------------------------------------
def render_graph(
    pipeline: Pipeline,
    *,
    format: str = "mermaid",
    direction: str = "TD",
    descriptions: bool = False,
    markdown: bool = False,
) -> str:
    """``pipeline``'s diagram as text ending in exactly one newline.

    Args:
        pipeline: A pipeline or an agent.
        format: One of :data:`FORMATS`.
        direction: One of :data:`DIRECTIONS`.
        descriptions: Add step and tool descriptions to the labels.
        markdown: Wrap the text in a fenced code block tagged with the format.

    Raises:
        ValueError: For an unknown format or direction.
    """
    if format not in FORMATS:
        raise ValueError(f"Unknown graph format {format!r}; choose from {', '.join(FORMATS)}.")
    graph = build_graph(pipeline, direction=direction, descriptions=descriptions)
    if format == "mermaid":
        text = to_mermaid(graph)
    elif format == "dot":
        text = to_dot(graph)
    else:
        text = to_json(graph)
    return f"```{format}\n{text}```\n" if markdown else text
