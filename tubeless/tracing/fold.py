"""One fold of the trace stream: what the records say about runs, steps, agent turns and calls.

:class:`TraceFold` takes trace v3 records one at a time, as a sink receives them while a run goes
on or as ``tubeless trace show`` reads them from a file, and keeps one
:class:`~tubeless.tracing.runs.Run` per run. Every reader of records reads those objects: the
run-tree projection (and the text of ``trace show``), the plain reporter and the live view. A
reporter still looks at a record to know *when* something happened; what it shows comes from
the fold.

- ``TraceFold()`` keeps every run of every run tree in the records (one NDJSON file may hold many
  appended runs; a ``pipeline.started`` for a run id that already started begins a new run). A
  call's tool is the one its run recorded, else the one its turn attributed to its call id.
  ``TraceFold(keep=False)`` folds the same way but lets go of each run once its
  ``pipeline.completed`` is folded (``add`` still returns it, and ``runs`` stays empty): memory
  follows the runs still open, for a reader that is done with a run when it ends (the
  OpenTelemetry sink, which ends the run's span then).
- ``TraceFold(scope="root")`` keeps what a reporter shows while a run goes on, in memory that does
  not grow with the run: the first root run and its steps, the runs its steps iterate (turns: per
  step the newest :data:`MAX_TURNS`, older ones only counted), and the tool calls of those turns
  (only the two newest turns keep calls: every pending or running one and, of the finished ones,
  the first :data:`MAX_CALLS` failed and the first :data:`MAX_CALLS` others in decision order).
  Of a turn or a call it keeps no steps, only its status, timing, error, and a turn's agent
  attributes or a call's last progress report and skip; a completed one is forgotten by id.
  Reporters run this on every record, so its handlers test types inline rather than through
  helpers (the plain reporter on it costs what it did before: about 8,000 machine instructions
  per record of a traced W1 run).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any, Final, Literal, TypeGuard

from tubeless.tracing.runs import Call, Run, RunStatus, Step, StepStatus, as_int, as_str

__all__ = ["MAX_CALLS", "MAX_TURNS", "TraceFold"]

#: Turns kept per iterated step in root scope (the newest; older ones are only counted).
MAX_TURNS: Final = 32
#: Finished calls kept per turn and group (failed, and the others) in root scope.
MAX_CALLS: Final = 32

_RUN_STATUSES: Final[Mapping[str, RunStatus]] = {s: s for s in ("completed", "failed", "cancelled")}
_TERMINAL: Final[Mapping[str, StepStatus]] = {
    "step.complete": "completed",
    "step.skipped": "skipped",
    "step.failed": "failed",
    "step.cancelled": "cancelled",
}
_EMPTY: Final[Mapping[str, Any]] = MappingProxyType({})
#: Settled calls that count as failed (a denied or waiting call did not fail: a person decides).
_FAILED_SETTLED: Final = frozenset({"failed", "interrupted"})


def _duration(value: Any) -> float | None:
    if type(value) is float:
        return value if math.isfinite(value) else None
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        number = float(value)
    except OverflowError:  # an int too large for a float
        return None
    return number if math.isfinite(number) else None


def _is_mapping(value: Any) -> TypeGuard[Mapping[str, Any]]:
    # ``type() is dict`` first: through the ABC alone, the check costs more than most records.
    return type(value) is dict or (value is not None and isinstance(value, Mapping))


def _error(record: Mapping[str, Any]) -> Mapping[str, Any] | None:
    error = record.get("error")
    return None if error is None or not _is_mapping(error) else error


_Handler = Callable[["TraceFold", Run, Mapping[str, Any], Mapping[str, Any]], bool]


class TraceFold:
    """Folds trace records, one at a time, into :class:`Run` objects (see the module docstring).

    Args:
        scope: ``"all"`` (every run) or ``"root"`` (the first root run, bounded).
        keep: Scope ``"all"``: keep finished runs (``False``: forget each one as it completes).
    """

    def __init__(self, *, scope: Literal["all", "root"] = "all", keep: bool = True) -> None:
        self._all = scope == "all"
        self._keep = keep or not self._all
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

    def running(self) -> list[Run]:
        """Root scope: the turns and calls still running (their records are still followed)."""
        return [run for run in self._open.values() if run is not self.root]

    def add(self, record: Mapping[str, Any]) -> Run | None:
        """Fold ``record``; return the run it was about, or ``None`` if it was ignored."""
        try:
            run_id = record.get("runId")
            name = record.get("name")
        except AttributeError:  # not a mapping
            self.dropped += 1
            return None
        if type(run_id) is not str:
            self.dropped += 1
            return None
        run = self._open.get(run_id)
        if self._all:
            if run is None or (name == "pipeline.started" and run.started):
                run = self._open[run_id] = Run(run_id)
                if self._keep:
                    run.arrival = len(self.runs)
                    self.runs.append(run)
            self._relations(run, record)
            handler = _HANDLERS.get(name) if isinstance(name, str) else None
        elif type(name) is not str:
            self.dropped += 1
            return None
        elif run is None:
            if name == "pipeline.started":
                return self._adopt(run_id, record)
            if name == "step.attempted":
                self._peek(record)
            return None
        elif run is self.root:
            handler = _HANDLERS.get(name)
        else:
            handler = (_TURN_HANDLERS if run.call is None else _CALL_HANDLERS).get(name)
        if handler is None:
            return None
        payload = record.get("payload")
        if type(payload) is not dict and not _is_mapping(payload):
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
                _iteration(run, iteration)
        parent = run.parent
        if run.iterated is None and parent is not None and run.iteration_run_id == parent.run_id:
            run.iterated = parent.steps.get(run.iteration_step_id or "")
        ts = record.get("timestampMs")
        if type(ts) is int and (run.first_ms is None or ts < run.first_ms):
            run.first_ms = ts
        error = _error(record)
        if error is not None:
            run.errors += (error,)  # a run has a few (its steps', finalization's, its own)

    def _adopt(self, run_id: str, record: Mapping[str, Any]) -> Run | None:
        """Root scope: the run a ``pipeline.started`` begins, if the scope follows it."""
        parent_id = record.get("parentRunId")
        root = self.root
        if parent_id is None:
            if root is not None:
                return None
            run = self.root = self._open[run_id] = Run(run_id)
            run.pipeline_id = as_str(record.get("pipelineId"))
            payload = record.get("payload")
            _started(self, run, record, payload if _is_mapping(payload) else _EMPTY)
            return run
        elif root is None or type(parent_id) is not str:
            return None
        elif parent_id == root.run_id:  # an iteration (turn) of one of its steps
            iteration = record.get("iteration")
            if type(iteration) is not dict and not _is_mapping(iteration):
                return None
            if iteration.get("runId") != parent_id:
                return None
            run = Run(run_id)
            run.parent, run.parent_run_id, run.iteration_run_id = root, parent_id, parent_id
            run.item_key = as_str(record.get("itemKey"))
            # The reporters have always grouped turns under str(stepId), even when it is no
            # string.
            run.iteration_step_id = step_id = str(iteration.get("stepId"))
            index = iteration.get("index")
            run.index = index if type(index) is int else None
            run.iterated = root.step(step_id)
            self._window(run.iterated, run)
        else:  # a call of a turn
            turn = self._open.get(parent_id)
            item_key = record.get("itemKey")
            if turn is None or type(item_key) is not str or turn.kind != "turn":
                return None
            run = Run(run_id)
            run.parent, run.parent_run_id, run.item_key = turn, parent_id, item_key
            call = run.call = turn.calls.get(item_key) or _declare(turn, item_key)
            call.run = run
        # Of a turn or a call, root scope keeps its start time only.
        pipeline_id, ts = record.get("pipelineId"), record.get("timestampMs")
        run.pipeline_id = pipeline_id if type(pipeline_id) is str else None
        run.started, run.started_ms = True, ts if type(ts) is int else None
        self._open[run_id] = run
        return run

    def _peek(self, record: Mapping[str, Any]) -> None:
        """Root scope: a run it does not follow (a delegated agent's turn) has a call waiting
        for approval, so the root's tree waits."""
        payload = record.get("payload")
        attributes = payload.get("attributes") if _is_mapping(payload) else None
        root = self.root
        if root is not None and _is_mapping(attributes):
            if attributes.get("agent.callStatus") != "waiting":
                return
            root.waits = True
            for run in self._open.values():  # the ones that fail as it stops
                run.waits = True

    def _window(self, step: Step, turn: Run) -> None:
        """Root scope: ``turn`` is the step's newest; only the two newest keep calls."""
        turns = step.turns
        if turns is None:
            turns = step.turns = deque(maxlen=MAX_TURNS)
        elif len(turns) > 1:
            older = turns[1]
            if older.calls:
                for call in older.calls.values():
                    call.run = None  # see _forget
                del older.calls  # back to the class's empty default
                older.kept = None
            oldest = turns[-1]
            if len(turns) == MAX_TURNS and self._open.get(oldest.run_id) is oldest:
                del self._open[oldest.run_id]
        turns.appendleft(turn)
        step.turn_count += 1

    def _forget(self, run: Run) -> None:
        """Root scope: a turn or call completed; a finished call stays while there is room.

        Scope "all" without ``keep``: any run completed, and is forgotten by id.
        """
        if self._open.get(run.run_id) is run:
            del self._open[run.run_id]
        call = run.call
        if call is None:
            return
        turn = run.parent
        assert turn is not None  # a call run's parent is its turn
        self._finished(turn, call, run.status == "failed")

    def _finished(self, turn: Run, call: Call, failed: bool) -> None:
        """Root scope: ``call`` of ``turn`` finished; it stays while its group has room."""
        if failed:
            turn.failed_calls += 1
        if turn.calls.get(call.call_id) is not call:
            return
        kept = turn.kept
        if kept is not None:
            kept[failed].append(call)
        elif turn.call_total <= MAX_CALLS:
            return  # no group can be full yet
        else:
            kept = turn.kept = ([], [])
            for other in turn.calls.values():  # once: the finished calls so far, this one too
                if other.run is not None and other.run.status != "running":
                    kept[other.run.status == "failed"].append(other)
                elif other.run is None and other.settled is not None:
                    kept[other.settled in _FAILED_SETTLED].append(other)
        group = kept[failed]
        if len(group) > MAX_CALLS:
            # The group is full: drop whichever of its members (this call included) comes last.
            last = max(group, key=lambda c: c.seq)
            group.remove(last)
            del _own_calls(turn)[last.call_id]
            # A call the window lets go no longer points at its run: nothing then leads back from
            # the run to its turn, so both are freed at once rather than by the cycle collector.
            last.run = None


def _iteration(run: Run, iteration: Any) -> None:
    if _is_mapping(iteration):
        run.iteration_run_id = as_str(iteration.get("runId"))
        run.iteration_step_id = as_str(iteration.get("stepId"))
        run.index = as_int(iteration.get("index"))


def _own_calls(turn: Run) -> dict[str, Call]:
    if not isinstance(turn.calls, dict):
        turn.calls = {}
    return turn.calls


def _declare(turn: Run, call_id: str) -> Call:
    turn.call_total += 1
    call = _own_calls(turn)[call_id] = Call(call_id, turn.call_total)
    return call


# -- what each record says (a handler returns whether the record was used) ----------------------
def _started(fold: TraceFold, run: Run, record: Mapping[str, Any], payload: Any) -> bool:
    if run.started:  # root scope: a repeated start changes nothing
        return False
    run.started = True
    ts, count = record.get("timestampMs"), payload.get("stepCount")
    run.started_ms = ts if type(ts) is int else None
    run.step_count = count if type(count) is int else None
    if payload.get("dryRun") is True:
        run.dry_run = True
    snapshot = payload.get("definitionSnapshot")
    if snapshot is None:
        return True
    steps = snapshot.get("steps") if _is_mapping(snapshot) else None
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
    run.status = _RUN_STATUSES.get(status, "failed") if type(status) is str else "failed"
    run.duration_ms = _duration(record.get("durationMs"))
    run.error = _error(record)
    if not fold._keep:  # scope "all" without keep: the reader is done with the run
        fold._forget(run)
    elif not fold._all and run is not fold.root:
        fold._forget(run)  # of a turn or a call, root scope keeps no more
        return True
    count = payload.get("errorCount")
    run.error_count = count if type(count) is int else None
    if payload.get("dryRun") is True:
        run.dry_run = True
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
        else:  # a new attempt
            step.progress = None
            # A late start does not reopen a finished step of a stored trace (where a reused run
            # id begins a new run); while a run goes on, it is the step running again.
            if step.status == "planned" or step.status == "running" or not fold._all:
                step.status = "running"
                step.started_ms = as_int(record.get("timestampMs"))
    elif name == "step.attempted":
        _attributes(fold, run, record, payload)
    elif name == "step.planned":
        step.name = as_str(payload.get("name"))
        step.description = as_str(payload.get("description"))
        nested = payload.get("nestedPipeline")
        ids = nested.get("stepIds") if isinstance(nested, Mapping) else None
        if isinstance(ids, list) and nested.get("mode") == "iterate":
            step.iterates = tuple(str(i) for i in ids)
    else:
        _ended(run, step, name, record, payload)
    return True


# -- root scope keeps the steps of the root only; of a turn or a call, what a reporter shows ---
def _child_progress(fold: TraceFold, run: Run, record: Mapping[str, Any], payload: Any) -> bool:
    progress = payload.get("progress")
    if progress is None:  # an attempt starting
        return False
    run.progress = progress if type(progress) is dict or _is_mapping(progress) else _EMPTY
    return True


def _child_skipped(fold: TraceFold, run: Run, record: Mapping[str, Any], payload: Any) -> bool:
    step_id = record.get("stepId")
    _ended(run, Step(step_id if type(step_id) is str else ""), "step.skipped", record, payload)
    return True


def _ended(run: Run, step: Step, name: str, record: Mapping[str, Any], payload: Any) -> None:
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


def _attributes(fold: TraceFold, run: Run, record: Mapping[str, Any], payload: Any) -> bool:
    """A ``step.attempted``: the attributes of the attempt (agent turn facts, call identity)."""
    step_id, attributes = record.get("stepId"), payload.get("attributes")
    if type(step_id) is not str:
        return False
    if type(attributes) is not dict and not _is_mapping(attributes):
        return True
    if "agent.callId" in attributes:
        call_id = attributes["agent.callId"]
        if step_id == "calls" and type(call_id) is str and call_id not in run.calls:
            # Newer writers attribute every call on the turn's calls step before it starts
            # (which also names calls that never started).
            call = _declare(run, call_id)
            call.attributed_tool = as_str(attributes.get("agent.tool"))
            call.parent_attempt_id = as_str(attributes.get("agent.parentAttemptId"))
        if "agent.callStatus" in attributes and step_id == "calls" and type(call_id) is str:
            _marked(fold, run, call_id, attributes)
        own = call_id is None or call_id == run.item_key
    else:
        summary = run.summary
        if not isinstance(summary, dict):
            summary = run.summary = {}
        first = summary.get(step_id)
        # The first record's attributes are kept as they are (records are read-only); a second
        # one for the same step (a retried attempt) merges into a new dict.
        summary[step_id] = attributes if first is None else {**first, **attributes}
        own = True
    if own and ("agent.tool" in attributes or "agent.parentAttemptId" in attributes):
        # What the run says about itself, as a call.
        if not run.tool:
            run.tool = as_str(attributes.get("agent.tool"))
        if not run.parent_attempt_id:
            run.parent_attempt_id = as_str(attributes.get("agent.parentAttemptId"))
    if run.iterated is not None and "agent.turn" in attributes:
        run.iterated.agent = True  # a turn says so, whatever the snapshot said
    return True


def _marked(fold: TraceFold, turn: Run, call_id: str, attributes: Mapping[str, Any]) -> None:
    """A call's ``agent.callStatus`` (waiting, denied, or how a resumed turn settled it)."""
    call = turn.calls.get(call_id)
    status = attributes.get("agent.callStatus")
    if call is None or type(status) is not str or call.marked is not None:
        return
    call.marked = status
    ok = attributes.get("agent.callOk")
    call.ok = ok if type(ok) is bool else None
    call.error_code = as_str(attributes.get("agent.callErrorCode"))
    call.reason_given = attributes.get("agent.reasonGiven") is True
    if status == "waiting":
        turn.waiting_calls += 1
        node: Run | None = turn
        while node is not None and not node.waits:  # stops at a marked one (and on a cycle)
            node.waits = True
            node = node.parent
        if not fold._all and fold.root is not None:
            fold.root.waits = True
    settled = call.settled
    if settled is not None and not fold._all and call.run is None:
        fold._finished(turn, call, settled in _FAILED_SETTLED)


_HANDLERS: Final[Mapping[str, _Handler]] = {
    "pipeline.started": _started,
    "pipeline.completed": _completed,
    "pipeline.finalize.started": _finalize,
    "pipeline.finalize.completed": _finalize,
    "pipeline.finalize.failed": _finalize,
    **dict.fromkeys(("step.planned", "step.running", "step.attempted", *_TERMINAL), _step_record),
}
# Root scope: what a turn's and a call's records are folded by (a repeated start is ignored).
# A call's own attributes only repeat the tool its turn attributed, so root scope skips them.
_TURN_HANDLERS: Final[Mapping[str, _Handler]] = {
    "pipeline.started": _started,
    "pipeline.completed": _completed,
    "step.attempted": _attributes,
}
_CALL_HANDLERS: Final[Mapping[str, _Handler]] = {
    "pipeline.started": _started,
    "pipeline.completed": _completed,
    "step.running": _child_progress,
    "step.skipped": _child_skipped,
}
