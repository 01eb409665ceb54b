"""What ``tubeless inspect`` prints: an entry's input schema, targets, steps and their
dependencies, identity, default plan and, for agents, limits, tool inventory and result
descriptor (text or a JSON-ready dict)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from tubeless.agent._spi import remotes
from tubeless.frozen import thaw
from tubeless.pipeline import DefinitionIdentity, Pipeline, Step
from tubeless.reporting.graph import agent_tools
from tubeless.reporting.plan_text import format_plan

__all__ = ["EntryKind", "format_inspect", "input_json_schema", "inspect_dict"]

EntryKind = Literal["agent", "pipeline"]

#: Tool input schemas and the result descriptor are shown on one line, cut to this many chars.
SCHEMA_WIDTH = 200
_LIMITS = (
    "maxTurns",
    "maxCalls",
    "maxDecisions",
    "maxDepth",
    "maxConcurrency",
    "maxInputTokens",
    "maxOutputTokens",
    "maxTotalTokens",
    "maxCostUsd",
    "onLimit",
)


def format_inspect(
    pipeline: Pipeline,
    *,
    entry_id: str,
    kind: EntryKind,
    strict: Mapping[str, Sequence[str]] | None = None,
    live: Mapping[str, Mapping[str, Any]] | None = None,
) -> str:
    """The text report of one project entry, ending in one newline.

    Args:
        pipeline: The entry's compiled pipeline (an agent is a pipeline too).
        entry_id: The entry's id in its project.
        kind: Whether the project declares it under ``agents`` or ``pipelines``.
        strict: Per tool name, why its descriptor is outside OpenAI's strict subset (empty:
            strict mode applies); shown under each tool when given.
        live: Per MCP tool name, the descriptor its server gave (``inspect --connect``):
            shown instead of the placeholder; without it nothing was contacted.
    """
    lines = [f"Entry {entry_id} ({kind})", f"Pipeline {pipeline.id}"]
    if pipeline.name:
        lines.append(f"Name: {pipeline.name}")
    if pipeline.description:
        lines.append(f"Description: {_one_line(pipeline.description)}")
    schema = input_json_schema(pipeline)
    shown = _INPUT_NOTES[schema] if isinstance(schema, str) else _compact(_structure(schema))
    lines.append(f"Input: {shown}")
    lines.append(f"Targets: {', '.join(pipeline.target_ids) or 'none'}")
    plan = pipeline.plan()
    if kind == "agent":  # one step, the turn loop: what it does is described below the plan
        lines.append(f"Steps: {', '.join(pipeline.step_ids) or 'none'}")
    else:
        lines.extend(_step_lines(plan))
    lines.append(f"Identity: {_identity_text(pipeline.identity)}")
    lines.append("")
    lines.extend(format_plan(plan).splitlines())
    for s in _agent_steps(pipeline):
        lines.append("")
        lines.extend(_agent_lines(s, strict, live))
    return "\n".join(lines) + "\n"


def inspect_dict(
    pipeline: Pipeline,
    *,
    entry_id: str,
    kind: EntryKind,
    live: Mapping[str, Mapping[str, Any]] | None = None,
) -> dict[str, Any]:
    """The JSON form of :func:`format_inspect` (``tubeless inspect --json``).

    ``agent`` describes the first agent step (every agent has exactly one), or is ``None``.
    """
    agents = _agent_steps(pipeline)
    schema = input_json_schema(pipeline)
    return {
        "entry": entry_id,
        "kind": kind,
        "pipeline_id": pipeline.id,
        "name": pipeline.name,
        "description": pipeline.description,
        "target_ids": list(pipeline.target_ids),
        "input_json_schema": None if isinstance(schema, str) else schema,
        "step_ids": list(pipeline.step_ids),
        "identity": _identity_dict(pipeline.identity),
        "plan": pipeline.plan().to_dict(definition=True),
        "agent": _agent_dict(agents[0], live) if agents else None,
    }


#: What the ``Input:`` line says for an entry without an input JSON Schema to show.
_INPUT_NOTES = {
    "none": "none (any input is accepted)",
    "unavailable": "(its schema has no JSON Schema form)",
}
#: Each dependency kind of a step, by the key a project writes it with.
_DEPENDENCIES = (
    ("depends_on", "dependencies"),
    ("optional_depends_on", "optional_dependencies"),
    ("skip_after_failure_of", "skip_after_failure_of"),
)


def input_json_schema(pipeline: Pipeline) -> dict[str, Any] | Literal["none", "unavailable"]:
    """The entry's input JSON Schema as plain data; ``"none"`` when the entry has no input
    schema (any input is accepted), ``"unavailable"`` when its schema cannot be expressed."""
    schema = pipeline.options_schema
    if schema is None:
        return "none"
    try:
        generated = thaw(schema.json_schema())
    except Exception:  # a type pydantic cannot express as JSON Schema still runs
        return "unavailable"
    return generated if isinstance(generated, dict) else "unavailable"


def _step_lines(plan: Any) -> list[str]:
    """``Steps:`` and one line per step, in execution order, with what it waits for."""
    if not plan.steps:
        return ["Steps: none"]
    lines = ["Steps:"]
    for planned in plan.steps:
        kinds = [
            f"{key}: {', '.join(ids)}"
            for key, attribute in _DEPENDENCIES
            if (ids := getattr(planned, attribute))
        ]
        lines.append(f"  {planned.id} ({'; '.join(kinds)})" if kinds else f"  {planned.id}")
    return lines


def _agent_steps(pipeline: Pipeline) -> list[Step]:
    return [s for s in pipeline.order if s.agent is not None]


def _identity_text(identity: DefinitionIdentity) -> str:
    text = (
        f"version={identity.version} structural={identity.structural_fingerprint} "
        f"definition={identity.definition_id}"
    )
    if identity.implementation_version is not None:
        text += f" implementation={identity.implementation_version}"
    return text


def _identity_dict(identity: DefinitionIdentity) -> dict[str, Any]:
    out: dict[str, Any] = {
        "version": identity.version,
        "structural_fingerprint": identity.structural_fingerprint,
        "definition_id": identity.definition_id,
    }
    if identity.implementation_version is not None:
        out["implementation_version"] = identity.implementation_version
    return out


def _mcp_line(s: Step, live: Mapping[str, Mapping[str, Any]] | None) -> list[str]:
    servers = sorted({str(getattr(r.source, "name", "?")) for r in remotes(s).values()})
    if not servers:
        return []
    names = ", ".join(servers)
    if live is None:
        return [
            f"MCP: tools of {names} are described by their server when a run connects "
            "(inspect --connect shows them)"
        ]
    return [f"MCP: connected to {names} for the live descriptions and input schemas below"]


def _agent_lines(
    s: Step,
    strict: Mapping[str, Sequence[str]] | None = None,
    live: Mapping[str, Mapping[str, Any]] | None = None,
) -> list[str]:
    assert s.agent is not None
    limits: Mapping[str, Any] = s.agent.get("limits", {})
    shown = " ".join(f"{_snake(key)}={limits[key]}" for key in _LIMITS if key in limits)
    lines = [f"Limits: {shown or 'none'}", *_mcp_line(s, live)]
    tools = agent_tools(s)
    sourced = remotes(s)
    lines.append("Tools:" if tools else "Tools: none")
    for tool in tools:
        target = "" if tool.kind == "function" else f" {tool.pipeline_id}"
        remote = sourced.get(tool.name)
        kind = tool.kind if remote is None else f"mcp {getattr(remote.source, 'name', '?')}"
        lines.append(f"  {tool.name} ({kind}{target if remote is None else ''})")
        described = (live or {}).get(tool.name)
        description = tool.description if described is None else described["description"]
        schema = tool.input_json_schema if described is None else described["input_json_schema"]
        lines.append(f"    description: {_one_line(description)}")
        lines.append(f"    input: {_compact(schema)}")
        if tool.approval != "never":
            lines.append(f"    approval: {tool.approval}")
        lines.append(f"    replay: {tool.replay}")
        if strict is not None and tool.name in strict:
            problems = strict[tool.name]
            verdict = (
                "yes"
                if not problems
                else "no ("
                + "; ".join(problems[:3])
                + (f"; and {len(problems) - 3} more)" if len(problems) > 3 else ")")
            )
            lines.append(f"    strict: {verdict}")
    lines.append(f"Result: {_compact(s.agent.get('resultJsonSchema'))}")
    return lines


def _agent_dict(s: Step, live: Mapping[str, Mapping[str, Any]] | None = None) -> dict[str, Any]:
    assert s.agent is not None
    limits: Mapping[str, Any] = s.agent.get("limits", {})
    sourced = remotes(s)
    capabilities: list[dict[str, Any]] = []
    for tool in agent_tools(s):
        entry: dict[str, Any] = {
            "name": tool.name,
            "description": tool.description,
            "input_json_schema": tool.input_json_schema,
            "kind": tool.kind,
            "pipeline_id": tool.pipeline_id,
            "replay": tool.replay,
            **({} if tool.approval == "never" else {"approval": tool.approval}),
        }
        remote = sourced.get(tool.name)
        if remote is not None:
            described = (live or {}).get(tool.name)
            if described is not None:
                entry["description"] = described["description"]
                entry["input_json_schema"] = described["input_json_schema"]
            entry["mcp"] = {
                "server": getattr(remote.source, "name", None),
                "tool": remote.name,
                "live": described is not None,
            }
        capabilities.append(entry)
    return {
        "limits": {_snake(key): value for key, value in limits.items()},
        "capabilities": capabilities,
        "result_json_schema": s.agent.get("resultJsonSchema"),
        "turn_pipeline_id": s.agent.get("turnPipelineId"),
    }


def _snake(key: str) -> str:
    return "".join("_" + c.lower() if c.isupper() else c for c in key)


def _one_line(text: str) -> str:
    return " ".join(text.split())


#: Annotations the ``Input:`` line leaves out so the shape fits its width (``--json`` keeps them).
_ANNOTATIONS = frozenset({"title", "description", "examples", "$comment"})


def _structure(schema: Any) -> Any:
    """``schema`` without its annotation keywords, at every level."""
    if isinstance(schema, dict):
        return {
            key: _structure(value)
            for key, value in schema.items()
            if key not in _ANNOTATIONS or not isinstance(value, str | list)
        }
    if isinstance(schema, list):
        return [_structure(item) for item in schema]
    return schema


def _compact(value: Any) -> str:
    """``value`` as one line of compact JSON, cut to :data:`SCHEMA_WIDTH` characters."""
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=str)
    return text if len(text) <= SCHEMA_WIDTH else text[: SCHEMA_WIDTH - 1] + "…"
