"""The live view's model: a bounded fold of trace records into the rows a terminal shows.

:class:`LiveModel` knows nothing about rendering. ``feed(record)`` does O(1) work (dictionary
look-ups; a finished call past a turn's first 32 also scans that turn's few dozen kept calls),
and every container is capped, so an agent that runs for thousands of turns uses the same memory
as one that runs for 40.

``rows()`` lays the run out as a tree, depth first:

- depth 0: the root run's steps in plan order; when a pipeline has more than
  ``MAX_GROUPS`` steps, running and failed ones come first, then an ``N more steps`` row.
- depth 1, under an agent (or iterated) step: the newest turn, then at most ``MAX_GROUPS - 1``
  older turns, newest first, then an ``N earlier turns`` row.
- depth 2, under one turn (the current one once it has calls, else the one before it): its
  calls, at most ``MAX_GROUPS``, pending, running and failed ones first, then the rest in
  decision order, then an ``N more calls`` row. Older turns keep only their counts (shown in
  the turn row's ``detail``); only the two newest turns keep calls at all.

So one agent step shows at most ``1 + 32 + 1 + 32 + 1 = 67`` rows (:data:`MAX_AGENT_ROWS`).
Only the root run's steps, its iterated children (turns) and the agent calls of those turns are
followed; a call that runs another agent is one call row.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from tubeless.tracing.projection import describe_error, terminal_safe

__all__ = ["MAX_ACTIVE_CALLS", "MAX_AGENT_ROWS", "MAX_GROUPS", "LiveModel", "Row", "RowKind"]

#: Visible steps, turns (the current one included) and calls per turn.
MAX_GROUPS: Final = 32
#: The most rows one agent step contributes: step, turns, overflow, calls, overflow.
MAX_AGENT_ROWS: Final = 1 + MAX_GROUPS + 1 + MAX_GROUPS + 1
#: Pending and running calls of one turn tracked individually; beyond this they are only counted.
MAX_ACTIVE_CALLS: Final = 1024

RowKind = Literal["step", "turn", "call", "more"]

_ACTIVE: Final = frozenset({"pending", "running"})
_FIRST: Final = frozenset({"pending", "running", "failed"})
_TERMINAL: Final = {"step.complete": "completed", "step.skipped": "skipped",
                     "step.failed": "failed", "step.cancelled": "cancelled"}


@dataclass(frozen=True, kw_only=True, slots=True)
class Row:
    """One line of the live view."""

    depth: int
    """0 for steps, 1 for turns, 2 for calls."""
    kind: RowKind
    """What the row stands for; ``more`` rows count what is not shown."""
    label: str
    """The step name, ``turn <i>``, the call's tool, or ``N more calls``."""
    status: str
    """``planned``, ``pending``, ``running``, ``completed``, ``skipped``, ``failed``,
    ``cancelled``, or ``more``."""
    tool: str | None = None
    """The tool (registry alias) of a call."""
    call_id: str | None = None
    """The decision's call id of a call."""
    duration_ms: float | None = None
    """How long a finished step, turn or call took."""
    started_ms: int | None = None
    """When a started step, turn or call began (epoch milliseconds), for elapsed time."""
    detail: str | None = None
    """Progress, decision summary, skip reason or error message."""


def _text(value: Any) -> str | None:
    return terminal_safe(value) if isinstance(value, str) else None


def _num(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        number = float(value)
    except OverflowError:  # an int too large for a float
        return None
    return number if math.isfinite(number) else None


def _ms(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _error_text(record: Mapping[str, Any]) -> str | None:
    error = _mapping(record.get("error"))
    code = _text(error.get("sourceCode")) or _text(error.get("code"))
    message = _text(describe_error(error)) if error.get("message") is not None else None
    return f"{code}: {message}" if code and message else message or code


@dataclass(slots=True)
class _Call:
    seq: int
    call_id: str
    tool: str
    status: str = "pending"
    started_ms: int | None = None
    duration_ms: float | None = None
    detail: str | None = None
    progress: str | None = None


@dataclass(slots=True)
class _Turn:
    run_id: str
    index: int
    agent: bool
    status: str = "running"
    started_ms: int | None = None
    duration_ms: float | None = None
    decision: str | None = None
    error: str | None = None
    total: int = 0
    failed: int = 0
    # Tracked calls by call id: every pending or running one (up to MAX_ACTIVE_CALLS), plus the
    # first MAX_GROUPS finished and the first MAX_GROUPS failed ones in decision order. Emptied
    # once two newer turns have started, since only one of the two newest turns shows calls.
    calls: dict[str, _Call] = field(default_factory=dict)
    active: int = 0
    kept_done: int = 0
    kept_failed: int = 0


@dataclass(slots=True)
class _Step:
    label: str
    agent: bool = False
    status: str = "planned"
    started_ms: int | None = None
    duration_ms: float | None = None
    detail: str | None = None
    turns: deque[_Turn] = field(default_factory=lambda: deque(maxlen=MAX_GROUPS))
    turn_total: int = 0


class LiveModel:
    """Folds the records of one run tree into bounded rows (see the module docstring)."""

    def __init__(self) -> None:
        self.root_run_id: str | None = None
        self.pipeline_id: str | None = None
        #: ``waiting`` before the root starts, ``running``, ``finalizing``, then the run's status.
        self.status = "waiting"
        #: Set when cancellation was asked for (a signal) and the run has not ended yet.
        self.cancelling = False
        self.dry_run = False
        self.started_ms: int | None = None
        self.duration_ms: float | None = None
        self.step_count: int | None = None
        self.error_count: int | None = None
        #: Records that were malformed and ignored.
        self.dropped = 0
        self._agent_steps: set[str] = set()
        self._steps: dict[str, _Step] = {}
        self._turns: dict[str, tuple[_Step, _Turn]] = {}
        self._calls: dict[str, tuple[_Turn, _Call]] = {}

    # -- feeding ---------------------------------------------------------------------------------
    def feed(self, record: Mapping[str, Any]) -> None:
        """Take one record; malformed records are counted in ``dropped``, never raised."""
        try:
            self._feed(record)
        except Exception:  # the model must survive anything a sink can be handed
            self.dropped += 1

    def _feed(self, record: Mapping[str, Any]) -> None:
        run_id = record.get("runId")
        name = record.get("name")
        if not isinstance(run_id, str) or not isinstance(name, str):
            self.dropped += 1
        elif run_id == self.root_run_id:
            self._root(name, record)
        elif run_id in self._calls:
            self._call(run_id, name, record)
        elif run_id in self._turns:
            self._turn(run_id, name, record)
        elif name == "pipeline.started":
            self._started(run_id, record)

    def _started(self, run_id: str, record: Mapping[str, Any]) -> None:
        parent = record.get("parentRunId")
        ts = _ms(record.get("timestampMs"))
        if parent is None:
            if self.root_run_id is None:
                payload = _mapping(record.get("payload"))
                self.root_run_id = run_id
                self.pipeline_id = _text(record.get("pipelineId"))
                self.status = "running"
                self.dry_run = payload.get("dryRun") is True
                self.started_ms = ts
                self.step_count = _ms(payload.get("stepCount"))
                for s in _mapping(payload.get("definitionSnapshot")).get("steps") or ():
                    if isinstance(s, Mapping) and "agent" in s and isinstance(s.get("id"), str):
                        self._agent_steps.add(s["id"])
            return
        iteration = _mapping(record.get("iteration"))
        if parent == self.root_run_id and iteration.get("runId") == parent:
            step = self._step(str(iteration.get("stepId")))
            index = _ms(iteration.get("index")) or step.turn_total + 1
            turn = _Turn(run_id=run_id, index=index, agent=step.agent, started_ms=ts)
            if len(step.turns) > 1:
                step.turns[1].calls.clear()  # only the two newest turns keep their calls
            if len(step.turns) == MAX_GROUPS:
                self._turns.pop(step.turns[-1].run_id, None)
            step.turns.appendleft(turn)
            step.turn_total += 1
            self._turns[run_id] = (step, turn)
            return
        found = self._turns.get(parent) if isinstance(parent, str) else None
        call_id = _text(record.get("itemKey"))
        if found is None or call_id is None or not found[1].agent:
            return
        turn = found[1]
        call = turn.calls.get(call_id) or self._declare(turn, call_id, None, record)
        if call is not None:
            call.status = "running"
            call.started_ms = ts
            self._calls[run_id] = (turn, call)

    def _step(self, step_id: str) -> _Step:
        if step_id not in self._steps:
            agent = step_id in self._agent_steps
            self._steps[step_id] = _Step(label=terminal_safe(step_id), agent=agent)
        return self._steps[step_id]

    # -- the root run ----------------------------------------------------------------------------
    def _root(self, name: str, record: Mapping[str, Any]) -> None:
        payload = _mapping(record.get("payload"))
        if name == "pipeline.completed":
            self.status = _text(payload.get("status")) or "completed"
            self.duration_ms = _num(record.get("durationMs"))
            self.error_count = _ms(payload.get("errorCount"))
            return
        if name == "pipeline.finalize.started":
            self.status = "finalizing"
            return
        step_id = record.get("stepId")
        if not isinstance(step_id, str):
            return
        step = self._step(step_id)
        if name == "step.planned":
            step.label = _text(payload.get("name")) or step.label
        elif name == "step.running":
            progress = payload.get("progress")
            if progress is None:
                step.status = "running"
                step.started_ms = _ms(record.get("timestampMs"))
                step.detail = None
            else:
                step.detail = _progress_text(_mapping(progress))
        elif name in _TERMINAL:
            step.status = _TERMINAL[name]
            step.duration_ms = _num(record.get("durationMs"))
            if name == "step.skipped":
                reason = _text(payload.get("reason")) or "skipped"
                dependency = _text(payload.get("dependencyId"))
                step.detail = f"{reason}: {dependency}" if dependency else reason
            elif name != "step.complete":
                step.detail = _error_text(record)

    # -- turns and calls -------------------------------------------------------------------------
    def _turn(self, run_id: str, name: str, record: Mapping[str, Any]) -> None:
        step, turn = self._turns[run_id]
        if name == "step.attempted":
            attributes = _mapping(_mapping(record.get("payload")).get("attributes"))
            if "agent.turn" not in attributes:
                return
            turn.agent = step.agent = True
            call_id = _text(attributes.get("agent.callId"))
            stage = record.get("stepId")
            if stage == "calls" and call_id is not None and call_id not in turn.calls:
                self._declare(turn, call_id, _text(attributes.get("agent.tool")), record)
            elif stage == "decide":
                decision = attributes.get("agent.decision")
                count = _ms(attributes.get("agent.callCount"))
                if decision == "finish":
                    turn.decision = "finish"
                elif count is not None:
                    turn.decision = f"{count} call" + ("" if count == 1 else "s")
        elif name == "pipeline.completed":
            del self._turns[run_id]
            turn.status = _text(_mapping(record.get("payload")).get("status")) or "completed"
            turn.duration_ms = _num(record.get("durationMs"))
            if turn.status in ("failed", "cancelled"):
                turn.error = _error_text(record)

    def _declare(
        self, turn: _Turn, call_id: str, tool: str | None, record: Mapping[str, Any]
    ) -> _Call | None:
        """Count a new call of ``turn`` and track it while there is room."""
        turn.total += 1
        if turn.active >= MAX_ACTIVE_CALLS:
            return None
        fallback = _text(record.get("pipelineId")) or "?"
        call = _Call(seq=turn.total, call_id=call_id, tool=tool or fallback)
        turn.calls[call_id] = call
        turn.active += 1
        return call

    def _call(self, run_id: str, name: str, record: Mapping[str, Any]) -> None:
        turn, call = self._calls[run_id]
        payload = _mapping(record.get("payload"))
        if name == "step.skipped":
            call.detail = _text(payload.get("reason")) or "skipped"
            return
        if name == "step.running" and payload.get("progress") is not None:
            call.progress = _progress_text(_mapping(payload["progress"]))  # the tool's report
            return
        if name != "pipeline.completed":
            return
        del self._calls[run_id]
        status = _text(payload.get("status")) or "completed"
        if status == "completed" and call.detail is not None:
            status = "skipped"
        elif status in ("failed", "cancelled"):
            call.detail = _error_text(record)
        call.status = status
        call.duration_ms = _num(record.get("durationMs"))
        turn.active -= 1
        if status == "failed":
            turn.failed += 1
        if turn.calls.get(call.call_id) is call:
            self._retain(turn, call)

    def _retain(self, turn: _Turn, call: _Call) -> None:
        """Keep a finished call only if it is among the first ``MAX_GROUPS`` of its group."""
        failed = call.status == "failed"
        if (turn.kept_failed if failed else turn.kept_done) < MAX_GROUPS:
            turn.kept_failed += failed
            turn.kept_done += not failed
            return
        # The group is full: drop whichever of its members (this call included) comes last.
        group = [c for c in turn.calls.values()
                 if c.status not in _ACTIVE and (c.status == "failed") == failed]
        del turn.calls[max(group, key=lambda c: c.seq).call_id]

    # -- rows ------------------------------------------------------------------------------------
    def rows(self) -> list[Row]:
        """The rows to draw now (see the module docstring for the layout and bounds)."""
        out: list[Row] = []
        steps = list(self._steps.values())
        shown = steps
        if len(steps) > MAX_GROUPS:  # plan order reads best; past the cap, what matters first
            shown = sorted(steps, key=lambda s: s.status not in _FIRST)[:MAX_GROUPS]
        for step in shown:
            out.append(Row(
                depth=0, kind="step", label=step.label, status=step.status,
                duration_ms=step.duration_ms, started_ms=step.started_ms, detail=step.detail,
            ))
            if step.turns:
                self._turn_rows(step, out)
        if len(steps) > len(shown):
            out.append(_more(0, len(steps) - len(shown), "step"))
        return out

    def _turn_rows(self, step: _Step, out: list[Row]) -> None:
        word = "turn" if step.agent else "iteration"
        # The newest turn that has calls: the current one once it has decided, else the last.
        expanded = next((t for t in list(step.turns)[:2] if t.total), None)
        for turn in step.turns:
            detail = turn.decision
            if turn.failed:
                detail = f"{detail or str(turn.total) + ' calls'}, {turn.failed} failed"
            if turn.error:
                detail = turn.error
            out.append(Row(
                depth=1, kind="turn", label=f"{word} {turn.index}", status=turn.status,
                duration_ms=turn.duration_ms, started_ms=turn.started_ms, detail=detail,
            ))
            if turn is expanded:
                calls = sorted(turn.calls.values(), key=lambda c: (c.status not in _FIRST, c.seq))
                visible = calls[:MAX_GROUPS]
                out.extend(
                    Row(depth=2, kind="call", label=c.tool, status=c.status, tool=c.tool,
                        call_id=c.call_id, duration_ms=c.duration_ms,
                        started_ms=c.started_ms, detail=c.detail or c.progress)
                    for c in visible
                )
                if turn.total > len(visible):
                    out.append(_more(2, turn.total - len(visible), "call"))
        earlier = step.turn_total - len(step.turns)
        if earlier > 0:
            out.append(_more(1, earlier, f"earlier {word}"))


def _more(depth: int, count: int, noun: str) -> Row:
    plural = noun if count == 1 else noun + "s"
    label = f"{count} {plural}" if noun.startswith("earlier") else f"{count} more {plural}"
    return Row(depth=depth, kind="more", label=label, status="more")


def _progress_text(progress: Mapping[str, Any]) -> str:
    def fmt(value: Any) -> str:
        number = _num(value)
        if number is None:
            return "?"
        return str(int(number)) if number.is_integer() else f"{number:g}"

    message = _text(progress.get("message"))
    if progress.get("total") is None and message:
        return message  # "2/? Turn 3 of at most 20" says less than the message alone
    text = f"{fmt(progress.get('completed'))}/{fmt(progress.get('total'))}"
    return f"{text} {message}" if message else text
