"""The text form of a plan, as ``tubeless plan`` prints it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tubeless.pipeline import Plan
from tubeless.pipeline._spi import PlanStep, SelectionReason

__all__ = ["format_plan"]

_NESTED_LABELS = {"single": "child", "for-each": "fan-out"}


def format_plan(plan: Plan, *, explain: bool = False) -> str:
    """Render ``plan`` as text lines (ending in a newline).

    Args:
        plan: The plan to render.
        explain: Add why each step is (or is not) selected.
    """
    lines = [
        f"Pipeline {plan.pipeline_id}: plan (ok={_bool(plan.ok)}, dryRun={_bool(plan.dry_run)}, "
        f"steps={len(plan.steps)})"
    ]
    for s in plan.steps:
        lines.append(_step_line(s, explain=explain))
        if s.agent is not None:
            lines.extend(_agent_lines(s.agent))
    lines.extend(f"  ! {error.format()}" for error in plan.errors)
    return "\n".join(lines) + "\n"


def _bool(value: bool) -> str:
    return "true" if value else "false"


def _step_line(s: PlanStep, *, explain: bool) -> str:
    display = f"{s.name} [{s.id}]" if s.name else s.id
    disposition = "run" if s.skip_reason is None else f"skip: {s.skip_reason}"
    if explain:
        notes = _annotations(s)
        if notes:
            disposition += f" ({'; '.join(notes)})"
    line = f"  - {display}: {disposition}{_nested(s.nested_pipeline)}"
    if s.description:
        line += f" - {s.description}"
    return line


def _agent_lines(agent: Mapping[str, Any]) -> list[str]:
    """The agent's limits and capability inventory, indented under its step."""
    limits = agent.get("limits", {})
    names = (
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
    text = " ".join(f"{_snake_key(name)}={limits[name]}" for name in names if name in limits)
    lines = [f"      limits: {text}"]
    capabilities = agent.get("capabilities", [])
    if not capabilities:
        lines.append("      tools: none")
    for capability in capabilities:
        description = " ".join(str(capability.get("description", "")).split())
        if len(description) > 100:
            description = description[:99] + "…"
        gate = capability.get("approval")
        needs = "" if gate is None else f" (needs approval: {gate})"
        replay = capability.get("replay")
        shown = f" (replay {replay})" if replay else ""
        lines.append(f"      tool {capability['name']}{shown}: {description}{needs}")
    return lines


def _snake_key(key: str) -> str:
    return "".join("_" + c.lower() if c.isupper() else c for c in key)


def _annotations(s: PlanStep) -> list[str]:
    notes: list[str] = []
    if s.skip_reason is None and s.runtime_skip_possible:
        notes.append("policy may skip")
    notes.extend(text for text in map(_reason_text, s.selection_reasons) if text)
    return notes


def _reason_text(reason: SelectionReason) -> str:
    kind = reason.kind
    if kind == "exact":
        return "exact selection"
    if kind == "target":
        return f"target {reason.target_id}"
    if kind == "required-dependency":
        return f"required by {reason.dependent_id} for target {reason.target_id}"
    if kind == "failure-gate":
        return f"failure gate for {reason.dependent_id} for target {reason.target_id}"
    if kind == "optional-only":
        return f"optional-only input to {reason.dependent_id} for target {reason.target_id}"
    if kind == "outside-target-closure":
        return "outside target closure"
    if kind == "not-selected":
        return "not selected"
    return ""


def _nested(nested: Mapping[str, Any] | None) -> str:
    if nested is None:
        return ""
    declared = len(nested["stepIds"])
    count = f"({declared} declared step{'' if declared == 1 else 's'})"
    if nested["mode"] == "iterate":
        return (
            f" -> iteration (at most {nested['maxIterations']}) pipeline "
            f"{nested['pipelineId']} {count}"
        )
    return f" -> {_NESTED_LABELS[nested['mode']]} pipeline {nested['pipelineId']} {count}"
