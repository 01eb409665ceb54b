"""The trace records of one served run after a given store sequence: the event stream's buffer.

``read_since`` has the signature ``tubeless.tracing.read_since`` is getting; until that lands,
this minimal SQLite reader stands in for it (swap the body for the import). A served run may be
several invocations (the first, and one after each restart or approval), each with its own root
run id; every one of them carries the served run's id as its ``correlationId``, and the first
also as its ``runId``, so the records of a served run are the rows with either.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

from tubeless.tracing.sqlite import TABLE, _record

__all__ = ["read_since"]

_COLUMNS = (
    "id, version, run_id, correlation_id, parent_run_id, pipeline_id, step_id, attempt_id, "
    "item_key, event_name, timestamp_ms, duration_ms, payload_json, error_json, iteration_json"
)


def read_since(
    source: str, *, run_id: str, after: int = 0, limit: int = 1000
) -> list[tuple[int, dict[str, Any]]]:
    """Up to ``limit`` records of ``run_id`` (its tree) with their sequence, strictly after
    ``after``, in store order. A store that does not exist yet holds nothing."""
    path = Path(source)
    if not path.exists() or path.stat().st_size == 0:
        return []
    conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    try:
        conn.execute("PRAGMA busy_timeout = 5000")
        try:
            rows = conn.execute(
                f"SELECT {_COLUMNS} FROM {TABLE} WHERE (correlation_id = ? OR run_id = ?) "
                "AND id > ? ORDER BY id LIMIT ?",
                (run_id, run_id, after, limit),
            ).fetchall()
        except sqlite3.OperationalError as exc:
            if "no such table" in str(exc):
                return []
            raise
    finally:
        conn.close()
    return [(int(row[0]), _record(row, path)) for row in rows]
