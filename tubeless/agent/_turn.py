"""The turn pipeline ``<id>/turn``: decide → calls → reduce, compiled once per agent.

Each step is a module-level function; ``decide`` is three: :func:`ask` (charge a decision and
call the user's ``decide``), then :func:`finish` or :func:`admit` (check the batch against the
limits and prepare its calls). Every turn carries its :class:`Invocation` (``t.invocation``);
the features that hook into the turn (checkpoints, cassettes, the trace) hear its commit points
through ``t.invocation.hooks`` (``_hooks``), the agent's other records go through
``t.invocation.trace``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

from tubeless._callables import is_awaitable
from tubeless.agent._approvals import dispatch_gated, gated_requests
from tubeless.agent._decisions import Continue, DecisionError, Finish, parse_decision
from tubeless.agent._dispatch import dispatch
from tubeless.agent._invocation import Invocation
from tubeless.agent._limits import BUDGET_NAMES, LimitReachedError
from tubeless.agent._prepare import PreparedCall, prepare_calls
from tubeless.agent._scope import Scope
from tubeless.agent._state import freeze_state
from tubeless.agent._turn_types import TurnInput, TurnSpec
from tubeless.agent._usage import NO_USAGE, Usage
from tubeless.frozen import FrozenDict
from tubeless.pipeline import Pipeline, Step, StepContext, StepLogger, define_pipeline
from tubeless.schema import SchemaValidationError

if TYPE_CHECKING:
    from decimal import Decimal

__all__ = ["DecisionContext", "TurnInput", "TurnSpec", "build_turn_pipeline"]


@dataclass(frozen=True, slots=True)
class _Finished:
    result: Any


# Built with the slot's own setter: a frozen dataclass's ``__init__`` is a class call plus an
# ``object.__setattr__`` (about three times the instructions).
_new = object.__new__
_set_finished = _Finished.__dict__["result"].__set__


class DecisionContext:
    """What ``decide`` (and ``dry_run``) receive besides the state; no handler is reachable.

    Attributes:
        turn: The turn number, from 1.
        state_version: Accepted batches so far, from 0.
        capabilities: ``{name, description, input_json_schema}`` per tool, in name order.
        result_json_schema: The descriptor of the finish result.
        input: The agent's validated input.
        signal: The run's cancellation token.
        log: A logger whose lines are recorded in the trace.
        dry_run: Whether decisions are previews.
        execution: ``{agent_run_id, turn, idempotency_key}``.
        final: True for the one decision asked after a limit was reached under
            ``on_limit="finish"``; only a finish decision is accepted then. A built-in adapter
            also sets it when a budget could not cover this request and one more.
        on_limit: The agent's limit policy (``fail``, ``finish`` or ``wait``).
        remaining: ``{turns, decisions, calls}`` still available (the tightest budget of the
            delegation chain; 0 where exhausted).
        usage: Token and cost budgets: ``reserve`` before a model request, ``charge`` after
            it, ``remaining`` (docs/budgets.md). The built-in providers use it.
    """

    __slots__ = (
        "_agent_run_id",
        "_key_base",
        "_max_turns",
        "_scope",
        "_spent",
        "_step",
        "capabilities",
        "dry_run",
        "final",
        "input",
        "result_json_schema",
        "signal",
        "state_version",
        "turn",
    )

    def __init__(
        self,
        turn: int,
        state_version: int,
        capabilities: tuple[FrozenDict, ...],
        result_json_schema: FrozenDict,
        step: StepContext,
        invocation: Invocation,
        max_turns: int = 0,
        final: bool = False,
    ) -> None:
        self.final = final
        # Not the invocation itself: nothing reachable from here may lead to a handler (its
        # decision source, its hooks' registry).
        self._agent_run_id = invocation.run_id
        self._key_base = invocation.idempotency_base
        self._scope = invocation.scope
        self._max_turns = max_turns
        self.turn = turn
        self.state_version = state_version
        self.capabilities = capabilities
        self.result_json_schema = result_json_schema
        self.input = invocation.input
        self.signal = step.signal
        self.dry_run = step.dry_run
        self._step = step
        self._spent: list[Any] | None = None
        """``[input_tokens, output_tokens, cost_usd]`` of this decision's model requests."""

    @property
    def log(self) -> StepLogger:
        """A logger whose lines are recorded in the trace."""
        return self._step.log

    @property
    def execution(self) -> FrozenDict:
        """``{agent_run_id, turn, idempotency_key}`` (the key is stable across resumes)."""
        return FrozenDict._trusted(
            {
                "agent_run_id": self._agent_run_id,
                "turn": self.turn,
                "idempotency_key": f"{self._key_base}/{self.turn}",
            }
        )

    @property
    def remaining(self) -> FrozenDict:
        """``{turns, decisions, calls}`` still available; 0 where exhausted."""
        return remaining(self._scope, self._max_turns, self.turn)

    @property
    def on_limit(self) -> str:
        """The agent's limit policy: ``fail``, ``finish`` or ``wait``."""
        return "fail" if self._scope is None else self._scope.budget.limits.on_limit

    @property
    def usage(self) -> Usage:
        """The token and cost budgets of the delegation chain (``reserve``, ``charge``)."""
        return NO_USAGE if self._scope is None else self._scope.usage

    def report_model_request(
        self,
        *,
        provider: str,
        model: str,
        duration_ms: float,
        input_tokens: int | None = None,
        output_tokens: int | None = None,
        finish_reasons: Sequence[str] = (),
        response_model: str | None = None,
        error_type: str | None = None,
        cost_usd: Decimal | None = None,
    ) -> None:
        """Record one model request in the trace (the adapters call it for every request).

        A ``step.attempted`` record on ``decide`` with GenAI attributes (``gen_ai.provider.name``,
        ``gen_ai.request.model``, ``gen_ai.usage.input_tokens``, ...; ``error.type`` for a failed
        request): names, counts and codes, never a prompt or a response. The OpenTelemetry sink
        makes it a ``chat <model>`` span. Ignored when nothing records the run. The counts and
        ``cost_usd`` also add up into the decision's usage summary (``agent.usage.*``).
        """
        if not self._step.tracing:
            return
        if input_tokens is not None or output_tokens is not None or cost_usd is not None:
            spent = self._spent
            if spent is None:
                spent = self._spent = [0, 0, None]
            spent[0] += input_tokens or 0
            spent[1] += output_tokens or 0
            if cost_usd is not None:
                spent[2] = cost_usd if spent[2] is None else spent[2] + cost_usd
        # Imported here: the span vocabulary is for traced model runs, not for every import.
        from tubeless.tracing._spi import model_request_attributes

        attributes = model_request_attributes(
            provider=provider,
            model=model,
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            finish_reasons=finish_reasons,
            response_model=response_model,
            error_type=error_type,
        )
        self._step.report_attempt(1, attributes, duration_ms=duration_ms)


def remaining(scope: Scope | None, max_turns: int, turn: int) -> FrozenDict:
    """Turns after ``turn``, and the tightest decision and call budgets of ``scope``'s chain."""
    chain = scope.chain if scope is not None else ()
    decisions = min((b.limits.max_decisions - b.decisions for b in chain), default=0)
    calls = min((b.limits.max_calls - b.calls for b in chain), default=0)
    return FrozenDict._trusted(
        {
            "turns": max(0, max_turns - turn),
            "decisions": max(0, decisions),
            "calls": max(0, calls),
        }
    )


def build_turn_pipeline(spec: TurnSpec) -> Pipeline:
    """Compile the turn pipeline of ``spec``."""
    steps = [
        Step(id="decide", run=partial(decide, spec), orchestration=True, name="Decide"),
        Step(
            id="calls",
            run=partial(calls, spec=spec) if spec.approvals else calls,
            depends_on=("decide",),
            orchestration=True,
            name="Calls",
        ),
        Step(
            id="reduce",
            run=partial(reduce, spec),
            depends_on=("decide", "calls"),
            orchestration=True,
            name="Reduce",
        ),
    ]
    return define_pipeline(id=f"{spec.id}/turn", name="Turn", steps=steps, finalize="reduce")


# -- step 1: decide ----------------------------------------------------------------------------
async def decide(
    spec: TurnSpec, inputs: dict[str, Any], ctx: StepContext
) -> _Finished | tuple[PreparedCall, ...]:
    """Ask for a decision; a finish ends the loop, a batch of calls is admitted."""
    t: TurnInput = ctx.options
    decision: Continue | Finish | None = t.invocation.hooks.resume_decision(t)
    try:
        if decision is None:
            source = "dry_run" if ctx.dry_run and spec.dry_run is not None else "decide"
            decision = parse_decision(await ask(spec, t, ctx), source=source)
        if isinstance(decision, Finish):
            return finish(spec, t, ctx, decision)
        return admit(spec, t, ctx, decision)
    except LimitReachedError as exc:
        from tubeless.agent._budget_wait import wait, waits  # only when a limit is reached

        if exc.limit in BUDGET_NAMES and waits(t.invocation.scope, exc):
            raise wait(t, exc) from None
        if spec.limits.on_limit != "finish" or exc.limit == "max_depth":
            raise
        return await final(spec, t, ctx, exc)


async def final(
    spec: TurnSpec, t: TurnInput, ctx: StepContext, reached: LimitReachedError
) -> _Finished:
    """``on_limit="finish"``: one more decision, uncharged, with ``ctx.final``; it must finish."""
    t.invocation.trace.limit_reached(ctx, t, reached.limit)
    decision = parse_decision(await ask(spec, t, ctx, final=True))
    if not isinstance(decision, Finish):
        raise DecisionError(
            f"Agent {reached.limit}={reached.bound} was reached: the final decision "
            "(ctx.final) must finish"
        ) from None
    return finish(spec, t, ctx, decision)


async def ask(spec: TurnSpec, t: TurnInput, ctx: StepContext, *, final: bool = False) -> Any:
    """Charge one decision (not the ``final`` one), then call ``decide`` (``dry_run`` in dry
    runs, a replaying cassette's recording) under a permit."""
    ctx.signal.raise_if_cancelled()
    invocation = t.invocation
    scope = invocation.scope
    if not final:
        scope.reserve("max_decisions", 1)
    invocation.hooks.reserved(t)  # the final decision is not charged, but is still a decision
    # The tape says where decisions come from (a replaying cassette's recording). Not kept on
    # the invocation: nothing the decision context reaches may lead to ``decide``'s globals.
    source = invocation.tape.source(
        spec.dry_run if ctx.dry_run and spec.dry_run is not None else spec.decide
    )
    live = invocation.live
    decision_ctx = DecisionContext(
        t.turn,
        t.state_version,
        spec.capabilities if live is None else live.capabilities,
        spec.result_json_schema,
        ctx,
        invocation,
        spec.limits.max_turns,
        final,
    )
    if not scope.try_enter(ctx.signal):
        await scope.enter(ctx.signal)
    try:
        raw = source(t.state, decision_ctx)
        if is_awaitable(raw):
            raw = await raw
    finally:
        scope.exit()
        if decision_ctx._spent is not None:  # only traced decisions that asked a model
            invocation.trace.usage(ctx, t, decision_ctx._spent)
    return raw


def finish(spec: TurnSpec, t: TurnInput, ctx: StepContext, decision: Finish) -> _Finished:
    """The finish result, once the result schema accepted it."""
    t.invocation.trace.decided(ctx, t, "finish", 0)
    try:
        finished: _Finished = _new(_Finished)
        _set_finished(finished, spec.result_schema.validate(decision.result))
    except SchemaValidationError as exc:
        raise DecisionError(f"Agent finish result was rejected: {exc}", exc.issues) from None
    t.invocation.hooks.decided(t, decision, None)
    return finished


def admit(
    spec: TurnSpec, t: TurnInput, ctx: StepContext, decision: Continue
) -> tuple[PreparedCall, ...]:
    """The batch's calls, prepared, once the turn and call limits allow them."""
    invocation = t.invocation
    count = len(decision.calls)
    invocation.trace.decided(ctx, t, "continue", count)
    if t.turn >= spec.limits.max_turns:
        raise LimitReachedError(
            limit="max_turns",
            bound=spec.limits.max_turns,
            consumed=t.turn,
            requested=1,
            scope=invocation.run_id,
            calls=count,
        )
    hooks = invocation.hooks
    if not hooks.readmitted(t):
        invocation.scope.check("max_calls", count)
    live = invocation.live
    registry = spec.registry if live is None else live.registry
    prepared = prepare_calls(decision.calls, registry, scope=invocation.scope, dry_run=ctx.dry_run)
    hooks.decided(t, decision, prepared)
    return prepared


# -- step 2: calls -----------------------------------------------------------------------------
def calls(inputs: dict[str, Any], ctx: StepContext, spec: TurnSpec | None = None) -> Any:
    """Charge the batch to the call budgets and run it: its outcomes, or an awaitable of them.

    ``spec`` is given for an agent with tools that may need approval: after the charge every
    approval predicate of the batch runs, and a batch with gated calls goes to the approver.
    """
    decided = inputs["decide"]
    if isinstance(decided, _Finished):
        return ()
    t: TurnInput = ctx.options
    invocation = t.invocation
    hooks = invocation.hooks
    # Charged once: a resumed batch was charged before the run stopped.
    if not hooks.readmitted(t):
        invocation.scope.reserve("max_calls", len(decided))
    hooks.admitted(ctx, t, len(decided))
    if spec is not None:
        live = invocation.live
        requests = gated_requests(
            decided,
            spec.registry if live is None else live.registry,
            ctx,
            key=invocation.approval_key,
            route=invocation.route,
            agent_run_id=invocation.run_id,
            turn=t.turn,
        )
        if requests:
            return dispatch_gated(decided, requests, ctx, t)
    return dispatch(decided, ctx, t)


# -- step 3: reduce ----------------------------------------------------------------------------
def reduce(spec: TurnSpec, inputs: dict[str, Any], ctx: StepContext) -> Any:
    """The transition: finish, or the next turn's input with the reduced state committed.

    Synchronous unless the user's reducer is (then an awaitable of the transition).
    """
    decided = inputs["decide"]
    if isinstance(decided, _Finished):
        return {"kind": "finish", "result": decided.result}
    t: TurnInput = ctx.options
    outcomes = inputs["calls"]
    if spec.reduce is None:
        return _next(t, t.state, len(outcomes), ctx)
    reduced = spec.reduce(t.state, outcomes)
    if is_awaitable(reduced):
        return _reduce_async(reduced, t, len(outcomes), ctx)
    return _next(t, freeze_state(reduced), len(outcomes), ctx)


async def _reduce_async(
    reduced: Awaitable[Any], t: TurnInput, count: int, ctx: StepContext
) -> dict[str, Any]:
    return _next(t, freeze_state(await reduced), count, ctx)


def _next(t: TurnInput, state: Any, count: int, ctx: StepContext) -> dict[str, Any]:
    """The transition to the next turn, with ``state`` committed."""
    invocation = t.invocation
    following = TurnInput(state, t.turn + 1, t.state_version + 1, t.calls + count, invocation)
    invocation.hooks.reduced(ctx, t, following)
    return {"kind": "next", "state": following}
