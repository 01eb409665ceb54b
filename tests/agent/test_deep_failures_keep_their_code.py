"""A failure deep in delegation or in a long exception chain keeps its code (issue 14 item 15):
the source code, the error type in the trace, and a chain cut in the middle keeping the innermost.
"""

from __future__ import annotations

import json
from importlib import resources
from typing import Any

import jsonschema
import pytest

from tubeless import PipelineExecutionError, define_agent, define_pipeline, pipeline_tool, step
from tubeless import errors as codes
from tubeless.agent import define_tool
from tubeless.errors import MAX_CAUSE_DEPTH
from tubeless.testing import call, capture_trace, continue_with, finish, scripted


def record_validator() -> jsonschema.Draft202012Validator:
    text = resources.files("tubeless.tracing").joinpath("record.schema.json").read_text("utf-8")
    return jsonschema.Draft202012Validator(json.loads(text))


def echo_tool() -> Any:
    return define_tool(
        description="Echo.", input_schema=str, output_schema=str, run=lambda text, ctx: text
    )


def lookup_tool() -> Any:
    def lookup(text: str, ctx: Any) -> str:
        return {"a": "1"}["b"]

    return define_tool(description="Look up.", input_schema=str, output_schema=str, run=lookup)


def delegation_chain(
    depth: int, leaf_tools: dict[str, Any], leaf_decide: Any, max_turns: int = 1
) -> Any:
    """``level-<depth>`` delegates to ``level-<depth-1>`` ... down to ``level-0``."""
    agent = define_agent(
        id="level-0",
        input_schema=dict[str, Any],
        result_schema=Any,
        initial_state=lambda validated: {},
        decide=leaf_decide,
        tools=leaf_tools,
        limits={"max_turns": max_turns},
    )
    for level in range(1, depth + 1):
        agent = define_agent(
            id=f"level-{level}",
            input_schema=dict[str, Any],
            result_schema=Any,
            initial_state=lambda validated: {},
            decide=scripted(continue_with(call("delegate", {}, "d")), finish("never")),
            tools={"delegate": pipeline_tool(agent, description="Delegate.")},
        )
    return agent


def chain_of(cause: dict[str, Any] | None) -> list[dict[str, Any]]:
    found = []
    while cause is not None:
        found.append(cause)
        cause = cause.get("cause")
    return found


@pytest.mark.parametrize("depth", [1, 2, 3, 4])
async def test_a_limit_hit_deep_in_delegation_keeps_its_source_code(depth: int) -> None:
    """Issue 14 item 15: at delegation depth 3 (and 4) the source code is the limit's, not
    TUBELESS_CHILD_FAILED: the deepest code is found before the cause chain is cut."""
    agent = delegation_chain(
        depth, {"echo": echo_tool()}, scripted(continue_with(call("echo", "x")))
    )

    with capture_trace() as trace:
        run = await agent.run({}, trace=trace)

    assert run.status == "failed"
    assert run.errors[0].source_code == codes.AGENT_LIMIT_REACHED
    assert PipelineExecutionError(run).source_code == codes.AGENT_LIMIT_REACHED
    root_completed = trace.records[-1]
    assert root_completed["name"] == "pipeline.completed"
    assert root_completed["error"]["sourceCode"] == codes.AGENT_LIMIT_REACHED
    innermost = chain_of(root_completed["error"]["cause"])[-1]
    assert (innermost["name"], innermost["sourceCode"]) == (
        "LimitReachedError",
        codes.AGENT_LIMIT_REACHED,
    )
    assert list(record_validator().iter_errors(root_completed)) == []


async def test_a_handler_exception_deep_in_delegation_keeps_its_type_in_the_trace() -> None:
    """Issue 14 item 15: the innermost exception (its type and message) survives the cut."""
    agent = delegation_chain(
        3, {"lookup": lookup_tool()}, scripted(continue_with(call("lookup", "x", "c1"))), 2
    )

    with capture_trace() as trace:
        run = await agent.run({}, trace=trace)

    chain = chain_of(trace.records[-1]["error"]["cause"])
    assert (chain[-1]["name"], chain[-1]["message"]) == ("KeyError", "'b'")
    assert len(chain) <= MAX_CAUSE_DEPTH + 1
    assert run.errors[0].source_code == codes.STEP_FAILED
    assert run.errors[0].cause is not None
    assert run.errors[0].cause.deepest().name == "KeyError"


class CodedError(Exception):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


def nested_failure(links: int, innermost: BaseException) -> Any:
    def run(inputs: Any, ctx: Any) -> None:
        def fail(level: int) -> None:
            if level == 0:
                raise innermost
            try:
                fail(level - 1)
            except Exception as exc:
                raise RuntimeError(f"level {level}") from exc

        fail(links)

    return run


@pytest.mark.parametrize(
    ("innermost", "source_code", "name"),
    [
        pytest.param(CodedError("DEEP_CODE", "deep"), "DEEP_CODE", "CodedError", id="coded"),
        pytest.param(KeyError("deep"), None, "KeyError", id="uncoded"),
    ],
)
async def test_a_long_exception_chain_is_cut_in_the_middle_keeping_the_innermost(
    innermost: BaseException, source_code: str | None, name: str
) -> None:
    """Issue 14 item 15: 40 chained exceptions keep the outer links, a marker and the innermost."""
    pipeline = define_pipeline(id="deep", steps=[step("s", nested_failure(40, innermost))])

    run = await pipeline.run()

    [error] = run.errors
    wire = chain_of(error.to_wire()["cause"])
    assert len(wire) == MAX_CAUSE_DEPTH + 1
    assert [link["message"] for link in wire[:2]] == ["level 40", "level 39"]
    assert wire[-2]["message"] == "Cause chain truncated (33 causes omitted)"
    assert (wire[-1]["name"], error.source_code) == (name, source_code)


async def test_a_code_in_the_omitted_middle_of_a_chain_is_still_the_source_code() -> None:
    """Issue 14 item 15: the marker carries the innermost code of the links it stands for."""

    def run(inputs: Any, ctx: Any) -> None:
        try:
            raise nested_failure_in(30)
        except Exception as exc:
            raise RuntimeError("top") from exc

    def nested_failure_in(links: int) -> BaseException:
        try:
            try:
                raise KeyError("bottom")
            except KeyError as exc:
                raise CodedError("MIDDLE_CODE", "middle") from exc
        except CodedError as coded:
            error: BaseException = coded
            for level in range(links):
                try:
                    raise RuntimeError(f"wrap {level}") from error
                except RuntimeError as wrapped:
                    error = wrapped
            return error

    pipeline = define_pipeline(id="middle", steps=[step("s", run)])
    result = await pipeline.run()

    assert result.errors[0].source_code == "MIDDLE_CODE"
    assert PipelineExecutionError(result).source_code == "MIDDLE_CODE"
