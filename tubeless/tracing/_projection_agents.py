"""The agent history of one projected run: turns, calls and how the agent ended (UPSTREAM §4.12).

An agent run is an ordinary run whose plan has an agent step. Its turns are the child runs
iterated by that step (``iteration.runId`` = the agent run, ``iteration.stepId`` = the step),
and each turn's calls are the turn's child runs that carry an ``itemKey`` (the call id). What
the records do not say stays ``None`` (or ``"unknown"`` for a call's status): tool aliases come
only from the ``agent.tool`` attribute, never from pipeline names.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final, Protocol

from tubeless.errors import AGENT_LIMIT_REACHED
from tubeless.frozen import FrozenDict
from tubeless.tracing._projection_history import (
    AgentHistory,
    CallNode,
    Decision,
    Termination,
    TurnNode,
)

if TYPE_CHECKING:
    from tubeless.tracing.projection import RunStatus, RunTree, StepNode

__all__ = ["agent_history", "as_int", "as_str"]

_TURN_STEPS: Final = ("decide", "calls", "reduce")
_AGENT_STEP: Final = "agent"
# Writers cut cause chains at 16 levels; a reader of foreign files still must not loop forever.
_MAX_CAUSE_WALK: Final = 64
_CAMEL = re.compile(r"(?<!^)(?=[A-Z])")


class Facts(Protocol):
    """What the fold kept about one run besides its projected tree."""

    @property
    def run_id(self) -> str: ...
    @property
    def iteration(self) -> Mapping[str, Any] | None: ...
    @property
    def attributes(self) -> Mapping[str, Sequence[Mapping[str, Any]]]:
        """``step.attempted`` attributes by step id, in arrival order."""

    @property
    def errors(self) -> Sequence[Mapping[str, Any]]:
        """Every wire error recorded for the run (steps, finalization, completion)."""

    @property
    def run_error(self) -> Mapping[str, Any] | None:
        """The first run error, from ``pipeline.completed``."""

    @property
    def snapshot_steps(self) -> Sequence[Mapping[str, Any]] | None:
        """``definitionSnapshot.steps`` of ``pipeline.started``, when recorded."""

    @property
    def iterate_steps(self) -> Mapping[str, tuple[str, ...]]:
        """Planned steps that iterate a nested pipeline, with that pipeline's step ids."""

    @property
    def kids(self) -> Sequence[Facts]:
        """The child runs, ordered by start."""

    @property
    def tree(self) -> RunTree: ...


def agent_history(
    facts: Facts, status: RunStatus, steps: Sequence[StepNode]
) -> AgentHistory | None:
    """The agent history of a run about to be projected, or ``None`` if it is no agent.

    ``facts.kids`` must already be projected (their ``tree`` set).
    """
    found = _agent_step(facts)
    if found is None:
        return None
    step_id, meta = found
    turns = _turns(facts, step_id)
    nodes = tuple(_turn(turn) for turn in turns)
    agent_step = next((s for s in steps if s.id == step_id), None)
    limited = any(_mentions_limit(e) for run in (facts, *turns) for e in run.errors)
    return AgentHistory(
        step_id=step_id,
        termination=_termination(status, agent_step, nodes, limited=limited),
        limits=_limits(meta),
        capabilities=_capabilities(meta),
        turns=nodes,
    )


# -- detection --------------------------------------------------------------------------------
def _agent_step(facts: Facts) -> tuple[str, Mapping[str, Any] | None] | None:
    """The agent step id and its snapshot metadata (``None`` when no snapshot says it)."""
    snapshot = facts.snapshot_steps
    if snapshot is not None:
        for entry in snapshot:
            if isinstance(entry.get("agent"), Mapping) and isinstance(entry.get("id"), str):
                return entry["id"], entry["agent"]
        return None
    # Child runs carry no snapshot: an agent shows by its iterated decide → calls → reduce.
    if facts.iterate_steps.get(_AGENT_STEP) == _TURN_STEPS:
        return _AGENT_STEP, None
    for kid in facts.kids:
        if _is_turn_of(kid, facts.run_id, _AGENT_STEP) and (
            set(_TURN_STEPS) <= {s.id for s in kid.tree.steps}
            or _attribute(kid, "decide", "agent.runId") == facts.run_id
        ):
            return _AGENT_STEP, None
    return None


def _is_turn_of(kid: Facts, run_id: str, step_id: str) -> bool:
    iteration = kid.iteration
    return (
        iteration is not None
        and iteration.get("runId") == run_id
        and iteration.get("stepId") == step_id
    )


def _turns(facts: Facts, step_id: str) -> list[Facts]:
    turns = [kid for kid in facts.kids if _is_turn_of(kid, facts.run_id, step_id)]
    # Kids are in start order already; a stable sort by index keeps that order for ties.
    turns.sort(key=_index_order)
    return turns


def _index_order(kid: Facts) -> tuple[bool, int]:
    index = as_int((kid.iteration or {}).get("index"))
    return (index is None, index or 0)


# -- turns and calls --------------------------------------------------------------------------
def _merged(facts: Facts, step_id: str, *, per_call: bool = False) -> dict[str, Any]:
    """The attributes of ``step_id`` merged in order (summary or per-call attributions)."""
    merged: dict[str, Any] = {}
    for attributes in facts.attributes.get(step_id, ()):
        if ("agent.callId" in attributes) == per_call:
            merged.update(attributes)
    return merged


def _attribute(facts: Facts, step_id: str, key: str) -> Any:
    return _merged(facts, step_id).get(key)


def _turn(turn: Facts) -> TurnNode:
    tree = turn.tree
    decide = _merged(turn, "decide")
    calls = _merged(turn, "calls")
    reduce = _merged(turn, "reduce")
    raw_decision = decide.get("agent.decision")
    decision: Decision | None = raw_decision if raw_decision in ("continue", "finish") else None
    call_count = as_int(decide.get("agent.callCount"))
    if call_count is None:
        call_count = as_int(calls.get("agent.callCount"))
    admitted = as_int(calls.get("agent.callsAdmitted"))
    if admitted is None:
        admitted = as_int(reduce.get("agent.callsAdmitted"))
    if admitted is None and decision == "finish":
        # A finishing turn admits nothing, so the count before it is the count after it.
        admitted = as_int(decide.get("agent.callsAdmitted"))
    index = as_int((turn.iteration or {}).get("index"))
    if index is None:
        index = as_int(decide.get("agent.turn"))
    return TurnNode(
        run_id=tree.run_id,
        index=index,
        status=tree.status,
        decision=decision,
        call_count=call_count,
        calls_admitted=admitted,
        state_version=as_int(decide.get("agent.stateVersion")),
        next_state_version=as_int(reduce.get("agent.stateVersion")),
        error_code=tree.error_code,
        calls=_calls(turn),
    )


def _calls(turn: Facts) -> tuple[CallNode, ...]:
    # Newer writers attribute every dispatched call on the turn's calls step; use them when
    # present (they also name calls that never started), else rely on the call runs alone.
    attributed: dict[str, tuple[str | None, str | None]] = {}
    for attributes in turn.attributes.get("calls", ()):
        call_id = attributes.get("agent.callId")
        if isinstance(call_id, str) and call_id not in attributed:
            attributed[call_id] = (
                as_str(attributes.get("agent.tool")),
                as_str(attributes.get("agent.parentAttemptId")),
            )
    nodes: list[CallNode] = []
    seen: set[str] = set()
    for kid in turn.kids:
        tree = kid.tree
        if tree.item_key is None:
            continue
        seen.add(tree.item_key)
        tool, parent_attempt = _call_identity(kid, tree.item_key)
        fallback = attributed.get(tree.item_key, (None, None))
        error_code, source_code = _first_error(kid)
        nodes.append(
            CallNode(
                call_id=tree.item_key,
                tool=tool or fallback[0],
                run_id=tree.run_id,
                pipeline_id=tree.pipeline_id,
                status=tree.status,
                duration_ms=tree.duration_ms,
                error_code=error_code,
                source_code=source_code,
                parent_attempt_id=parent_attempt or fallback[1],
                child_agent_run_ids=_child_agents(tree),
            )
        )
    for call_id, (tool, parent_attempt) in attributed.items():
        if call_id not in seen:
            nodes.append(
                CallNode(
                    call_id=call_id,
                    tool=tool,
                    run_id=None,
                    pipeline_id=None,
                    status="unknown",
                    duration_ms=None,
                    error_code=None,
                    source_code=None,
                    parent_attempt_id=parent_attempt,
                    child_agent_run_ids=(),
                )
            )
    return tuple(nodes)


def _call_identity(call: Facts, call_id: str) -> tuple[str | None, str | None]:
    """``agent.tool`` and ``agent.parentAttemptId`` recorded inside the call run itself."""
    tool = parent_attempt = None
    for step_attributes in call.attributes.values():
        for attributes in step_attributes:
            if attributes.get("agent.callId") not in (None, call_id):
                continue
            tool = tool or as_str(attributes.get("agent.tool"))
            parent_attempt = parent_attempt or as_str(attributes.get("agent.parentAttemptId"))
    return tool, parent_attempt


def _first_error(facts: Facts) -> tuple[str | None, str | None]:
    error = facts.run_error
    if error is None:
        return None, None
    return as_str(error.get("code")), as_str(error.get("sourceCode"))


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
            if as_int(value) is not None
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


def as_int(value: Any) -> int | None:
    """``value`` if it is an integer (not a bool), else ``None``."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def as_str(value: Any) -> str | None:
    """``value`` if it is a string, else ``None``."""
    return value if isinstance(value, str) else None
