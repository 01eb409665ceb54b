"""Agent state ownership: every committed state is a frozen copy of plain data."""

from __future__ import annotations

from typing import Any

from tubeless.errors import AGENT_INVALID_STATE, TubelessError
from tubeless.frozen import FreezeError, freeze, growable

__all__ = ["StateError", "freeze_state"]


class StateError(TubelessError):
    """State that is not plain data."""

    code = AGENT_INVALID_STATE

    def __init__(self, where: str, error: FreezeError) -> None:
        super().__init__(
            self.code,
            f"{where} must contain only None, bools, ints, finite floats, strings, lists and "
            f"dicts with string keys ({error})",
        )
        self.path = error.path


def freeze_state(value: Any, where: str = "Agent state") -> Any:
    """A frozen copy of ``value`` (already-frozen parts are reused, not copied).

    Top-level tuples become ``FrozenTuple`` (see :func:`~tubeless.frozen.growable`), so a
    history grown with ``+ tuple(outcomes)`` is never walked again.
    """
    try:
        return growable(freeze(value))
    except FreezeError as exc:
        raise StateError(where, exc) from None
