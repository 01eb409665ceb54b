"""What changed between two definitions of an agent, said part by part (issue 28).

A checkpoint entry and a cassette header keep the definition's *parts* next to its identity:
the ``implementation_version``, each limit, the input and result schemas, and per tool its
description, input and output schemas, replay class and approval (a tool that runs an agent
nests that agent's parts; another pipeline tool keeps its definition id). Identities say only
*that* something changed; comparing the parts says *what*: ``tool 'send': description
changed``, ``limits.max_calls: 10 -> 12``, ``tool 'x' added``. Descriptions and schemas are
kept as digests (a part only has to compare equal), small values (limits, replay, approval) as
themselves, so the message can quote them.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any, Final

from tubeless.frozen import thaw
from tubeless.pipeline import Pipeline
from tubeless.pipeline._spi import descriptor_fingerprint, schema_fingerprint

__all__ = ["changed_parts", "definition_parts", "said"]

#: The limits by their snake_case name, as the agent metadata spells them.
_LIMITS: Final = (
    ("max_turns", "maxTurns"),
    ("max_calls", "maxCalls"),
    ("max_decisions", "maxDecisions"),
    ("max_depth", "maxDepth"),
    ("max_concurrency", "maxConcurrency"),
)
#: Tool parts kept as digests (named when they differ) and as values (quoted when they differ).
_DIGESTS: Final = (
    ("description", "description"),
    ("input_schema", "input schema"),
    ("output_schema", "output schema"),
)
_VALUES: Final = ("replay", "approval")
#: How many changes one message names.
_MAX_NAMED: Final = 8


def _digest(text: Any) -> str:
    return "sha256:" + hashlib.sha256(str(text).encode("utf-8")).hexdigest()


def definition_parts(pipeline: Pipeline) -> dict[str, Any]:
    """The parts of an agent's pipeline (or of any pipeline: its id and definition id)."""
    parts: dict[str, Any] = {
        "id": pipeline.id,
        "implementation_version": pipeline.implementation_version,
    }
    step = pipeline.steps[0] if len(pipeline.steps) == 1 else None
    agent = None if step is None else step.agent
    if step is None or agent is None:
        parts["definition_id"] = pipeline.identity.definition_id
        return parts
    limits = agent.get("limits") or {}
    parts["limits"] = {name: limits.get(camel) for name, camel in _LIMITS}
    parts["limits"]["on_limit"] = limits.get("onLimit", "fail")
    parts["input_schema"] = agent.get("inputSchema")
    parts["result_schema"] = descriptor_fingerprint(thaw(agent.get("resultJsonSchema")))
    tools: dict[str, Any] = {}
    for capability, tool_pipeline in zip(
        agent.get("capabilities") or (), step.capabilities, strict=False
    ):
        name = str(capability["name"])
        tool: dict[str, Any] = {
            "description": _digest(capability.get("description")),
            "input_schema": descriptor_fingerprint(thaw(capability.get("inputJsonSchema"))),
            "replay": capability.get("replay"),
            "approval": capability.get("approval", "never"),
        }
        if tool_pipeline.id == f"{pipeline.id}/tool/{name}":  # a handler tool's own pipeline
            output = tool_pipeline.steps[0].output_schema
            tool["output_schema"] = None if output is None else schema_fingerprint(output)
        else:  # a pipeline or agent tool
            tool["pipeline"] = definition_parts(tool_pipeline)
        tools[name] = tool
    parts["tools"] = tools
    return parts


def _quoted(value: Any) -> str:
    return repr(value)


def changed_parts(saved: Mapping[str, Any], now: Mapping[str, Any]) -> list[str]:
    """Every difference between two definitions' parts, named for people (empty: none)."""
    found: list[str] = []
    if saved.get("implementation_version") != now.get("implementation_version"):
        found.append(
            f"implementation_version: {_quoted(saved.get('implementation_version'))} -> "
            f"{_quoted(now.get('implementation_version'))}"
        )
    saved_limits, now_limits = saved.get("limits") or {}, now.get("limits") or {}
    for name in now_limits:
        if saved_limits.get(name) != now_limits[name]:
            found.append(
                f"limits.{name}: {_quoted(saved_limits.get(name))} -> {_quoted(now_limits[name])}"
            )
    for part, label in (("input_schema", "input schema"), ("result_schema", "result schema")):
        if saved.get(part) != now.get(part):
            found.append(f"{label} changed")
    found += _tools_changed(saved.get("tools") or {}, now.get("tools") or {})
    if not found and saved.get("definition_id") != now.get("definition_id"):
        found.append("its definition changed")  # a plain pipeline: its id says only that
    return found


def _tools_changed(saved: Mapping[str, Any], now: Mapping[str, Any]) -> list[str]:
    found = [f"tool {name!r} added" for name in now if name not in saved]
    found += [f"tool {name!r} removed" for name in saved if name not in now]
    for name, tool in now.items():
        before = saved.get(name)
        if not isinstance(before, Mapping):
            continue
        where = f"tool {name!r}"
        for part, label in _DIGESTS:
            if before.get(part) != tool.get(part):
                found.append(f"{where}: {label} changed")
        for part in _VALUES:
            if before.get(part) != tool.get(part):
                found.append(
                    f"{where}: {part} {_quoted(before.get(part))} -> {_quoted(tool.get(part))}"
                )
        inner_before, inner = before.get("pipeline"), tool.get("pipeline")
        if isinstance(inner, Mapping) and isinstance(inner_before, Mapping):
            ran = f"{where} ({inner.get('id')!r})"
            found += [f"{ran}: {change}" for change in changed_parts(inner_before, inner)]
        elif inner_before != inner:
            found.append(f"{where}: its pipeline changed")
    return found


def said(changes: list[str]) -> str:
    """``changes`` as one clause (the first few, then how many more)."""
    shown = ", ".join(changes[:_MAX_NAMED])
    more = len(changes) - _MAX_NAMED
    return shown + (f" (and {more} more)" if more > 0 else "")
