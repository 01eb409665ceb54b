"""Child composition: a single child, a fan-out over items, and bounded iteration.

Each helper returns one ordinary (opaque) step; the child's steps never appear in the parent's
plan. Child runs get their own run id, ``parent_run_id`` = the parent run, the parent's
cancellation token and trace sinks, and always inherit a parent's dry run.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from tubeless import errors as codes
from tubeless._callables import maybe_await
from tubeless.errors import TubelessError
from tubeless.pipeline._cancel import YIELD_EVERY
from tubeless.pipeline._child import _controls, run_child_value
from tubeless.pipeline._context import StepContext
from tubeless.pipeline._failures import ChildRunFailedError, first_error_cause
from tubeless.pipeline._step import NestedPipeline, Step, _refs

if TYPE_CHECKING:
    from tubeless.pipeline._pipeline import Pipeline
    from tubeless.pipeline._results import PipelineRun

__all__ = [
    "FanOutFailedError",
    "for_each_pipeline",
    "from_pipeline",
]

_MAX_FAN_OUT_FAILURES = 32
_MAX_KEY = 1024


class FanOutFailedError(TubelessError):
    """Some children of a fan-out did not complete; ``fan_out`` summarises them.

    ``recorded_cause`` is the first failed child's first error.
    """

    code = codes.CHILD_FAILED

    def __init__(self, step_id: str, failures: list[tuple[int, str, PipelineRun]]) -> None:
        cancelled = all(run.status == "cancelled" for _, _, run in failures)
        first_index, first_key, first_run = failures[0]
        first_error = first_run.errors[0] if first_run.errors else None
        super().__init__(
            self.code,
            f"{len(failures)} of the fan-out children of step {step_id} did not complete; "
            f"first: item {first_index} ({first_key!r}) {first_run.status}"
            + (f": {first_error.message[:_MAX_KEY]}" if first_error else ""),
        )
        self.cancelled = cancelled
        self.runs = tuple(run for _, _, run in failures)
        shown = failures[:_MAX_FAN_OUT_FAILURES]
        self.fan_out = {
            "failures": [_failure_entry(i, key, run) for i, key, run in shown],
            "failureCount": len(failures),
            "omittedFailureCount": len(failures) - len(shown),
        }
        self.recorded_cause = first_error_cause(first_run)


def _failure_entry(index: int, key: str, run: PipelineRun) -> dict[str, Any]:
    error = run.errors[0] if run.errors else None
    entry: dict[str, Any] = {
        "index": index,
        "key": key[:_MAX_KEY],
        "keyTruncated": len(key) > _MAX_KEY,
        "cancelled": run.status == "cancelled",
    }
    if error is not None:
        snapshot: dict[str, Any] = {"message": error.message[:_MAX_KEY], "name": error.code}
        if error.source_code is not None:
            snapshot["sourceCode"] = error.source_code
        entry["error"] = snapshot
    return entry


def _composed(
    id: str,
    run: Callable[..., Any],
    nested: NestedPipeline,
    *,
    depends_on: Any,
    optional_depends_on: Any,
    skip_after_failure_of: Any,
    skip: Callable[..., Any] | None,
    dry_run: Any,
    name: str | None,
    description: str | None,
    problems: tuple[tuple[str, str], ...] = (),
) -> Step:
    found = list(problems)
    if dry_run is not None and dry_run != "skip":
        found.append(
            (
                codes.DEFINITION_STEP_INVALID,
                f"Step {id!r}: composed steps support only "
                "dry_run='skip' (children run their own previews).",
            )
        )
    if not hasattr(nested.pipeline, "order"):
        found.append(
            (
                codes.DEFINITION_STEP_INVALID,
                f"Step {id!r}: pipeline must be made with define_pipeline(...).",
            )
        )
    return Step(
        id=id,
        run=run,
        depends_on=_refs(depends_on),
        optional_depends_on=_refs(optional_depends_on),
        skip_after_failure_of=_refs(skip_after_failure_of),
        skip=skip,
        dry_run=dry_run,
        name=name,
        description=description,
        nested=nested,
        orchestration=True,
        problems=tuple(found),
    )


def from_pipeline(
    id: str,
    pipeline: Pipeline,
    *,
    map_options: Callable[..., Any] | None = None,
    map_result: Callable[..., Any] | None = None,
    controls: Any = None,
    depends_on: Iterable[Any] | str | Step = (),
    optional_depends_on: Iterable[Any] | str | Step = (),
    skip_after_failure_of: Iterable[Any] | str | Step = (),
    skip: Callable[..., Any] | None = None,
    dry_run: Any = None,
    name: str | None = None,
    description: str | None = None,
) -> Step:
    """A step that runs ``pipeline`` once as a child run.

    Args:
        id: The step id.
        pipeline: The child pipeline.
        map_options: ``map_options(inputs, ctx)`` returns the child's raw input; without it the
            parent's validated options are passed on (and the child validates them itself).
        map_result: ``map_result(result)`` reshapes the child's final result.
        controls: Child controls (``targets``, ``step_ids``, ``max_concurrency``,
            ``continue_on_error``), or ``controls(inputs, ctx)`` returning them.
        depends_on: As for :func:`step`.
        optional_depends_on: As for :func:`step`.
        skip_after_failure_of: As for :func:`step`.
        skip: As for :func:`step`.
        dry_run: ``"skip"`` to skip the child in dry runs (otherwise it runs its previews).
        name: Display name.
        description: Display description.
    """

    async def run(inputs: dict[str, Any], ctx: StepContext) -> Any:
        raw = ctx.options if map_options is None else await maybe_await(map_options(inputs, ctx))
        ok, value = await run_child_value(
            ctx, pipeline, raw, controls=_controls(controls, inputs, ctx)
        )
        if not ok:
            raise ChildRunFailedError(value)
        if map_result is not None:
            value = await maybe_await(map_result(value))
        return value

    return _composed(
        id,
        run,
        NestedPipeline(mode="single", pipeline=pipeline),
        depends_on=depends_on,
        optional_depends_on=optional_depends_on,
        skip_after_failure_of=skip_after_failure_of,
        skip=skip,
        dry_run=dry_run,
        name=name,
        description=description,
    )


def for_each_pipeline(
    id: str,
    pipeline: Pipeline,
    *,
    items: Callable[..., Any],
    key: Callable[[Any, int], str],
    map_options: Callable[..., Any],
    concurrency: int | Callable[..., int] = 1,
    controls: Any = None,
    map_result: Callable[..., Any] | None = None,
    depends_on: Iterable[Any] | str | Step = (),
    optional_depends_on: Iterable[Any] | str | Step = (),
    skip_after_failure_of: Iterable[Any] | str | Step = (),
    skip: Callable[..., Any] | None = None,
    dry_run: Any = None,
    name: str | None = None,
    description: str | None = None,
) -> Step:
    """A step that runs ``pipeline`` once per item; the output is the results in item order.

    Args:
        id: The step id.
        pipeline: The child pipeline.
        items: ``items(inputs, ctx)`` returns the items.
        key: ``key(item, index)`` returns a unique string key (the child's ``item_key``);
            duplicate keys fail the step before any child starts.
        map_options: ``map_options(item, index, inputs, ctx)`` returns a child's raw input.
        concurrency: Children running at once (or ``concurrency(inputs, ctx)``).
        controls: Child controls, or ``controls(item, index, inputs, ctx)``.
        map_result: ``map_result(results)`` reshapes the list of child results.
        depends_on: As for :func:`step`.
        optional_depends_on: As for :func:`step`.
        skip_after_failure_of: As for :func:`step`.
        skip: As for :func:`step`; a skip value must be the whole result list.
        dry_run: ``"skip"`` to skip the fan-out in dry runs.
        name: Display name.
        description: Display description.
    """
    problems: tuple[tuple[str, str], ...] = ()
    if not callable(concurrency) and (
        isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1
    ):
        problems = (
            (codes.DEFINITION_STEP_INVALID, f"Step {id!r}: concurrency must be an integer >= 1."),
        )

    async def run(inputs: dict[str, Any], ctx: StepContext) -> Any:
        values = list(await maybe_await(items(inputs, ctx)))
        keys = [key(item, index) for index, item in enumerate(values)]
        bad = [k for k in keys if not isinstance(k, str)]
        if bad:
            raise TypeError(f"Fan-out keys must be strings; got {type(bad[0]).__name__}.")
        seen: set[str] = set()
        dupes = sorted({k for k in keys if k in seen or seen.add(k)})  # type: ignore[func-returns-value]
        if dupes:
            raise TubelessError(
                codes.FOR_EACH_DUPLICATE_KEY,
                f"Fan-out keys must be unique; duplicated: {', '.join(map(repr, dupes[:10]))}.",
            )
        limit = concurrency(inputs, ctx) if callable(concurrency) else concurrency
        return await _fan_out(
            ctx, pipeline, values, keys, limit, inputs, map_options, controls, map_result
        )

    return _composed(
        id,
        run,
        NestedPipeline(
            mode="for-each",
            pipeline=pipeline,
            concurrency="dynamic" if callable(concurrency) else concurrency,
        ),
        depends_on=depends_on,
        optional_depends_on=optional_depends_on,
        skip_after_failure_of=skip_after_failure_of,
        skip=skip,
        dry_run=dry_run,
        name=name,
        description=description,
        problems=problems,
    )


async def _fan_out(
    ctx: StepContext,
    pipeline: Pipeline,
    values: list[Any],
    keys: list[str],
    limit: int,
    inputs: dict[str, Any],
    map_options: Callable[..., Any],
    controls: Any,
    map_result: Callable[..., Any] | None,
) -> Any:
    total = len(values)
    results: list[Any] = [None] * total
    failures: list[tuple[int, str, PipelineRun]] = []
    setup_errors: list[BaseException] = []
    cursor = 0
    finished = 0

    async def one(index: int) -> None:
        nonlocal finished
        item = values[index]
        try:
            raw = await maybe_await(map_options(item, index, inputs, ctx))
            child_controls = _controls(controls, item, index, inputs, ctx)
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # user mappers may raise SystemExit or their own
            setup_errors.append(exc)
            return
        ok, result = await run_child_value(
            ctx, pipeline, raw, item_key=keys[index], controls=child_controls
        )
        finished += 1
        if ok:
            results[index] = result
        else:
            failures.append((index, keys[index], result))
        ctx.report_progress(finished, total, f"{finished} of {total} items")

    async def worker() -> None:
        nonlocal cursor
        ran = 0
        while cursor < total and not failures and not setup_errors and not ctx.signal.cancelled:
            index = cursor
            cursor += 1
            await one(index)
            ran += 1
            if ran % YIELD_EVERY == 0:
                await asyncio.sleep(0)  # quick children may never suspend: let the loop run

    workers = max(1, min(limit, total))
    if workers == 1:
        await worker()
    else:
        tasks = [asyncio.ensure_future(worker()) for _ in range(workers)]
        try:
            await asyncio.gather(*tasks)
        except asyncio.CancelledError:
            for task in tasks:
                task.cancel()
            await asyncio.wait(tasks)
            raise
    if setup_errors:
        raise setup_errors[0]
    if failures:
        failures.sort(key=lambda f: f[0])
        raise FanOutFailedError(ctx.step_id, failures)
    ctx.signal.raise_if_cancelled()
    if map_result is not None:
        return await maybe_await(map_result(results))
    return results
