"""Pipelines and agents as tools: arguments, outcomes, shared budgets, depth, identity.

UPSTREAM §4.6, §4.8, §4.13, §5.1 (delegation recipe) and §7 items 22, 23 and 25.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Annotated, Any

import pydantic
import pytest
from pydantic import BeforeValidator
from typing_extensions import TypedDict

from examples.agent_delegation import delegating_agent
from tests.fixtures.runs import chain_codes
from tubeless import (
    ToolError,
    define_agent,
    define_pipeline,
    define_tool,
    for_each_pipeline,
    pipeline_tool,
    step,
)
from tubeless import errors as codes
from tubeless.errors import ErrorCause, PipelineError
from tubeless.testing import call, capture_trace, continue_with, finish, scripted

# -- helpers ------------------------------------------------------------------------------------


class Counter:
    """Counts how often each labelled callback ran."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}

    def hit(self, label: str) -> None:
        self.counts[label] = self.counts.get(label, 0) + 1

    def validator(self, label: str) -> BeforeValidator:
        def check(value: Any) -> Any:
            self.hit(label)
            return value

        return BeforeValidator(check)


class Reductions:
    def __init__(self) -> None:
        self.batches: list[tuple[Any, ...]] = []

    def __call__(self, state: Any, outcomes: Sequence[Any]) -> Any:
        self.batches.append(tuple(outcomes))
        return state


def make_agent(
    tools: dict[str, Any],
    decide: Callable[..., Any],
    *,
    id: str = "parent-agent",
    reduce: Callable[..., Any] | None = None,
    limits: dict[str, int] | None = None,
    dry_run: Callable[..., Any] | None = None,
) -> Any:
    return define_agent(
        id=id,
        input_schema=dict[str, Any],
        result_schema=Any,
        initial_state=lambda validated: {},
        decide=decide,
        dry_run=dry_run,
        reduce=reduce,
        tools=tools,
        limits=limits,
    )


def causes(error: PipelineError) -> list[ErrorCause]:
    found: list[ErrorCause] = []
    node = error.cause
    while node is not None:
        found.append(node)
        node = node.cause
    return found


def limit_message(error: PipelineError) -> str:
    """The message of the ``TUBELESS_AGENT_LIMIT_REACHED`` link of an error's cause chain."""
    [message] = {c.message for c in causes(error) if c.source_code == codes.AGENT_LIMIT_REACHED}
    return message


async def echo(text: str, ctx: Any) -> str:
    return text


def echo_tool() -> Any:
    return define_tool(description="Echo text.", input_schema=str, output_schema=str, run=echo)


# -- arguments ------------------------------------------------------------------------------------


class Doubled(pydantic.BaseModel):
    doubled: int


def doubling_child(counter: Counter, *, id: str = "doubling") -> Any:
    options = pydantic.create_model(
        "Options", amount=(Annotated[int, counter.validator("child schema")], ...)
    )

    def double(inputs: dict[str, Any], ctx: Any) -> dict[str, int]:
        counter.hit("child step")
        return {"doubled": ctx.options.amount * 2}

    return define_pipeline(
        id=id, options_schema=options, result_schema=Doubled, steps=[step("double", double)]
    )


async def test_model_arguments_are_the_childs_raw_input_validated_once_by_the_childs_schema() -> (
    None
):
    counter = Counter()
    reductions = Reductions()
    decide = scripted(continue_with(call("double", {"amount": "21"}, "d")), finish("done"))
    agent = make_agent(
        {"double": pipeline_tool(doubling_child(counter), description="Double an amount.")},
        decide,
        reduce=reductions,
    )

    run = await agent.run({})

    assert run.status == "completed"
    assert counter.counts == {"child schema": 1, "child step": 1}
    [(outcome,)] = reductions.batches
    assert dict(outcome) == {"id": "d", "tool": "double", "ok": True, "value": Doubled(doubled=42)}
    assert type(outcome["value"]) is Doubled


async def test_an_invalid_pipeline_tool_argument_fails_the_decision_before_any_call_starts() -> (
    None
):
    counter = Counter()
    started: list[str] = []

    async def note(text: str, ctx: Any) -> str:
        started.append(text)
        return text

    decide = scripted(
        continue_with(call("note", "first", "n"), call("double", {"amount": "many"}, "d")),
        finish("never"),
    )
    agent = make_agent(
        {
            "note": define_tool(description="Note.", input_schema=str, output_schema=str, run=note),
            "double": pipeline_tool(doubling_child(counter), description="Double an amount."),
        },
        decide,
    )

    with capture_trace() as trace:
        run = await agent.run({}, trace=trace)

    assert (run.status, run.finalized) == ("failed", False)
    assert started == []
    assert counter.counts == {"child schema": 1}
    assert run.errors[0].source_code == codes.AGENT_INVALID_DECISION
    assert "many" not in str(run.errors[0].to_wire())
    assert [r["pipelineId"] for r in trace.records if r["name"] == "pipeline.started"] == [
        "parent-agent",
        "parent-agent/turn",
    ]
    assert decide.remaining == 1


async def test_input_schema_and_map_options_validate_map_once_and_let_the_child_validate() -> None:
    counter = Counter()
    mapped: list[Any] = []

    def map_options(validated: Any) -> Any:
        mapped.append(validated)
        return {"amount": validated.amount}

    arguments = pydantic.create_model(
        "Arguments", amount=(Annotated[int, counter.validator("argument schema")], ...)
    )

    reductions = Reductions()
    decide = scripted(continue_with(call("double", {"amount": "4"}, "d")), finish("done"))
    agent = make_agent(
        {
            "double": pipeline_tool(
                doubling_child(counter),
                description="Double an amount.",
                input_schema=arguments,
                map_options=map_options,
            )
        },
        decide,
        reduce=reductions,
    )

    run = await agent.run({})

    assert run.status == "completed"
    assert counter.counts == {"argument schema": 1, "child schema": 1, "child step": 1}
    assert mapped == [arguments(amount=4)]
    [(outcome,)] = reductions.batches
    assert outcome["value"] == Doubled(doubled=8)


async def test_the_outcome_value_is_the_childs_exact_final_result() -> None:
    def build(inputs: dict[str, Any], ctx: Any) -> Any:
        return {"words": ctx.options["text"].split(), "count": 2, "nested": {"ok": True}}

    child = define_pipeline(
        id="split",
        options_schema=dict[str, str],
        steps=[step("build", build)],
    )
    reductions = Reductions()
    decide = scripted(continue_with(call("split", {"text": "a b"}, "s")), finish("done"))
    agent = make_agent(
        {"split": pipeline_tool(child, description="Split text.")}, decide, reduce=reductions
    )

    direct = await child.run({"text": "a b"})
    run = await agent.run({})

    assert run.status == "completed"
    [(outcome,)] = reductions.batches
    assert outcome == {
        "id": "s",
        "tool": "split",
        "ok": True,
        "value": {"words": ("a", "b"), "count": 2, "nested": {"ok": True}},
    }
    assert outcome["value"] == {**direct.value, "words": tuple(direct.value["words"])}


# -- child failures -------------------------------------------------------------------------------


def failing_child(errors: list[Exception], *, id: str = "failing") -> Any:
    """A child whose fan-out runs one item per error, all active at once, each raising it."""
    barrier = asyncio.Barrier(len(errors))

    async def fail(inputs: dict[str, Any], ctx: Any) -> Any:
        await barrier.wait()
        raise errors[ctx.options["index"]]

    item = define_pipeline(id=f"{id}-item", steps=[step("fail", fail)])
    return define_pipeline(
        id=id,
        options_schema=dict[str, Any],
        steps=[
            for_each_pipeline(
                "items",
                item,
                items=lambda inputs, ctx: range(len(errors)),
                key=lambda index, position: f"item-{index}",
                map_options=lambda index, position, inputs, ctx: {"index": index},
                concurrency=len(errors),
            )
        ],
    )


@pytest.mark.parametrize(
    ("errors", "expected"),
    [
        pytest.param(
            [ToolError("NOT_FOUND", "Word unavailable")],
            {"code": "NOT_FOUND", "message": "Word unavailable"},
            id="one-tool-error",
        ),
        pytest.param(
            [ToolError("NOT_FOUND", "first"), ToolError("DENIED", "second")],
            {"code": codes.TOOL_ERRORS, "message": "NOT_FOUND: first; DENIED: second"},
            id="several-tool-errors",
        ),
    ],
)
async def test_a_child_failing_only_with_handler_tool_errors_is_a_recoverable_outcome(
    errors: list[Exception], expected: dict[str, str]
) -> None:
    reductions = Reductions()
    decide = scripted(continue_with(call("child", {}, "c")), finish("recovered"))
    agent = make_agent(
        {"child": pipeline_tool(failing_child(errors), description="Fails.")},
        decide,
        reduce=reductions,
        limits={"max_concurrency": len(errors)},
    )

    run = await asyncio.wait_for(agent.run({}), 30)

    assert (run.status, run.value) == ("completed", "recovered")
    assert reductions.batches == [({"id": "c", "tool": "child", "ok": False, "error": expected},)]


@pytest.mark.parametrize(
    "errors",
    [
        pytest.param([RuntimeError("boom")], id="one-other-error"),
        pytest.param([ToolError("NOT_FOUND", "x"), RuntimeError("boom")], id="mixed-errors"),
    ],
)
async def test_a_child_failing_with_any_other_error_is_fatal(errors: list[Exception]) -> None:
    reductions = Reductions()
    decide = scripted(continue_with(call("child", {}, "c")), finish("never"))
    agent = make_agent(
        {"child": pipeline_tool(failing_child(errors), description="Fails.")},
        decide,
        reduce=reductions,
        limits={"max_concurrency": len(errors)},
    )

    run = await asyncio.wait_for(agent.run({}), 30)

    assert (run.status, run.finalized) == ("failed", False)
    assert reductions.batches == []
    assert decide.remaining == 1


# -- the delegation recipe ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("question", "dry_run", "answer"),
    [
        pytest.param(
            "red blue", False, "Summary: 3 characters; RED | 4 characters; BLUE", id="live"
        ),
        pytest.param("red blue", True, "Summary: 3 characters; RED | 4 characters; BLUE", id="dry"),
        pytest.param(
            "missing",
            False,
            "Summary: 7 characters; Observed NOT_FOUND: Word unavailable",
            id="recovered",
        ),
    ],
)
async def test_the_delegation_recipe_answers(question: str, dry_run: bool, answer: str) -> None:
    run = await delegating_agent.run({"question": question}, dry_run=dry_run)

    assert (run.status, run.dry_run, run.value) == ("completed", dry_run, {"answer": answer})


# -- shared budgets and depth ---------------------------------------------------------------------


def child_agent(decide: Callable[..., Any], tools: dict[str, Any], **limits: int) -> Any:
    return define_agent(
        id="child-agent",
        input_schema=dict[str, Any],
        result_schema=Any,
        initial_state=lambda validated: {},
        decide=decide,
        tools=tools,
        limits=limits or None,
    )


async def test_a_child_agents_batch_is_charged_against_the_parents_call_budget() -> None:
    started: list[str] = []

    async def note(text: str, ctx: Any) -> str:
        started.append(text)
        return text

    note_tool = define_tool(description="Note.", input_schema=str, output_schema=str, run=note)
    child = child_agent(
        scripted(continue_with(*(call("note", f"n{i}") for i in range(3))), finish("child done")),
        {"note": note_tool},
        max_calls=10,
    )
    parent_decide = scripted(continue_with(call("delegate", {}, "d")), finish("never"))
    parent = make_agent(
        {"delegate": pipeline_tool(child, description="Delegate.")},
        parent_decide,
        limits={"max_calls": 3},
    )

    run = await parent.run({}, run_id="parent-run")

    assert (run.status, run.finalized) == ("failed", False)
    assert started == []
    assert codes.AGENT_LIMIT_REACHED in chain_codes(run.errors[0])
    assert limit_message(run.errors[0]) == (
        "Agent max_calls=3 exceeded (consumed=1, requested=3, scope=parent-run)"
    )
    assert parent_decide.remaining == 1


async def test_max_decisions_are_charged_across_the_parent_and_its_child_agent() -> None:
    child = child_agent(
        scripted(continue_with(call("echo", "a")), finish("child done")),
        {"echo": echo_tool()},
        max_decisions=10,
    )
    parent_decide = scripted(continue_with(call("delegate", {}, "d")), finish("parent done"))
    parent = make_agent(
        {"delegate": pipeline_tool(child, description="Delegate.")},
        parent_decide,
        limits={"max_decisions": 3},
    )

    run = await parent.run({}, run_id="parent-run")

    # parent turn 1 (1) + child turns 1 and 2 (2, 3) leave nothing for parent turn 2.
    assert run.status == "failed"
    assert limit_message(run.errors[0]) == (
        "Agent max_decisions=3 exceeded (consumed=3, requested=1, scope=parent-run)"
    )
    assert parent_decide.remaining == 1


async def test_max_depth_of_the_parent_bounds_delegation_inside_its_child_agent() -> None:
    grandchild_runs: list[Any] = []

    def leaf(inputs: dict[str, Any], ctx: Any) -> str:
        grandchild_runs.append(ctx.options)
        return "leaf"

    grandchild = define_pipeline(
        id="grandchild", options_schema=dict[str, Any], steps=[step("leaf", leaf)]
    )
    child = child_agent(
        scripted(continue_with(call("deeper", {}, "g")), finish("child done")),
        {"deeper": pipeline_tool(grandchild, description="Go deeper.")},
    )
    parent = make_agent(
        {"delegate": pipeline_tool(child, description="Delegate.")},
        scripted(continue_with(call("delegate", {}, "d")), finish("never")),
        limits={"max_depth": 1},
    )

    run = await parent.run({}, run_id="parent-run")

    assert run.status == "failed"
    assert grandchild_runs == []
    assert limit_message(run.errors[0]) == (
        "Agent max_depth=1 exceeded (consumed=1, requested=1, scope=parent-run)"
    )


async def test_nested_agents_with_max_concurrency_one_everywhere_do_not_deadlock() -> None:
    def leaf(inputs: dict[str, Any], ctx: Any) -> str:
        return f"leaf:{ctx.options['text']}"

    grandchild = define_pipeline(
        id="grandchild", options_schema=dict[str, str], steps=[step("leaf", leaf)]
    )
    child = define_agent(
        id="child-agent",
        input_schema=dict[str, str],
        result_schema=str,
        initial_state=lambda validated: {"text": validated["text"], "got": None},
        decide=lambda state, ctx: (
            continue_with(call("echo", state["text"]), call("leaf", {"text": state["text"]}))
            if state["got"] is None
            else finish(" + ".join(state["got"]))
        ),
        reduce=lambda state, outcomes: {**state, "got": [o["value"] for o in outcomes]},
        tools={
            "echo": echo_tool(),
            "leaf": pipeline_tool(grandchild, description="A leaf pipeline."),
        },
        limits={"max_concurrency": 1},
    )
    parent = define_agent(
        id="parent-agent",
        input_schema=dict[str, Any],
        result_schema=Any,
        initial_state=lambda validated: {"answers": None},
        decide=lambda state, ctx: (
            continue_with(call("child", {"text": "x"}, "x"), call("child", {"text": "y"}, "y"))
            if state["answers"] is None
            else finish(state["answers"])
        ),
        reduce=lambda state, outcomes: {"answers": [o["value"] for o in outcomes]},
        tools={"child": pipeline_tool(child, description="A child agent.")},
        limits={"max_concurrency": 1},
    )

    run = await asyncio.wait_for(parent.run({}), 30)

    assert (run.status, run.value) == ("completed", ("x + leaf:x", "y + leaf:y"))


# -- identity -------------------------------------------------------------------------------------


class TextInput(TypedDict):
    text: str


class OtherInput(TypedDict):
    text: str
    loud: bool


def _build(
    *,
    tool_description: str = "Echo text.",
    tool_input: Any = str,
    limits: dict[str, int] | None = None,
    implementation_version: str | None = "v1",
    child_version: str | None = "child-v1",
    name: str | None = "Identity agent",
    description: str | None = "An agent whose identity is under test.",
) -> Any:
    child = define_pipeline(
        id="identity-child",
        options_schema=TextInput,
        implementation_version=child_version,
        steps=[step("work", lambda inputs, ctx: ctx.options["text"])],
    )
    return define_agent(
        id="identity-agent",
        name=name,
        description=description,
        implementation_version=implementation_version,
        input_schema=dict[str, Any],
        result_schema=str,
        initial_state=lambda validated: {},
        decide=lambda state, ctx: finish("x"),
        tools={
            "echo": define_tool(
                description=tool_description, input_schema=tool_input, output_schema=str, run=echo
            ),
            "child": pipeline_tool(child, description="A child pipeline."),
        },
        limits=limits or {"max_turns": 3},
    )


@pytest.mark.parametrize(
    ("changes", "same"),
    [
        pytest.param({}, True, id="identical-definition"),
        pytest.param({"name": "Renamed"}, True, id="agent-name"),
        pytest.param({"description": "Described otherwise."}, True, id="agent-description"),
        pytest.param({"tool_description": "Repeat text."}, False, id="tool-description"),
        pytest.param({"limits": {"max_turns": 4}}, False, id="limit"),
        pytest.param({"tool_input": OtherInput}, False, id="tool-input-schema"),
        pytest.param({"implementation_version": "v2"}, False, id="implementation-version"),
        pytest.param({"child_version": "child-v2"}, False, id="child-implementation-version"),
    ],
)
def test_definition_id_follows_what_the_agent_is_not_what_it_is_called(
    changes: dict[str, Any], same: bool
) -> None:
    base = _build().identity.definition_id
    changed = _build(**changes).identity.definition_id

    assert (changed == base) is same
