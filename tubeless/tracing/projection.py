"""Run trees: what happened, run by run, projected from the fold of trace v3 records.

:func:`run_trees` accepts the records of any number of run trees, interleaved as they were
written (one NDJSON file may hold many appended runs), folds them with
:class:`~tubeless.tracing.fold.TraceFold` and returns one frozen :class:`RunTree` per root run.
A run whose parent is not among the records becomes a root too, so nothing is lost. Agent runs
also get an :class:`AgentHistory` (turns and calls). :func:`format_tree` and
:func:`format_run_list` render the text the CLI prints; every piece of recorded text goes
through :func:`terminal_safe` first.

Example:
    >>> trees = run_trees(trace.records)  # doctest: +SKIP
    >>> print(format_tree(trees[0]))  # doctest: +SKIP
    Run scripted-agent:6f0e...  scripted-agent  completed  3ms
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, fields
from typing import Any

from tubeless.tracing._call_progress import CallProgress
from tubeless.tracing._projection_agents import (
    AgentHistory,
    CallNode,
    Termination,
    TurnNode,
    agent_history,
    plain_data,
)
from tubeless.tracing._projection_text import (
    describe_error,
    format_duration,
    format_run_list,
    format_tree,
    terminal_safe,
)
from tubeless.tracing.fold import TraceFold
from tubeless.tracing.runs import Run, RunStatus, StepStatus, as_str, waiting_error

__all__ = [
    "AgentHistory",
    "CallNode",
    "CallProgress",
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


@dataclass(frozen=True, kw_only=True, slots=True)
class StepNode:
    """One plan step of a run, as far as the records got."""

    id: str
    """The step id."""
    status: StepStatus
    """``planned`` (never started), ``running`` (started, no terminal record), or terminal
    (``waiting`` for a step that stopped for approval)."""
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
        return plain_data(self)


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
    nothing about whether a process is still alive); ``waiting``, a run that stopped for
    approval (recorded ``failed`` with ``TUBELESS_APPROVAL_REQUIRED``, a call below it
    waiting)."""
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
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out["steps"] = [step.to_dict() for step in self.steps]
        out["children"] = []  # filled in by to_dict, without recursion
        out["agent"] = None if self.agent is None else self.agent.to_dict()
        return out

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
    fold = TraceFold()
    for record in records:
        fold.add(record)
    return _Forest(fold).roots()


class _Forest:
    """The fold's runs linked into trees and projected bottom-up into :class:`RunTree`."""

    def __init__(self, fold: TraceFold) -> None:
        self.runs = fold.runs
        self.parents: dict[Run, Run] = {}
        for run in self.runs:
            parent = run.parent
            if parent is None and run.parent_run_id is not None:
                parent = fold.run(run.parent_run_id)  # a parent whose records came later
            if parent is not None and parent is not run:
                self.parents[run] = parent
        self.kids: dict[Run, list[Run]] = {}
        for run, parent in self.parents.items():
            self.kids.setdefault(parent, []).append(run)
        for kids in self.kids.values():
            kids.sort(key=_order)
        self.trees: dict[Run, RunTree] = {}

    def roots(self) -> list[RunTree]:
        """Every run ends up under one root, by start time then arrival."""
        roots = sorted((run for run in self.runs if run not in self.parents), key=_order)
        placed: set[Run] = set()
        for root in roots:
            self._project(root, placed)
        # Runs left over sit on a parentRunId cycle (only a corrupt file has one): make the
        # earliest of them a root, which projects the rest of its cycle below it.
        for run in sorted(self.runs, key=_order):
            if run not in placed:
                roots.append(run)
                self._project(run, placed)
        return [self.trees[root] for root in roots]

    def _project(self, root: Run, placed: set[Run]) -> None:
        placed.add(root)
        stack: list[tuple[Run, bool]] = [(root, False)]
        while stack:
            run, expanded = stack.pop()
            if expanded:
                self.trees[run] = self._tree(run)
                continue
            # Drop a kid already placed elsewhere (the way back around a cycle).
            kids = self.kids[run] = [kid for kid in self.kids.get(run, ()) if kid not in placed]
            placed.update(kids)
            stack.append((run, True))
            stack.extend((kid, False) for kid in reversed(kids))

    def _tree(self, run: Run) -> RunTree:
        steps = tuple(
            StepNode(
                id=step.id,
                # A progress report shows the step ran, even when its start was not recorded.
                status="running"
                if step.status == "planned" and step.progress is not None
                else "waiting"
                if step.status == "failed" and run.waits and waiting_error(step.error)
                else step.status,
                reason=step.reason,
                attempt_id=step.attempt_id,
                duration_ms=step.duration_ms,
                error_code=None if step.error is None else as_str(step.error.get("code")),
                source_code=None if step.error is None else as_str(step.error.get("sourceCode")),
            )
            for step in run.steps.values()
        )
        error = run.error
        return RunTree(
            run_id=run.run_id,
            pipeline_id=run.pipeline_id or "",
            parent_run_id=run.parent_run_id,
            item_key=run.item_key,
            iteration_index=run.index,
            status="waiting" if run.waiting else run.status,
            dry_run=run.dry_run,
            started_at_ms=run.started_ms if run.started_ms is not None else run.first_ms,
            duration_ms=run.duration_ms,
            error_code=None if error is None else as_str(error.get("code")),
            error_message=None if error is None else as_str(error.get("message")),
            error_summary=None if error is None else describe_error(error),
            steps=steps,
            children=tuple(self.trees[kid] for kid in self.kids.get(run, ())),
            agent=agent_history(run, steps, self.kids, self.trees),
        )


def _order(run: Run) -> tuple[bool, int, int]:
    start = run.started_ms if run.started_ms is not None else run.first_ms
    return (start is None, start or 0, run.arrival)
