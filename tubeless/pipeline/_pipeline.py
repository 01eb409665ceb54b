"""The compiled ``Pipeline``: plan, run, identity. Built only by ``define_pipeline``."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from tubeless.errors import PipelineExecutionError
from tubeless.pipeline._results import PipelineRun as PipelineRunType
from tubeless.schema import Schema

if TYPE_CHECKING:
    from tubeless.durable import CheckpointStore
    from tubeless.pipeline._cancel import CancelToken
    from tubeless.pipeline._execute import Controls
    from tubeless.pipeline._plan import Plan
    from tubeless.pipeline._results import DefinitionIdentity, PipelineRun
    from tubeless.pipeline._step import Step
    from tubeless.tracing.sinks import TraceSink

__all__ = ["Finalizer", "Pipeline", "TraceArg"]

#: ``trace=``: one sink or several.
TraceArg = "TraceSink | Sequence[TraceSink] | None"

_PLAN_CACHE_SIZE = 64


@dataclass(frozen=True, kw_only=True, slots=True)
class Finalizer:
    """How the final result is made: last step output, one step's output, or a function."""

    kind: Literal["last", "step", "function"]
    fn: Callable[..., Any] | None = None
    required: tuple[str, ...] = ()


class Pipeline:
    """A checked, immutable pipeline definition. Create it with ``define_pipeline``."""

    __slots__ = (
        "_by_id",
        "_identity",
        "_lean",
        "_plans",
        "_snapshot",
        "_trace_snapshot",
        "description",
        "finalizer",
        "has_agent",
        "id",
        "implementation_version",
        "name",
        "options_schema",
        "order",
        "result_schema",
        "steps",
        "target_ids",
    )

    def __init__(
        self,
        *,
        id: str,
        name: str | None,
        description: str | None,
        implementation_version: str | None,
        steps: tuple[Step, ...],
        order: tuple[Step, ...],
        target_ids: tuple[str, ...],
        finalizer: Finalizer,
        options_schema: Schema | None,
        result_schema: Schema | None,
    ) -> None:
        self.id = id
        self.name = name
        self.description = description
        self.implementation_version = implementation_version
        self.steps = steps
        """Steps in declaration order."""
        self.order = order
        """Steps in execution order (stable topological order)."""
        self.target_ids = target_ids
        """The declared targets, selectable with ``targets=``."""
        self.finalizer = finalizer
        self.options_schema = options_schema
        self.result_schema = result_schema
        self._by_id = {s.id: s for s in steps}
        self.has_agent = any(s.agent is not None for s in steps)
        """Whether a step is an agent loop (its runs carry the definition snapshot)."""
        self._plans: dict[tuple[Any, ...], Plan] = {}
        self._lean: Any = None
        """The straight-line program of the default plan (``False`` if none), made once."""
        self._identity: DefinitionIdentity | None = None
        self._snapshot: dict[str, Any] | None = None
        self._trace_snapshot: tuple[Mapping[str, Any] | None] | None = None

    def __repr__(self) -> str:
        return f"<Pipeline {self.id!r} steps={[s.id for s in self.order]}>"

    @property
    def step_ids(self) -> tuple[str, ...]:
        """Step ids in execution order."""
        return tuple(s.id for s in self.order)

    def get_step(self, step_id: str) -> Step:
        """The step with id ``step_id`` (``KeyError`` if absent)."""
        return self._by_id[step_id]

    # -- identity -----------------------------------------------------------------------------
    @property
    def identity(self) -> DefinitionIdentity:
        """Fingerprints of this definition (computed once)."""
        if self._identity is None:
            from tubeless.pipeline._identity import compute_identity

            self._identity, self._snapshot = compute_identity(self)
        return self._identity

    def definition_snapshot(self) -> dict[str, Any]:
        """The JSON-ready structure the identity was computed from (camelCase, as traced)."""
        if self._snapshot is None:
            _ = self.identity
        assert self._snapshot is not None
        return self._snapshot

    def trace_snapshot(self) -> Mapping[str, Any] | None:
        """The snapshot as traced: ``None`` when it is over the 256 KiB record bound."""
        if self._trace_snapshot is None:
            from tubeless.tracing.records import bounded_snapshot

            self._trace_snapshot = (bounded_snapshot(self.definition_snapshot()),)
        return self._trace_snapshot[0]

    # -- planning -----------------------------------------------------------------------------
    def plan(
        self,
        *,
        dry_run: bool = False,
        targets: Iterable[str] | str | None = None,
        step_ids: Iterable[str] | str | None = None,
    ) -> Plan:
        """Plan a run without running anything (no handler, schema, predicate or initializer).

        Args:
            dry_run: Plan a dry run.
            targets: Declared targets to reach (with their dependency closure).
            step_ids: Exact steps to run (no prerequisites added).
        """
        key = (bool(dry_run), _ids(targets), _ids(step_ids))
        cached = self._plans.get(key)
        if cached is None:
            from tubeless.pipeline._plan import build_plan

            cached = build_plan(self, dry_run=key[0], targets=key[1], step_ids=key[2])
            if len(self._plans) >= _PLAN_CACHE_SIZE:
                self._plans.pop(next(iter(self._plans)))
            self._plans[key] = cached
        return cached

    # -- running ------------------------------------------------------------------------------
    async def run(
        self,
        raw_input: Any = None,
        /,
        *,
        dry_run: bool = False,
        targets: Iterable[str] | str | None = None,
        step_ids: Iterable[str] | str | None = None,
        max_concurrency: int = 1,
        continue_on_error: bool = False,
        trace: TraceSink | Sequence[TraceSink] | None = None,
        signal: CancelToken | None = None,
        run_id: str | None = None,
        correlation_id: str | None = None,
        approver: Callable[[Any], Any] | None = None,
        checkpoints: CheckpointStore | None = None,
        checkpoint_key: str | None = None,
        restart: bool = False,
    ) -> PipelineRun:
        """Run the pipeline; returns the run record whatever the outcome.

        Args:
            raw_input: The input, validated once by ``options_schema``.
            dry_run: Run previews: ``dry_run="skip"`` steps skip, preview handlers replace runs.
            targets: Declared targets to reach (with their dependency closure).
            step_ids: Exact steps to run.
            max_concurrency: Steps of this run allowed at once (default 1).
            continue_on_error: Keep running independent steps after a failure.
            trace: A sink or sinks receiving the trace of the whole run tree (flushed at the
                end, never closed).
            signal: A token to cancel the run cooperatively.
            run_id: The run id (default ``<pipeline id>:<uuid4>``).
            correlation_id: An id recorded on every run of the tree.
            approver: ``approver(request) -> bool | Awaitable[bool]``, asked before an agent
                tool call that needs approval runs (see docs/agents.md); passed down unread.
            checkpoints: A checkpoint store: the agents of the run commit their progress to it
                and a later run with the same key resumes from there (DESIGN.md §11; dry runs
                open no storage).
            checkpoint_key: The task's key in the store (default ``<id>:<input digest>``).
            restart: Start the key over instead of resuming it (or returning its saved end).

        Raises:
            CheckpointError: ``TUBELESS_AGENT_INVALID_CHECKPOINT_KEY`` for an unusable key.
            asyncio.CancelledError: If the awaiting task is cancelled (after recording the
                cancelled run and flushing the sinks).
        """
        default_controls, make_controls, run_root = _EXECUTOR or _load_executor()
        if (
            not dry_run
            and targets is None
            and step_ids is None
            and max_concurrency == 1
            and type(max_concurrency) is int
            and not continue_on_error
        ):
            controls = default_controls
        else:
            controls = make_controls(
                dry_run=bool(dry_run),
                targets=_ids(targets),
                step_ids=_ids(step_ids),
                max_concurrency=max_concurrency,
                continue_on_error=bool(continue_on_error),
            )
        return await run_root(
            self,
            raw_input,
            controls,
            trace=trace,
            signal=signal,
            run_id=run_id,
            correlation_id=correlation_id,
            approver=approver,
            checkpoints=checkpoints,
            checkpoint_key=checkpoint_key,
            restart=restart,
        )

    async def run_or_raise(self, raw_input: Any = None, /, **kwargs: Any) -> Any:
        """Run and return the final value.

        Raises:
            PipelineExecutionError: If the run failed or was cancelled (``.run`` has the record).
        """
        result = await self.run(raw_input, **kwargs)
        if result.status != "completed":
            first = result.errors[0].exception if result.errors else None
            raise PipelineExecutionError(result) from original_exception(first)
        return result.value

    def run_sync(self, raw_input: Any = None, /, **kwargs: Any) -> Any:
        """Run on a new event loop and return the final value (see ``run_or_raise``)."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            pass  # no loop: the run below must not start inside this handler (see below)
        else:
            raise RuntimeError(
                f"run_sync() cannot be called from a running event loop; "
                f"use 'await pipeline.run_or_raise(...)' for pipeline {self.id!r}."
            )
        # Outside the except block: anything a callback raises inline on the loop would
        # otherwise get the "no running event loop" RuntimeError as its __context__.
        return asyncio.run(self.run_or_raise(raw_input, **kwargs))

    def declared(self) -> Mapping[str, Step]:
        """Steps by id."""
        return self._by_id


def _ids(values: Iterable[str] | str | None) -> tuple[str, ...] | None:
    """A selection as a tuple; a lone string is one id, not a sequence of characters."""
    if values is None:
        return None
    if isinstance(values, str):
        return (values,)
    return tuple(values)


def original_exception(exc: BaseException | None) -> BaseException | None:
    """The exception that started a failure, looking through child-run wrappers."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        run = getattr(exc, "run", None)
        runs = getattr(exc, "runs", None) or ((run,) if isinstance(run, PipelineRunType) else ())
        inner = None
        for child in runs:
            if child.errors and child.errors[0].exception is not None:
                inner = child.errors[0].exception
                break
        if inner is None:
            return exc
        exc = inner
    return exc


#: The executor's entry points, loaded by the first run: defining a pipeline never needs the
#: executor (it loads the sinks and the checkpoint session), and an ``import`` statement in
#: ``run`` itself costs every run thousands of instructions even once the module is loaded.
_EXECUTOR: tuple[Controls, type[Controls], Callable[..., Awaitable[PipelineRun]]] | None = None


def _load_executor() -> tuple[Controls, type[Controls], Callable[..., Awaitable[PipelineRun]]]:
    global _EXECUTOR
    from tubeless.pipeline._execute import DEFAULT_CONTROLS, Controls, run_root

    _EXECUTOR = (DEFAULT_CONTROLS, Controls, run_root)
    return _EXECUTOR
