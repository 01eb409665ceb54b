"""An agent whose tools come from an MCP server (examples/notes_server.py), decisions scripted.

Turn 1 adds the question as a note, turn 2 searches the notes for its first word, turn 3
finishes with what the server answered. No model and no credentials::

    python -m examples.mcp_notes --question "hello tubeless"
    {"answer": "note 1 of 1; notes with 'hello': hello tubeless"}

``projects/mcp-notes.yaml`` declares the same agent (same definition id).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from examples._cli import run_agent_cli
from examples.text import ANSWER_JSON_SCHEMA, Answer, Question, question_of
from tubeless.agent import DecisionContext, define_agent
from tubeless.mcp import McpServer, mcp_tools

#: The repository root: the server runs as ``python -m examples.notes_server`` from there.
ROOT = Path(__file__).resolve().parents[1]


def initial_state(validated: Question) -> dict[str, Any]:
    """The question and nothing observed yet."""
    return {"question": question_of(validated), "observed": []}


def decide(state: Any, ctx: DecisionContext) -> dict[str, Any]:
    """Add the question as a note, search for its first word, then answer."""
    observed = state["observed"]
    if not observed:
        note = {"text": state["question"]}
        return {
            "kind": "continue",
            "calls": [{"id": "add", "tool": "notes__add_note", "input": note}],
        }
    if len(observed) == 1:
        word = {"word": (state["question"].split() or [""])[0]}
        return {
            "kind": "continue",
            "calls": [{"id": "find", "tool": "notes__find_notes", "input": word}],
        }
    return {"kind": "finish", "result": "; ".join(observed)}


def observe(outcome: Any, question: str) -> str:
    """One observation per outcome."""
    if not outcome["ok"]:
        return f"Observed {outcome['error']['code']}: {outcome['error']['message']}"
    value = outcome["value"]
    if outcome["tool"] == "notes__add_note":
        return f"note {value['number']} of {value['count']}"
    word = (question.split() or [""])[0]
    return f"notes with {word!r}: " + (" | ".join(value["result"]) or "none")


def reduce(state: Any, outcomes: Sequence[Any]) -> dict[str, Any]:
    """Add this batch's observations."""
    seen = [observe(outcome, state["question"]) for outcome in outcomes]
    return {"question": state["question"], "observed": [*state["observed"], *seen]}


notes = McpServer.stdio("notes", [sys.executable, "-m", "examples.notes_server"], cwd=str(ROOT))

mcp_notes = define_agent(
    id="mcp-notes",
    name="MCP notes",
    description="Adds a note to an MCP server and searches it, with scripted decisions.",
    implementation_version="mcp-notes-v1",
    input_schema=Question,
    result_schema=Answer,
    result_json_schema=ANSWER_JSON_SCHEMA,
    initial_state=initial_state,
    decide=decide,
    dry_run=decide,
    reduce=reduce,
    tools=mcp_tools(notes, ["add_note", "find_notes"]),
    limits={"max_turns": 3, "max_calls": 10, "max_decisions": 3},
)

if __name__ == "__main__":
    sys.exit(run_agent_cli(mcp_notes, "python -m examples.mcp_notes"))
