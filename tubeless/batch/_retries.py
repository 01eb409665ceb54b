"""Running a row again while its worker died (``--row-retries``); a leaf of the batch package.

Every engine wraps its rows in :func:`with_row_retries`; the engines of other processes import
it from here rather than from the engine interface (``_engine.py``), which imports them.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from tubeless.errors import BATCH_WORKER_DIED

if TYPE_CHECKING:
    from tubeless.batch._row import RowOutcome
    from tubeless.pipeline import CancelToken

__all__ = ["DEFAULT_ROW_RETRIES", "with_row_retries"]

#: How many more times a row whose worker died runs (``--row-retries``).
DEFAULT_ROW_RETRIES = 2


async def with_row_retries(
    attempt: Callable[[bool], Awaitable[RowOutcome]],
    *,
    retries: int,
    retry: bool,
    signal: CancelToken,
) -> RowOutcome:
    """Run a row by ``attempt(retry)``; while its worker died (``TUBELESS_BATCH_WORKER_DIED``)
    and the batch is not cancelled, run it again on another worker (``attempt(True)``),
    ``retries`` more times at most. The row that still failed says how often it ran."""
    outcome = await attempt(retry)
    runs = 1
    while _worker_died(outcome) and runs <= retries and not signal.cancelled:
        outcome = await attempt(True)
        runs += 1
    if runs > 1 and _worker_died(outcome):
        error = outcome.row["error"]
        error["message"] = (
            f"{error['message']}; it ran {runs} times and its worker died each time "
            f"(--row-retries {retries})"
        )
    return outcome


def _worker_died(outcome: RowOutcome) -> bool:
    error = outcome.row.get("error")
    return isinstance(error, dict) and error.get("code") == BATCH_WORKER_DIED
