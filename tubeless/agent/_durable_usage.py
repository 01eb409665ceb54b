"""Token and cost budgets of a checkpointed agent: restored on resume, committed at every
reservation and charge (DESIGN.md §19, durable).

A reservation is committed before its request is sent (``Usage.reserve`` calls the ledger's
listeners before it returns) and the charge after the response, so a run that dies with a
request in flight keeps that request's whole reservation, and a resume never refills a budget:
the ledger starts from what the checkpoint says was consumed, under the bounds it holds (raised
by ``tubeless checkpoints raise``, never by the definition).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Callable
from typing import Any

from tubeless.agent._usage import Ledger
from tubeless.durable._spi import AgentEntry, saved_usage, store_usage

__all__ = ["attach_usage"]


def attach_usage(
    ledger: Ledger | None, entry: AgentEntry, resumed: bool, commit: Callable[[], None]
) -> Callable[[], None]:
    """Restore ``ledger`` from ``entry`` (on resume) and commit the document after each of its
    reservations and charges; returns the function that detaches it again."""
    if ledger is None:
        return _nothing
    saved = saved_usage(entry.budget)
    if resumed and saved is not None:
        ledger.restore(saved)
    loop = asyncio.get_running_loop()
    loop_thread = threading.get_ident()

    def committed(changed: Ledger) -> None:
        store_usage(entry.budget, changed.snapshot())
        if threading.get_ident() == loop_thread:
            commit()
            return
        # A tool handler in a worker thread reserved: commit on the loop (commits are made
        # one at a time there) and return only once the reservation is durable.
        done: concurrent.futures.Future[None] = concurrent.futures.Future()

        def run() -> None:
            try:
                commit()
            except BaseException as exc:
                done.set_exception(exc)
            else:
                done.set_result(None)

        loop.call_soon_threadsafe(run)
        done.result()

    store_usage(entry.budget, ledger.snapshot())
    ledger.listeners.append(committed)

    def detach() -> None:
        ledger.listeners.remove(committed)

    return detach


def _nothing(*args: Any) -> None:
    pass
