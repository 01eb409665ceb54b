"""The runs page and a run page as JSON (``?format=json``): the same bounded data the pages
show, for scripts. A run's turns are the page's window of them, not the whole history."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

__all__ = ["run_json", "runs_json"]


def runs_json(data: dict[str, Any]) -> dict[str, Any]:
    """``{runs, total, page, pages}`` of :func:`~tubeless.ui._runs.runs_page` data."""
    return {
        "runs": [asdict(row) for row in data["rows"]],
        "total": data["total"],
        "page": data["page"],
        "pages": data["pages"],
    }


def run_json(data: dict[str, Any]) -> dict[str, Any]:
    """``{run, correlation_id, definition_id, limits, usage, errors, turns, turn_count,
    turn_page, turn_pages}`` of :func:`~tubeless.ui._run_view.run_page` data."""
    tree = data["run"]
    run = {
        key: getattr(tree, key)
        for key in (
            "run_id",
            "pipeline_id",
            "parent_run_id",
            "item_key",
            "status",
            "started_at_ms",
            "duration_ms",
            "error_code",
            "error_message",
        )
    }
    usage = data["usage"]
    return {
        "run": run,
        "correlation_id": data["correlation_id"],
        "definition_id": data["definition_id"],
        "limits": None if data["limits"] is None else dict(data["limits"]),
        "usage": None
        if usage is None
        else {"input_tokens": usage[0], "output_tokens": usage[1], "cost_usd": usage[2]},
        "errors": data["errors"],
        "turns": [row["turn"].to_dict() for row in data["timeline"]["turns"]],
        "turn_count": data["turn_count"],
        "turn_page": data["turn_page"],
        "turn_pages": data["turn_pages"],
    }
