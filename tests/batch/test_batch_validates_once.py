"""A batch validates each input once: the driver validates it for the row's key, and the row's
run takes that value as its validated options instead of validating the input again. What a
row's run sees, its key, its output row and a refused input's error are as they were."""

from __future__ import annotations

import asyncio
from typing import Any

import pydantic

from tubeless import errors
from tubeless.batch import run_batch
from tubeless.durable._keys import default_key
from tubeless.pipeline import define_pipeline, step


def _rows(entry: Any, inputs: list[Any], **options: Any) -> list[dict[str, Any]]:
    async def collect() -> list[dict[str, Any]]:
        return [row async for row in run_batch(entry, inputs, **options)]

    return asyncio.run(collect())


def _counted() -> tuple[type[pydantic.BaseModel], list[int]]:
    calls: list[int] = []

    class Options(pydantic.BaseModel):
        n: int

        @pydantic.field_validator("n")
        @classmethod
        def _count(cls, value: int) -> int:
            calls.append(value)
            return value

    return Options, calls


def test_each_input_is_validated_once_and_the_run_sees_the_validated_value() -> None:
    options, calls = _counted()
    seen: list[Any] = []

    async def double(inputs: dict[str, Any], ctx: Any) -> int:
        seen.append(ctx.options)
        return int(ctx.options.n) * 2

    entry = define_pipeline(id="double", steps=[step("double", double)], options_schema=options)

    rows = _rows(entry, [{"n": 1}, {"n": "2"}, {"n": 1}], concurrency=2)

    assert sorted(calls) == [1, 1, 2]  # once per row, not twice
    assert [row["result"] for row in rows] == [2, 4, 2]
    assert sorted(seen, key=lambda value: value.n) == [options(n=1), options(n=1), options(n=2)]
    first = default_key("double", {"n": 1})
    assert [row["key"] for row in rows] == [first, default_key("double", {"n": 2}), f"{first}#2"]


def test_a_refused_input_fails_its_row_as_before() -> None:
    options, calls = _counted()

    async def double(inputs: dict[str, Any], ctx: Any) -> int:
        return int(ctx.options.n) * 2

    entry = define_pipeline(id="double", steps=[step("double", double)], options_schema=options)

    rows = _rows(entry, [{"n": "x"}, {"n": 3}])

    assert rows[0]["status"] == "failed"
    assert rows[0]["error"]["code"] == errors.OPTIONS_VALIDATION_FAILED
    assert rows[0]["error"]["message"].startswith(
        "line 1: Pipeline double options validation failed"
    )
    assert rows[1]["result"] == 6
    assert calls == [3]


def test_a_retried_row_runs_on_its_input_again_not_on_what_the_first_attempt_changed() -> None:
    seen: list[Any] = []

    async def flaky(inputs: dict[str, Any], ctx: Any) -> Any:
        seen.append(dict(ctx.options))
        attempt = len(seen)
        ctx.options["n"] = 99  # a handler that changes its options in place
        if attempt == 1:
            raise RuntimeError("first attempt fails")
        return attempt

    schema = {"type": "object", "properties": {"n": {"type": "integer"}}}
    entry = define_pipeline(id="flaky", steps=[step("flaky", flaky)], options_schema=schema)

    rows = _rows(entry, [{"n": 1}], retry_failed=True)

    assert rows[0]["status"] == "completed", rows
    assert seen == [{"n": 1}, {"n": 1}]
