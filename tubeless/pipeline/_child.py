"""Starting a child run from a step: the general executor, or the lean path when it can.

Child runs get their own run id, ``parent_run_id`` = the parent run, the parent's cancellation
token and trace sinks, and always inherit a parent's dry run.
"""

from __future__ import annotations

from collections.abc import Awaitable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from tubeless.pipeline._context import StepContext
from tubeless.pipeline._execute import DEFAULT_CONTROLS, UNVALIDATED, Controls, execute
from tubeless.pipeline._lean import lean_program, run_lean, value_of

if TYPE_CHECKING:
    from tubeless.pipeline._pipeline import Pipeline

__all__ = ["run_child", "run_child_value"]


def run_child(
    ctx: StepContext,
    pipeline: Pipeline,
    raw_input: Any,
    *,
    item_key: str | None = None,
    iteration: Mapping[str, Any] | None = None,
    controls: Controls | None = None,
    validated: Any = UNVALIDATED,
    slots: Mapping[str, Any] | None = None,
) -> Any:
    """Start a child run of ``pipeline`` linked to the run of ``ctx`` (an awaitable run record).

    The child shares the parent's cancellation token and sinks and is a dry run whenever the
    parent is. ``validated`` skips the child's options validation for an input already validated
    by the caller (each schema transform runs exactly once).
    """
    controls = controls or Controls()
    if ctx.dry_run and not controls.dry_run:
        controls = replace(controls, dry_run=True)
    env = ctx._env if not slots else ctx._env.derive(**slots)
    return execute(
        pipeline,
        raw_input,
        controls,
        env=env,
        signal=ctx.signal,
        parent_run_id=ctx.run_id,
        item_key=item_key,
        iteration=iteration,
        validated=validated,
    )


def run_child_value(
    ctx: StepContext,
    pipeline: Pipeline,
    raw_input: Any,
    *,
    item_key: str | None = None,
    iteration: Mapping[str, Any] | None = None,
    controls: Controls | None = None,
    validated: Any = UNVALIDATED,
    slots: Mapping[str, Any] | None = None,
) -> Awaitable[tuple[bool, Any]]:
    """Like :func:`run_child`, for callers that need the run record only when it failed.

    Returns ``(True, value)`` when the child completed, else ``(False, its PipelineRun)``.
    Without trace sinks, a straight-line child takes the lean path (no records built unless it
    fails); the outcome and every record anyone can read are the same either way.
    """
    env = ctx._env if not slots else ctx._env.derive(**slots)
    if (
        env.fanout is None
        and not ctx.dry_run
        and (controls is None or controls is DEFAULT_CONTROLS)
        and (program := lean_program(pipeline)) is not None
    ):
        return run_lean(
            pipeline,
            program,
            raw_input,
            env=env,
            signal=ctx.signal,
            parent_run_id=ctx.run_id,
            item_key=item_key,
            validated=validated,
        )
    return value_of(
        run_child(
            ctx,
            pipeline,
            raw_input,
            item_key=item_key,
            iteration=iteration,
            controls=controls,
            validated=validated,
            slots=slots,
        )
    )


def _controls(value: Any, *args: Any) -> Controls:
    if value is None:
        return DEFAULT_CONTROLS
    if callable(value):
        value = value(*args)
    if isinstance(value, Controls):
        return value
    if not isinstance(value, Mapping):
        raise TypeError(
            "controls must be a mapping with targets, step_ids, max_concurrency "
            "or continue_on_error"
        )
    unknown = set(value) - {"targets", "step_ids", "max_concurrency", "continue_on_error"}
    if unknown:
        raise TypeError(f"Unknown child controls: {', '.join(sorted(unknown))}")
    targets = value.get("targets")
    step_ids = value.get("step_ids")
    return Controls(
        targets=None if targets is None else tuple(targets),
        step_ids=None if step_ids is None else tuple(step_ids),
        max_concurrency=value.get("max_concurrency", 1),
        continue_on_error=bool(value.get("continue_on_error", False)),
    )
