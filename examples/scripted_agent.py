"""The scripted agent recipe: real tools and state, with decisions scripted (no model needed).

Turn 1 asks for a variable-size batch: ``count`` on the whole question and ``uppercase`` on
each word, all in one turn. The reducer turns the outcomes into observations (recovering from a
deliberate ``ToolError``), and turn 2 finishes with them joined::

    python -m examples.scripted_agent --question "hello tubeless"
    {"answer": "14 characters; HELLO; TUBELESS"}
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

from examples._cli import run_agent_cli
from examples.text import ANSWER_JSON_SCHEMA, Answer, Question, count, question_of, uppercase
from tubeless.agent import DecisionContext, define_agent


def initial_state(validated: Question) -> dict[str, Any]:
    """The question and no observations yet."""
    return {"question": question_of(validated), "observations": []}


def decide(state: Any, ctx: DecisionContext) -> dict[str, Any]:
    """First count and uppercase everything in one batch; then finish with the observations."""
    if not state["observations"]:
        words = state["question"].split()
        calls = [{"id": "length", "tool": "count", "input": state["question"]}]
        calls += [
            {"id": f"word-{index}", "tool": "uppercase", "input": word}
            for index, word in enumerate(words)
        ]
        return {"kind": "continue", "calls": calls}
    return {"kind": "finish", "result": "; ".join(state["observations"])}


def observe(outcome: Any) -> str:
    """One observation per outcome, in decision order."""
    if not outcome["ok"]:
        error = outcome["error"]
        return f"Observed {error['code']}: {error['message']}"
    if outcome["tool"] == "count":
        return f"{outcome['value']} characters"
    return str(outcome["value"])


def reduce(state: Any, outcomes: Sequence[Any]) -> dict[str, Any]:
    """Replace the observations with this batch's."""
    return {"question": state["question"], "observations": [observe(o) for o in outcomes]}


def check_answer(result: Any, summary: Any) -> None:
    """An eval check (projects/scripted-agent.cases.yaml): one observation per uppercase call."""
    observations = result["answer"].split("; ")
    assert len(observations) == summary["calls"], f"{len(observations)} observations"
    assert summary["tools"].get("count") == 1, "count was not called once"


scripted_agent = define_agent(
    id="scripted-agent",
    name="Scripted agent",
    description="Counts characters and uppercases words with scripted decisions.",
    implementation_version="scripted-v1",
    input_schema=Question,
    result_schema=Answer,
    result_json_schema=ANSWER_JSON_SCHEMA,
    initial_state=initial_state,
    decide=decide,
    dry_run=decide,
    reduce=reduce,
    tools={"uppercase": uppercase, "count": count},
    limits={"max_turns": 3, "max_calls": 100, "max_decisions": 3, "max_concurrency": 2},
)

if __name__ == "__main__":
    sys.exit(run_agent_cli(scripted_agent, "python -m examples.scripted_agent"))
