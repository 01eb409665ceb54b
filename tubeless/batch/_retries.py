"""Running a row again while its worker died (``--row-retries``); a leaf of the batch package.

Every engine wraps its rows in :func:`with_row_retries`; the engines of other processes import
it from here rather than from the engine interface (``_engine.py``), which imports them.

A worker that died mid-row may leave the row's checkpoint lease behind (a store shared across
machines has no OS lock that dies with the process): the row's next attempt finds the key held
(``TUBELESS_CHECKPOINT_LOCKED``) until that lease expires, at most ``lease_ttl_s`` after the
dead worker's last renewal. Such an attempt is not counted as a run: the row is sent again
until the lease is taken over, within a bounded wait, so it never hangs.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from tubeless.errors import BATCH_WORKER_DIED, CHECKPOINT_LOCKED

if TYPE_CHECKING:
    from tubeless.batch._row import RowOutcome
    from tubeless.pipeline import CancelToken

__all__ = ["DEFAULT_ROW_RETRIES", "lease_wait", "with_row_retries"]

#: How many more times a row whose worker died runs (``--row-retries``).
DEFAULT_ROW_RETRIES = 2
#: Seconds between attempts of a row whose dead worker's lease has not expired yet (at most).
LOCKED_POLL_S = 1.0


def lease_wait(store: object) -> float | None:
    """How long a retried row may find its key held by its dead worker's lease: twice the
    store's ``lease_ttl_s`` (its clock and ours may differ a little), else ``None``."""
    ttl = getattr(store, "lease_ttl_s", None)
    if isinstance(ttl, int | float) and not isinstance(ttl, bool) and ttl > 0:
        return 2.0 * float(ttl) + 1.0
    return None


async def with_row_retries(
    attempt: Callable[[bool], Awaitable[RowOutcome]],
    *,
    retries: int,
    retry: bool,
    signal: CancelToken,
    lease_wait_s: float | None = None,
) -> RowOutcome:
    """Run a row by ``attempt(retry)``; while its worker died (``TUBELESS_BATCH_WORKER_DIED``)
    and the batch is not cancelled, run it again on another worker (``attempt(True)``),
    ``retries`` more times at most. The row that still failed says how often it ran.

    With ``lease_wait_s``, a rerun that finds the row's key still held
    (``TUBELESS_CHECKPOINT_LOCKED``: the dead worker's lease) is sent again until the lease
    expires, for ``lease_wait_s`` seconds at most; then the row fails with that error."""
    outcome = await attempt(retry)
    runs = 1
    while _worker_died(outcome) and runs <= retries and not signal.cancelled:
        outcome = await attempt(True)
        if lease_wait_s is not None:
            outcome = await _until_taken_over(attempt, outcome, lease_wait_s, signal)
        runs += 1
    if runs > 1 and _worker_died(outcome):
        error = outcome.row["error"]
        error["message"] = (
            f"{error['message']}; it ran {runs} times and its worker died each time "
            f"(--row-retries {retries})"
        )
    return outcome


async def _until_taken_over(
    attempt: Callable[[bool], Awaitable[RowOutcome]],
    outcome: RowOutcome,
    wait_s: float,
    signal: CancelToken,
) -> RowOutcome:
    """``outcome``, or while it is the dead worker's lease refusing the key, a later attempt."""
    deadline = time.monotonic() + wait_s
    poll = min(LOCKED_POLL_S, max(wait_s / 8, 0.05))
    while _code(outcome) == CHECKPOINT_LOCKED and not signal.cancelled:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        await asyncio.sleep(min(poll, left))
        outcome = await attempt(True)
    return outcome


def _worker_died(outcome: RowOutcome) -> bool:
    return _code(outcome) == BATCH_WORKER_DIED


def _code(outcome: RowOutcome) -> object:
    error = outcome.row.get("error")
    return error.get("code") if isinstance(error, dict) else None
