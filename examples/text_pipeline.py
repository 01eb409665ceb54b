"""A small text pipeline: count a question's characters and uppercase each word in a child run.

Run it with ``python -m examples.text_pipeline --question "hello tubeless"`` (or ``make run``);
``--plan`` prints the plan without running anything and ``--dry-run`` runs the previews.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import Any

from pydantic import BaseModel

from tubeless import (
    PipelineRun,
    StepContext,
    define_pipeline,
    for_each_pipeline,
    require_outputs,
    step,
)
from tubeless.reporting import format_plan


class Question(BaseModel):
    """The pipeline's input."""

    question: str = "hello tubeless"


class Answer(BaseModel):
    """The pipeline's result."""

    answer: str


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
    return ctx.options.question.split()


async def count_characters(inputs: dict[str, Any], ctx: StepContext) -> int:
    """Count the question's characters."""
    return len(ctx.options.question)


def summarize(outputs: dict[str, Any], ctx: StepContext) -> dict[str, str]:
    """Join the character count and the uppercased words."""
    parts = [f"{outputs['count']} characters", *outputs["uppercase"]]
    return {"answer": "; ".join(parts)}


pipeline = define_pipeline(
    id="text-pipeline",
    name="Text pipeline",
    description="Counts characters and uppercases every word.",
    implementation_version="1",
    options_schema=Question,
    result_schema=Answer,
    steps=[
        step("words", split_words, name="Split words"),
        step("count", count_characters, name="Count characters", dry_run=count_characters),
        for_each_pipeline(
            "uppercase",
            uppercase_word,
            items=lambda inputs, ctx: inputs["words"],
            key=lambda word, index: f"word-{index}",
            map_options=lambda word, index, inputs, ctx: word,
            concurrency=2,
            depends_on=["words"],
            name="Uppercase words",
        ),
    ],
    finalize=require_outputs(["count", "uppercase"], summarize),
)


def main(argv: list[str] | None = None) -> int:
    """Run (or plan) the pipeline from the command line; prints the result as JSON."""
    parser = argparse.ArgumentParser(prog="python -m examples.text_pipeline")
    parser.add_argument("--question", help="the text to process (default: 'hello tubeless')")
    parser.add_argument("--dry-run", action="store_true", help="run the preview handlers")
    parser.add_argument("--plan", action="store_true", help="print the plan; run nothing")
    parser.add_argument("--explain", action="store_true", help="with --plan: say why")
    args = parser.parse_args(argv)
    if args.plan:
        print(format_plan(pipeline.plan(dry_run=args.dry_run), explain=args.explain), end="")
        return 0
    raw = {} if args.question is None else {"question": args.question}
    run: PipelineRun = asyncio.run(pipeline.run(raw, dry_run=args.dry_run))
    if run.status != "completed":
        for error in run.errors:
            print(f"error: {error.code}: {error.format()}", file=sys.stderr)
        return 7 if run.status == "cancelled" else 6
    print(json.dumps(run.value.model_dump()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
