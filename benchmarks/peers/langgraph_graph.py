"""The scripted agent as a LangGraph graph, for ``langgraph dev`` (its ``langgraph.json``).

Two nodes, as an agent loop is usually drawn: ``decide`` (the scripted decision) and ``tools``
(the batch of calls, two at a time), looping until ``decide`` finishes. No checkpointer is
given here: ``langgraph dev`` supplies its in-memory one and saves a checkpoint per step.
Input ``{"question": ...}``; the final state's ``answer`` is the result.
"""

from __future__ import annotations

from typing import Any

from langgraph.graph import END, START, StateGraph
from typing_extensions import TypedDict

from benchmarks.peers.scripted import decide, observe, run_calls


class State(TypedDict, total=False):
    """The graph's state: the question, the batch asked for, the observations, the answer."""

    question: str
    pending: list[dict[str, Any]]
    observations: list[str]
    answer: str


async def decide_node(state: State) -> dict[str, Any]:
    """Ask for the calls, or finish with the observations."""
    decision = decide(state.get("question", "hello tubeless"), state.get("observations"))
    if decision["kind"] == "continue":
        return {"pending": decision["calls"]}
    return {"pending": [], "answer": decision["result"]}


async def tools_node(state: State) -> dict[str, Any]:
    """Run the batch and replace the observations with its outcomes'."""
    outcomes = await run_calls(state["pending"])
    return {"pending": [], "observations": [observe(o) for o in outcomes]}


def _route(state: State) -> str:
    return "tools" if state.get("pending") else END


builder = StateGraph(State)
builder.add_node("decide", decide_node)
builder.add_node("tools", tools_node)
builder.add_edge(START, "decide")
builder.add_conditional_edges("decide", _route)
builder.add_edge("tools", "decide")
graph = builder.compile()
