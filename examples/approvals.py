"""An agent whose risky tool waits for a person: the approvals recipe (no model needed).

Turn 1 drafts a note (no approval needed) and asks to publish it and to mail it. ``publish``
always needs approval; ``send_mail`` only for addresses outside ``example.com`` (a predicate).
Turn 2 finishes with what happened to each call, denied ones included::

    tubeless run projects/approvals.yaml --title "Release notes" --to ops@elsewhere.org \\
        --approve-all
    {"drafted": "RELEASE NOTES", "published": true, "mailed": true, "denied": []}

The same agent in Python is :data:`approvals_agent` (same definition id as the project's)::

    python -m examples.approvals --to ops@elsewhere.org --deny-all
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import Any

from pydantic import BaseModel, Field

from tubeless import Schema
from tubeless.agent import DecisionContext, ToolContext, define_agent, define_tool


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
                {
                    "id": "mail",
                    "tool": "send_mail",
                    "input": {"to": state["to"], "subject": state["title"]},
                },
            ],
        }
    by_id = {o["id"]: o for o in state["outcomes"]}
    return {
        "kind": "finish",
        "result": {
            "drafted": by_id["draft"]["value"],
            "published": by_id["publish"]["ok"],
            "mailed": by_id["mail"]["ok"],
            "denied": [
                o["id"]
                for o in state["outcomes"]
                if not o["ok"] and o["error"]["code"] == "TUBELESS_TOOL_DENIED"
            ],
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


_MAIL = {
    "type": "object",
    "properties": {"to": {"type": "string"}, "subject": {"type": "string"}},
    "required": ["to", "subject"],
    "additionalProperties": False,
}

approvals_agent = define_agent(
    id="approvals",
    name="Approval-gated publisher",
    description="Drafts, publishes and mails a note; publishing and outside mail need approval.",
    implementation_version="approvals-v1",
    input_schema=Note,
    result_schema=Report,
    initial_state=initial_state,
    decide=decide,
    reduce=reduce,
    limits={"max_turns": 3, "max_calls": 6, "on_limit": "finish", "max_concurrency": 2},
    tools={
        "draft": define_tool(
            description="Draft a note from its title.",
            input_schema=Schema.json({"type": "string"}),
            output_schema=Schema.json({"type": "string"}),
            run=draft,
        ),
        "publish": define_tool(
            description="Publish the note where everyone can read it.",
            input_schema=Schema.json({"type": "string"}),
            output_schema=Schema.json({"type": "boolean"}),
            run=publish,
            approval="always",
        ),
        "send_mail": define_tool(
            description="Mail the note to one address.",
            input_schema=Schema.json(_MAIL),
            output_schema=Schema.json({"type": "boolean"}),
            run=send_mail,
            approval=outside_example_com,
        ),
    },
)


def main(argv: list[str] | None = None) -> int:
    """``--to``, and ``--deny-all`` (the default approves every request)."""
    parser = argparse.ArgumentParser(prog="python -m examples.approvals")
    parser.add_argument("--to", default="team@example.com")
    parser.add_argument("--deny-all", action="store_true")
    args = parser.parse_args(argv)
    run = asyncio.run(
        approvals_agent.run({"to": args.to}, approver=lambda request: not args.deny_all)
    )
    if run.status != "completed":
        for error in run.errors:
            print(f"error: {error.format()}", file=sys.stderr)
        return 6
    print(json.dumps(run.value.model_dump()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
