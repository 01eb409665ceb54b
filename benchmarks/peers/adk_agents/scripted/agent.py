"""The scripted agent as an ADK agent with no model, for ``adk api_server``.

A ``BaseAgent`` subclass does the scripted work itself and yields what an ADK model agent
records for the same turn: the decision's function calls, their responses, and the final
text. The runner appends each event to the session (in memory, or in the session store
``adk api_server`` was given). The question is the user message's text.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator

from google.adk.agents import BaseAgent
from google.adk.agents.invocation_context import InvocationContext
from google.adk.events import Event
from google.genai import types

from benchmarks.peers.scripted import decide, observe, run_calls


def _question(ctx: InvocationContext) -> str:
    content = ctx.user_content
    texts = [part.text for part in (content.parts or []) if part.text] if content else []
    return " ".join(texts) or "hello tubeless"


class ScriptedAgent(BaseAgent):
    """Count and uppercase with scripted decisions: one batch of calls, then finish."""

    async def _run_async_impl(self, ctx: InvocationContext) -> AsyncGenerator[Event, None]:
        question = _question(ctx)
        observations: list[str] = []
        while True:
            decision = decide(question, observations)
            if decision["kind"] == "finish":
                text = types.Part(text=decision["result"])
                yield Event(
                    author=self.name,
                    invocation_id=ctx.invocation_id,
                    branch=ctx.branch,
                    content=types.Content(role="model", parts=[text]),
                )
                return
            calls = decision["calls"]
            asked = [
                types.Part(
                    function_call=types.FunctionCall(
                        id=call["id"], name=call["tool"], args={"text": call["input"]}
                    )
                )
                for call in calls
            ]
            yield Event(
                author=self.name,
                invocation_id=ctx.invocation_id,
                branch=ctx.branch,
                content=types.Content(role="model", parts=asked),
            )
            outcomes = await run_calls(calls)
            answered = [
                types.Part(
                    function_response=types.FunctionResponse(
                        id=outcome["id"],
                        name=outcome["tool"],
                        response={"result": outcome.get("value"), "error": outcome.get("error")},
                    )
                )
                for outcome in outcomes
            ]
            yield Event(
                author=self.name,
                invocation_id=ctx.invocation_id,
                branch=ctx.branch,
                content=types.Content(role="user", parts=answered),
            )
            observations = [observe(outcome) for outcome in outcomes]


root_agent = ScriptedAgent(
    name="scripted", description="Counts characters and uppercases words (scripted)."
)
