"""The runs page's data: root runs filtered, newest first, one bounded page at a time."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

from tubeless.ui._traces import RunRow, Snapshot

__all__ = ["RUNS_PER_PAGE", "STATUSES", "RunFilter", "parse_time", "runs_page"]

#: Rows per runs page: the bound on what one response sends, whatever the trace holds.
RUNS_PER_PAGE: Final = 50
STATUSES: Final = ("running", "waiting", "completed", "failed", "cancelled")


@dataclass(frozen=True, kw_only=True, slots=True)
class RunFilter:
    """What the runs page's form asks for; empty strings mean no filter."""

    entry: str = ""
    status: str = ""
    since: str = ""
    until: str = ""
    q: str = ""
    page: int = 1

    @classmethod
    def from_query(cls, query: Mapping[str, str]) -> RunFilter:
        """The filter of a query string (unknown or malformed values are ignored)."""
        try:
            page = max(1, min(int(query.get("page", "1")), 1_000_000))
        except ValueError:
            page = 1
        status = query.get("status", "")
        return cls(
            entry=query.get("entry", "")[:500],
            status=status if status in STATUSES else "",
            since=query.get("since", "")[:40],
            until=query.get("until", "")[:40],
            q=query.get("q", "").strip()[:500],
            page=page,
        )

    def query(self, **changes: Any) -> dict[str, str]:
        """The query string of this filter with ``changes``, empty values left out."""
        values = {
            "entry": self.entry,
            "status": self.status,
            "since": self.since,
            "until": self.until,
            "q": self.q,
            "page": str(self.page),
        }
        values.update({key: str(value) for key, value in changes.items()})
        return {key: value for key, value in values.items() if value and value != "1"}


def parse_time(text: str) -> int | None:
    """Epoch milliseconds of an ISO date or date-time (``datetime-local`` form; UTC unless it
    names a zone), or ``None`` for an empty or malformed value."""
    if not text:
        return None
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)


def _keep(row: RunRow, wanted: RunFilter, since: int | None, until: int | None) -> bool:
    if wanted.entry and row.entry != wanted.entry:
        return False
    if wanted.status and row.status != wanted.status:
        return False
    if wanted.q and not row.run_id.startswith(wanted.q):
        return False
    started = row.started_at_ms
    if since is not None and (started is None or started < since):
        return False
    return until is None or (started is not None and started <= until)


def runs_page(snapshot: Snapshot, wanted: RunFilter) -> dict[str, Any]:
    """``{rows, total, page, pages, entries, statuses, batches, problems, filter}``: at most
    :data:`RUNS_PER_PAGE` rows of the runs that pass ``wanted``."""
    since, until = parse_time(wanted.since), parse_time(wanted.until)
    matched = [row for row in snapshot.rows if _keep(row, wanted, since, until)]
    pages = max(1, -(-len(matched) // RUNS_PER_PAGE))
    page = min(wanted.page, pages)
    start = (page - 1) * RUNS_PER_PAGE
    return {
        "rows": matched[start : start + RUNS_PER_PAGE],
        "total": len(matched),
        "page": page,
        "pages": pages,
        "entries": sorted({row.entry for row in snapshot.rows}),
        "statuses": STATUSES,
        "batches": snapshot.batches,
        "evals": snapshot.evals,
        "problems": snapshot.problems,
        "filter": wanted,
        "record_count": snapshot.record_count,
    }
