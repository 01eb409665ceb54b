"""Tools and agent definitions: define_tool, ToolError, define_agent, Limits, pipeline_tool.

Everything here is checked at definition time (seed "Define tools and an agent", DESIGN §3,
UPSTREAM §4.2-4.3), except the two claims that an explicit descriptor never replaces the
validator, which need one run.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pydantic
import pytest

from tubeless import (
    AgentDefinitionError,
    Limits,
    Pipeline,
    ToolError,
    define_agent,
    define_pipeline,
    define_tool,
    pipeline_tool,
    step,
)
from tubeless.agent import Tool
from tubeless.errors import AGENT_INVALID_DECISION, AGENT_INVALID_DEFINITION
from tubeless.frozen import FrozenDict, thaw
from tubeless.testing import call, continue_with, finish, scripted

MAX_SAFE_INT = 2**53 - 1


async def _echo(value: Any, ctx: Any) -> Any:
    return value


def _tool(**overrides: Any) -> Tool:
    fields: dict[str, Any] = {
        "description": "Echo the text.",
        "input_schema": str,
        "output_schema": str,
        "run": _echo,
    }
    fields.update(overrides)
    return define_tool(**fields)


def _decide(state: Any, ctx: Any) -> Any:
    return finish("done")


def _agent(**overrides: Any) -> Pipeline:
    fields: dict[str, Any] = {
        "id": "probe",
        "input_schema": dict[str, Any],
        "result_schema": str,
        "initial_state": lambda validated: {},
        "decide": _decide,
    }
    fields.update(overrides)
    return define_agent(**fields)


def _assert_sorted_and_frozen(value: Any) -> None:
    """Every mapping is a FrozenDict with keys in sorted order; every sequence a tuple."""
    if isinstance(value, dict):
        assert type(value) is FrozenDict
        assert list(value) == sorted(value)
        for item in value.values():
            _assert_sorted_and_frozen(item)
    elif isinstance(value, list | tuple):
        assert type(value) is tuple
        for item in value:
            _assert_sorted_and_frozen(item)
    else:
        assert value is None or type(value) in (str, int, float, bool)


class Leaf(pydantic.BaseModel):
    """A nested model, so the derived descriptor has ``$defs`` and several levels."""

    zeta: str
    alpha: int = 0


class Query(pydantic.BaseModel):
    """A tool argument whose fields are declared out of alphabetical order."""

    text: str = pydantic.Field(description="What to look for.")
    limit: int = 10
    leaves: list[Leaf] = []


# -- define_tool: descriptions, schemas, handlers ---------------------------------------------


@pytest.mark.parametrize(
    "description",
    [
        pytest.param("", id="empty"),
        pytest.param("   \n\t", id="whitespace"),
        pytest.param("x" * 4097, id="4097-chars"),
        pytest.param(None, id="none"),
        pytest.param(42, id="not-a-string"),
    ],
)
def test_define_tool_rejects_a_blank_missing_or_oversized_description(description: Any) -> None:
    with pytest.raises(AgentDefinitionError) as caught:
        _tool(description=description)
    assert caught.value.code == AGENT_INVALID_DEFINITION


def test_define_tool_accepts_a_description_of_exactly_4096_characters() -> None:
    tool = _tool(description="d" * 4096)
    assert tool.description == "d" * 4096


@pytest.mark.parametrize(
    "field",
    [pytest.param("input_schema", id="input"), pytest.param("output_schema", id="output")],
)
@pytest.mark.parametrize(
    "schema",
    [
        pytest.param(42, id="int-instance"),
        pytest.param(object(), id="object-instance"),
        pytest.param("str", id="type-name-string"),
        pytest.param({"type": "no-such-type"}, id="invalid-json-schema"),
    ],
)
def test_define_tool_rejects_a_non_schema(field: str, schema: Any) -> None:
    with pytest.raises(AgentDefinitionError) as caught:
        _tool(**{field: schema})
    assert caught.value.code == AGENT_INVALID_DEFINITION


@pytest.mark.parametrize(
    "field",
    [pytest.param("run", id="run"), pytest.param("preview", id="preview")],
)
@pytest.mark.parametrize(
    "handler",
    [pytest.param("handler", id="string"), pytest.param(42, id="int")],
)
def test_define_tool_rejects_a_non_callable_handler(field: str, handler: Any) -> None:
    with pytest.raises(AgentDefinitionError) as caught:
        _tool(**{field: handler})
    assert caught.value.code == AGENT_INVALID_DEFINITION


def test_define_tool_rejects_a_missing_run_handler() -> None:
    with pytest.raises(AgentDefinitionError) as caught:
        _tool(run=None)
    assert caught.value.code == AGENT_INVALID_DEFINITION


def test_define_tool_rejects_an_input_schema_that_has_no_json_schema_and_no_descriptor() -> None:
    with pytest.raises(AgentDefinitionError) as caught:
        _tool(input_schema=Callable[[int], int])
    assert caught.value.code == AGENT_INVALID_DEFINITION


def test_derived_descriptor_equals_the_draft_2020_12_schema_frozen_with_sorted_keys() -> None:
    tool = _tool(input_schema=Query)

    expected = Query.model_json_schema(mode="validation")
    assert thaw(tool.input_json_schema) == expected
    assert json.dumps(tool.input_json_schema) == json.dumps(expected, sort_keys=True)
    _assert_sorted_and_frozen(tool.input_json_schema)
    with pytest.raises(TypeError):
        tool.input_json_schema["type"] = "string"  # type: ignore[index]
    with pytest.raises(TypeError):
        tool.input_json_schema["properties"]["text"]["extra"] = 1


def test_derived_descriptor_of_a_json_schema_dict_is_that_schema_sorted() -> None:
    schema = {"type": "object", "required": ["b", "a"], "properties": {"b": {}, "a": {}}}
    tool = _tool(input_schema=schema)

    assert thaw(tool.input_json_schema) == schema
    assert list(tool.input_json_schema) == ["properties", "required", "type"]
    assert list(tool.input_json_schema["properties"]) == ["a", "b"]
    # Array order is data, not a key order: it is kept.
    assert tool.input_json_schema["required"] == ("b", "a")


def test_explicit_descriptor_is_used_as_given_sorted_frozen_and_owned() -> None:
    given: dict[str, Any] = {
        "type": "object",
        "properties": {"zeta": {"type": "string"}, "alpha": {"type": "integer"}},
        "required": ["zeta"],
    }
    tool = _tool(input_schema=dict[str, Any], input_json_schema=given)

    assert thaw(tool.input_json_schema) == given
    _assert_sorted_and_frozen(tool.input_json_schema)
    assert list(tool.input_json_schema["properties"]) == ["alpha", "zeta"]

    given["type"] = "array"
    given["properties"]["zeta"]["type"] = "number"
    given["required"].append("alpha")
    assert tool.input_json_schema == {
        "properties": {"alpha": {"type": "integer"}, "zeta": {"type": "string"}},
        "required": ("zeta",),
        "type": "object",
    }


@pytest.mark.parametrize(
    "descriptor",
    [
        pytest.param(["type", "string"], id="list"),
        pytest.param("string", id="string"),
        pytest.param({"enum": {1, 2}}, id="set-value"),
        pytest.param({"maximum": float("nan")}, id="nan"),
        pytest.param({"maximum": float("inf")}, id="inf"),
        pytest.param({1: "x"}, id="non-string-key"),
        pytest.param({"default": object()}, id="object-value"),
        pytest.param({"default": b"bytes"}, id="bytes-value"),
    ],
)
def test_define_tool_rejects_a_descriptor_that_is_not_a_json_object(descriptor: Any) -> None:
    with pytest.raises(AgentDefinitionError) as caught:
        _tool(input_json_schema=descriptor)
    assert caught.value.code == AGENT_INVALID_DEFINITION


async def test_explicit_descriptor_never_replaces_the_validator() -> None:
    """An argument valid per a too-loose descriptor is still rejected by the schema."""
    started: list[Any] = []

    async def run(value: int, ctx: Any) -> int:
        started.append(value)
        return value

    tool = _tool(input_schema=int, output_schema=int, run=run, input_json_schema={"type": "string"})
    agent = _agent(tools={"number": tool}, decide=scripted(continue_with(call("number", "seven"))))

    run_record = await agent.run({})

    assert run_record.status == "failed"
    assert run_record.errors[0].source_code == AGENT_INVALID_DECISION
    assert started == []


def test_tool_is_immutable() -> None:
    tool = _tool()
    with pytest.raises(AttributeError):
        tool.description = "Something else."  # type: ignore[misc]
    with pytest.raises(AttributeError):
        tool._run = _echo  # type: ignore[misc]


def test_tool_attributes_cannot_be_deleted() -> None:
    tool = _tool()
    with pytest.raises(AttributeError):
        del tool.description
    assert tool.description == "Echo the text."


def test_tool_exposes_no_handler_through_its_public_attributes() -> None:
    async def secret_handler(value: str, ctx: Any) -> str:
        return value

    tool = _tool(run=secret_handler, preview=secret_handler)
    public = {name: getattr(tool, name) for name in dir(tool) if not name.startswith("_")}

    assert secret_handler not in public.values()
    assert {name for name, value in public.items() if callable(value)} == set()
    assert "secret_handler" not in repr(tool)


# -- ToolError --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "message"),
    [
        pytest.param("", "m", id="empty-code"),
        pytest.param("  ", "m", id="blank-code"),
        pytest.param("C" * 257, "m", id="257-char-code"),
        pytest.param(None, "m", id="none-code"),
        pytest.param(7, "m", id="int-code"),
        pytest.param("CODE", "m" * 4097, id="4097-char-message"),
        pytest.param("CODE", None, id="none-message"),
    ],
)
def test_tool_error_rejects_invalid_code_or_message(code: Any, message: Any) -> None:
    with pytest.raises(ValueError):
        ToolError(code, message)


def test_tool_error_accepts_the_largest_code_and_message() -> None:
    error = ToolError("C" * 256, "m" * 4096)
    assert error.code == "C" * 256
    assert error.message == "m" * 4096


def test_tool_error_is_an_exception_carrying_code_and_message() -> None:
    error = ToolError("NOT_FOUND", "No such word")
    assert isinstance(error, Exception)
    assert (error.code, error.message, str(error)) == ("NOT_FOUND", "No such word", "No such word")


def test_tool_error_allows_an_empty_message() -> None:
    assert ToolError("EMPTY", "").message == ""


# -- define_agent: definition errors ------------------------------------------------------------


@pytest.mark.parametrize(
    "agent_id",
    [pytest.param("", id="empty"), pytest.param("  ", id="blank"), pytest.param(None, id="none")],
)
def test_define_agent_rejects_a_blank_id(agent_id: Any) -> None:
    with pytest.raises(AgentDefinitionError) as caught:
        _agent(id=agent_id)
    assert caught.value.code == AGENT_INVALID_DEFINITION


@pytest.mark.parametrize(
    "name",
    [
        pytest.param("9lives", id="leading-digit"),
        pytest.param("_x", id="leading-underscore"),
        pytest.param("-x", id="leading-hyphen"),
        pytest.param("two words", id="space"),
        pytest.param("a.b", id="dot"),
        pytest.param("é", id="non-ascii-letter"),
        pytest.param("x\n", id="trailing-newline"),
        pytest.param("", id="empty"),
        pytest.param("a" * 129, id="129-chars"),
        pytest.param(7, id="not-a-string"),
    ],
)
def test_define_agent_rejects_a_tool_name_outside_the_name_pattern(name: Any) -> None:
    with pytest.raises(AgentDefinitionError) as caught:
        _agent(tools={name: _tool()})
    assert caught.value.code == AGENT_INVALID_DEFINITION


@pytest.mark.parametrize(
    "name",
    [
        pytest.param("a" * 128, id="128-chars"),
        pytest.param("a-b_C9", id="letters-digits-underscore-hyphen"),
        pytest.param("Z", id="single-uppercase-letter"),
    ],
)
def test_define_agent_accepts_a_tool_name_matching_the_name_pattern(name: str) -> None:
    agent = _agent(tools={name: _tool()})
    names = [c["name"] for c in agent.plan().step("agent").agent["capabilities"]]
    assert names == [name]


@pytest.mark.parametrize(
    "tool",
    [
        pytest.param(_echo, id="plain-function"),
        pytest.param({"description": "d", "run": _echo}, id="dict"),
        pytest.param("uppercase", id="string"),
        pytest.param(None, id="none"),
    ],
)
def test_define_agent_rejects_a_tool_not_made_by_define_tool_or_pipeline_tool(tool: Any) -> None:
    with pytest.raises(AgentDefinitionError) as caught:
        _agent(tools={"t": tool})
    assert caught.value.code == AGENT_INVALID_DEFINITION


@pytest.mark.parametrize(
    "tools",
    [
        pytest.param([("t", None)], id="list-of-pairs"),
        pytest.param("t", id="string"),
        pytest.param(42, id="int"),
    ],
)
def test_define_agent_rejects_a_tools_argument_that_is_not_a_mapping(tools: Any) -> None:
    with pytest.raises(AgentDefinitionError) as caught:
        _agent(tools=tools)
    assert caught.value.code == AGENT_INVALID_DEFINITION


def test_define_agent_rejects_more_than_4096_tools() -> None:
    tool = _tool()
    with pytest.raises(AgentDefinitionError) as caught:
        _agent(tools={f"t{index}": tool for index in range(4097)})
    assert caught.value.code == AGENT_INVALID_DEFINITION


@pytest.mark.parametrize(
    ("field", "value"),
    [
        pytest.param("initial_state", None, id="initial_state-missing"),
        pytest.param("initial_state", {"question": ""}, id="initial_state-a-mapping"),
        pytest.param("decide", None, id="decide-missing"),
        pytest.param("decide", "finish", id="decide-a-string"),
        pytest.param("reduce", "append", id="reduce-a-string"),
        pytest.param("reduce", 0, id="reduce-an-int"),
        pytest.param("dry_run", "decide", id="dry_run-a-string"),
        pytest.param("dry_run", True, id="dry_run-a-bool"),
    ],
)
def test_define_agent_rejects_missing_or_non_callable_callbacks(field: str, value: Any) -> None:
    with pytest.raises(AgentDefinitionError) as caught:
        _agent(**{field: value})
    assert caught.value.code == AGENT_INVALID_DEFINITION


@pytest.mark.parametrize(
    "field",
    [pytest.param("input_schema", id="input"), pytest.param("result_schema", id="result")],
)
def test_define_agent_rejects_a_non_schema(field: str) -> None:
    with pytest.raises(AgentDefinitionError) as caught:
        _agent(**{field: object()})
    assert caught.value.code == AGENT_INVALID_DEFINITION


def test_define_agent_rejects_a_result_schema_without_json_schema_and_no_descriptor() -> None:
    with pytest.raises(AgentDefinitionError) as caught:
        _agent(result_schema=Callable[[int], int])
    assert caught.value.code == AGENT_INVALID_DEFINITION


def test_define_agent_accepts_a_result_schema_without_json_schema_given_a_descriptor() -> None:
    agent = _agent(result_schema=Callable[[int], int], result_json_schema={"type": "string"})
    assert agent.plan().step("agent").agent["resultJsonSchema"] == {"type": "string"}


def test_define_agent_rejects_a_result_descriptor_that_is_not_json() -> None:
    with pytest.raises(AgentDefinitionError) as caught:
        _agent(result_json_schema={"const": float("nan")})
    assert caught.value.code == AGENT_INVALID_DEFINITION


def test_define_agent_rejects_an_unknown_limit_key_naming_it() -> None:
    with pytest.raises(AgentDefinitionError) as caught:
        _agent(limits={"max_turns": 2, "max_foo": 1})
    assert caught.value.code == AGENT_INVALID_DEFINITION
    assert caught.value.message == "Unsupported agent limit: max_foo"


def test_define_agent_rejects_limits_that_are_neither_limits_nor_a_mapping() -> None:
    with pytest.raises(AgentDefinitionError) as caught:
        _agent(limits=[("max_turns", 2)])
    assert caught.value.code == AGENT_INVALID_DEFINITION


@pytest.mark.parametrize(
    "limits",
    [
        pytest.param({"max_turns": 0}, id="mapping-max_turns-0"),
        pytest.param({"max_calls": True}, id="mapping-bool"),
        pytest.param({"max_depth": 1.0}, id="mapping-float"),
    ],
)
def test_define_agent_validates_limits_given_as_a_mapping(limits: dict[str, Any]) -> None:
    with pytest.raises(AgentDefinitionError) as caught:
        _agent(limits=limits)
    assert caught.value.code == AGENT_INVALID_DEFINITION


# -- Limits -------------------------------------------------------------------------------------


def test_limits_defaults_are_20_turns_100_calls_100_decisions_depth_4_concurrency_1_fail() -> None:
    assert Limits().to_dict() == {
        "max_turns": 20,
        "max_calls": 100,
        "max_decisions": 100,
        "max_depth": 4,
        "max_concurrency": 1,
        "on_limit": "fail",
    }


LIMIT_NAMES = ["max_turns", "max_calls", "max_decisions", "max_depth", "max_concurrency"]


@pytest.mark.parametrize("name", LIMIT_NAMES)
@pytest.mark.parametrize(
    "value",
    [
        pytest.param(True, id="bool-true"),
        pytest.param(False, id="bool-false"),
        pytest.param(2.0, id="integral-float"),
        pytest.param(2.5, id="float"),
        pytest.param("2", id="string"),
        pytest.param(None, id="none"),
        pytest.param(MAX_SAFE_INT + 1, id="above-2**53-1"),
    ],
)
def test_limits_reject_values_that_are_not_safe_integers(name: str, value: Any) -> None:
    with pytest.raises(AgentDefinitionError) as caught:
        Limits(**{name: value})
    assert caught.value.code == AGENT_INVALID_DEFINITION


@pytest.mark.parametrize(
    ("name", "value"),
    [
        pytest.param("max_turns", 0, id="max_turns-0"),
        pytest.param("max_calls", -1, id="max_calls--1"),
        pytest.param("max_decisions", 0, id="max_decisions-0"),
        pytest.param("max_depth", -1, id="max_depth--1"),
        pytest.param("max_concurrency", 0, id="max_concurrency-0"),
    ],
)
def test_limits_reject_values_below_their_minimum(name: str, value: int) -> None:
    with pytest.raises(AgentDefinitionError) as caught:
        Limits(**{name: value})
    assert caught.value.code == AGENT_INVALID_DEFINITION


@pytest.mark.parametrize(
    ("name", "value"),
    [
        pytest.param("max_calls", 0, id="max_calls-0"),
        pytest.param("max_depth", 0, id="max_depth-0"),
        pytest.param("max_turns", 1, id="max_turns-1"),
        pytest.param("max_decisions", 1, id="max_decisions-1"),
        pytest.param("max_concurrency", 1, id="max_concurrency-1"),
        *[pytest.param(name, MAX_SAFE_INT, id=f"{name}-2**53-1") for name in LIMIT_NAMES],
    ],
)
def test_limits_accept_values_at_the_edges_of_their_range(name: str, value: int) -> None:
    assert getattr(Limits(**{name: value}), name) == value


def test_limits_are_immutable() -> None:
    limits = Limits()
    with pytest.raises(AttributeError):
        limits.max_turns = 3  # type: ignore[misc]


# -- pipeline_tool: definition errors -----------------------------------------------------------


class ChildOptions(pydantic.BaseModel):
    text: str


def _child(*, options_schema: Any = ChildOptions) -> Pipeline:
    def work(inputs: dict[str, Any], ctx: Any) -> str:
        return "done"

    return define_pipeline(id="child", steps=[step("work", work)], options_schema=options_schema)


def test_pipeline_tool_rejects_a_child_that_is_not_a_pipeline() -> None:
    with pytest.raises(AgentDefinitionError) as caught:
        pipeline_tool(_echo, description="Not a pipeline.")  # type: ignore[arg-type]
    assert caught.value.code == AGENT_INVALID_DEFINITION


@pytest.mark.parametrize(
    "extra",
    [
        pytest.param({"input_schema": str}, id="input_schema-without-map_options"),
        pytest.param({"map_options": lambda text: {"text": text}}, id="map_options-alone"),
    ],
)
def test_pipeline_tool_needs_input_schema_and_map_options_together(extra: dict[str, Any]) -> None:
    with pytest.raises(AgentDefinitionError) as caught:
        pipeline_tool(_child(), description="Run the child.", **extra)
    assert caught.value.code == AGENT_INVALID_DEFINITION


def test_pipeline_tool_rejects_a_child_without_options_schema_and_no_descriptor() -> None:
    with pytest.raises(AgentDefinitionError) as caught:
        pipeline_tool(_child(options_schema=None), description="Run the child.")
    assert caught.value.code == AGENT_INVALID_DEFINITION


def test_pipeline_tool_rejects_a_blank_description() -> None:
    with pytest.raises(AgentDefinitionError) as caught:
        pipeline_tool(_child(), description=" ")
    assert caught.value.code == AGENT_INVALID_DEFINITION


def test_pipeline_tool_derives_its_descriptor_from_the_childs_options_schema() -> None:
    tool = pipeline_tool(_child(), description="Run the child.")
    assert thaw(tool.input_json_schema) == ChildOptions.model_json_schema()
    _assert_sorted_and_frozen(tool.input_json_schema)


def test_pipeline_tool_accepts_a_child_without_options_schema_given_a_descriptor() -> None:
    tool = pipeline_tool(
        _child(options_schema=None),
        description="Run the child.",
        input_json_schema={"type": "object"},
    )
    assert tool.input_json_schema == {"type": "object"}


# -- define_agent: the compiled pipeline ----------------------------------------------------------


def test_define_agent_returns_an_ordinary_pipeline_with_one_agent_step_and_target() -> None:
    agent = _agent(id="research", tools={"echo": _tool()})

    assert isinstance(agent, Pipeline)
    assert agent.id == "research"
    assert agent.step_ids == ("agent",)
    assert agent.target_ids == ("agent",)


def test_agent_plan_has_one_step_iterating_the_turn_pipeline_up_to_max_turns() -> None:
    agent = _agent(id="research", tools={"echo": _tool()}, limits={"max_turns": 7})
    plan = agent.plan()

    assert plan.ok
    assert [s.id for s in plan.steps] == ["agent"]
    nested = dict(plan.steps[0].nested_pipeline or {})
    nested.pop("pipelineName", None)  # a display name, not part of this claim
    assert nested == {
        "mode": "iterate",
        "pipelineId": "research/turn",
        "stepIds": ["decide", "calls", "reduce"],
        "maxIterations": 7,
    }


def test_agent_plan_metadata_lists_capabilities_in_code_point_order_and_the_limits() -> None:
    names = ["b", "a_b", "Zed", "a-b", "a9", "B"]
    tools = {
        name: _tool(description=f"Tool {name}.", input_schema=Query if name == "a9" else str)
        for name in names
    }
    agent = _agent(
        tools=tools,
        limits=Limits(max_turns=3, max_calls=0, max_decisions=5, max_depth=0, max_concurrency=2),
    )

    metadata = dict(agent.plan().step("agent").agent or {})
    assert str(metadata.pop("inputSchema")).startswith("sha256:")
    assert json.loads(json.dumps(metadata)) == {
        "limits": {
            "maxTurns": 3,
            "maxCalls": 0,
            "maxDecisions": 5,
            "maxDepth": 0,
            "maxConcurrency": 2,
        },
        "capabilities": [
            {
                "name": name,
                "description": f"Tool {name}.",
                "inputJsonSchema": (
                    Query.model_json_schema() if name == "a9" else {"type": "string"}
                ),
                "replay": "unsafe",
            }
            # Plain code-point order: '-' < digits < uppercase < '_' < lowercase.
            for name in ["B", "Zed", "a-b", "a9", "a_b", "b"]
        ],
        "resultJsonSchema": {"type": "string"},
        "turnPipelineId": "probe/turn",
    }


def test_define_agent_adds_no_tool_implicitly() -> None:
    agent = _agent()
    assert agent.plan().step("agent").agent["capabilities"] == []


async def test_agent_without_tools_offers_decide_no_capabilities() -> None:
    seen: list[Any] = []

    def decide(state: Any, ctx: Any) -> Any:
        seen.append(ctx.capabilities)
        return finish("done")

    assert await _agent(decide=decide).run_or_raise({}) == "done"
    assert seen == [()]
