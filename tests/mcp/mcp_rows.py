"""Callables for the MCP batch tests' projects: a row's input names the calls of its one turn
(``{"calls": [[tool, arguments], ...]}``); the result is each outcome's value or error code."""

from __future__ import annotations

from typing import Any


def initial(raw: Any) -> dict[str, Any]:
    return {"calls": raw.get("calls", []), "outcomes": None}


def decide(state: Any, ctx: Any) -> dict[str, Any]:
    if state["outcomes"] is None:
        calls = [
            {"id": f"c{i}", "tool": tool, "input": arguments}
            for i, (tool, arguments) in enumerate(state["calls"])
        ]
        return {"kind": "continue", "calls": calls}
    return {"kind": "finish", "result": state["outcomes"]}


def reduce(state: Any, outcomes: Any) -> dict[str, Any]:
    seen = [o["value"] if o["ok"] else o["error"]["code"] for o in outcomes]
    return {"calls": state["calls"], "outcomes": seen}
