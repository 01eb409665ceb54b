"""The delegation recipe: an agent whose tools are another agent and a pipeline.

Turn 1 sends each word to the scripted agent (``process_word``, a pipeline tool, so budgets are
shared and each call is one delegation edge); turn 2 summarizes the answers with the
``agent-summary`` pipeline; turn 3 finishes::

    python -m examples.agent_delegation --question "red blue"
    {"answer": "Summary: 3 characters; RED | 4 characters; BLUE"}
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

from typing_extensions import TypedDict

from examples._cli import run_agent_cli
from examples.scripted_agent import scripted_agent
from examples.text import ANSWER_JSON_SCHEMA, Answer, Question, question_of
from tubeless import StepContext, define_pipeline, step
from tubeless.agent import DecisionContext, define_agent, pipeline_tool


class SummaryInput(TypedDict):
    """The summary pipeline's input."""

    text: str


def summarize_text(inputs: dict[str, Any], ctx: StepContext) -> str:
    """Prefix the text."""
    return f"Summary: {ctx.options['text']}"


summary_pipeline = define_pipeline(
    id="agent-summary",
    name="Agent summary",
    options_schema=SummaryInput,
    result_schema=str,
    steps=[step("summarize", summarize_text)],
)


def summary_options(validated: Question) -> SummaryInput:
    """The summary pipeline's input from the tool's validated argument."""
    return {"text": question_of(validated)}


def initial_state(validated: Question) -> dict[str, Any]:
    """The question, no answers and no summary yet."""
    return {"question": question_of(validated), "answers": [], "summary": None}


def decide(state: Any, ctx: DecisionContext) -> dict[str, Any]:
    """Delegate every word, then summarize the answers, then finish."""
    if not state["answers"]:
        return {
            "kind": "continue",
            "calls": [
                {"id": f"word-{index}", "tool": "process_word", "input": {"question": word}}
                for index, word in enumerate(state["question"].split())
            ],
        }
    if state["summary"] is None:
        joined = " | ".join(state["answers"])
        return {
            "kind": "continue",
            "calls": [{"id": "summary", "tool": "summarize", "input": {"question": joined}}],
        }
    return {"kind": "finish", "result": state["summary"]}


def reduce(state: Any, outcomes: Sequence[Any]) -> dict[str, Any]:
    """Collect the word answers, then the summary."""
    if outcomes[0]["tool"] == "summarize":
        return {**state, "summary": outcomes[0]["value"]}
    answers = [
        o["value"]["answer"] if o["ok"] else f"Observed {o['error']['code']}" for o in outcomes
    ]
    return {**state, "answers": answers}


delegating_agent = define_agent(
    id="delegating-agent",
    name="Delegating agent",
    description="Delegates each word to the scripted agent, then summarizes.",
    implementation_version="delegation-v1",
    input_schema=Question,
    result_schema=Answer,
    result_json_schema=ANSWER_JSON_SCHEMA,
    initial_state=initial_state,
    decide=decide,
    dry_run=decide,
    reduce=reduce,
    tools={
        "process_word": pipeline_tool(
            scripted_agent, description="Count and uppercase one word with the scripted agent."
        ),
        "summarize": pipeline_tool(
            summary_pipeline,
            description="Summarize text.",
            input_schema=Question,
            map_options=summary_options,
        ),
    },
    limits={
        "max_turns": 3,
        "max_calls": 100,
        "max_decisions": 50,
        "max_depth": 1,
        "max_concurrency": 2,
    },
)

if __name__ == "__main__":
    sys.exit(run_agent_cli(delegating_agent, "python -m examples.agent_delegation"))
