"""The agent history of a projected run: turns, calls and how the agent ended (UPSTREAM §4.12).

An agent run is an ordinary run whose plan has an agent step. Its turns are the child runs
iterated by that step (``iteration.runId`` = the agent run, ``iteration.stepId`` = the step),
and each turn's calls are the turn's child runs that carry an ``itemKey`` (the call id), then the
calls its ``calls`` step attributed that never started. What the records do not say stays
``None`` (or ``"unknown"`` for a call's status): tool aliases come only from the ``agent.tool``
attribute, never from pipeline names. :func:`agent_history` reads the fold's
:class:`~tubeless.tracing.fold.Run` objects; :mod:`tubeless.tracing.projection` re-exports the
public node classes.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields, is_dataclass
from typing import TYPE_CHECKING, Any, Final, Literal

from tubeless.errors import AGENT_LIMIT_REACHED
from tubeless.frozen import FrozenDict
from tubeless.tracing._call_progress import CallProgress, call_progress
from tubeless.tracing.runs import TURN_STEPS, Call, Run, RunStatus, as_int, as_str

if TYPE_CHECKING:
    from tubeless.tracing.projection import RunTree, StepNode

__all__ = [
    "AgentHistory",
    "CallNode",
    "CallStatus",
    "Decision",
    "Termination",
    "TurnNode",
    "agent_history",
    "plain_data",
]

Termination = Literal[
    "running", "finish", "completed", "limit", "cancelled", "failed", "skipped", "waiting"
]
CallStatus = Literal[
    "completed", "failed", "cancelled", "running", "unknown", "waiting", "denied", "interrupted"
]
Decision = Literal["continue", "finish"]

_AGENT_STEP: Final = "agent"
# Writers cut cause chains at 16 levels; a reader of foreign files still must not loop forever.
_MAX_CAUSE_WALK: Final = 64
_CAMEL = re.compile(r"(?<!^)(?=[A-Z])")


def plain_data(node: Any) -> dict[str, Any]:
    """A frozen node as JSON-ready data, field by field: tuples become lists, mappings dicts."""
    return {f.name: _plain(getattr(node, f.name)) for f in fields(node)}


def _plain(value: Any) -> Any:
    if is_dataclass(value):
        return plain_data(value)
    if isinstance(value, tuple):
        return [_plain(item) for item in value]
    return dict(value) if isinstance(value, Mapping) else value


@dataclass(frozen=True, kw_only=True, slots=True)
class CallNode:
    """One dispatched (or recorded) tool call of a turn."""

    call_id: str
    """The decision's call id (the call run's ``itemKey``)."""
    tool: str | None
    """The registry alias from ``agent.tool``; ``None`` when nothing recorded it."""
    run_id: str | None
    """The call's run, ``None`` for a call recorded but never started."""
    pipeline_id: str | None
    """The pipeline the call ran."""
    status: CallStatus
    """The call run's status (``waiting`` for a delegated agent that stopped for approval);
    without a run, what the turn recorded (``waiting``, ``denied``, ``interrupted``, or
    ``completed``/``failed`` for a reconciled or restored outcome), else ``"unknown"``."""
    duration_ms: float | None
    """The call run's duration, when it completed."""
    error_code: str | None
    """The call run's first error code (``TUBELESS_STEP_FAILED`` for a handler ``ToolError``)."""
    source_code: str | None
    """The original code behind ``error_code`` (the ``ToolError`` code, e.g. ``NOT_FOUND``)."""
    parent_attempt_id: str | None
    """The turn's ``calls`` attempt that dispatched the call, from ``agent.parentAttemptId``."""
    child_agent_run_ids: tuple[str, ...]
    """Agent runs started by this call (a subagent behind a pipeline tool); their trees hang
    under the call run in ``RunTree.children``."""
    marked: str | None = None
    """``agent.callStatus`` as recorded: ``waiting``, ``denied``, ``interrupted``,
    ``reconciled``, ``rerun`` (ran again after a resume) or ``restored`` (its outcome was saved
    before the run stopped); ``None`` for a call that simply ran."""
    reason_given: bool = False
    """A denied call's denial came with a reason (the reason stays in the checkpoint)."""
    progress: CallProgress | None = None
    """The call run's last progress report (the latest while it runs); ``None`` when it
    reported none (or never started)."""

    def to_dict(self) -> dict[str, Any]:
        """The call as snake_case JSON-ready data."""
        return plain_data(self)


@dataclass(frozen=True, kw_only=True, slots=True)
class TurnNode:
    """One turn (one iteration of the agent step)."""

    run_id: str
    """The turn run."""
    index: int | None
    """The turn number as the agent counts (``agent.turn``: a resumed agent's first turn is the
    turn it resumed at), else ``iteration.index``."""
    status: RunStatus
    """The turn run's status."""
    decision: Decision | None
    """What ``decide`` returned, from ``agent.decision``."""
    call_count: int | None
    """Calls in the decision (0 for finish)."""
    calls_admitted: int | None
    """Calls the agent had admitted up to and including this turn."""
    state_version: int | None
    """The state version the turn started from."""
    next_state_version: int | None
    """The state version after ``reduce``; ``None`` when the turn did not reduce."""
    error_code: str | None
    """The turn run's first error code."""
    calls: tuple[CallNode, ...]
    """The turn's calls, in start order."""

    def to_dict(self) -> dict[str, Any]:
        """The turn as snake_case JSON-ready data."""
        return plain_data(self)


@dataclass(frozen=True, kw_only=True, slots=True)
class AgentHistory:
    """How an agent run went, turn by turn."""

    step_id: str
    """The agent step of the run's plan."""
    termination: Termination
    """``running`` (no ``pipeline.completed`` yet), ``finish`` (completed by a finishing turn),
    ``completed`` (completed without a recorded finish), ``limit`` (a limit stopped it),
    ``cancelled``, ``failed``, or ``skipped`` (the agent step did not run)."""
    limits: Mapping[str, int] | None
    """The agent's limits (``max_turns``, ...) from the definition snapshot, when recorded."""
    capabilities: tuple[str, ...] | None
    """The registered tool names from the definition snapshot, when recorded."""
    turns: tuple[TurnNode, ...]
    """The turns, by index."""
    resumed_turn: int | None = None
    """The turn a resumed checkpointed run went on from (``agent.resumedTurn``)."""
    checkpoint_key: str | None = None
    """The checkpoint key of a resumed run (``agent.checkpointKey``)."""
    usage: Mapping[str, Any] | None = None
    """``{input_tokens, output_tokens, cost_usd}`` of the agent's own model requests, summed
    over its turns' ``agent.usage.*`` (``cost_usd`` ``None`` unless priced); ``None`` when no
    turn recorded any."""

    def to_dict(self) -> dict[str, Any]:
        """The history as snake_case JSON-ready data."""
        return plain_data(self)


def agent_history(
    run: Run,
    steps: Sequence[StepNode],
    kids: Mapping[Run, Sequence[Run]],
    trees: Mapping[Run, RunTree],
) -> AgentHistory | None:
    """The agent history of ``run`` about to be projected, or ``None`` if it is no agent.

    ``kids`` are the child runs by parent, ordered by start; ``trees`` must already hold the
    projected tree of every run below ``run``.
    """
    found = _agent_step(run, kids.get(run, ()))
    if found is None:
        return None
    step_id, meta = found
    turns = _turns(run, kids.get(run, ()), step_id)
    nodes = tuple(_turn(turn, kids.get(turn, ()), trees) for turn in turns)
    agent_step = next((s for s in steps if s.id == step_id), None)
    limited = any(_mentions_limit(e) for one in (run, *turns) for e in one.errors)
    status: RunStatus = "waiting" if run.waiting else run.status
    return AgentHistory(
        step_id=step_id,
        termination=_termination(status, agent_step, nodes, limited=limited),
        limits=_limits(meta),
        capabilities=_capabilities(meta),
        turns=nodes,
        resumed_turn=as_int(run.attribute(step_id, "agent.resumedTurn")),
        checkpoint_key=as_str(run.attribute(step_id, "agent.checkpointKey")),
        usage=_usage(turns),
    )


def _usage(turns: Sequence[Run]) -> Mapping[str, Any] | None:
    """The agent's model usage summed over its turns' decide summaries."""
    found = False
    tokens_in = tokens_out = 0
    cost: float | None = None
    for turn in turns:
        spent_in = as_int(turn.attribute("decide", "agent.usage.inputTokens"))
        spent_out = as_int(turn.attribute("decide", "agent.usage.outputTokens"))
        if spent_in is None and spent_out is None:
            continue
        found = True
        tokens_in += spent_in or 0
        tokens_out += spent_out or 0
        priced = turn.attribute("decide", "agent.usage.costUsd")
        if isinstance(priced, int | float) and not isinstance(priced, bool):
            cost = (cost or 0.0) + float(priced)
    if not found:
        return None
    return FrozenDict({"input_tokens": tokens_in, "output_tokens": tokens_out, "cost_usd": cost})


# -- detection --------------------------------------------------------------------------------
def _agent_step(run: Run, kids: Sequence[Run]) -> tuple[str, Mapping[str, Any] | None] | None:
    """The agent step id and its snapshot metadata (``None`` when no snapshot says it)."""
    if run.agents is not None:  # a definition snapshot names the agent steps
        return next(((i, meta) for i, meta in run.agents.items() if meta is not None), None)
    # Child runs carry no snapshot: an agent shows by its iterated decide → calls → reduce.
    step = run.steps.get(_AGENT_STEP)
    if step is not None and step.iterates == TURN_STEPS:
        return _AGENT_STEP, None
    for kid in kids:
        if _is_turn_of(kid, run.run_id, _AGENT_STEP) and (
            set(TURN_STEPS) <= kid.steps.keys()
            or kid.attribute("decide", "agent.runId") == run.run_id
        ):
            return _AGENT_STEP, None
    return None


def _is_turn_of(kid: Run, run_id: str, step_id: str) -> bool:
    return kid.iteration_run_id == run_id and kid.iteration_step_id == step_id


def _turns(run: Run, kids: Sequence[Run], step_id: str) -> list[Run]:
    turns = [kid for kid in kids if _is_turn_of(kid, run.run_id, step_id)]
    # Kids are in start order already; a stable sort by index keeps that order for ties.
    turns.sort(key=lambda kid: (kid.index is None, kid.index or 0))
    return turns


# -- turns and calls --------------------------------------------------------------------------
def _turn(turn: Run, kids: Sequence[Run], trees: Mapping[Run, RunTree]) -> TurnNode:
    return TurnNode(
        run_id=turn.run_id,
        index=turn.turn,
        status="waiting" if turn.waiting else turn.status,
        decision=turn.decision,
        call_count=turn.call_count,
        calls_admitted=turn.calls_admitted,
        state_version=turn.state_version,
        next_state_version=turn.next_state_version,
        error_code=None if turn.error is None else as_str(turn.error.get("code")),
        calls=_calls(turn, kids, trees),
    )


def _calls(turn: Run, kids: Sequence[Run], trees: Mapping[Run, RunTree]) -> tuple[CallNode, ...]:
    # The call runs, in start order; then the calls the turn attributed that never started.
    nodes: list[CallNode] = []
    seen: set[str] = set()
    for kid in kids:
        call_id = kid.item_key
        if call_id is None:
            continue
        seen.add(call_id)
        attributed = turn.calls.get(call_id) or Call(call_id, 0)
        error = kid.error or {}
        nodes.append(
            CallNode(
                call_id=call_id,
                tool=kid.tool or attributed.attributed_tool,
                run_id=kid.run_id,
                pipeline_id=kid.pipeline_id or "",
                status="waiting" if kid.waiting else kid.status,
                duration_ms=kid.duration_ms,
                error_code=as_str(error.get("code")),
                source_code=as_str(error.get("sourceCode")),
                parent_attempt_id=kid.parent_attempt_id or attributed.parent_attempt_id,
                child_agent_run_ids=_child_agents(trees[kid]),
                marked=attributed.marked,
                progress=call_progress(kid.progress),
            )
        )
    nodes.extend(
        CallNode(
            call_id=call.call_id,
            tool=call.attributed_tool,
            run_id=None,
            pipeline_id=None,
            status=_settled(call),
            duration_ms=None,
            error_code=call.error_code,
            source_code=None,
            parent_attempt_id=call.parent_attempt_id,
            child_agent_run_ids=(),
            marked=call.marked,
            reason_given=call.reason_given,
        )
        for call in turn.calls.values()
        if call.call_id not in seen
    )
    return tuple(nodes)


def _settled(call: Call) -> CallStatus:
    settled = call.settled
    if settled in ("waiting", "denied", "interrupted", "completed", "failed"):
        return settled  # type: ignore[return-value]  # narrowed by the test above
    return "unknown"


def _child_agents(call: RunTree) -> tuple[str, ...]:
    """The nearest agent runs at or below the call run (not the agents nested inside them)."""
    found: list[str] = []
    stack = [call]
    while stack:
        tree = stack.pop()
        if tree.agent is not None:
            found.append(tree.run_id)
            continue
        stack.extend(reversed(tree.children))
    return tuple(found)


# -- termination ------------------------------------------------------------------------------
def _termination(
    status: RunStatus,
    agent_step: StepNode | None,
    turns: Sequence[TurnNode],
    *,
    limited: bool,
) -> Termination:
    if status == "running":
        return "running"
    if agent_step is not None and agent_step.status == "skipped":
        return "skipped"
    if limited:
        return "limit"
    if status == "cancelled":
        return "cancelled"
    if status == "waiting":
        return "waiting"
    if status == "failed":
        return "failed"
    if turns and turns[-1].decision == "finish" and turns[-1].status == "completed":
        return "finish"
    return "completed"


def _mentions_limit(error: Mapping[str, Any]) -> bool:
    """Whether a limit code appears anywhere in the error's cause chain or fan-out summary."""
    pending: list[Any] = [error]
    walked = 0
    while pending and walked < _MAX_CAUSE_WALK:
        node = pending.pop()
        walked += 1
        if not isinstance(node, Mapping):
            continue
        if AGENT_LIMIT_REACHED in (node.get("code"), node.get("sourceCode")):
            return True
        pending.append(node.get("cause"))
        fan_out = node.get("fanOut")
        if isinstance(fan_out, Mapping) and isinstance(fan_out.get("failures"), list):
            pending.extend(f.get("error") for f in fan_out["failures"] if isinstance(f, Mapping))
    return False


# -- snapshot metadata ------------------------------------------------------------------------
def _limits(meta: Mapping[str, Any] | None) -> Mapping[str, int] | None:
    raw = None if meta is None else meta.get("limits")
    if not isinstance(raw, Mapping):
        return None
    return FrozenDict(
        {
            _CAMEL.sub("_", str(key)).lower(): value
            for key, value in raw.items()
            if as_int(value) is not None or (key == "maxCostUsd" and isinstance(value, str))
        }
    )


def _capabilities(meta: Mapping[str, Any] | None) -> tuple[str, ...] | None:
    raw = None if meta is None else meta.get("capabilities")
    if not isinstance(raw, list):
        return None
    return tuple(
        entry["name"]
        for entry in raw
        if isinstance(entry, Mapping) and isinstance(entry.get("name"), str)
    )
