"""A call's outcome (DESIGN.md §3, §11): the one place outcomes are built and saved.

An outcome is what the reducer sees of one call: ``{id, tool, ok: true, value}`` or ``{id,
tool, ok: false, error: {code, message}}``, frozen (a :class:`FrozenDict`) so state can hold
it. A value that is not plain data (a model instance a tool returned) keeps its exact form in a
read-only ``MappingProxyType`` instead, which frozen state rejects, so it never hides inside
state. A checkpoint saves an outcome in its JSON form (:func:`to_saved`); a value that had to be
converted for it is marked ``revalidate`` and is validated by the tool's schema again when the
outcome is restored (:func:`from_saved`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any, Protocol

from tubeless.errors import CALL_INTERRUPTED, CHECKPOINT_INVALID, TOOL_DENIED, CheckpointError
from tubeless.frozen import FreezeError, FrozenDict, freeze
from tubeless.schema import Schema

__all__ = ["Called", "denied", "failed", "from_saved", "interrupted", "ok", "to_saved"]


class Called(Protocol):
    """The call an outcome is of (a prepared call): its id and its tool's name."""

    @property
    def id(self) -> str: ...

    @property
    def tool(self) -> str: ...


def ok(call: Called, value: Any) -> Mapping[str, Any]:
    """A call that returned ``value`` (frozen; a value that is not plain data stays as is)."""
    outcome = {"id": call.id, "tool": call.tool, "ok": True, "value": value}
    try:
        outcome["value"] = freeze(value)
    except FreezeError:
        return MappingProxyType(outcome)
    return FrozenDict._trusted(outcome)


def failed(call: Called, code: str, message: str) -> FrozenDict:
    """A call that failed in a way the agent may recover from (a tool error, a denial)."""
    error = FrozenDict({"code": code, "message": message})
    return FrozenDict._trusted({"id": call.id, "tool": call.tool, "ok": False, "error": error})


def interrupted(call: Called) -> FrozenDict:
    """A call that was running when its run stopped and cannot be run again safely."""
    return failed(
        call,
        CALL_INTERRUPTED,
        f"Call {call.id!r} to tool {call.tool!r} was running when the run stopped; whether it "
        "took effect is unknown",
    )


def denied(call: Called, message: str) -> FrozenDict:
    """A call its approver denied (``message`` says which call and why)."""
    return failed(call, TOOL_DENIED, message)


def to_saved(call: Called, outcome: Mapping[str, Any]) -> Mapping[str, Any]:
    """``outcome`` in the form a checkpoint saves: frozen outcomes as they are, a value that is
    not plain data in its JSON form, marked to be validated again when restored.

    Raises:
        CheckpointError: ``TUBELESS_CHECKPOINT_INVALID`` when the value has no JSON form.
    """
    if type(outcome) is FrozenDict:
        return outcome
    # Imported here: pydantic_core is a third of what importing the agent API costs, and only
    # durable runs with a non-frozen tool value come here.
    import pydantic_core

    try:
        value = pydantic_core.to_jsonable_python(outcome["value"])
        freeze(value)
    except Exception as exc:
        raise CheckpointError(
            CHECKPOINT_INVALID,
            f"The value of call {call.id!r} to tool {call.tool!r} has no JSON form, so it "
            f"cannot be checkpointed: {exc}",
        ) from None
    return {"id": call.id, "tool": call.tool, "ok": True, "value": value, "revalidate": True}


def from_saved(
    saved: Mapping[str, Any], call: Called, schema: Callable[[], Schema | None]
) -> Mapping[str, Any]:
    """The outcome a checkpoint saved (``to_saved``), its value validated again by the tool's
    ``schema()`` when it was converted to be saved."""
    if not saved.get("revalidate"):
        return freeze(saved)  # type: ignore[no-any-return]  # a mapping freezes to FrozenDict
    value = saved["value"]
    validator = schema()
    if validator is not None:
        value = validator.validate(value)
    return MappingProxyType({"id": call.id, "tool": call.tool, "ok": True, "value": value})
