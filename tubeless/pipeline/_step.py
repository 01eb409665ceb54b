"""Step and finalizer definitions: plain frozen values, checked by ``define_pipeline``."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from tubeless.errors import DEFINITION_SCHEMA_INVALID
from tubeless.schema import Schema

if TYPE_CHECKING:
    from tubeless.pipeline._pipeline import Pipeline

__all__ = [
    "NestedPipeline",
    "RequiredOutputs",
    "Step",
    "require_outputs",
    "step",
]

DryRunPolicy = Literal["skip"] | Callable[..., Any] | None


@dataclass(frozen=True, kw_only=True, slots=True)
class NestedPipeline:
    """How a composed step runs a child pipeline (shown in plans and identities)."""

    mode: Literal["single", "for-each", "iterate"]
    pipeline: Pipeline
    concurrency: int | Literal["dynamic"] | None = None
    max_iterations: int | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class Step:
    """One node of a pipeline. Build it with :func:`step` or a composition helper."""

    id: str
    run: Callable[..., Any]
    """``run(inputs, ctx)``: sync (runs in a worker thread) or async."""
    depends_on: tuple[Any, ...] = ()
    optional_depends_on: tuple[Any, ...] = ()
    skip_after_failure_of: tuple[Any, ...] = ()
    skip: Callable[..., Any] | None = None
    dry_run: Any = None
    """``None`` (run normally), ``"skip"``, or a preview handler with ``run``'s signature."""
    output_schema: Schema | None = None
    name: str | None = None
    description: str | None = None
    nested: NestedPipeline | None = None
    agent: Mapping[str, Any] | None = None
    """Agent metadata shown in plans, inspect and graphs (set by the agent layer)."""
    agent_snapshot: Mapping[str, Any] | None = None
    """The agent metadata as the definition snapshot records it and the identity hashes it
    (UPSTREAM §1.12: limits, capabilities with fingerprints and identities, the result
    descriptor's fingerprint); set by the agent layer together with ``agent``."""
    capabilities: tuple[Pipeline, ...] = ()
    """Pipelines whose identities feed this step's definition id (agent tools)."""
    inline: bool = False
    """Run a sync ``run`` on the event loop instead of a worker thread."""
    orchestration: bool = False
    """The step only coordinates other runs (composition, agent turns): it runs on the event
    loop, never waits for a handler permit, and its errors are never handler errors."""
    problems: tuple[tuple[str, str], ...] = field(default=(), compare=False, repr=False)
    """Definition problems found while building the step, as ``(code, message)`` pairs."""
    run_is_async: bool = field(init=False, compare=False, repr=False)
    dry_run_is_async: bool = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "run_is_async", callable(self.run) and is_async_callable(self.run))
        preview = self.dry_run
        object.__setattr__(
            self, "dry_run_is_async", callable(preview) and is_async_callable(preview)
        )

    @property
    def dependency_ids(self) -> tuple[str, ...]:
        """Every step this one waits for (required, optional and failure gates)."""
        return (*self.depends_on, *self.optional_depends_on, *self.skip_after_failure_of)


@dataclass(frozen=True, kw_only=True, slots=True)
class RequiredOutputs:
    """A finalizer that first checks the listed steps published an output."""

    step_ids: tuple[str, ...]
    fn: Callable[..., Any] | None


def _ref(value: Any) -> Any:
    return value.id if isinstance(value, Step) else value


def _refs(values: Iterable[Any] | str | Step) -> tuple[Any, ...]:
    if isinstance(values, (str, Step)):
        values = (values,)
    return tuple(_ref(v) for v in values)


def step(
    id: str,
    run: Callable[..., Any],
    *,
    depends_on: Iterable[Any] | str | Step = (),
    optional_depends_on: Iterable[Any] | str | Step = (),
    skip_after_failure_of: Iterable[Any] | str | Step = (),
    skip: Callable[..., Any] | None = None,
    dry_run: DryRunPolicy = None,
    output_schema: Any = None,
    name: str | None = None,
    description: str | None = None,
) -> Step:
    """Define a step; ``define_pipeline`` checks it together with its pipeline.

    Args:
        id: Stable machine id, unique in the pipeline (``__finalize__`` is reserved).
        run: ``run(inputs, ctx)``; ``inputs`` maps each dependency id to its output.
        depends_on: Required dependencies (ids or steps): their outputs are inputs, and their
            failure blocks this step.
        optional_depends_on: Inputs used only when the upstream step published an output.
        skip_after_failure_of: Failure gates: wait for them, skip if one failed or cancelled.
        skip: ``skip(inputs, ctx)`` policy predicate: return ``None``/``False`` to run, a reason
            string (or ``True``) to skip publishing ``None``, or ``{"reason", "value"}`` to skip
            publishing ``value``.
        dry_run: ``"skip"`` to skip in dry runs, or a preview handler used instead of ``run``.
        output_schema: A pydantic model, a type, or ``Schema.json(...)`` for the output.
        name: Display name.
        description: Display description.
    """
    schema, problems = coerce_schema(output_schema, f"Step {id!r}: output_schema")
    return Step(
        id=id,
        run=run,
        depends_on=_refs(depends_on),
        optional_depends_on=_refs(optional_depends_on),
        skip_after_failure_of=_refs(skip_after_failure_of),
        skip=skip,
        dry_run=dry_run,
        output_schema=schema,
        name=name,
        description=description,
        problems=problems,
    )


def coerce_schema(value: Any, label: str) -> tuple[Schema | None, tuple[tuple[str, str], ...]]:
    """``Schema.of(value)``, or the definition problem explaining why it is not a schema."""
    if value is None:
        return None, ()
    try:
        return Schema.of(value), ()
    except (TypeError, ValueError) as exc:
        return None, ((DEFINITION_SCHEMA_INVALID, f"{label} is not a schema: {exc}"),)


def require_outputs(
    steps: Iterable[Any] | str | Step, fn: Callable[..., Any] | None = None
) -> RequiredOutputs:
    """A finalizer that fails unless every listed step published an output.

    Args:
        steps: Step ids or steps whose outputs the result needs (a published ``None`` counts).
        fn: ``fn(outputs, ctx)`` computing the result; without it the result is the dict of the
            listed outputs.
    """
    return RequiredOutputs(step_ids=_refs(steps), fn=fn)


def is_async_callable(fn: Callable[..., Any]) -> bool:
    """Whether calling ``fn`` returns a coroutine (also for callable objects)."""
    if inspect.iscoroutinefunction(fn):
        return True
    call = getattr(fn, "__call__", None)  # noqa: B004 -- we want the bound method, not callable()
    return call is not None and inspect.iscoroutinefunction(call)
