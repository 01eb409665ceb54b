"""Run trees: a pure fold of trace v3 records into what happened, run by run.

:func:`run_trees` accepts the records of any number of run trees, interleaved as they were
written (one NDJSON file may hold many appended runs), and returns one :class:`RunTree` per root
run. A run whose parent is not among the records becomes a root too, so nothing is lost. Agent
runs also get an :class:`AgentHistory` (turns and calls). :func:`format_tree` and
:func:`format_run_list` render the text the CLI prints; every piece of recorded text goes
through :func:`terminal_safe` first.

Example:
    >>> trees = run_trees(trace.records)  # doctest: +SKIP
    >>> print(format_tree(trees[0]))  # doctest: +SKIP
    Run scripted-agent:6f0e...  scripted-agent  completed  3ms
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from tubeless.tracing._projection_agents import agent_history
from tubeless.tracing._projection_agents import as_int as _int
from tubeless.tracing._projection_agents import as_str as _str
from tubeless.tracing._projection_fold import Run as _Run
from tubeless.tracing._projection_fold import fold as _fold
from tubeless.tracing._projection_history import (
    AgentHistory,
    CallNode,
    Termination,
    TurnNode,
)
from tubeless.tracing._projection_text import (
    describe_error,
    format_duration,
    format_run_list,
    format_tree,
    terminal_safe,
)

__all__ = [
    "AgentHistory",
    "CallNode",
    "RunStatus",
    "RunTree",
    "StepNode",
    "StepStatus",
    "Termination",
    "TurnNode",
    "describe_error",
    "find_run",
    "format_duration",
    "format_run_list",
    "format_tree",
    "run_trees",
    "terminal_safe",
]

RunStatus = Literal["completed", "failed", "cancelled", "running"]
StepStatus = Literal["planned", "running", "completed", "skipped", "failed", "cancelled"]


@dataclass(frozen=True, kw_only=True, slots=True)
class StepNode:
    """One plan step of a run, as far as the records got."""

    id: str
    """The step id."""
    status: StepStatus
    """``planned`` (never started), ``running`` (started, no terminal record), or terminal."""
    reason: str | None
    """Why a skipped step was skipped (``dry-run``, ``fail-fast``, ``policy``, ...)."""
    attempt_id: str | None
    """The step's last attempt."""
    duration_ms: float | None
    """How long the attempt took, when it started and ended."""
    error_code: str | None
    """The code of a failed or cancelled step."""
    source_code: str | None
    """The original code behind ``error_code`` (e.g. a ``ToolError`` code)."""

    def to_dict(self) -> dict[str, Any]:
        """The step as snake_case JSON-ready data."""
        return {
            "id": self.id,
            "status": self.status,
            "reason": self.reason,
            "attempt_id": self.attempt_id,
            "duration_ms": self.duration_ms,
            "error_code": self.error_code,
            "source_code": self.source_code,
        }


@dataclass(frozen=True, kw_only=True, slots=True)
class RunTree:
    """One run and the runs it started."""

    run_id: str
    """The run id."""
    pipeline_id: str
    """The pipeline the run ran."""
    parent_run_id: str | None
    """The run that started this one, as recorded (even when it is not among the records)."""
    item_key: str | None
    """The fan-out item key, ``iteration-<i>`` for an iteration, or the agent call id."""
    iteration_index: int | None
    """The iteration number of an iterated child (an agent turn), from 1."""
    status: RunStatus
    """The run's status; ``running`` means no ``pipeline.completed`` was recorded (which says
    nothing about whether a process is still alive)."""
    dry_run: bool
    """Whether the run was a dry run."""
    started_at_ms: int | None
    """When the run started (epoch milliseconds)."""
    duration_ms: float | None
    """The run's duration, ``None`` if unknown."""
    error_code: str | None
    """The code of the first run error."""
    error_message: str | None
    """The message of the first run error."""
    error_summary: str | None
    """The first run error in the user's terms (:func:`describe_error`): a handler's exception
    as ``<Type>: <message>``, looking through the wrappers of failed child runs."""
    steps: tuple[StepNode, ...]
    """The plan steps, in plan order."""
    children: tuple[RunTree, ...]
    """Child runs (``parentRunId`` = this run), by start time then arrival."""
    agent: AgentHistory | None
    """The agent history when the run's plan has an agent step."""

    def to_dict(self) -> dict[str, Any]:
        """The whole tree as snake_case JSON-ready data."""
        root = self._own_dict()
        stack: list[tuple[RunTree, dict[str, Any]]] = [(self, root)]
        # Iterative, so an adversarially deep trace cannot exhaust the recursion limit.
        while stack:
            tree, out = stack.pop()
            for child in tree.children:
                child_out = child._own_dict()
                out["children"].append(child_out)
                stack.append((child, child_out))
        return root

    def _own_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "pipeline_id": self.pipeline_id,
            "parent_run_id": self.parent_run_id,
            "item_key": self.item_key,
            "iteration_index": self.iteration_index,
            "status": self.status,
            "dry_run": self.dry_run,
            "started_at_ms": self.started_at_ms,
            "duration_ms": self.duration_ms,
            "error_code": self.error_code,
            "error_message": self.error_message,
            "error_summary": self.error_summary,
            "steps": [step.to_dict() for step in self.steps],
            "children": [],
            "agent": None if self.agent is None else self.agent.to_dict(),
        }

    def walk(self) -> Iterator[RunTree]:
        """This run and every run below it, depth first, in order."""
        stack: list[RunTree] = [self]
        while stack:
            tree = stack.pop()
            yield tree
            stack.extend(reversed(tree.children))


def find_run(trees: Iterable[RunTree], run_id: str) -> RunTree | None:
    """The first run called ``run_id`` in ``trees``, searching depth first."""
    for tree in trees:
        for run in tree.walk():
            if run.run_id == run_id:
                return run
    return None


# -- the tree ---------------------------------------------------------------------------------
def run_trees(records: Iterable[Mapping[str, Any]]) -> list[RunTree]:
    """Fold trace records (of one or many run trees, interleaved) into root run trees.

    Roots are runs without a ``parentRunId`` or whose parent is not among the records. Records
    that are not mappings with a string ``runId`` are ignored. A ``pipeline.started`` for a run
    id that already started begins a new run (a caller reused the id in an appended file).

    Returns:
        The roots, by start time then arrival.
    """
    current: dict[str, _Run] = {}
    runs: list[_Run] = []
    for arrival, record in enumerate(records):
        if not isinstance(record, Mapping) or not isinstance(record.get("runId"), str):
            continue
        run_id: str = record["runId"]
        run = current.get(run_id)
        if run is None or (record.get("name") == "pipeline.started" and run.started):
            run = current[run_id] = _Run(run_id, arrival)
            runs.append(run)
        _fold(run, record)
        if run.parent is None and run.parent_run_id is not None:
            # Link as soon as the parent is known: if its id is reused later in the file, the
            # parent is the generation that was running at this moment.
            run.parent = current.get(run.parent_run_id)
    for run in runs:
        if run.parent is None and run.parent_run_id is not None:
            run.parent = current.get(run.parent_run_id)
        if run.parent is run:
            run.parent = None
    return [run.tree for run in _build(runs)]


def _build(runs: list[_Run]) -> list[_Run]:
    """Project every run bottom-up; return the roots (every run ends up under one)."""
    for run in runs:
        if run.parent is not None:
            run.parent.kids.append(run)
    for run in runs:
        run.kids.sort(key=_Run.order)
    roots = sorted((run for run in runs if run.parent is None), key=_Run.order)
    placed: set[int] = set()
    for root in roots:
        _project(root, placed)
    # Runs left over sit on a parentRunId cycle (only a corrupt file has one): make the earliest
    # of them a root, which projects the rest of its cycle below it.
    for run in sorted(runs, key=_Run.order):
        if id(run) not in placed:
            roots.append(run)
            _project(run, placed)
    return roots


def _project(root: _Run, placed: set[int]) -> None:
    placed.add(id(root))
    stack: list[tuple[_Run, bool]] = [(root, False)]
    while stack:
        run, expanded = stack.pop()
        if expanded:
            run.tree = _tree(run)
            continue
        # Drop a kid already placed elsewhere (the way back around a cycle).
        run.kids = [kid for kid in run.kids if id(kid) not in placed]
        placed.update(id(kid) for kid in run.kids)
        stack.append((run, True))
        stack.extend((kid, False) for kid in reversed(run.kids))


def _tree(run: _Run) -> RunTree:
    steps = tuple(
        StepNode(
            id=step_id,
            status=step.status,
            reason=step.reason,
            attempt_id=step.attempt_id,
            duration_ms=step.duration_ms,
            error_code=step.error_code,
            source_code=step.source_code,
        )
        for step_id, step in run.steps.items()
    )
    error = run.run_error
    return RunTree(
        run_id=run.run_id,
        pipeline_id=run.pipeline_id or "",
        parent_run_id=run.parent_run_id,
        item_key=run.item_key,
        iteration_index=_int((run.iteration or {}).get("index")),
        status=run.status,
        dry_run=run.dry_run,
        started_at_ms=run.started_at_ms if run.started_at_ms is not None else run.first_ts,
        duration_ms=run.duration_ms,
        error_code=None if error is None else _str(error.get("code")),
        error_message=None if error is None else _str(error.get("message")),
        error_summary=None if error is None else describe_error(error),
        steps=steps,
        children=tuple(kid.tree for kid in run.kids),
        agent=agent_history(run, run.status, steps),
    )
