"""One row: run the entry on one input and describe the outcome as a row (every engine's worker).

A row runs as a root run of its own (its own run id) with one sink, :class:`RowSink`, which
counts the root agent's turns and the calls of the whole tree (by tool name) and, when the
batch is traced, keeps the row's records for the driver, which alone writes the batch's sinks.
A worker of another process or host hands them to :class:`RecordBatches` instead, which ships
them as they are made: the records of an attempt whose worker died still reach the trace.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tubeless.batch._inputs import InputRow
from tubeless.errors import (
    BATCH_INPUT_INVALID,
    OPTIONS_VALIDATION_FAILED,
    REPLAY_DIVERGED,
    RUN_CANCELLED,
    TubelessError,
    deepest_source_code,
)

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Awaitable, Iterator
    from contextvars import ContextVar

    from tubeless.durable import CheckpointStore
    from tubeless.pipeline import CancelToken, Pipeline, PipelineRun

__all__ = [
    "RecordBatches",
    "RowMessage",
    "RowOutcome",
    "RowPlan",
    "RowSink",
    "failed_row",
    "new_outcome",
    "row_messages",
    "run_row",
]


@dataclass(frozen=True, kw_only=True, slots=True)
class RowPlan:
    """What one row runs with beyond its input (plain data: it crosses process boundaries)."""

    checkpoint_key: str | None = None
    """The row's checkpoint key (``--checkpoints``): its key, ``#2``, ``#3``... for repeats."""
    earlier_key: str | None = None
    """The checkpoint key round 2 gave the row (from its raw input), still looked up."""
    restart: bool = False
    """Start the row's checkpoint over (a retry of a row that failed)."""
    record: str | None = None
    """The cassette file the row records into."""
    replay: str | None = None
    """The cassette file the row replays."""

    def to_wire(self) -> dict[str, Any]:
        return {
            "checkpoint_key": self.checkpoint_key,
            "earlier_key": self.earlier_key,
            "restart": self.restart,
            "record": self.record,
            "replay": self.replay,
        }

    @classmethod
    def from_wire(cls, wire: Mapping[str, Any] | None) -> RowPlan:
        return cls(**wire) if wire else NO_PLAN


NO_PLAN = RowPlan()


class RecordBatches:
    """A row's records as JSON lines, taken in batches as they are made (a worker ships each
    batch to the driver at once). Records may come from any thread; :attr:`ready` is set on
    the event loop when a batch waits."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._lock = threading.Lock()
        self._pending: list[str] = []
        self.ready = asyncio.Event()

    def __call__(self, record: Mapping[str, Any]) -> None:
        from tubeless.tracing.records import record_json

        line = record_json(record)  # now: the record is what it was when it was made
        with self._lock:
            self._pending.append(line)
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self._loop:
            self.ready.set()
        else:
            self._loop.call_soon_threadsafe(self.ready.set)

    def take(self) -> list[str]:
        """The records made since the last call (on the event loop)."""
        with self._lock:
            taken, self._pending = self._pending, []
        self.ready.clear()
        return taken


class RowSink:
    """Counts a row's turns and calls and, if ``keep``, keeps its records in order (or hands
    each to ``forward``, which ships it)."""

    __slots__ = ("forward", "keep", "records", "root", "root_pipeline", "tools", "turns")

    def __init__(
        self, *, keep: bool, forward: Callable[[Mapping[str, Any]], None] | None = None
    ) -> None:
        self.keep = keep
        self.forward = forward
        self.records: list[Mapping[str, Any]] = []
        self.root: str | None = None
        self.root_pipeline = ""
        self.turns = 0
        self.tools: dict[str, int] = {}

    def export(self, record: Mapping[str, Any]) -> None:
        name = record["name"]
        if name == "pipeline.started":
            if "parentRunId" not in record:
                self.root = record["runId"]
                self.root_pipeline = f"{record['pipelineId']}/turn"
            elif (
                record["parentRunId"] == self.root
                and "iteration" in record
                and record["pipelineId"] == self.root_pipeline
            ):
                self.turns += 1
        elif name == "step.attempted" and record.get("stepId") == "calls":
            attributes = record.get("payload", {}).get("attributes", {})
            tool = attributes.get("agent.tool")
            if tool is not None and "agent.callId" in attributes:
                self.tools[tool] = self.tools.get(tool, 0) + 1
        if self.forward is not None:
            self.forward(record)
        elif self.keep:
            self.records.append(record)

    def flush(self) -> None:
        pass

    def close(self) -> None:
        pass


@dataclass(kw_only=True, slots=True)
class RowOutcome:
    """A finished row, and what only the driver needs of it."""

    row: dict[str, Any]
    """The output row (``{index, key, status, result | error, run_id, duration_ms, turns,
    calls}``)."""
    tools: dict[str, int] = field(default_factory=dict)
    """Calls per tool name (for eval expectations)."""
    records: list[Mapping[str, Any]] = field(default_factory=list)
    """The row's trace records, in order (empty unless the batch is traced)."""

    def to_wire(self) -> tuple[str, dict[str, int], list[str]]:
        """A form that crosses a process boundary: the row as JSON, records as JSON lines."""
        from tubeless.tracing.records import record_json

        return json.dumps(self.row), self.tools, [record_json(r) for r in self.records]

    @classmethod
    def from_wire(cls, wire: tuple[str, dict[str, int], list[str]]) -> RowOutcome:
        row, tools, records = wire
        return cls(
            row=json.loads(row), tools=dict(tools), records=[json.loads(text) for text in records]
        )


_new = object.__new__


def new_outcome(
    row: dict[str, Any], tools: dict[str, int], records: list[Mapping[str, Any]]
) -> RowOutcome:
    """``RowOutcome(row=row, tools=tools, records=records)`` at under half the constructor's
    cost (its ``__init__`` binds keywords and fills defaults; every row that runs makes one)."""
    outcome: RowOutcome = _new(RowOutcome)
    outcome.row = row
    outcome.tools = tools
    outcome.records = records
    return outcome


def failed_row(
    item: InputRow, key: str, code: str, message: str, duration_ms: float = 0.0
) -> RowOutcome:
    """A row that failed without a run of its own (an unreadable line, a dead worker)."""
    return RowOutcome(
        row={
            "index": item.index,
            "key": key,
            "status": "failed",
            "error": {"code": code, "message": message},
            "run_id": None,
            "duration_ms": round(duration_ms, 3),
            "turns": 0,
            "calls": 0,
        }
    )


async def run_row(
    entry: Pipeline,
    item: InputRow,
    key: str,
    traced: bool,
    tools: bool = False,
    signal: CancelToken | None = None,
    store: CheckpointStore | None = None,
    plan: RowPlan = NO_PLAN,
    forward: Callable[[Mapping[str, Any]], None] | None = None,
) -> RowOutcome:
    """Run ``entry`` on ``item``'s input as a root run and describe it as a row.

    (Its arguments may be given by position: the local engine does, once a row, since binding
    keywords costs more; others name them.)

    Args:
        traced: Keep the row's trace records (the batch has sinks).
        forward: With ``traced``, given each record as it is made instead of keeping it.
        tools: Count calls per tool name (eval's ``tools`` expectation).
        store: The batch's checkpoint store (``plan.checkpoint_key`` names the row's key).
        plan: The row's checkpoint key and cassette.

    A row that needs neither runs untraced (the fast path): its turns and calls are read from
    the root agent's budget instead of counted from records; both give the same numbers.
    """
    if item.problem is not None:
        return failed_row(item, key, BATCH_INPUT_INVALID, f"line {item.line}: {item.problem}")
    root_budgets, outer = _AGENT_VARS or _load_agent_vars()
    sink = RowSink(keep=traced, forward=forward if traced else None) if traced or tools else None
    budgets: list[Any] = []
    token = root_budgets.set(budgets)
    start = _clock()
    try:
        if store is not None and plan.checkpoint_key is not None:
            from tubeless.durable._spi import find_key

            durable = {
                "checkpoints": store,
                "checkpoint_key": find_key(store, plan.checkpoint_key, plan.earlier_key),
                "restart": plan.restart,
            }
        else:
            durable = _NOT_DURABLE
        if plan.record is None and plan.replay is None:
            run = await _run(entry, item, None if sink is None else [sink], signal, durable)
        else:
            with _cassette(plan):
                run = await _run(entry, item, None if sink is None else [sink], signal, durable)
    except TubelessError as exc:  # the row's cassette or checkpoint cannot be used
        return failed_row(item, key, exc.code, exc.message, (_clock() - start) * 1000)
    except asyncio.CancelledError:
        # The task was cancelled (a second signal): the run recorded its cancellation.
        duration = (_clock() - start) * 1000
        outcome = failed_row(item, key, RUN_CANCELLED, "the row was cancelled", duration)
        outcome.row["status"] = "cancelled"
        outcome.records = sink.records if sink is not None else []
        return outcome
    finally:
        root_budgets.reset(token)
    # Milliseconds to three decimals (as ``round(x, 3)`` gives them, but for a tie rounding
    # up, at a fifth of its cost: a duration is never negative).
    duration_ms = int((_clock() - start) * 1_000_000 + 0.5) / 1000
    turns = calls = 0
    metered = False
    run_id = run.run_id
    for budget in budgets:  # the root agents' budgets (one, for an agent entry)
        calls += budget.calls
        if budget.id == run_id:
            turns += budget.decisions
        if budget.ledger is not None:
            metered = True
    if sink is not None:
        turns, calls = sink.turns, sum(sink.tools.values())
    # The output row, its keys in this order (one literal: the usual row is a completed one).
    status = run.status
    if status == "completed":
        value = run.value
        row = {
            "index": item.index,
            "key": key,
            "status": status,
            "result": value if type(value) in _PLAIN else _jsonable(value),
            "run_id": run_id,
            "duration_ms": duration_ms,
            "turns": turns,
            "calls": calls,
        }
    else:
        row = {
            "index": item.index,
            "key": key,
            "status": status,
            "error": _error(item, run),
            "run_id": run_id,
            "duration_ms": duration_ms,
            "turns": turns,
            "calls": calls,
        }
    if metered or outer.get():  # (rows of unbudgeted agents in an unbudgeted batch: neither)
        usage = row_usage(budgets)
        if usage is not None:
            row["usage"] = usage
    if sink is None:
        return new_outcome(row, {}, [])
    return new_outcome(row, dict(sink.tools), sink.records)


def row_usage(budgets: list[Any]) -> dict[str, Any] | None:
    """``{input_tokens, output_tokens, cost_usd}`` of a row whose model requests were metered:
    by the batch's row meter, else by its root agents' own budgets; ``None`` when nothing was
    (rows of unbudgeted agents in an unbudgeted batch)."""
    outer = (_AGENT_VARS or _load_agent_vars())[1].get()
    ledgers = [ledger for ledger in outer if ledger.id == "row"] if outer else []
    if not ledgers:
        ledgers = [b.ledger for b in budgets if b.ledger is not None]
    if not ledgers:
        return None
    cost = sum((ledger.cost_usd for ledger in ledgers), 0)
    priced = any("max_cost_usd" in ledger.bounds for ledger in ledgers) or bool(cost)
    return {
        "input_tokens": sum(ledger.input_tokens for ledger in ledgers),
        "output_tokens": sum(ledger.output_tokens for ledger in ledgers),
        "cost_usd": float(cost) if priced else None,
    }


_clock = time.perf_counter
#: The durable arguments of a row without a checkpoint (never changed).
_NOT_DURABLE: dict[str, Any] = {}

#: The agent layer's ``ROOT_BUDGETS`` and ``OUTER_LEDGERS`` (loaded by the first row: an
#: ``import`` statement in :func:`run_row` would cost every row thousands of instructions).
_AGENT_VARS: tuple[ContextVar[list[Any] | None], ContextVar[tuple[Any, ...]]] | None = None


def _load_agent_vars() -> tuple[ContextVar[list[Any] | None], ContextVar[tuple[Any, ...]]]:
    global _AGENT_VARS
    from tubeless.agent._spi import OUTER_LEDGERS, ROOT_BUDGETS

    _AGENT_VARS = (ROOT_BUDGETS, OUTER_LEDGERS)
    return _AGENT_VARS


RowMessage = tuple[str, Any]
"""What a worker sends the driver for one row: ``("records", [JSON line, ...])`` as the row
makes them (when streaming), then ``("done", RowOutcome.to_wire())``."""


async def row_messages(
    run: Callable[[RecordBatches | None], Awaitable[RowOutcome]], *, stream: bool
) -> AsyncIterator[RowMessage]:
    """Run a row (``run(forward)``, which passes ``forward`` to :func:`run_row`) and yield its
    messages: with ``stream``, each batch of records as soon as it is made."""
    batches = RecordBatches(asyncio.get_running_loop()) if stream else None
    task = asyncio.ensure_future(run(batches))
    try:
        while batches is not None and not task.done():
            waiter = asyncio.ensure_future(batches.ready.wait())
            try:
                await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                waiter.cancel()
            lines = batches.take()
            if lines:
                yield ("records", lines)
        outcome = await task
    finally:
        if not task.done():
            task.cancel()  # the worker's call was cancelled: so is the row's run
    if batches is not None and (lines := batches.take()):
        yield ("records", lines)
    yield ("done", outcome.to_wire())


def _run(
    entry: Pipeline,
    item: InputRow,
    trace: list[RowSink] | None,
    signal: CancelToken | None,
    durable: dict[str, Any],
) -> Awaitable[PipelineRun]:
    """``entry.run(item.raw, ...)``; an input the driver validated already (for the row's key)
    is handed to the root run as validated, so that it is not validated a second time."""
    if item.validated is None:
        return entry.run(item.raw, trace=trace, signal=signal, **durable)
    pipeline_run, run_root, controls = _ROOT or _load_root()
    if type(entry).run is not pipeline_run:  # a pipeline whose run does more: left to it
        return entry.run(item.raw, trace=trace, signal=signal, **durable)
    if durable:
        return run_root(
            entry,
            item.raw,
            controls,
            trace=trace,
            signal=signal,
            run_id=None,
            correlation_id=None,
            validated=item.validated[0],
            **durable,
        )
    return run_root(  # no ``**{}``: a call that unpacks a mapping binds every argument slowly
        entry,
        item.raw,
        controls,
        trace=trace,
        signal=signal,
        run_id=None,
        correlation_id=None,
        validated=item.validated[0],
    )


#: ``Pipeline.run``, the root run it starts and its default controls (loaded by the first row
#: whose input the driver validated: an ``import`` in ``_run`` would cost every row).
_ROOT: tuple[Any, Callable[..., Awaitable[PipelineRun]], Any] | None = None


def _load_root() -> tuple[Any, Callable[..., Awaitable[PipelineRun]], Any]:
    global _ROOT
    from tubeless.pipeline import Pipeline
    from tubeless.pipeline._spi import DEFAULT_CONTROLS, run_root

    _ROOT = (Pipeline.run, run_root, DEFAULT_CONTROLS)
    return _ROOT


@contextlib.contextmanager
def _cassette(plan: RowPlan) -> Iterator[None]:
    """The row's cassette: recording into ``plan.record`` or replaying ``plan.replay``."""
    from tubeless.testing import record, replay

    if plan.record is not None:
        with record(plan.record):
            yield
        return
    assert plan.replay is not None
    with replay(plan.replay):
        yield


def _jsonable(value: Any) -> Any:
    """``value``'s JSON form (results that are their own, :data:`_PLAIN`, are not passed in)."""
    global _to_jsonable
    if _to_jsonable is None:  # imported once, when the first row completes
        from pydantic_core import to_jsonable_python

        _to_jsonable = to_jsonable_python
    return _to_jsonable(value)


_to_jsonable: Callable[[Any], Any] | None = None
#: Results that are their own JSON form (exact types: a subclass goes through pydantic).
_PLAIN = frozenset({int, str, bool, type(None)})


def _error(item: InputRow, run: PipelineRun) -> dict[str, str]:
    """The row's error: the deepest original code of the run's first error, and its message."""
    first = run.errors[0]
    code = deepest_source_code(first) or first.code
    message = first.message
    step = f"step {first.step_id}: " if first.step_id else ""
    deepest = first.cause.deepest() if first.cause is not None else None
    if code == REPLAY_DIVERGED and deepest is not None:
        return {"code": code, "message": deepest.message}  # the divergence, as said
    if deepest is not None and deepest.message not in message:
        message = f"{message.rstrip('.')}; caused by: {deepest.message}"
    message = step + message
    if first.code == OPTIONS_VALIDATION_FAILED and first.step_id is None:
        message = f"line {item.line}: {message}"  # the row's own input was rejected
    return {"code": code, "message": message}
