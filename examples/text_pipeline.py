"""A small text pipeline: count a question's characters and uppercase each word in child runs.

It shows targets, an optional dependency, a dry-run preview and a fan-out; its YAML twin is
``projects/text-pipeline.yaml``. Run it with ``python -m examples.text_pipeline --question
"hello tubeless"``; ``--plan`` prints the plan without running anything and ``--dry-run`` runs
the previews.
"""

from __future__ import annotations

import sys
from typing import Any

from examples._cli import run_agent_cli
from examples.text import Answer, Question, question_of
from tubeless import StepContext, define_pipeline, for_each_pipeline, step


async def uppercase(inputs: dict[str, Any], ctx: StepContext) -> str:
    """Uppercase one word (the child pipeline's validated input)."""
    word: str = ctx.options
    ctx.log.info("uppercasing a word of %d characters", len(word))
    return word.upper()


uppercase_word = define_pipeline(
    id="uppercase-word",
    name="Uppercase word",
    options_schema=str,
    result_schema=str,
    steps=[step("uppercase", uppercase, dry_run=uppercase)],
)


def split_words(inputs: dict[str, Any], ctx: StepContext) -> list[str]:
    """Split the question on whitespace (a sync handler: it runs in a worker thread)."""
    return question_of(ctx.options).split()


async def count_characters(inputs: dict[str, Any], ctx: StepContext) -> int:
    """Count the question's characters."""
    return len(question_of(ctx.options))


def word_items(inputs: dict[str, Any], ctx: StepContext) -> list[str]:
    """The fan-out's items: the words."""
    return list(inputs["words"])


def word_key(word: str, index: int) -> str:
    """A fan-out item's key."""
    return f"word-{index}"


def word_options(word: str, index: int, inputs: dict[str, Any], ctx: StepContext) -> str:
    """A child's input: the word itself."""
    return word


def report(inputs: dict[str, Any], ctx: StepContext) -> str:
    """The character count, then the uppercased words when that branch ran."""
    parts = [f"{inputs['count']} characters", *inputs.get("uppercase", ())]
    return "; ".join(parts)


def answer(outputs: dict[str, Any], ctx: StepContext) -> str:
    """The report, or just the count when only the ``count`` target ran."""
    if "report" in outputs:
        return str(outputs["report"])
    return f"{outputs['count']} characters"


pipeline = define_pipeline(
    id="text-pipeline",
    name="Text pipeline",
    description="Counts characters and uppercases every word.",
    implementation_version="1",
    options_schema=Question,
    result_schema=Answer,
    targets=["count", "report"],
    finalize=answer,
    steps=[
        step("words", split_words, name="Split words"),
        step("count", count_characters, name="Count characters", dry_run=count_characters),
        for_each_pipeline(
            "uppercase",
            uppercase_word,
            items=word_items,
            key=word_key,
            map_options=word_options,
            concurrency=2,
            depends_on=["words"],
            name="Uppercase words",
        ),
        step(
            "report",
            report,
            depends_on=["count"],
            optional_depends_on=["uppercase"],
            name="Report",
        ),
    ],
)

if __name__ == "__main__":
    sys.exit(run_agent_cli(pipeline, "python -m examples.text_pipeline"))
