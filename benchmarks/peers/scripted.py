"""The scripted agent's work, written once for the peer servers (no peer library needed).

It mirrors ``examples/scripted_agent.py``: the first decision asks for ``count`` on the whole
question and ``uppercase`` on each word in one batch, at most two calls at a time (the agent's
``max_concurrency``); the outcomes become observations; the second decision finishes with them
joined by ``"; "``. A word containing ``missing`` fails its call, observed as an error.
"""

from __future__ import annotations

import asyncio
from typing import Any

#: The agent's ``max_concurrency``: calls of one batch running at once.
CONCURRENCY = 2


class ScriptedToolError(Exception):
    """A tool's expected failure (the example's ``ToolError("NOT_FOUND", ...)``)."""


async def uppercase(text: str) -> str:
    """The ``uppercase`` tool."""
    if "missing" in text:
        raise ScriptedToolError("Word unavailable")
    return text.upper()


async def count(text: str) -> int:
    """The ``count`` tool."""
    return len(text)


TOOLS: dict[str, Any] = {"uppercase": uppercase, "count": count}


def decide(question: str, observations: list[str] | None) -> dict[str, Any]:
    """First all the calls in one batch; then finish with the observations."""
    if not observations:
        calls = [{"id": "length", "tool": "count", "input": question}]
        calls += [
            {"id": f"word-{index}", "tool": "uppercase", "input": word}
            for index, word in enumerate(question.split())
        ]
        return {"kind": "continue", "calls": calls}
    return {"kind": "finish", "result": "; ".join(observations)}


async def run_calls(calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Run one batch, ``CONCURRENCY`` at a time; one outcome per call, in decision order."""
    gate = asyncio.Semaphore(CONCURRENCY)

    async def one(call: dict[str, Any]) -> dict[str, Any]:
        async with gate:
            try:
                value = await TOOLS[call["tool"]](call["input"])
            except ScriptedToolError as error:
                return {"id": call["id"], "tool": call["tool"], "ok": False, "error": str(error)}
            return {"id": call["id"], "tool": call["tool"], "ok": True, "value": value}

    return list(await asyncio.gather(*(one(call) for call in calls)))


def observe(outcome: dict[str, Any]) -> str:
    """One observation per outcome, as the example words it."""
    if not outcome["ok"]:
        return f"Observed NOT_FOUND: {outcome['error']}"
    if outcome["tool"] == "count":
        return f"{outcome['value']} characters"
    return str(outcome["value"])


def expected_answer(question: str) -> str:
    """The answer every server must return for ``question`` (the load checks it)."""
    words = [word.upper() for word in question.split()]
    return "; ".join([f"{len(question)} characters", *words])
