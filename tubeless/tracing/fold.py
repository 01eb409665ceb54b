"""One fold of the trace stream: what the records say about runs, steps, agent turns and calls.

:class:`TraceFold` takes trace v3 records one at a time, as a sink receives them while a run goes
on or as ``tubeless trace show`` reads them from a file, and keeps one :class:`Run` per run. Every
reader of records reads these objects: the run-tree projection (:mod:`tubeless.tracing.projection`
and the text of ``trace show``), the plain reporter and the live view (:mod:`tubeless.reporting`).
A reporter still looks at a record to know *when* something happened; what it shows comes from
the fold.

A run is of one :data:`RunKind`: a ``call`` (a tool call: a child of a turn, named by its item
key), a ``turn`` (an iteration of an agent step), an ``agent`` (its plan has an agent step: the
definition snapshot says so, or one of its turns recorded ``agent.*`` attributes), or a
``pipeline``. A turn's facts (decision, call count, state versions) are its ``agent.*``
attributes merged step by step; a call's tool is the one its run recorded, else the one the turn
attributed to its call id.

Two scopes:

- ``TraceFold()`` keeps every run of every run tree in the records (one NDJSON file may hold many
  appended runs); a ``pipeline.started`` for a run id that already started begins a new run.
  Its size is the input's, which the trace reader bounds.
- ``TraceFold(scope="root")`` keeps what a reporter shows while a run goes on, in memory that does
  not grow with the run: the first root run and its steps, the runs its steps iterate (turns: per
  step the newest :data:`MAX_TURNS`, older ones only counted), and the tool calls of those turns
  (only the two newest turns keep calls: every pending or running one and, of the finished ones,
  the first :data:`MAX_CALLS` failed and the first :data:`MAX_CALLS` others in decision order).
  A turn or call is forgotten by id once its run completed.

Objects are updated in place and belong to the fold: readers must not change them.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal

__all__ = [
    "MAX_CALLS",
    "MAX_TURNS",
    "TURN_STEPS",
    "Call",
    "Run",
    "RunKind",
    "RunStatus",
    "Step",
    "StepStatus",
    "TraceFold",
    "as_int",
    "as_str",
]

RunKind = Literal["agent", "turn", "call", "pipeline"]
RunStatus = Literal["completed", "failed", "cancelled", "running"]
StepStatus = Literal["planned", "running", "completed", "skipped", "failed", "cancelled"]

#: Turns kept per iterated step in root scope (the newest; older ones are only counted).
MAX_TURNS: Final = 32
#: Finished calls kept per turn and group (failed, and the others) in root scope.
MAX_CALLS: Final = 32
#: The steps of an agent turn, in order.
TURN_STEPS: Final = ("decide", "calls", "reduce")

_RUN_STATUSES: Final[Mapping[str, RunStatus]] = {s: s for s in ("completed", "failed", "cancelled")}
_TERMINAL: Final[Mapping[str, StepStatus]] = {
    "step.complete": "completed",
    "step.skipped": "skipped",
    "step.failed": "failed",
    "step.cancelled": "cancelled",
}
_EMPTY: Final[Mapping[str, Any]] = {}


def as_int(value: Any) -> int | None:
    """``value`` if it is an integer (not a bool), else ``None``."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def as_str(value: Any) -> str | None:
    """``value`` if it is a string, else ``None``."""
    return value if isinstance(value, str) else None


def _duration(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        number = float(value)
    except OverflowError:  # an int too large for a float
        return None
    return number if math.isfinite(number) else None


def _error(record: Mapping[str, Any]) -> Mapping[str, Any] | None:
    error = record.get("error")
    return error if error is not None and isinstance(error, Mapping) else None


@dataclass(eq=False, slots=True)
class Step:
    """One step of a run (or a run's finalization), as far as its records got."""

    id: str
    agent: bool = False
    """An agent step: the snapshot says so, or a turn of it recorded agent attributes."""
    name: str | None = None
    description: str | None = None
    status: StepStatus = "planned"
    """``planned`` until an attempt starts (a progress report does not start it); once terminal,
    no late record reopens it."""
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
    """The call's run once it started (root scope)."""

    @property
    def tool(self) -> str | None:
        """The registry alias: as the call's run recorded it, else as the turn attributed it."""
        own = None if self.run is None else self.run.tool
        return own or self.attributed_tool


@dataclass(eq=False, slots=True)
class Run:
    """One run (one generation of a run id) as far as its records got."""

    run_id: str
    arrival: int = 0
    """The order of the run's first record among runs (scope "all")."""
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
    errors: list[Mapping[str, Any]] = field(default_factory=list)
    """Every wire error of its records (scope "all")."""
    agents: dict[str, Mapping[str, Any] | None] | None = None
    """The agent steps of the definition snapshot with their metadata; ``None`` without one."""
    steps: dict[str, Step] = field(default_factory=dict)
    finalize: Step | None = None
    skipped: Step | None = None
    """The last step that was skipped (for a call: why its tool did not run)."""
    progress: Mapping[str, Any] | None = None
    """The last progress report of any of its steps."""
    summary: dict[str, dict[str, Any]] = field(default_factory=dict)
    """``step.attempted`` attributes without a call id, merged in order, by step id."""
    tool: str | None = None
    """``agent.tool`` and ``agent.parentAttemptId`` as the run recorded them for itself."""
    parent_attempt_id: str | None = None
    calls: dict[str, Call] = field(default_factory=dict)
    """A turn's calls by id (scope "all": those its ``calls`` step attributed)."""
    call_total: int = 0
    """Root scope: the calls a turn declared, how many failed, and the finished ones kept."""
    failed_calls: int = 0
    kept: tuple[list[Call], list[Call]] | None = None
    call: Call | None = None
    """A call run's call (root scope)."""

    @property
    def kind(self) -> RunKind:
        """``call``, ``turn``, ``agent`` or ``pipeline`` (see the module docstring)."""
        parent = self.parent
        if parent is not None:
            if self.iteration_run_id == parent.run_id:
                step = parent.steps.get(self.iteration_step_id or "")
                if step is not None and step.agent:
                    return "turn"
            elif self.item_key is not None and parent.kind == "turn":
                return "call"
        return "agent" if any(step.agent for step in self.steps.values()) else "pipeline"

    def attribute(self, step_id: str, key: str) -> Any:
        """``key`` of the merged summary attributes of ``step_id`` (``None`` if absent)."""
        return self.summary.get(step_id, _EMPTY).get(key)

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
            agent = self.agents is not None and step_id in self.agents
            step = self.steps[step_id] = Step(step_id, agent)
        return step


_Handler = Callable[["TraceFold", Run, Mapping[str, Any], Mapping[str, Any]], bool]


class TraceFold:
    """Folds trace records, one at a time, into :class:`Run` objects (see the module docstring).

    Args:
        scope: ``"all"`` (every run) or ``"root"`` (the first root run, bounded).
    """

    def __init__(self, *, scope: Literal["all", "root"] = "all") -> None:
        self._all = scope == "all"
        #: Every run in arrival order (scope "all").
        self.runs: list[Run] = []
        #: The first root run (scope "root").
        self.root: Run | None = None
        #: Records ignored as malformed: not a mapping, no string ``runId`` (and in root scope
        #: ``name``).
        self.dropped = 0
        # Scope "all": the latest generation of every run id. Root scope: the root, and the turns
        # and calls still running.
        self._open: dict[str, Run] = {}

    def run(self, run_id: str) -> Run | None:
        """The latest run called ``run_id`` (in root scope: the root, or one still running)."""
        return self._open.get(run_id)

    def add(self, record: Mapping[str, Any]) -> Run | None:
        """Fold ``record``; return the run it was about, or ``None`` if it was ignored."""
        try:
            run_id = record.get("runId")
            name = record.get("name")
        except AttributeError:  # not a mapping
            self.dropped += 1
            return None
        if not isinstance(run_id, str) or not (self._all or isinstance(name, str)):
            self.dropped += 1
            return None
        run = self._open.get(run_id)
        if self._all:
            if run is None or (name == "pipeline.started" and run.started):
                run = self._open[run_id] = Run(run_id, len(self.runs))
                self.runs.append(run)
            self._relations(run, record)
        elif run is None:
            run = self._adopt(run_id, record) if name == "pipeline.started" else None
            if run is None:
                return None
        handler = _HANDLERS.get(name) if isinstance(name, str) else None
        if handler is None:
            return run
        payload = record.get("payload")
        # ``type() is dict`` first: the Mapping check alone costs more than folding most records.
        if type(payload) is not dict and not isinstance(payload, Mapping):
            payload = _EMPTY
        return run if handler(self, run, record, payload) else None

    def _relations(self, run: Run, record: Mapping[str, Any]) -> None:
        """Scope "all": the first of each relation field that a record has, and its error."""
        if run.pipeline_id is None:
            run.pipeline_id = as_str(record.get("pipelineId"))
        if run.parent_run_id is None:
            run.parent_run_id = as_str(record.get("parentRunId"))
        if run.parent is None and run.parent_run_id is not None:
            # Linked as soon as the parent is known: if its id is reused later in the file, the
            # parent is the generation that was running at this moment.
            run.parent = self._open.get(run.parent_run_id)
        if run.item_key is None:
            run.item_key = as_str(record.get("itemKey"))
        if run.iteration_run_id is None and run.index is None:
            iteration = record.get("iteration")
            if iteration is not None:
                _iteration(run, iteration, stringify=False)
        ts = record.get("timestampMs")
        if type(ts) is int and (run.first_ms is None or ts < run.first_ms):
            run.first_ms = ts
        error = _error(record)
        if error is not None:
            run.errors.append(error)

    def _adopt(self, run_id: str, record: Mapping[str, Any]) -> Run | None:
        """Root scope: the run a ``pipeline.started`` begins, if the scope follows it."""
        parent_id = record.get("parentRunId")
        root = self.root
        if parent_id is None:
            if root is None:
                self.root = self._begin(run_id, record, None)
            return self.root if root is None else None
        if root is None or not isinstance(parent_id, str):
            return None
        if parent_id == root.run_id:
            iteration = record.get("iteration")
            if not isinstance(iteration, Mapping) or iteration.get("runId") != parent_id:
                return None
            run = self._begin(run_id, record, root)
            _iteration(run, iteration, stringify=True)
            self._window(root.step(run.iteration_step_id or ""), run)
            return run
        turn = self._open.get(parent_id)
        item_key = record.get("itemKey")
        if turn is None or turn.kind != "turn" or not isinstance(item_key, str):
            return None
        run = self._begin(run_id, record, turn)
        run.call = turn.calls.get(item_key) or _declare(turn, item_key)
        run.call.run = run
        return run

    def _begin(self, run_id: str, record: Mapping[str, Any], parent: Run | None) -> Run:
        run = self._open[run_id] = Run(run_id, pipeline_id=as_str(record.get("pipelineId")))
        if parent is not None:
            run.parent, run.parent_run_id = parent, parent.run_id
            run.item_key = as_str(record.get("itemKey"))
        return run

    def _window(self, step: Step, turn: Run) -> None:
        """Root scope: ``turn`` is the step's newest; only the two newest keep calls."""
        turns = step.turns
        if turns is None:
            turns = step.turns = deque(maxlen=MAX_TURNS)
        if len(turns) > 1:
            turns[1].calls.clear()
            turns[1].kept = None
        if len(turns) == MAX_TURNS and self._open.get(turns[-1].run_id) is turns[-1]:
            del self._open[turns[-1].run_id]
        turns.appendleft(turn)
        step.turn_count += 1

    def _forget(self, run: Run) -> None:
        """Root scope: a turn or call completed; a finished call stays while there is room."""
        if run is self.root:
            return
        if self._open.get(run.run_id) is run:
            del self._open[run.run_id]
        call, turn = run.call, run.parent
        if call is None or turn is None:
            return
        failed = run.status == "failed"
        turn.failed_calls += failed
        if turn.calls.get(call.call_id) is not call:
            return
        if turn.kept is None:
            turn.kept = ([], [])
        group = turn.kept[failed]
        group.append(call)
        if len(group) > MAX_CALLS:
            # The group is full: drop whichever of its members (this call included) comes last.
            last = max(group, key=lambda c: c.seq)
            group.remove(last)
            del turn.calls[last.call_id]


def _iteration(run: Run, iteration: Any, *, stringify: bool) -> None:
    if not isinstance(iteration, Mapping):
        return
    run.iteration_run_id = as_str(iteration.get("runId"))
    step_id = iteration.get("stepId")
    # The reporters have always grouped turns under str(stepId), even when it is no string.
    run.iteration_step_id = str(step_id) if stringify else as_str(step_id)
    run.index = as_int(iteration.get("index"))


def _declare(turn: Run, call_id: str) -> Call:
    turn.call_total += 1
    call = turn.calls[call_id] = Call(call_id, turn.call_total)
    return call


# -- what each record says (a handler returns whether the record was used) ----------------------
def _started(fold: TraceFold, run: Run, record: Mapping[str, Any], payload: Any) -> bool:
    if run.started:  # root scope: a repeated start changes nothing
        return False
    run.started = True
    run.started_ms = as_int(record.get("timestampMs"))
    run.dry_run = payload.get("dryRun") is True
    run.step_count = as_int(payload.get("stepCount"))
    snapshot = payload.get("definitionSnapshot")
    steps = snapshot.get("steps") if isinstance(snapshot, Mapping) else None
    if isinstance(steps, list):
        agents: dict[str, Mapping[str, Any] | None] = {}
        for entry in steps:
            if isinstance(entry, Mapping) and "agent" in entry and isinstance(entry.get("id"), str):
                meta = entry["agent"]
                if agents.get(entry["id"]) is None:  # the first metadata of an id wins
                    agents[entry["id"]] = meta if isinstance(meta, Mapping) else None
        run.agents = agents
        for step in run.steps.values():
            step.agent = step.agent or step.id in agents
    return True


def _completed(fold: TraceFold, run: Run, record: Mapping[str, Any], payload: Any) -> bool:
    status = payload.get("status")
    # An unknown status from a foreign writer still ended the run; call it failed.
    run.status = _RUN_STATUSES.get(status, "failed") if isinstance(status, str) else "failed"
    run.dry_run = run.dry_run or payload.get("dryRun") is True
    run.duration_ms = _duration(record.get("durationMs"))
    run.error = _error(record)
    run.error_count = as_int(payload.get("errorCount"))
    if not fold._all:
        fold._forget(run)
    return True


def _finalize(fold: TraceFold, run: Run, record: Mapping[str, Any], payload: Any) -> bool:
    step = run.finalize
    if step is None:
        step = run.finalize = Step("finalize")
    if record["name"] == "pipeline.finalize.started":
        step.status = "running"
        step.started_ms = as_int(record.get("timestampMs"))
    else:
        step.status = "completed" if record["name"] == "pipeline.finalize.completed" else "failed"
        step.duration_ms = _duration(record.get("durationMs"))
        step.error = _error(record)
    return True


def _step_record(fold: TraceFold, run: Run, record: Mapping[str, Any], payload: Any) -> bool:
    step_id = record.get("stepId")
    if not isinstance(step_id, str):
        return False
    step = run.step(step_id)
    attempt_id = record.get("attemptId")
    if isinstance(attempt_id, str):
        step.attempt_id = attempt_id
    name = record["name"]
    if name == "step.running":
        progress = payload.get("progress")
        if progress is not None:
            step.progress = run.progress = progress if isinstance(progress, Mapping) else _EMPTY
        elif step.status in ("planned", "running"):  # a late start never reopens a step
            step.status = "running"
            step.started_ms = as_int(record.get("timestampMs"))
            step.progress = None
    elif name == "step.attempted":
        attributes = payload.get("attributes")
        if isinstance(attributes, Mapping):
            _attributes(run, step_id, attributes)
    elif name == "step.planned":
        step.name = as_str(payload.get("name"))
        step.description = as_str(payload.get("description"))
        nested = payload.get("nestedPipeline")
        ids = nested.get("stepIds") if isinstance(nested, Mapping) else None
        if isinstance(ids, list) and nested.get("mode") == "iterate":
            step.iterates = tuple(str(i) for i in ids)
    else:
        step.status = _TERMINAL[name]
        step.reason = as_str(payload.get("reason"))
        step.dependency_id = as_str(payload.get("dependencyId"))
        step.message = as_str(payload.get("message"))
        step.duration_ms = _duration(record.get("durationMs"))
        error = _error(record)
        if error is not None:
            step.error = error
        if name == "step.skipped":
            run.skipped = step
    return True


def _attributes(run: Run, step_id: str, attributes: Mapping[str, Any]) -> None:
    call_id = attributes.get("agent.callId")
    if "agent.callId" not in attributes:
        merged = run.summary.get(step_id)
        if merged is None:
            merged = run.summary[step_id] = {}
        merged.update(attributes)
    elif step_id == "calls" and isinstance(call_id, str) and call_id not in run.calls:
        # Newer writers attribute every call on the turn's calls step before it starts (which
        # also names calls that never started).
        call = _declare(run, call_id)
        call.attributed_tool = as_str(attributes.get("agent.tool"))
        call.parent_attempt_id = as_str(attributes.get("agent.parentAttemptId"))
    if call_id is None or call_id == run.item_key:  # what the run says about itself, as a call
        run.tool = run.tool or as_str(attributes.get("agent.tool"))
        run.parent_attempt_id = run.parent_attempt_id or as_str(
            attributes.get("agent.parentAttemptId")
        )
    parent = run.parent
    if "agent.turn" in attributes and parent is not None and run.iteration_run_id == parent.run_id:
        step = parent.steps.get(run.iteration_step_id or "")
        if step is not None:
            step.agent = True  # a turn says so, whatever the snapshot said


_HANDLERS: Final[Mapping[str, _Handler]] = {
    "pipeline.started": _started,
    "pipeline.completed": _completed,
    "pipeline.finalize.started": _finalize,
    "pipeline.finalize.completed": _finalize,
    "pipeline.finalize.failed": _finalize,
    **dict.fromkeys(("step.planned", "step.running", "step.attempted", *_TERMINAL), _step_record),
}
