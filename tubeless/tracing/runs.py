"""The runs a :class:`~tubeless.tracing.fold.TraceFold` keeps: runs, their steps and calls.

Every reader of trace records reads these objects (the run-tree projection, the plain reporter,
the live view). A :class:`Run` is of one :data:`RunKind`: a ``call`` (a tool call: a child of a
turn, named by its item key), a ``turn`` (an iteration of an agent step), an ``agent`` (its plan
has an agent step: the definition snapshot says so, or one of its turns recorded ``agent.*``
attributes), or a ``pipeline``. A turn's facts (decision, call count, state versions) are its
``agent.*`` attributes merged step by step.

A call may also carry ``agent.callStatus`` (:attr:`Call.marked`): ``waiting`` (for approval,
unrun), ``denied``, and after a resume ``interrupted``, ``reconciled``, ``rerun`` or
``restored``. A run that stopped for approval is recorded as ``failed`` (the wire knows three
statuses); :attr:`Run.waiting` and :func:`waiting_error` tell it apart: its error's original
code is ``TUBELESS_APPROVAL_REQUIRED`` and a call at or below it was recorded ``waiting``. (A run
without checkpoints or an approver fails with the same code, and no call waits.)

The fold updates them in place; readers must not change them.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Final, Literal

from tubeless.errors import APPROVAL_REQUIRED

__all__ = [
    "SETTLED",
    "TURN_STEPS",
    "Call",
    "Run",
    "RunKind",
    "RunStatus",
    "Step",
    "StepStatus",
    "as_int",
    "as_str",
    "waiting_error",
]

RunKind = Literal["agent", "turn", "call", "pipeline"]
#: ``waiting`` is never recorded (nor set by the fold): projections show it for a run that
#: stopped for approval (:attr:`Run.waiting`), which the wire records as ``failed``.
RunStatus = Literal["completed", "failed", "cancelled", "running", "waiting"]
StepStatus = Literal["planned", "running", "completed", "skipped", "failed", "cancelled", "waiting"]

#: The steps of an agent turn, in order.
TURN_STEPS: Final = ("decide", "calls", "reduce")
#: ``agent.callStatus`` values of calls settled without a run of their own.
SETTLED: Final = frozenset({"waiting", "denied", "interrupted", "reconciled", "restored"})

_NOTHING: Final[Mapping[str, Any]] = MappingProxyType({})


def as_int(value: Any) -> int | None:
    """``value`` if it is an integer (not a bool), else ``None``."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def as_str(value: Any) -> str | None:
    """``value`` if it is a string, else ``None``."""
    return value if isinstance(value, str) else None


def waiting_error(error: Mapping[str, Any] | None) -> bool:
    """Whether a recorded error stopped for approval (``TUBELESS_APPROVAL_REQUIRED`` at its
    origin); a run is waiting when this holds and a call below it waits (:attr:`Run.waits`)."""
    if error is None:
        return False
    return (error.get("sourceCode") or error.get("code")) == APPROVAL_REQUIRED


@dataclass(eq=False, slots=True)
class Step:
    """One step of a run (or a run's finalization), as far as its records got."""

    id: str
    agent: bool = False
    """An agent step: the snapshot says so, or a turn of it recorded agent attributes."""
    name: str | None = None
    description: str | None = None
    status: StepStatus = "planned"
    """``planned`` until an attempt starts (a progress report does not start it); in a stored
    trace (scope "all"), no late record reopens a finished step."""
    attempt_id: str | None = None
    started_ms: int | None = None
    duration_ms: float | None = None
    reason: str | None = None
    """Why a skipped step was skipped; ``dependency_id`` and ``message`` say more."""
    dependency_id: str | None = None
    message: str | None = None
    error: Mapping[str, Any] | None = None
    """The wire error of a failed or cancelled step."""
    progress: Mapping[str, Any] | None = None
    """The current attempt's last progress report (empty if malformed)."""
    iterates: tuple[str, ...] | None = None
    """The step ids of the nested pipeline the step iterates, from ``step.planned``."""
    turns: deque[Run] | None = None
    """Root scope: the runs the step iterated (turns), newest first."""
    turn_count: int = 0
    """Root scope: how many runs the step iterated."""


@dataclass(eq=False, slots=True)
class Call:
    """One tool call of a turn: attributed by the turn's ``calls`` step, or by its run starting."""

    call_id: str
    seq: int
    """The order in which the turn declared its calls, from 1."""
    attributed_tool: str | None = None
    """``agent.tool`` as the turn attributed it (and ``agent.parentAttemptId`` below)."""
    parent_attempt_id: str | None = None
    run: Run | None = None
    """The call's run once it started (root scope, while the call is kept)."""
    marked: str | None = None
    """``agent.callStatus``: ``waiting``, ``denied``, ``interrupted``, ``reconciled``, ``rerun``
    or ``restored`` (see :mod:`tubeless.agent._trace`); ``None`` for a call that simply ran."""
    ok: bool | None = None
    """``agent.callOk``: whether a reconciled or restored outcome is ok."""
    error_code: str | None = None
    """``agent.callErrorCode``: the code of a marked call's failed outcome."""
    reason_given: bool = False
    """``agent.reasonGiven``: a denied call's denial came with a reason (kept out of the
    trace)."""

    @property
    def settled(self) -> str | None:
        """The status of a call settled without a run: ``waiting``, ``denied``,
        ``interrupted``, ``completed`` or ``failed`` (reconciled or restored); else ``None``."""
        marked = self.marked
        if marked is None or marked not in SETTLED:
            return None
        if marked in ("reconciled", "restored"):
            return "completed" if self.ok else "failed"
        return marked

    @property
    def tool(self) -> str | None:
        """The registry alias: as the call's run recorded it, else as the turn attributed it."""
        own = None if self.run is None else self.run.tool
        return own or self.attributed_tool


class Run:
    """One run (one generation of a run id) as far as its records got.

    What no record said yet is the class default; creating one sets only what every run has.
    """

    pipeline_id: str | None = None
    parent_run_id: str | None = None
    parent: Run | None = None
    """The parent's run, when known by the time this run named it."""
    item_key: str | None = None
    """The fan-out item key, ``iteration-<i>`` for an iteration, or the agent call id."""
    iteration_run_id: str | None = None
    """``iteration.runId``, ``iteration.stepId`` and ``iteration.index`` of an iterated run."""
    iteration_step_id: str | None = None
    index: int | None = None
    iterated: Step | None = None
    """The parent's step that iterated this run (an agent step makes it a turn)."""
    started: bool = False
    started_ms: int | None = None
    first_ms: int | None = None
    """The earliest timestamp of its records (scope "all")."""
    status: RunStatus = "running"
    """``running`` until ``pipeline.completed``; an unknown recorded status counts as failed."""
    dry_run: bool = False
    duration_ms: float | None = None
    step_count: int | None = None
    error_count: int | None = None
    error: Mapping[str, Any] | None = None
    """The run error of ``pipeline.completed``."""
    agents: dict[str, Mapping[str, Any] | None] | None = None
    """The agent steps of the definition snapshot with their metadata; ``None`` without one."""
    finalize: Step | None = None
    skipped: Step | None = None
    """The last step that was skipped (for a call: why its tool did not run)."""
    progress: Mapping[str, Any] | None = None
    """The last progress report of any of its steps."""
    tool: str | None = None
    """``agent.tool`` and ``agent.parentAttemptId`` as the run recorded them for itself."""
    parent_attempt_id: str | None = None
    call_total: int = 0
    """Root scope: the calls a turn declared, how many failed, and the finished ones kept."""
    failed_calls: int = 0
    kept: tuple[list[Call], list[Call]] | None = None
    call: Call | None = None
    """A call run's call (root scope)."""
    waits: bool = False
    """A call of this run, or of a run below it, was recorded ``waiting`` for approval (root
    scope: of the root's tree, marked on the root and on the runs still open)."""
    waiting_calls: int = 0
    """A turn's calls recorded ``waiting``."""

    # The containers start as one shared empty mapping and become the run's own dict on the
    # first write (most turns and calls of a reporter's fold never fill most of them).
    steps: Mapping[str, Step] = _NOTHING
    summary: Mapping[str, Mapping[str, Any]] = _NOTHING
    """``step.attempted`` attributes without a call id, merged in order, by step id."""
    calls: Mapping[str, Call] = _NOTHING
    """A turn's calls by id (scope "all": those its ``calls`` step attributed)."""
    errors: tuple[Mapping[str, Any], ...] = ()
    """Every wire error of its records (scope "all")."""

    arrival: int = 0
    """The order of the run's first record among runs (scope "all")."""

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id

    @property
    def kind(self) -> RunKind:
        """``call``, ``turn``, ``agent`` or ``pipeline`` (see the module docstring)."""
        if self.iterated is not None:
            if self.iterated.agent:
                return "turn"
        elif self.item_key is not None and self.parent is not None and self.parent.kind == "turn":
            return "call"
        return "agent" if any(step.agent for step in self.steps.values()) else "pipeline"

    def attribute(self, step_id: str, key: str) -> Any:
        """``key`` of the merged summary attributes of ``step_id`` (``None`` if absent)."""
        return self.summary.get(step_id, _NOTHING).get(key)

    @property
    def waiting(self) -> bool:
        """Stopped for approval: recorded ``failed`` with :func:`waiting_error`, and a call at or
        below it waits."""
        return self.status == "failed" and self.waits and waiting_error(self.error)

    @property
    def turn(self) -> int | None:
        """A turn's number as its agent counts (``agent.turn``; a resumed agent's first turn is
        the one it resumed at), else its iteration index."""
        for step_id in TURN_STEPS:
            number = as_int(self.attribute(step_id, "agent.turn"))
            if number is not None:
                return number
        parent, step = self.parent, self.iteration_step_id
        if self.index is not None and parent is not None and step is not None:
            resumed = as_int(parent.attribute(step, "agent.resumedTurn"))
            if resumed is not None:
                return self.index + resumed - 1
        return self.index

    @property
    def decision(self) -> Literal["continue", "finish"] | None:
        """A turn's decision."""
        decision = self.attribute("decide", "agent.decision")
        return decision if decision in ("continue", "finish") else None

    @property
    def call_count(self) -> int | None:
        """Calls in a turn's decision (0 for finish)."""
        count = as_int(self.attribute("decide", "agent.callCount"))
        return count if count is not None else as_int(self.attribute("calls", "agent.callCount"))

    @property
    def calls_admitted(self) -> int | None:
        """Calls the agent had admitted up to and including this turn."""
        for step_id in ("calls", "reduce"):
            admitted = as_int(self.attribute(step_id, "agent.callsAdmitted"))
            if admitted is not None:
                return admitted
        # A finishing turn admits nothing, so the count before it is the count after it.
        if self.decision == "finish":
            return as_int(self.attribute("decide", "agent.callsAdmitted"))
        return None

    @property
    def state_version(self) -> int | None:
        """The state version a turn started from."""
        return as_int(self.attribute("decide", "agent.stateVersion"))

    @property
    def next_state_version(self) -> int | None:
        """The state version after ``reduce``; ``None`` when the turn did not reduce."""
        return as_int(self.attribute("reduce", "agent.stateVersion"))

    def step(self, step_id: str) -> Step:
        """The step called ``step_id``, made (planned) if no record named it yet."""
        step = self.steps.get(step_id)
        if step is None:
            steps = self.steps if isinstance(self.steps, dict) else {}
            agent = self.agents is not None and step_id in self.agents
            step = steps[step_id] = Step(step_id, agent)
            self.steps = steps
        return step
