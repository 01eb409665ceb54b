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

import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final, Literal, TypeAlias

from tubeless.tracing._projection_agents import (
    AgentHistory,
    CallNode,
    Termination,
    TurnNode,
    agent_history,
)
from tubeless.tracing._projection_agents import as_int as _int
from tubeless.tracing._projection_agents import as_str as _str

__all__ = [
    "AgentHistory",
    "CallNode",
    "RunStatus",
    "RunTree",
    "StepNode",
    "StepStatus",
    "Termination",
    "TurnNode",
    "find_run",
    "format_duration",
    "format_run_list",
    "format_tree",
    "run_trees",
    "terminal_safe",
]

RunStatus = Literal["completed", "failed", "cancelled", "running"]
StepStatus = Literal["planned", "running", "completed", "skipped", "failed", "cancelled"]

_RUN_STATUSES: Final = frozenset({"completed", "failed", "cancelled"})
_TERMINAL: Final[Mapping[str, StepStatus]] = {
    "step.complete": "completed",
    "step.skipped": "skipped",
    "step.failed": "failed",
    "step.cancelled": "cancelled",
}
# C0, DEL and C1 controls; bidi embeddings/overrides, isolates and marks (LRM, RLM, ALM);
# line separators and zero-width characters.
_UNSAFE: Final = (
    *range(0x00, 0x20),
    0x7F,
    *range(0x80, 0xA0),
    *range(0x202A, 0x202F),
    *range(0x2066, 0x206A),
    0x200E,
    0x200F,
    0x061C,
    # Line and paragraph separators, and zero-width characters that hide text.
    0x2028,
    0x2029,
    *range(0x200B, 0x200E),
    0x2060,
    0xFEFF,
)
_SAFE_TABLE: Final = dict.fromkeys(_UNSAFE, " ")
_MAX_INDENT: Final = 32


def terminal_safe(text: str) -> str:
    """``text`` with control (C0, C1, DEL) and bidi override characters replaced by spaces.

    The result has the same length as ``text``, so columns computed on it stay put.
    """
    return text.translate(_SAFE_TABLE)


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


# -- the fold ---------------------------------------------------------------------------------
class _Step:
    __slots__ = (
        "attempt_id",
        "duration_ms",
        "error_code",
        "rank",
        "reason",
        "source_code",
        "status",
    )

    def __init__(self) -> None:
        self.status: StepStatus = "planned"
        self.rank = 0
        self.reason: str | None = None
        self.attempt_id: str | None = None
        self.duration_ms: float | None = None
        self.error_code: str | None = None
        self.source_code: str | None = None


class _Run:
    """What the fold learned about one run (one generation of a run id)."""

    __slots__ = (
        "arrival",
        "attributes",
        "completed",
        "dry_run",
        "duration_ms",
        "errors",
        "first_ts",
        "item_key",
        "iterate_steps",
        "iteration",
        "kids",
        "parent",
        "parent_run_id",
        "pipeline_id",
        "run_error",
        "run_id",
        "snapshot_steps",
        "started",
        "started_at_ms",
        "status",
        "steps",
        "tree",
    )

    tree: RunTree

    def __init__(self, run_id: str, arrival: int) -> None:
        self.run_id = run_id
        self.arrival = arrival
        self.pipeline_id: str | None = None
        self.parent_run_id: str | None = None
        self.parent: _Run | None = None
        self.item_key: str | None = None
        self.iteration: Mapping[str, Any] | None = None
        self.first_ts: int | None = None
        self.started = False
        self.started_at_ms: int | None = None
        self.completed = False
        self.status: RunStatus = "running"
        self.dry_run = False
        self.duration_ms: float | None = None
        self.run_error: Mapping[str, Any] | None = None
        self.errors: list[Mapping[str, Any]] = []
        self.steps: dict[str, _Step] = {}
        self.attributes: dict[str, list[Mapping[str, Any]]] = {}
        self.snapshot_steps: Sequence[Mapping[str, Any]] | None = None
        self.iterate_steps: dict[str, tuple[str, ...]] = {}
        self.kids: list[_Run] = []

    def order(self) -> tuple[bool, int, int]:
        start = self.started_at_ms if self.started_at_ms is not None else self.first_ts
        return (start is None, start or 0, self.arrival)


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


def _fold(run: _Run, record: Mapping[str, Any]) -> None:
    if run.pipeline_id is None and isinstance(record.get("pipelineId"), str):
        run.pipeline_id = record["pipelineId"]
    if run.parent_run_id is None and isinstance(record.get("parentRunId"), str):
        run.parent_run_id = record["parentRunId"]
    if run.item_key is None and isinstance(record.get("itemKey"), str):
        run.item_key = record["itemKey"]
    if run.iteration is None and isinstance(record.get("iteration"), Mapping):
        run.iteration = record["iteration"]
    ts = _int(record.get("timestampMs"))
    if ts is not None and (run.first_ts is None or ts < run.first_ts):
        run.first_ts = ts
    name = record.get("name")
    raw_payload = record.get("payload")
    payload: Mapping[str, Any] = raw_payload if isinstance(raw_payload, Mapping) else {}
    error = record.get("error")
    if isinstance(error, Mapping):
        run.errors.append(error)
    if name == "pipeline.started":
        run.started = True
        run.started_at_ms = ts
        run.dry_run = payload.get("dryRun") is True
        snapshot = payload.get("definitionSnapshot")
        if isinstance(snapshot, Mapping) and isinstance(snapshot.get("steps"), list):
            run.snapshot_steps = [s for s in snapshot["steps"] if isinstance(s, Mapping)]
    elif name == "pipeline.completed":
        run.completed = True
        status = payload.get("status")
        # An unknown status from a foreign writer still ended the run; call it failed.
        run.status = status if status in _RUN_STATUSES else "failed"
        run.dry_run = run.dry_run or payload.get("dryRun") is True
        run.duration_ms = _duration(record.get("durationMs"))
        run.run_error = error if isinstance(error, Mapping) else None
    elif (
        isinstance(name, str) and name.startswith("step.") and isinstance(record.get("stepId"), str)
    ):
        _fold_step(run, name, record["stepId"], record, payload)


def _fold_step(
    run: _Run, name: str, step_id: str, record: Mapping[str, Any], payload: Mapping[str, Any]
) -> None:
    step = run.steps.get(step_id)
    if step is None:
        step = run.steps[step_id] = _Step()
    attempt_id = record.get("attemptId")
    if isinstance(attempt_id, str):
        step.attempt_id = attempt_id
    if name == "step.planned":
        nested = payload.get("nestedPipeline")
        if isinstance(nested, Mapping) and nested.get("mode") == "iterate":
            ids = nested.get("stepIds")
            if isinstance(ids, list):
                run.iterate_steps[step_id] = tuple(str(i) for i in ids)
    elif name == "step.running":
        # Ranks keep a late progress record from reopening a finished step.
        if step.rank < 1:
            step.status, step.rank = "running", 1
    elif name == "step.attempted":
        attributes = payload.get("attributes")
        if isinstance(attributes, Mapping):
            run.attributes.setdefault(step_id, []).append(attributes)
    elif name in _TERMINAL:
        step.status, step.rank = _TERMINAL[name], 2
        reason = payload.get("reason")
        step.reason = reason if isinstance(reason, str) else None
        step.duration_ms = _duration(record.get("durationMs"))
        error = record.get("error")
        if isinstance(error, Mapping):
            step.error_code = _str(error.get("code"))
            step.source_code = _str(error.get("sourceCode"))


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
        steps=steps,
        children=tuple(kid.tree for kid in run.kids),
        agent=agent_history(run, run.status, steps),
    )


def _duration(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


# -- text -------------------------------------------------------------------------------------
def format_duration(ms: float) -> str:
    """``<n>ms`` below a second, ``<x.y>s`` below a minute, else ``<m>m<s>s``."""
    ms = max(ms, 0.0)
    if round(ms) < 1000:
        return f"{round(ms)}ms"
    seconds = ms / 1000
    if round(seconds, 1) < 60:
        return f"{seconds:.1f}s"
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes}m{rest}s"


def format_run_list(trees: Iterable[RunTree]) -> str:
    """One line per root: ``<runId>  <pipelineId>  <status>  started <ISO-8601>[  <duration>]``.

    Empty input gives an empty string; otherwise every line ends with a newline.
    """
    lines = []
    for tree in trees:
        parts = [
            terminal_safe(tree.run_id),
            terminal_safe(tree.pipeline_id),
            tree.status,
            f"started {_iso(tree.started_at_ms)}",
        ]
        if tree.duration_ms is not None:
            parts.append(format_duration(tree.duration_ms))
        lines.append("  ".join(parts) + "\n")
    return "".join(lines)


def _iso(ms: int | None) -> str:
    if ms is None:
        return "unknown"
    try:
        moment = datetime.fromtimestamp(ms / 1000, tz=UTC)
    except (OverflowError, OSError, ValueError):
        return f"{ms}ms"
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


_Item: TypeAlias = tuple[int, str] | tuple[int, RunTree]


def format_tree(tree: RunTree) -> str:
    """The indented text of ``tree``: the run, its steps, agent turns and calls, child runs.

    Each run block starts ``Run <id>  <pipeline>  <status>[  <duration>][  dry run]``; failed
    runs add an ``error`` line; agent runs add ``turn`` lines with their ``call`` lines, and a
    call whose run started further runs (a subagent) shows that run's block below the call.
    """
    lines: list[str] = []
    stack: list[_Item] = [(0, tree)]
    while stack:
        depth, item = stack.pop()
        if isinstance(item, str):
            lines.append(_indent(depth) + item)
        else:
            stack.extend(reversed(_block(item, depth)))
    return "\n".join(lines) + "\n"


def _indent(depth: int) -> str:
    # Past a sane nesting depth, indenting further would make the text quadratic in the depth
    # of a (corrupt or hostile) trace; say how much deeper the line is instead.
    if depth <= _MAX_INDENT:
        return "  " * depth
    return "  " * _MAX_INDENT + f"[+{depth - _MAX_INDENT}] "


def _block(tree: RunTree, depth: int) -> list[_Item]:
    """The lines of one run and, as nested items, the run blocks below it."""
    header = ["Run " + terminal_safe(tree.run_id), terminal_safe(tree.pipeline_id), tree.status]
    if tree.duration_ms is not None:
        header.append(format_duration(tree.duration_ms))
    if tree.dry_run:
        header.append("dry run")
    items: list[_Item] = [(depth, "  ".join(header))]
    inner = depth + 1
    if tree.error_code is not None or tree.error_message is not None:
        message = terminal_safe(tree.error_message or "")
        items.append((inner, f"error {terminal_safe(tree.error_code or '?')}  {message}"))
    for step in tree.steps:
        parts = [f"step {terminal_safe(step.id)}", step.status]
        if step.reason is not None:
            parts.append(terminal_safe(step.reason))
        if step.duration_ms is not None:
            parts.append(format_duration(step.duration_ms))
        if step.error_code is not None:
            parts.append(_code(step.error_code, step.source_code))
        items.append((inner, "  ".join(parts)))
    if tree.agent is None:
        items.extend((inner, child) for child in tree.children)
        return items
    items.append((inner, f"agent  {tree.agent.termination}"))
    by_id = {child.run_id: child for child in tree.children}
    shown: set[str] = set()
    for turn in tree.agent.turns:
        shown.add(turn.run_id)
        items.extend(_turn_items(turn, by_id.get(turn.run_id), inner))
    items.extend((inner, child) for child in tree.children if child.run_id not in shown)
    return items


def _turn_items(turn: TurnNode, run: RunTree | None, depth: int) -> list[_Item]:
    count = "?" if turn.call_count is None else str(turn.call_count)
    parts = [
        f"turn {'?' if turn.index is None else turn.index}",
        turn.decision or "?",
        f"{count} call" if count == "1" else f"{count} calls",
        turn.status,
    ]
    if run is not None and run.duration_ms is not None:
        parts.append(format_duration(run.duration_ms))
    if turn.error_code is not None:
        parts.append(terminal_safe(turn.error_code))
    items: list[_Item] = [(depth, "  ".join(parts))]
    children = {} if run is None else {child.run_id: child for child in run.children}
    for call in turn.calls:
        parts = [
            f"call {terminal_safe(call.call_id)}",
            terminal_safe(call.tool or "?"),
            call.status,
        ]
        if call.duration_ms is not None:
            parts.append(format_duration(call.duration_ms))
        if call.error_code is not None:
            parts.append(_code(call.error_code, call.source_code))
        items.append((depth + 1, "  ".join(parts)))
        call_run = children.pop(call.run_id, None) if call.run_id is not None else None
        if call_run is not None and (call_run.agent is not None or call_run.children):
            items.append((depth + 2, call_run))
    # Whatever else the turn started (nothing, with today's harness) still shows.
    items.extend((depth + 1, child) for child in children.values())
    return items


def _code(code: str, source: str | None) -> str:
    if source is None or source == code:
        return terminal_safe(code)
    return f"{terminal_safe(code)} ({terminal_safe(source)})"
