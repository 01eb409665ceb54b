"""A pipeline definition built identically in this process and in subprocesses.

``test_identity.py`` imports it by path and runs ``python -c`` on it with different
``PYTHONHASHSEED`` values; the printed identity must not depend on the process.
"""

from __future__ import annotations

import json
from typing import Any

import pydantic

from tubeless import Schema, define_pipeline, from_pipeline, require_outputs, step
from tubeless.pipeline import Pipeline


class Options(pydantic.BaseModel):
    topic: str
    tags: frozenset[str] = frozenset()
    limits: dict[str, int] = {}


class Summary(pydantic.BaseModel):
    text: str
    words: int = 0
    labels: set[str] = set()


def _run(inputs: Any, ctx: Any) -> Any:
    return {"text": "x"}


async def _arun(inputs: Any, ctx: Any) -> Any:
    return None


def build() -> Pipeline:
    """The pipeline whose identity the tests compare across processes."""
    child = define_pipeline(
        id="child",
        steps=[
            step(
                "load",
                _run,
                output_schema=Schema.json(
                    {
                        "type": "object",
                        "properties": {"z": {"type": "string"}, "a": {"type": "integer"}},
                        "required": ["z", "a"],
                    }
                ),
            ),
            step("shape", _arun, depends_on="load", dry_run="skip"),
        ],
        implementation_version="child-1",
    )
    return define_pipeline(
        id="fixture",
        steps=[
            step("fetch", _arun, dry_run=lambda inputs, ctx: None),
            step("tags", _run, output_schema=set[str]),
            step("gate", _run, skip=lambda inputs, ctx: None),
            step(
                "summarize",
                _run,
                depends_on=["tags", "fetch"],
                optional_depends_on="gate",
                output_schema=Summary,
            ),
            from_pipeline("nested", child, depends_on="summarize", skip_after_failure_of="gate"),
            step(
                "publish",
                _arun,
                depends_on=["nested", "summarize"],
                skip_after_failure_of=["gate", "tags"],
            ),
        ],
        options_schema=Options,
        result_schema=dict[str, Any],
        targets=["publish", "summarize"],
        finalize=require_outputs(["summarize"]),
        implementation_version="2024.1",
    )


if __name__ == "__main__":
    print(json.dumps(build().identity.to_wire(), sort_keys=True))
