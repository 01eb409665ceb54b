"""``AgentStep``: the one step of an agent's pipeline, and how one invocation of it runs.

``define_agent`` (``_agent``) checks a definition and hands its :class:`TurnSpec` here::

    pipeline <id>                 single step "agent" (finalized by it); its run is the AgentStep
      step "agent" = iterate_pipeline(<id>/turn, max_iterations=max_turns)
    pipeline <id>/turn            decide → calls → reduce (``_turn``, finalized by reduce)

An invocation (:meth:`AgentStep.__call__`) computes its route and budget scope once, opens its
cassette tape, makes its :class:`Invocation` with the hooks the run needs (``turn_hooks``) and
runs the turns: through the checkpoint journal (``_durable.run_durable``) when the run has a
checkpoint session, and with the tools' servers connected first when some tool is sourced
(``connect_sources``). The step's data (spec, turn pipeline, limits, sourced tools) are
attributes, so ``inspect --connect`` finds the servers without running anything.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import replace
from typing import Any

from tubeless._callables import is_awaitable
from tubeless.agent._dispatch import DEPTH_SLOT, EXECUTION_SLOT
from tubeless.agent._durable import run_durable
from tubeless.agent._durable_checks import DurableAgent
from tubeless.agent._invocation import INVOCATION_SLOT, Invocation, turn_hooks
from tubeless.agent._limits import Limits, usd_text
from tubeless.agent._scope import ROOT_BUDGETS, SCOPE_SLOT, Budget, Scope, invocation_route
from tubeless.agent._sources import Remote, connect_sources
from tubeless.agent._state import freeze_state
from tubeless.agent._tape import TAPE_SLOT, open_tape
from tubeless.agent._trace import agent_trace
from tubeless.agent._turn import TurnInput, TurnSpec, build_turn_pipeline
from tubeless.durable._spi import SESSION_SLOT
from tubeless.frozen import thaw
from tubeless.pipeline import (
    DefinitionIdentity,
    Pipeline,
    Step,
    StepContext,
    define_pipeline,
    iterate_pipeline,
)
from tubeless.pipeline._spi import APPROVER_SLOT, descriptor_fingerprint, schema_fingerprint
from tubeless.schema import Schema

__all__ = ["AgentStep", "remotes"]


class AgentStep:
    """An agent's step: what it runs by, and (called as the step's ``run``) one invocation.

    Attributes:
        spec: What the turn steps need (decide, reduce, tools, result schema, limits).
        turn: The turn pipeline ``<id>/turn``.
        limits: The agent's limits (``spec.limits``).
        remotes: The sourced tools (``tubeless.mcp``) by registered name; empty for none.
        pipeline: The agent's pipeline, whose single step this is.
        durable: What a checkpoint of this definition is compared with.
    """

    __slots__ = (
        "_initial_state",
        "_iterate",
        "_turns",
        "durable",
        "limits",
        "pipeline",
        "remotes",
        "spec",
        "turn",
    )

    def __init__(
        self,
        spec: TurnSpec,
        inputs: Schema,
        initial_state: Callable[..., Any],
        *,
        name: str | None,
        description: str | None,
        implementation_version: str | None,
    ) -> None:
        self.spec = spec
        self.limits = spec.limits
        self.turn = build_turn_pipeline(spec)
        self.remotes: Mapping[str, Remote] = {
            name: entry.tool.remote
            for name, entry in spec.registry.items()
            if entry.tool.remote is not None
        }
        self.durable = DurableAgent(spec, implementation_version)
        self._initial_state = initial_state
        loop = iterate_pipeline(
            "agent",
            self.turn,
            max_iterations=spec.limits.max_turns,
            initial_state=self._first_turn,
            map_options=_turn_input,
            transition=_transition,
            dry_run=None if spec.dry_run is not None else "skip",
        )
        self._iterate = loop.run
        # The turns as they run: with servers to connect first, or the iteration itself (one
        # frame fewer between run() and a tool's handler).
        self._turns = self._connected_turns if self.remotes else self._iterate
        self.pipeline: Pipeline = define_pipeline(
            id=spec.id,
            name=name,
            description=description,
            implementation_version=implementation_version,
            options_schema=inputs,
            steps=[
                replace(
                    loop,
                    run=self,
                    agent=_metadata(spec, inputs),
                    agent_snapshot=_snapshot_metadata(spec),
                    capabilities=tuple(entry.pipeline for entry in spec.registry.values()),
                )
            ],
            targets=["agent"],
            finalize="agent",
        )
        self.durable.pipeline = self.pipeline

    def _definition(self) -> tuple[DefinitionIdentity, dict[str, Any]]:
        """The agent's identity and parts, which a cassette records."""
        return self.pipeline.identity, self.durable.parts()

    async def __call__(self, step_inputs: dict[str, Any], ctx: StepContext) -> Any:
        """One invocation of the agent: its result (the finish decision's, validated)."""
        slots = ctx.slots
        spec = self.spec
        parent: Scope | None = slots.get(SCOPE_SLOT)
        depth = slots.get(DEPTH_SLOT, parent.depth if parent is not None else 0)
        # The route is computed here once: the checkpoint, approvals and the tape all use it.
        route, leaf = invocation_route(slots, parent, spec.id, slots.get(EXECUTION_SLOT) or {})
        scope = Scope(Budget(ctx.run_id, depth, self.limits), parent, route, spec.pricing)
        if parent is None:
            budgets = ROOT_BUDGETS.get()
            if budgets is not None:
                budgets.append(scope.budget)
        tape = open_tape(slots.get(TAPE_SLOT), spec.id, route, leaf, self._definition, ctx.options)
        # Positional: a class called with keywords builds a dict for ``__init__``.
        invocation = Invocation(
            ctx.options,
            ctx.run_id,
            scope,
            slots.get(APPROVER_SLOT),
            turn_hooks(tape, None, ctx.tracing),
            agent_trace(ctx),
            tape,
        )
        session = slots.get(SESSION_SLOT)
        try:
            if session is not None:
                down: dict[str, Any] = {TAPE_SLOT: tape, INVOCATION_SLOT: invocation}
                result = await run_durable(
                    self.durable, session, invocation, ctx.derive(**down), self._turns, step_inputs
                )
            else:
                down = {SCOPE_SLOT: scope, TAPE_SLOT: tape, INVOCATION_SLOT: invocation}
                result = await self._turns(step_inputs, ctx.derive(gate=scope, **down))
        except BaseException as exc:
            invocation.hooks.ended(None, exc)
            raise
        invocation.hooks.ended(result, None)
        return result

    def _first_turn(
        self, step_inputs: dict[str, Any], ctx: StepContext
    ) -> TurnInput | Awaitable[TurnInput]:
        """The first turn's input: the one a checkpoint resumes from, else the initial state.

        An awaitable of it only when ``initial_state`` is async (the iteration awaits what it
        must): a sync initializer costs no coroutine."""
        invocation: Invocation = ctx.slots[INVOCATION_SLOT]
        if invocation.resumed is not None:
            return invocation.resumed
        initial = self._initial_state(invocation.input)
        if is_awaitable(initial):
            return _first_turn_of(initial, invocation)
        return TurnInput(freeze_state(initial, "Agent initial state"), 1, 0, 0, invocation)

    async def _connected_turns(self, step_inputs: dict[str, Any], ctx: StepContext) -> Any:
        """The turns with the tools' servers connected: for this invocation only, closed however
        it ends."""
        spec = self.spec
        async with connect_sources(spec.registry, spec.capabilities, ctx) as (live, slots):
            invocation: Invocation = ctx.slots[INVOCATION_SLOT]
            # A checkpointed invocation records what the servers said, or refuses a resume if
            # they now say something else (DESIGN.md §15).
            if live is not None:
                invocation.hooks.connected(live.descriptors)
            # Only this invocation's: a child agent without servers of its own has its own
            # Invocation, so it never sees its parent's tools.
            invocation.live = live
            return await self._iterate(step_inputs, ctx.derive(**slots))


def remotes(step: Step) -> Mapping[str, Remote]:
    """The sourced tools of an agent step, by registered name (empty for any other step)."""
    agent = step.run
    return agent.remotes if isinstance(agent, AgentStep) else {}


async def _first_turn_of(initial: Awaitable[Any], invocation: Invocation) -> TurnInput:
    """The first turn's input once an async ``initial_state`` returned."""
    state = freeze_state(await initial, "Agent initial state")
    return TurnInput(state, 1, 0, 0, invocation)


def _turn_input(state: TurnInput, step_inputs: dict[str, Any], ctx: StepContext) -> TurnInput:
    """Each turn's options: the iteration state (the previous turn's transition)."""
    return state


def _transition(result: Any, state: TurnInput, ctx: StepContext) -> Any:
    """The loop's transition: the turn's own (``reduce`` returns it)."""
    return result


# -- what plans, inspect and identities show ----------------------------------------------------
def _on_limit(limits: Limits) -> dict[str, str]:
    """``onLimit`` when it is not the default, so round-1 identities stay as they were."""
    return {} if limits.on_limit == "fail" else {"onLimit": limits.on_limit}


def _approval(approval: Any) -> dict[str, str]:
    """``approval`` (``always`` or ``predicate``) for a gated tool; nothing for the default."""
    if approval == "never":
        return {}
    return {"approval": "always" if approval == "always" else "predicate"}


def _limits(limits: Limits) -> dict[str, int | str]:
    return {
        "maxTurns": limits.max_turns,
        "maxCalls": limits.max_calls,
        "maxDecisions": limits.max_decisions,
        "maxDepth": limits.max_depth,
        "maxConcurrency": limits.max_concurrency,
    }


def _budgets(limits: Limits) -> dict[str, int | str]:
    """The token and cost budgets that are set (camelCase; a cost as its decimal string), so
    that identities without budgets stay as they were and a budget changes the identity."""
    if not limits.budgeted:
        return {}
    return {
        _CAMEL[name]: value if isinstance(value, int) else usd_text(value)
        for name, value in limits.budgets().items()
    }


_CAMEL = {
    "max_input_tokens": "maxInputTokens",
    "max_output_tokens": "maxOutputTokens",
    "max_total_tokens": "maxTotalTokens",
    "max_cost_usd": "maxCostUsd",
}


def _metadata(spec: TurnSpec, inputs: Schema) -> dict[str, Any]:
    return {
        "limits": {**_limits(spec.limits), **_budgets(spec.limits), **_on_limit(spec.limits)},
        "capabilities": [
            {
                "name": c["name"],
                "description": c["description"],
                "inputJsonSchema": thaw(c["input_json_schema"]),
                **_approval(spec.registry[str(c["name"])].tool.approval),
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
    return {
        # Budgets only when set (round 3): an unbudgeted agent's snapshot keeps its old shape.
        "limits": {**_limits(spec.limits), **_budgets(spec.limits)},
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
