"""``define_agent``: compile a bounded decision loop into an ordinary pipeline.

::

    pipeline <id>                 single step and target "agent" (finalized by it)
      step "agent" = iterate_pipeline(<id>/turn, max_iterations=max_turns)
    pipeline <id>/turn            decide → calls → reduce (finalized by reduce)
    pipeline <id>/tool/<name>     one per handler tool: single step "tool"

Pipeline tools run their own pipeline (or agent) as the call's child run.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from tubeless._callables import maybe_await
from tubeless.agent._dispatch import DEPTH_SLOT, EXECUTION_SLOT
from tubeless.agent._durable import run_durable
from tubeless.agent._durable_checks import DurableAgent
from tubeless.agent._invocation import INVOCATION_SLOT, Invocation, turn_hooks
from tubeless.agent._limits import Limits
from tubeless.agent._prepare import CompiledTool
from tubeless.agent._scope import ROOT_BUDGETS, SCOPE_SLOT, Budget, Scope, invocation_route
from tubeless.agent._sources import REMOTES_ATTRIBUTE, connect_sources
from tubeless.agent._state import freeze_state
from tubeless.agent._tape import TAPE_SLOT, open_tape
from tubeless.agent._tools import TOOL_NAME, Tool, ToolContext, descriptor
from tubeless.agent._trace import agent_trace
from tubeless.agent._turn import TurnInput, TurnSpec, build_turn_pipeline
from tubeless.durable._session import SESSION_SLOT
from tubeless.errors import AgentDefinitionError, PipelineDefinitionError
from tubeless.frozen import FrozenDict, thaw
from tubeless.pipeline import (
    DefinitionIdentity,
    Pipeline,
    StepContext,
    define_pipeline,
    iterate_pipeline,
    step,
)
from tubeless.pipeline._execute import APPROVER_SLOT
from tubeless.pipeline._identity import descriptor_fingerprint, schema_fingerprint
from tubeless.pipeline._step import is_async_callable
from tubeless.schema import Schema

__all__ = ["define_agent"]

_MAX_TOOLS = 4096


def _schema(value: Any, label: str) -> Schema:
    try:
        return Schema.of(value)
    except (TypeError, ValueError) as exc:
        raise AgentDefinitionError(f"{label} is not a schema: {exc}") from exc


def _tool_handler(name: str, handler: Callable[..., Any]) -> Callable[..., Any]:
    """Adapt ``handler(input, ctx)`` to a step handler that also records the call's identity."""

    def context(ctx: StepContext) -> ToolContext:
        execution = ctx.slots.get(EXECUTION_SLOT) or FrozenDict()
        agent_trace(ctx).call(ctx, execution, name)
        return ToolContext(ctx, execution)

    if is_async_callable(handler):
        # Returns the handler's coroutine; the step is ``inline``, so it is awaited on the loop.
        def run_async(inputs: dict[str, Any], ctx: StepContext) -> Any:
            return handler(ctx.options, context(ctx))

        return run_async

    def run_sync(inputs: dict[str, Any], ctx: StepContext) -> Any:
        return handler(ctx.options, context(ctx))

    return run_sync


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
    limits: Limits | Mapping[str, int] | None = None,
    name: str | None = None,
    description: str | None = None,
    implementation_version: str | None = None,
    result_json_schema: Mapping[str, Any] | None = None,
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
    )
    try:
        return _compile(spec, inputs, initial_state, name, description, implementation_version)
    except PipelineDefinitionError as exc:
        raise AgentDefinitionError(f"Agent {id!r}: {exc}") from exc


def _on_limit(limits: Limits) -> dict[str, str]:
    """``onLimit`` when it is not the default, so round-1 identities stay as they were."""
    return {} if limits.on_limit == "fail" else {"onLimit": limits.on_limit}


def _approval(tool: Tool) -> dict[str, str]:
    """``approval`` (``always`` or ``predicate``) for a gated tool; nothing for the default."""
    if tool.approval == "never":
        return {}
    return {"approval": "always" if tool.approval == "always" else "predicate"}


def _metadata(spec: TurnSpec, inputs: Schema) -> dict[str, Any]:
    limits = spec.limits
    return {
        "limits": {
            "maxTurns": limits.max_turns,
            "maxCalls": limits.max_calls,
            "maxDecisions": limits.max_decisions,
            "maxDepth": limits.max_depth,
            "maxConcurrency": limits.max_concurrency,
            **_on_limit(limits),
        },
        "capabilities": [
            {
                "name": c["name"],
                "description": c["description"],
                "inputJsonSchema": thaw(c["input_json_schema"]),
                **_approval(spec.registry[str(c["name"])].tool),
                "replay": spec.registry[c["name"]].tool.replay,
            }
            for c in spec.capabilities
        ],
        "inputSchema": schema_fingerprint(inputs),
        "resultJsonSchema": thaw(spec.result_json_schema),
        "turnPipelineId": f"{spec.id}/turn",
    }


def _snapshot_metadata(spec: TurnSpec) -> dict[str, Any]:
    """The agent metadata as the definition snapshot records it (the original release's shape).

    Descriptors enter as fingerprints, each tool with its pipeline's identity; the structural
    fingerprint reduces those identities to ``{version, structuralFingerprint}``. ``onLimit``
    and tool approvals stay out of it (the original release reads this shape); the
    definition's metadata carries them (``pipeline._identity._metadata``).
    """
    limits = spec.limits
    return {
        "limits": {
            "maxTurns": limits.max_turns,
            "maxCalls": limits.max_calls,
            "maxDecisions": limits.max_decisions,
            "maxDepth": limits.max_depth,
            "maxConcurrency": limits.max_concurrency,
        },
        "capabilities": [
            {
                "name": entry.name,
                "description": entry.tool.description,
                "inputSchemaFingerprint": descriptor_fingerprint(entry.tool.input_json_schema),
                "identity": entry.pipeline.identity.to_wire(),
            }
            for entry in spec.registry.values()
        ],
        "resultSchemaFingerprint": descriptor_fingerprint(spec.result_json_schema),
    }


def _compile(
    spec: TurnSpec,
    inputs: Schema,
    initial_state: Callable[..., Any],
    name: str | None,
    description: str | None,
    implementation_version: str | None,
) -> Pipeline:
    turn = build_turn_pipeline(spec)
    # Tools a server supplies (tubeless.mcp): each invocation connects their sources.
    remote = any(entry.tool.remote is not None for entry in spec.registry.values())
    durable = DurableAgent(spec, implementation_version)

    async def first_turn(step_inputs: dict[str, Any], ctx: StepContext) -> TurnInput:
        invocation: Invocation = ctx.slots[INVOCATION_SLOT]
        resumed = invocation.resumed
        if resumed is None:
            initial = await maybe_await(initial_state(invocation.input))
            state = freeze_state(initial, "Agent initial state")
            return TurnInput(state, 1, 0, 0, invocation)
        state, number, version, calls = resumed
        return TurnInput(state, number, version, calls, invocation)

    loop = iterate_pipeline(
        "agent",
        turn,
        max_iterations=spec.limits.max_turns,
        initial_state=first_turn,
        map_options=lambda state, step_inputs, ctx: state,
        transition=lambda result, state, ctx: result,
        dry_run=None if spec.dry_run is not None else "skip",
    )
    iterate = loop.run
    limits = spec.limits
    built: list[Pipeline] = []  # the agent's pipeline, for the identity a cassette records

    def definition() -> tuple[DefinitionIdentity, dict[str, Any]]:
        return built[0].identity, durable.parts()

    async def run_agent(step_inputs: dict[str, Any], ctx: StepContext) -> Any:
        slots = ctx.slots
        parent: Scope | None = slots.get(SCOPE_SLOT)
        depth = slots.get(DEPTH_SLOT, parent.depth if parent is not None else 0)
        # The route is computed here once: the checkpoint, approvals and the tape all use it.
        route, leaf = invocation_route(slots, parent, spec.id, slots.get(EXECUTION_SLOT) or {})
        scope = Scope(Budget(ctx.run_id, depth, limits), parent, route)
        if parent is None:
            budgets = ROOT_BUDGETS.get()
            if budgets is not None:
                budgets.append(scope.budget)
        tape = open_tape(slots.get(TAPE_SLOT), spec.id, route, leaf, definition, ctx.options)
        invocation = Invocation(
            input=ctx.options,
            run_id=ctx.run_id,
            scope=scope,
            approver=slots.get(APPROVER_SLOT),
            hooks=turn_hooks(tape, None, ctx.tracing),
            trace=agent_trace(ctx),
            tape=tape,
        )
        session = slots.get(SESSION_SLOT)
        try:
            if session is not None:
                down: dict[str, Any] = {TAPE_SLOT: tape, INVOCATION_SLOT: invocation}
                result = await run_durable(
                    durable, session, invocation, ctx.derive(**down), turns, step_inputs
                )
            else:
                down = {SCOPE_SLOT: scope, TAPE_SLOT: tape, INVOCATION_SLOT: invocation}
                result = await turns(step_inputs, ctx.derive(gate=scope, **down))
        except BaseException as exc:
            invocation.hooks.ended(None, exc)
            raise
        invocation.hooks.ended(result, None)
        return result

    async def connected_turns(step_inputs: dict[str, Any], ctx: StepContext) -> Any:
        """The turns with the tools' servers connected: for this invocation only, closed however
        it ends."""
        async with connect_sources(spec.registry, spec.capabilities, ctx) as (live, slots):
            invocation: Invocation = ctx.slots[INVOCATION_SLOT]
            # A checkpointed invocation records what the servers said, or refuses a resume if
            # they now say something else (DESIGN.md §15).
            if live is not None:
                invocation.hooks.connected(live.descriptors)
            # Only this invocation's: a child agent without servers of its own has its own
            # Invocation, so it never sees its parent's tools.
            invocation.live = live
            return await iterate(step_inputs, ctx.derive(**slots))

    # The turns as they run: with servers to connect first, or the iteration itself (one frame
    # fewer between run() and a tool's handler).
    turns = connected_turns if remote else iterate

    if remote:
        # inspect --connect finds an agent's server tools here (plans never look).
        setattr(
            run_agent,
            REMOTES_ATTRIBUTE,
            {
                name: entry.tool.remote
                for name, entry in spec.registry.items()
                if entry.tool.remote is not None
            },
        )
    agent_step = replace(
        loop,
        run=run_agent,
        agent=_metadata(spec, inputs),
        agent_snapshot=_snapshot_metadata(spec),
        capabilities=tuple(entry.pipeline for entry in spec.registry.values()),
    )
    pipeline = define_pipeline(
        id=spec.id,
        name=name,
        description=description,
        implementation_version=implementation_version,
        options_schema=inputs,
        steps=[agent_step],
        targets=["agent"],
        finalize="agent",
    )
    built.append(pipeline)
    durable.pipeline = pipeline
    return pipeline
