"""Text schemas and tools shared by the example agents."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BeforeValidator, Field
from typing_extensions import TypedDict

from tubeless.agent import ToolContext, ToolError, define_tool


class AnswerDict(TypedDict):
    """What the example agents return."""

    answer: str


def _wrap_answer(value: Any) -> Any:
    return {"answer": value} if isinstance(value, str) else value


#: Accepts the finish result as a string and returns ``{"answer": <string>}``.
Answer = Annotated[AnswerDict, BeforeValidator(_wrap_answer)]
#: The descriptor models see for the finish result: just the answer text.
ANSWER_JSON_SCHEMA = {"type": "string", "description": "The final answer text."}


class Question(TypedDict, total=False):
    """The example agents' input: ``question`` defaults to "hello tubeless"."""

    question: Annotated[str, Field(description="The text to work on.")]


def question_of(validated: Question) -> str:
    """The question, or the default."""
    return validated.get("question", "hello tubeless")


async def _uppercase(text: str, ctx: ToolContext) -> str:
    if "missing" in text:
        raise ToolError("NOT_FOUND", "Word unavailable")
    return text.upper()


async def _count(text: str, ctx: ToolContext) -> int:
    return len(text)


uppercase = define_tool(
    description="Uppercase a piece of text.",
    input_schema=str,
    output_schema=str,
    run=_uppercase,
    preview=_uppercase,
)

count = define_tool(
    description="Count the characters of a piece of text.",
    input_schema=str,
    output_schema=int,
    run=_count,
    preview=_count,
)
