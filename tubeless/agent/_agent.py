"""``define_agent``: check an agent's definition and compile it into an ordinary pipeline.

::

    pipeline <id>                 single step and target "agent" (``_agent_step.AgentStep``)
    pipeline <id>/turn            decide → calls → reduce (``_turn``)
    pipeline <id>/tool/<name>     one per handler tool: single step "tool"

Pipeline tools run their own pipeline (or agent) as the call's child run.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from tubeless.agent._agent_step import AgentStep
from tubeless.agent._dispatch import EXECUTION_SLOT
from tubeless.agent._limits import Limits
from tubeless.agent._prepare import CompiledTool
from tubeless.agent._tools import TOOL_NAME, Tool, ToolContext, descriptor
from tubeless.agent._trace import agent_trace
from tubeless.agent._turn import TurnSpec
from tubeless.errors import AgentDefinitionError, PipelineDefinitionError
from tubeless.frozen import FrozenDict
from tubeless.pipeline import Pipeline, StepContext, define_pipeline, step
from tubeless.pipeline._spi import is_async_callable
from tubeless.schema import Schema

__all__ = ["define_agent"]

_MAX_TOOLS = 4096


def _schema(value: Any, label: str) -> Schema:
    try:
        return Schema.of(value)
    except (TypeError, ValueError) as exc:
        raise AgentDefinitionError(f"{label} is not a schema: {exc}") from exc


def _tool_handler(name: str, handler: Callable[..., Any]) -> Callable[..., Any]:
    """Adapt ``handler(input, ctx)`` to a step handler that also records the call's identity.

    One adapter for both kinds: an async handler's coroutine is returned and awaited on the
    loop (its step is ``inline``), a sync handler runs in the step's worker thread.
    """

    def run(inputs: dict[str, Any], ctx: StepContext) -> Any:
        execution = ctx.slots.get(EXECUTION_SLOT) or FrozenDict()
        agent_trace(ctx).call(ctx, execution, name)
        return handler(ctx.options, ToolContext(ctx, execution))

    return run


def _tool_pipeline(agent_id: str, name: str, tool: Tool) -> Pipeline:
    preview = tool._preview
    assert tool._run is not None
    tool_step = step(
        "tool",
        _tool_handler(name, tool._run),
        dry_run="skip" if preview is None else _tool_handler(name, preview),
        output_schema=tool.output_schema,
    )
    if is_async_callable(tool._run) and (preview is None or is_async_callable(preview)):
        tool_step = replace(tool_step, inline=True)  # async handlers: no worker thread
    return define_pipeline(
        id=f"{agent_id}/tool/{name}",
        options_schema=tool.input_schema,
        steps=[tool_step],
        finalize="tool",
    )


def _registry(agent_id: str, tools: Mapping[str, Tool] | None) -> dict[str, CompiledTool]:
    if tools is None:
        return {}
    if not isinstance(tools, Mapping):
        raise AgentDefinitionError("Agent tools must be a mapping of names to tools.")
    if len(tools) > _MAX_TOOLS:
        raise AgentDefinitionError(f"An agent may register at most {_MAX_TOOLS} tools.")
    registry: dict[str, CompiledTool] = {}
    for name in sorted(tools):
        tool = tools[name]
        if not isinstance(name, str) or not TOOL_NAME.fullmatch(name):
            raise AgentDefinitionError(
                f"Tool name {name!r} must start with a letter and contain only letters, "
                "digits, '_' or '-' (at most 128 characters)."
            )
        if not isinstance(tool, Tool):
            raise AgentDefinitionError(
                f"Tool {name!r} must be made with define_tool(...) or pipeline_tool(...)."
            )
        if tool.kind == "handler":
            pipeline = _tool_pipeline(agent_id, name, tool)
        else:
            assert tool.pipeline is not None
            pipeline = tool.pipeline
        registry[name] = CompiledTool(name, tool, pipeline)
    return registry


def define_agent(
    *,
    id: str,
    input_schema: Any,
    result_schema: Any,
    initial_state: Callable[..., Any],
    decide: Callable[..., Any],
    tools: Mapping[str, Tool] | None = None,
    reduce: Callable[..., Any] | None = None,
    dry_run: Callable[..., Any] | None = None,
    limits: Limits | Mapping[str, Any] | None = None,
    name: str | None = None,
    description: str | None = None,
    implementation_version: str | None = None,
    result_json_schema: Mapping[str, Any] | None = None,
    pricing: Mapping[str, Any] | None = None,
) -> Pipeline:
    """Define an agent: an ordinary pipeline around a bounded decide → calls → reduce loop.

    Args:
        id: The agent's pipeline id.
        input_schema: Validates the agent's input once.
        result_schema: Validates (and may transform) the finish result once.
        initial_state: ``initial_state(input)`` returns the first state (frozen on commit).
        decide: ``decide(state, ctx)`` returns a decision (plain data, validated every turn).
        tools: Registered tools by name (``define_tool`` or ``pipeline_tool``); none implicitly.
        reduce: ``reduce(state, outcomes)`` returns the next state; without it the state is
            kept and outcomes are not accumulated.
        dry_run: A preview decision source used instead of ``decide`` in dry runs; without it
            a dry run skips the agent (and its finalization fails: nothing is invented).
        limits: :class:`Limits` or a mapping of its fields.
        name: Display name.
        description: Display description.
        implementation_version: Bump it when prompts, reducers or handlers change behaviour.
        result_json_schema: An explicit descriptor of the result for models.
        pricing: Model prices for a ``max_cost_usd`` budget, added to or overriding the
            genai-prices data: ``{"<provider>:<model>": {input_per_mtok, output_per_mtok,
            cached_input_per_mtok}}`` in US dollars (docs/budgets.md). Agents below this one
            inherit them. Prices are not part of the identity.

    Raises:
        AgentDefinitionError: For any invalid part (``TUBELESS_AGENT_INVALID_DEFINITION``).
    """
    if not isinstance(id, str) or not id.strip():
        raise AgentDefinitionError("An agent id must be a nonblank string.")
    inputs = _schema(input_schema, "input_schema")
    result = _schema(result_schema, "result_schema")
    for label, fn, required in (
        ("initial_state", initial_state, True),
        ("decide", decide, True),
        ("reduce", reduce, False),
        ("dry_run", dry_run, False),
    ):
        if (fn is not None or required) and not callable(fn):
            raise AgentDefinitionError(f"Agent {id!r}: {label} must be callable.")
    if result_json_schema is not None:
        result_descriptor = descriptor(result_json_schema, "result_json_schema")
    else:
        try:
            generated = result.json_schema()
        except Exception as exc:
            raise AgentDefinitionError(
                f"Agent {id!r}: result_schema has no JSON Schema; pass result_json_schema: {exc}"
            ) from exc
        result_descriptor = descriptor(generated, "result_schema")
    resolved_limits = Limits.coerce(limits)
    prices = None
    if pricing is not None:
        from tubeless.agent._pricing import price_table  # only cost budgets need decimals

        prices = price_table(pricing)
    registry = _registry(id, tools)
    capabilities = tuple(
        FrozenDict._trusted(
            {
                "name": entry.name,
                "description": entry.tool.description,
                "input_json_schema": entry.tool.input_json_schema,
            }
        )
        for entry in registry.values()
    )
    spec = TurnSpec(
        id=id,
        decide=decide,
        dry_run=dry_run,
        reduce=reduce,
        result_schema=result,
        result_json_schema=result_descriptor,
        capabilities=capabilities,
        registry=registry,
        limits=resolved_limits,
        approvals=any(entry.tool.approval != "never" for entry in registry.values()),
        pricing=prices or None,
    )
    try:
        agent = AgentStep(
            spec,
            inputs,
            initial_state,
            name=name,
            description=description,
            implementation_version=implementation_version,
        )
    except PipelineDefinitionError as exc:
        raise AgentDefinitionError(f"Agent {id!r}: {exc}") from exc
    return agent.pipeline
