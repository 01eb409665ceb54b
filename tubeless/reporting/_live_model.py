"""The live view's model: the rows a terminal shows, read from a bounded fold of the records.

:class:`LiveModel` knows nothing about rendering. ``feed(record)`` hands the record to a
:class:`~tubeless.tracing.fold.TraceFold` in root scope (O(1) work per record: dictionary
look-ups; a finished call past a turn's first 32 also scans the 33 kept in its group), whose
containers are all capped, so an agent that runs for thousands of turns uses the same memory as
one that runs for 40.

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
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal

from tubeless.tracing.fold import MAX_CALLS, MAX_TURNS, TraceFold
from tubeless.tracing.meters import budget_meters
from tubeless.tracing.projection import describe_error, terminal_safe
from tubeless.tracing.runs import Call, Run, Step, as_int, waiting_error

__all__ = ["MAX_AGENT_ROWS", "MAX_GROUPS", "LiveModel", "Row", "RowKind"]

#: Visible steps, turns (the current one included) and calls per turn: what the fold keeps.
MAX_GROUPS: Final = MAX_TURNS
assert MAX_CALLS == MAX_GROUPS
#: The most rows one agent step contributes: step, turns, overflow, calls, overflow.
MAX_AGENT_ROWS: Final = 1 + MAX_GROUPS + 1 + MAX_GROUPS + 1

RowKind = Literal["step", "turn", "call", "more"]

_FIRST: Final = frozenset({"pending", "running", "failed", "waiting", "interrupted"})
_ENDED_BADLY: Final = frozenset({"failed", "cancelled"})


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
    ``cancelled``, ``waiting`` (for approval), ``denied``, ``interrupted`` (a call running when
    a resumed run had stopped), or ``more``."""
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


def _error_text(error: Mapping[str, Any] | None) -> str | None:
    if error is None:
        return None
    code = _text(error.get("sourceCode")) or _text(error.get("code"))
    message = _text(describe_error(error)) if error.get("message") is not None else None
    return f"{code}: {message}" if code and message else message or code


_BUDGET_KEYS = {
    "maxCostUsd": "max_cost_usd",
    "maxTotalTokens": "max_total_tokens",
    "maxInputTokens": "max_input_tokens",
    "maxOutputTokens": "max_output_tokens",
}


class LiveModel:
    """The rows of one run tree, read from a bounded fold (see the module docstring)."""

    def __init__(self) -> None:
        self._fold = TraceFold(scope="root")
        self._errors = 0
        self._reasons: Mapping[tuple[int, str], str] = {}
        self._usage: dict[str, Any] | None = None
        """Model usage of every decision of the tree so far (budgets are shared down it)."""
        #: Set when cancellation was asked for (a signal) and the run has not ended yet.
        self.cancelling = False

    def use_denial_reasons(self, reasons: Mapping[tuple[int, str], str]) -> None:
        """The reasons people gave for denying calls of the root agent, by (turn, call id)."""
        self._reasons = reasons

    def _reasons_of(self, turn: Run) -> Mapping[str, str]:
        number = turn.turn
        return {c: r for (t, c), r in self._reasons.items() if t == number}

    # -- feeding ---------------------------------------------------------------------------------
    def feed(self, record: Mapping[str, Any]) -> None:
        """Take one record; malformed records are counted in ``dropped``, never raised."""
        try:
            self._fold.add(record)
            if isinstance(record, Mapping) and record.get("name") == "step.attempted":
                self._add_usage(record)
        except Exception:  # the model must survive anything a sink can be handed
            self._errors += 1

    def _add_usage(self, record: Mapping[str, Any]) -> None:
        payload = record.get("payload")
        attributes = payload.get("attributes") if isinstance(payload, Mapping) else None
        if not isinstance(attributes, Mapping) or "agent.usage.inputTokens" not in attributes:
            return
        usage = self._usage
        if usage is None:
            usage = self._usage = {"input_tokens": 0, "output_tokens": 0, "cost_usd": 0.0}
        for key, name in (
            ("input_tokens", "agent.usage.inputTokens"),
            ("output_tokens", "agent.usage.outputTokens"),
            ("cost_usd", "agent.usage.costUsd"),
        ):
            value = _num(attributes.get(name))
            if value is not None:
                usage[key] += value

    @property
    def meters(self) -> str | None:
        """``$0.42 of $2.00, 31k of 100k tokens`` for the root agent's budgets, if it has any."""
        root = self._fold.root
        limits: Mapping[str, Any] = {}
        for meta in ((root.agents if root is not None else None) or {}).values():
            found = meta.get("limits") if isinstance(meta, Mapping) else None
            if isinstance(found, Mapping):
                limits = found
                break
        bounds = {
            name: limits[key]
            for key, name in _BUDGET_KEYS.items()
            if key in limits and not isinstance(limits[key], bool)
        }
        if not bounds:
            return None
        return budget_meters(bounds, self._usage) or None

    @property
    def dropped(self) -> int:
        """Records that were malformed and ignored."""
        return self._fold.dropped + self._errors

    # -- the root run ----------------------------------------------------------------------------
    @property
    def root_run_id(self) -> str | None:
        """The root run's id, once it started."""
        root = self._fold.root
        return None if root is None else root.run_id

    @property
    def pipeline_id(self) -> str | None:
        """The root run's pipeline, terminal-safe."""
        root = self._fold.root
        return None if root is None else _text(root.pipeline_id)

    @property
    def status(self) -> str:
        """``starting`` (no root yet), ``running``, ``finalizing``, then the run's status
        (``waiting`` for a run that stopped for approval)."""
        root = self._fold.root
        if root is None:
            return "starting"
        if root.waiting:
            return "waiting"
        if root.status != "running":
            return root.status
        return "running" if root.finalize is None else "finalizing"

    @property
    def dry_run(self) -> bool:
        """Whether the root run is a dry run."""
        return self._fold.root is not None and self._fold.root.dry_run

    @property
    def started_ms(self) -> int | None:
        """When the root run started (epoch milliseconds)."""
        return None if self._fold.root is None else self._fold.root.started_ms

    @property
    def duration_ms(self) -> float | None:
        """The root run's duration, once it completed."""
        return None if self._fold.root is None else self._fold.root.duration_ms

    @property
    def step_count(self) -> int | None:
        """The root run's planned steps."""
        return None if self._fold.root is None else self._fold.root.step_count

    @property
    def error_count(self) -> int | None:
        """The root run's errors, once it completed."""
        return None if self._fold.root is None else self._fold.root.error_count

    # The fold's bounded containers, by the names the bound checks read.
    @property
    def _steps(self) -> Mapping[str, Step]:
        return {} if self._fold.root is None else self._fold.root.steps

    @property
    def _turns(self) -> dict[str, Run]:
        return {run.run_id: run for run in self._fold.running() if run.call is None}

    @property
    def _calls(self) -> dict[str, Run]:
        return {run.run_id: run for run in self._fold.running() if run.call is not None}

    # -- rows ------------------------------------------------------------------------------------
    def rows(self) -> list[Row]:
        """The rows to draw now (see the module docstring for the layout and bounds)."""
        out: list[Row] = []
        root_waits = self._fold.root is not None and self._fold.root.waits
        steps = list(self._steps.values())
        shown = steps
        if len(steps) > MAX_GROUPS:  # plan order reads best; past the cap, what matters first
            shown = sorted(steps, key=lambda s: s.status not in _FIRST)[:MAX_GROUPS]
        for step in shown:
            waiting = step.status == "failed" and root_waits and waiting_error(step.error)
            out.append(
                Row(
                    depth=0,
                    kind="step",
                    label=terminal_safe(step.name or step.id),
                    status="waiting" if waiting else step.status,
                    duration_ms=step.duration_ms,
                    started_ms=step.started_ms,
                    detail="approval needed" if waiting else _step_detail(step),
                )
            )
            if step.turns:
                self._turn_rows(step, step.turns, out)
        if len(steps) > len(shown):
            out.append(_more(0, len(steps) - len(shown), "step"))
        return out

    def _turn_rows(self, step: Step, turns: Iterable[Run], out: list[Row]) -> None:
        word = "turn" if step.agent else "iteration"
        newest = list(turns)
        # The newest turn that has calls: the current one once it has decided, else the last.
        expanded = next((t for t in newest[:2] if t.call_total), None)
        for position, turn in enumerate(newest):
            detail = _decision(turn)
            if turn.failed_calls:
                detail = f"{detail or str(turn.call_total) + ' calls'}, {turn.failed_calls} failed"
            error = _error_text(turn.error) if turn.status in _ENDED_BADLY else None
            if turn.waiting:
                error = "approval needed"
            if error:
                detail = error
            index = turn.turn or step.turn_count - position  # else its place among the turns
            out.append(
                Row(
                    depth=1,
                    kind="turn",
                    label=f"{word} {index}",
                    status="waiting" if turn.waiting else turn.status,
                    duration_ms=turn.duration_ms,
                    started_ms=turn.started_ms,
                    detail=detail,
                )
            )
            if turn is expanded:
                calls = sorted(turn.calls.values(), key=lambda c: (_status(c) not in _FIRST, c.seq))
                visible = calls[:MAX_GROUPS]
                reasons = self._reasons_of(turn)
                out.extend(_call_row(call, reasons) for call in visible)
                if turn.call_total > len(visible):
                    out.append(_more(2, turn.call_total - len(visible), "call"))
        earlier = step.turn_count - len(newest)
        if earlier > 0:
            out.append(_more(1, earlier, f"earlier {word}"))


def _step_detail(step: Step) -> str | None:
    """Why a step was skipped, what failed, or its last progress report."""
    if step.status == "skipped":
        reason = _text(step.reason) or "skipped"
        dependency = _text(step.dependency_id)
        return f"{reason}: {dependency}" if dependency else reason
    if step.status in _ENDED_BADLY:
        return _error_text(step.error)
    return None if step.progress is None else _progress_text(step.progress)


def _decision(turn: Run) -> str | None:
    if turn.decision == "finish":
        return "finish"
    count = as_int(turn.attribute("decide", "agent.callCount"))
    return None if count is None else f"{count} call" + ("" if count == 1 else "s")


def _status(call: Call) -> str:
    run = call.run
    if run is None:
        return call.settled or "pending"
    if run.waiting:
        return "waiting"
    return "skipped" if run.status == "completed" and run.skipped is not None else run.status


def _call_row(call: Call, reasons: Mapping[str, str]) -> Row:
    run = call.run
    detail = None
    if run is not None:
        if run.waiting:
            detail = "approval needed"
        elif run.status in _ENDED_BADLY:
            detail = _error_text(run.error)
        elif run.skipped is not None:
            detail = _text(run.skipped.reason) or "skipped"
        if detail is None and run.progress is not None:
            detail = _progress_text(run.progress)  # the tool's own report
        if detail is None and call.marked == "rerun":
            detail = "run again: running when the run stopped"
    elif call.marked is not None:
        detail = _marked_detail(call, reasons.get(call.call_id))
    tool = terminal_safe(call.tool or (None if run is None else run.pipeline_id) or "?")
    return Row(
        depth=2,
        kind="call",
        label=tool,
        status=_status(call),
        tool=tool,
        call_id=terminal_safe(call.call_id),
        duration_ms=None if run is None else run.duration_ms,
        started_ms=None if run is None else run.started_ms,
        detail=detail,
    )


def _marked_detail(call: Call, reason: str | None) -> str | None:
    """What a call settled without a run says: approval, denial (with the person's reason when
    the view was handed it), or how a resumed turn settled it."""
    code = _text(call.error_code)
    if call.marked == "waiting":
        return "approval needed"
    if call.marked == "denied":
        if reason:
            return f"denied: {terminal_safe(reason)}"
        return "denied (a reason is in the checkpoint)" if call.reason_given else "denied"
    if call.marked == "interrupted":
        return f"{code}: running when the run stopped"
    if call.marked == "reconciled":
        return "reconciled" + (f": {code}" if code and not call.ok else "")
    if call.marked == "restored":
        return "done before the run stopped" + (f": {code}" if code and not call.ok else "")
    return None


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
