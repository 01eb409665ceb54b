"""Template filters: durations, times, amounts and URL parts as the pages show them."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any, Final
from urllib.parse import quote, urlencode

__all__ = ["FILTERS", "duration", "moment"]


def duration(ms: Any) -> str:
    """``850µs``, ``12ms``, ``3.4s``, ``2m 05s``; an em dash when unknown."""
    if not isinstance(ms, int | float) or isinstance(ms, bool):
        return "—"
    if ms < 1:
        return f"{ms * 1000:.0f}µs"
    if ms < 1000:
        return f"{ms:.1f}ms" if ms < 10 else f"{ms:.0f}ms"
    seconds = ms / 1000
    if seconds < 60:
        return f"{seconds:.1f}s"
    return f"{int(seconds // 60)}m {int(seconds % 60):02d}s"


def moment(ms: Any) -> str:
    """Epoch milliseconds as ``2026-12-02 01:57:43Z``; an em dash when unknown."""
    if not isinstance(ms, int) or isinstance(ms, bool):
        return "—"
    try:
        when = datetime.fromtimestamp(ms / 1000, tz=UTC)
    except (OverflowError, OSError, ValueError):
        return "—"
    return when.strftime("%Y-%m-%d %H:%M:%SZ")


def iso(ms: Any) -> str:
    """Epoch milliseconds as a machine-readable ``datetime`` attribute value."""
    if not isinstance(ms, int) or isinstance(ms, bool):
        return ""
    try:
        return datetime.fromtimestamp(ms / 1000, tz=UTC).isoformat(timespec="milliseconds")
    except (OverflowError, OSError, ValueError):
        return ""


def amount(value: Any, money: bool = False) -> str:
    """A token count with thousands separators, or dollars (``$0.0421``)."""
    if value is None:
        return "—"
    if money:
        number = Decimal(str(value))
        return f"${number:.4f}" if number < 1 else f"${number:,.2f}"
    return f"{int(value):,}"


def path_part(text: Any) -> str:
    """``text`` quoted for one path segment (run ids hold ``/`` and ``:``)."""
    return quote(str(text), safe="")


def query(values: dict[str, Any]) -> str:
    """A query string of ``values``."""
    return urlencode(values)


FILTERS: Final[dict[str, Callable[..., str]]] = {
    "duration": duration,
    "moment": moment,
    "iso": iso,
    "amount": amount,
    "pathpart": path_part,
    "query": query,
}
