"""The trace records of one served run after a given store sequence: the event stream's buffer.

A served run may be several invocations (the first, and one after each restart or approval),
each with its own root run id; every one of them carries the served run's id as its
``correlationId``, so the records of a served run are those with that correlation id, read with
:func:`tubeless.tracing.read_since` from the SQLite or Postgres trace store.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tubeless.tracing import read_since as _read_since

__all__ = ["read_since"]


def read_since(
    source: str, *, run_id: str, after: int = 0, limit: int = 1000
) -> list[tuple[int, dict[str, Any]]]:
    """Up to ``limit`` records of the served run ``run_id`` with their sequence, strictly after
    ``after``, in store order. A store that does not exist yet holds nothing."""
    if "://" not in source:
        path = Path(source)
        if not path.exists() or path.stat().st_size == 0:
            return []
    return _read_since(source, correlation_id=run_id, after=after, limit=limit)
