"""A call's progress as the run tree shows it: the last report of the call's run.

The fold keeps each run's last progress report (``step.running`` with ``progress``);
:func:`call_progress` turns it into a frozen :class:`CallProgress` for the call's node.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["CallProgress", "call_progress"]


@dataclass(frozen=True, kw_only=True, slots=True)
class CallProgress:
    """The last progress a call's run reported: numbers and the tool's short message.

    Progress records hold no inputs or outputs, only what the handler reported
    (``ctx.report_progress(completed, total, message)``); their ``details`` rows are left out.
    A running call's is its latest report, a finished call's its last one.
    """

    completed: float | None
    """``completed`` as recorded (``None`` when it is not a number)."""
    total: float | None
    """``total`` as recorded; ``None`` when the tool did not say (or not as a number)."""
    message: str | None
    """The tool's message, as recorded (bounded by the writer)."""
    fraction: float | None
    """``completed / total`` within ``[0, 1]``, when both are numbers and ``total`` > 0."""

    def to_dict(self) -> dict[str, Any]:
        """The progress as snake_case JSON-ready data."""
        return {
            "completed": self.completed,
            "total": self.total,
            "message": self.message,
            "fraction": self.fraction,
        }


def call_progress(report: Mapping[str, Any] | None) -> CallProgress | None:
    """A recorded progress report as a :class:`CallProgress` (``None`` without a report).

    It reads three keys of a mapping the fold already holds, so projecting a call's progress
    costs next to nothing; a malformed report (empty mapping) keeps ``None`` fields.
    """
    if report is None:
        return None
    completed = _number(report.get("completed"))
    total = _number(report.get("total"))
    message = report.get("message")
    fraction = None
    if completed is not None and total is not None and total > 0:
        fraction = min(1.0, max(0.0, completed / total))
    return CallProgress(
        completed=completed,
        total=total,
        message=message if isinstance(message, str) else None,
        fraction=fraction,
    )


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return value if math.isfinite(value) else None
