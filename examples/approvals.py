"""An agent whose risky tool waits for a person: the approvals recipe (no model needed).

Turn 1 drafts a note (no approval needed) and asks to publish it and to mail it. ``publish``
always needs approval; ``send_mail`` only for addresses outside ``example.com`` (a predicate).
Turn 2 finishes with what happened to each call, denied ones included::

    tubeless run projects/approvals.yaml --title "Release notes" --to ops@elsewhere.org \\
        --approve-all
    {"drafted": "RELEASE NOTES", "published": true, "mailed": true, "denied": []}
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from tubeless.agent import DecisionContext, ToolContext


class Note(BaseModel):
    """What to draft, and who is told about it."""

    title: str = Field(default="Release notes", min_length=1, max_length=200)
    to: str = Field(default="team@example.com", min_length=3, max_length=200)


class Report(BaseModel):
    """What became of each call."""

    drafted: str
    published: bool
    mailed: bool
    denied: list[str]


def initial_state(validated: Note) -> dict[str, Any]:
    return {"title": validated.title, "to": validated.to, "outcomes": []}


def decide(state: Any, ctx: DecisionContext) -> dict[str, Any]:
    """One batch of three calls, then a report of their outcomes."""
    if not state["outcomes"]:
        return {
            "kind": "continue",
            "calls": [
                {"id": "draft", "tool": "draft", "input": state["title"]},
                {"id": "publish", "tool": "publish", "input": state["title"]},
                {"id": "mail", "tool": "send_mail", "input": {"to": state["to"],
                                                              "subject": state["title"]}},
            ],
        }
    by_id = {o["id"]: o for o in state["outcomes"]}
    return {
        "kind": "finish",
        "result": {
            "drafted": by_id["draft"]["value"],
            "published": by_id["publish"]["ok"],
            "mailed": by_id["mail"]["ok"],
            "denied": [o["id"] for o in state["outcomes"]
                       if not o["ok"] and o["error"]["code"] == "TUBELESS_TOOL_DENIED"],
        },
    }


def reduce(state: Any, outcomes: Any) -> dict[str, Any]:
    return {**state, "outcomes": list(outcomes)}


def draft(title: str, ctx: ToolContext) -> str:
    return title.upper()


def publish(title: str, ctx: ToolContext) -> bool:
    ctx.log.info("published")
    return True


def send_mail(message: dict[str, Any], ctx: ToolContext) -> bool:
    ctx.log.info("mailed")
    return True


def outside_example_com(message: dict[str, Any], ctx: ToolContext) -> bool:
    """Mail to anyone outside example.com needs a person's yes."""
    return not str(message["to"]).endswith("@example.com")
