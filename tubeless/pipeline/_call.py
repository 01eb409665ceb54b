"""Calling a step's handler: the one way the executor and the lean path both use.

:func:`call_step` starts the handler the way its colour requires (awaited on the loop, called
inline, or in a worker thread), under the run tree's handler gate when the step is a leaf, and
hands back its value or an awaitable of it. :func:`checked_output` applies the output schema.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tubeless._callables import call_in_thread, is_awaitable
from tubeless.pipeline._failures import OutputInvalidError
from tubeless.schema import SchemaValidationError

if TYPE_CHECKING:
    from collections.abc import Callable

    from tubeless.pipeline._context import HandlerGate, RunEnvironment, StepContext
    from tubeless.pipeline._step import Step

__all__ = ["call_step", "checked_output"]


def call_step(
    s: Step, inputs: dict[str, Any], ctx: StepContext, env: RunEnvironment, *, dry_run: bool
) -> Any:
    """Start the handler of ``s`` (its preview in dry runs): its value, or an awaitable of it.

    Await the result when :func:`is_awaitable` says so. A leaf step below a handler gate is
    always a coroutine that holds the gate around the handler: nothing runs before it is held.
    Orchestration steps are never gated (they only start child runs).
    """
    if dry_run and callable(s.dry_run):
        handler, is_async = s.dry_run, s.dry_run_is_async
    else:
        handler, is_async = s.run, s.run_is_async
    gate = None if s.orchestration else env.gate
    if gate is not None:
        return _gated(gate, handler, is_async or s.inline, inputs, ctx)
    if is_async or s.inline or s.orchestration:
        return handler(inputs, ctx)
    return _in_thread(handler, inputs, ctx)


async def _gated(
    gate: HandlerGate,
    handler: Callable[..., Any],
    on_loop: bool,
    inputs: dict[str, Any],
    ctx: StepContext,
) -> Any:
    signal = ctx.signal
    if not gate.try_enter(signal):
        await gate.enter(signal)
    try:
        if not on_loop:
            return await _in_thread(handler, inputs, ctx)
        value = handler(inputs, ctx)
        if is_awaitable(value):
            value = await value
        return value
    finally:
        gate.exit()


async def _in_thread(handler: Callable[..., Any], inputs: dict[str, Any], ctx: StepContext) -> Any:
    value = await call_in_thread(handler, inputs, ctx, signal=ctx.signal)
    if is_awaitable(value):  # a sync callable may return a coroutine
        value = await value
    return value


def checked_output(s: Step, step_id: str, value: Any) -> Any:
    """``value`` through the step's output schema (``OutputInvalidError`` if it is rejected)."""
    if s.output_schema is None:
        return value
    try:
        return s.output_schema.validate(value)
    except SchemaValidationError as exc:
        raise OutputInvalidError(step_id, exc) from exc
