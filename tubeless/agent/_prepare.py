"""Preparing a batch: resolve every tool name, then validate every argument, before any call.

Handler tools validate (and transform, once) their argument with the tool's input schema.
Pipeline tools check the delegation depth, validate with their own input schema when they have
one, map to the child's raw input, validate that with the child's schema and plan the child.
Everything a batch needs is checked here, so a rejected call never lets a sibling start.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tubeless.agent._decisions import Call, DecisionError, shown, unknown_tool
from tubeless.agent._scope import Scope
from tubeless.agent._tools import Tool
from tubeless.pipeline import Pipeline
from tubeless.schema import Schema, SchemaValidationError

__all__ = ["CompiledTool", "PreparedCall", "prepare_calls"]


@dataclass(frozen=True, slots=True)
class CompiledTool:
    """A registered tool and the pipeline each of its calls runs."""

    name: str
    tool: Tool
    pipeline: Pipeline


@dataclass(slots=True)
class PreparedCall:
    """A call ready to dispatch: its pipeline and its already validated input.

    Slotted, like ``TurnInput``, for the fast attribute path (W1: 1.4 % fewer instructions);
    never changed once made.
    """

    id: str
    tool: str
    pipeline: Pipeline
    value: Any
    delegates: bool
    """Whether the call runs a pipeline tool (one delegation edge)."""
    raw: Any = None
    """The argument as the decision gave it (what an approval request shows and digests)."""


def _validate(schema: Schema, value: Any, call: Call, what: str) -> Any:
    try:
        return schema.validate(value)
    except SchemaValidationError as exc:
        raise DecisionError(
            f"{what} of call {shown(call.id)} to tool {shown(call.tool)} were rejected: {exc}",
            exc.issues,
        ) from None


def prepare_calls(
    calls: tuple[Call, ...],
    registry: Mapping[str, CompiledTool],
    *,
    scope: Scope,
    dry_run: bool,
) -> tuple[PreparedCall, ...]:
    """Resolve, validate and map every call of a batch; raises before anything runs."""
    if len(calls) == 1:  # the common batch, without the lists
        call = calls[0]
        compiled = registry.get(call.tool)
        if compiled is not None and compiled.tool.kind == "handler":
            schema = compiled.tool.input_schema
            assert schema is not None
            value = _validate(schema, call.input, call, "Arguments")
            return (PreparedCall(call.id, call.tool, compiled.pipeline, value, False, call.input),)
    resolved: list[CompiledTool] = []
    for call in calls:
        compiled = registry.get(call.tool)
        if compiled is None:
            raise unknown_tool(call.tool, registry)
        resolved.append(compiled)
    prepared: list[PreparedCall] = []
    for call, compiled in zip(calls, resolved, strict=True):
        tool = compiled.tool
        if tool.kind == "handler":
            assert tool.input_schema is not None
            value = _validate(tool.input_schema, call.input, call, "Arguments")
            prepared.append(
                PreparedCall(call.id, call.tool, compiled.pipeline, value, False, call.input)
            )
            continue
        scope.check_delegation()
        raw = call.input
        if tool.input_schema is not None:
            assert tool._map_options is not None
            raw = tool._map_options(_validate(tool.input_schema, raw, call, "Arguments"))
        child = compiled.pipeline
        if child.options_schema is not None:
            raw = _validate(child.options_schema, raw, call, "Child input")
        if not child.plan(dry_run=dry_run).ok:
            raise DecisionError(f"Agent tool {shown(call.tool)} has an invalid plan")
        prepared.append(PreparedCall(call.id, call.tool, child, raw, True, call.input))
    return tuple(prepared)
