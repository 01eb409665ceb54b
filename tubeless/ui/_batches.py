"""Batch output files (``tubeless batch --output``) read back for the pages: one row per input,
in input order, linked to the run that ran it. A file is taken for a batch output when its first
line is a JSON object with an integer ``index`` and a string ``status`` and no record ``name``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

__all__ = ["Batch", "BatchRow", "read_batch"]

_MAX_BATCH_ROWS: Final = 100_000


@dataclass(frozen=True, kw_only=True, slots=True)
class BatchRow:
    """One row of a batch output file."""

    index: int
    key: str | None
    status: str
    run_id: str | None
    duration_ms: float | None
    turns: int | None
    calls: int | None
    error_code: str | None
    error_message: str | None


@dataclass(frozen=True, kw_only=True, slots=True)
class Batch:
    """A batch output file (``tubeless batch --output``): its rows in input order."""

    number: int
    source: str
    rows: tuple[BatchRow, ...]

    @property
    def failed(self) -> int:
        """Rows that did not complete."""
        return sum(1 for row in self.rows if row.status != "completed")


def read_batch(source: str, number: int) -> Batch | None:
    """``source`` as a batch output file, or ``None`` when it is not one (a trace)."""
    if "://" in source or not source.endswith((".jsonl", ".ndjson", ".json")):
        return None
    try:
        with open(source, encoding="utf-8") as handle:
            first = handle.readline()
            try:
                head = json.loads(first)
            except ValueError:
                return None
            if not _batch_row(head):
                return None
            lines = [first, *handle]
    except OSError:
        return None
    rows: list[BatchRow] = []
    for line in lines[:_MAX_BATCH_ROWS]:
        try:
            raw = json.loads(line)
        except ValueError:
            continue
        if _batch_row(raw):
            rows.append(_batch_row_of(raw))
    return Batch(number=number, source=source, rows=tuple(rows))


def _batch_row(raw: Any) -> bool:
    return (
        isinstance(raw, dict)
        and "name" not in raw
        and isinstance(raw.get("index"), int)
        and isinstance(raw.get("status"), str)
    )


def _batch_row_of(raw: Mapping[str, Any]) -> BatchRow:
    found = raw.get("error")
    error: Mapping[str, Any] = found if isinstance(found, Mapping) else {}

    def text(value: Any) -> str | None:
        return value if isinstance(value, str) else None

    def integer(value: Any) -> int | None:
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    duration = raw.get("duration_ms")
    return BatchRow(
        index=raw["index"],
        key=text(raw.get("key")),
        status=raw["status"],
        run_id=text(raw.get("run_id")),
        duration_ms=float(duration) if isinstance(duration, int | float) else None,
        turns=integer(raw.get("turns")),
        calls=integer(raw.get("calls")),
        error_code=text(error.get("code")),
        error_message=text(error.get("message")),
    )
