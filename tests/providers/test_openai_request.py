"""What the OpenAI adapter sends and accepts, checked against the official ``openai`` types (a
dev dependency only); strict schemas; instructions templates; factory arguments; and that
loading, planning and inspecting the live project need no key and make no request."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from openai.types.responses import FunctionToolParam, Response
from openai.types.responses.response_create_params import ResponseCreateParamsNonStreaming
from pydantic import BaseModel, TypeAdapter, ValidationError

from tests.providers.fixtures.openai_responses import (
    THREE_TURNS,
    ScriptedServer,
    finish_call,
    function_call,
    message,
    output_text,
    reasoning,
    refusal,
    response,
    tool_call,
)
from tests.providers.fixtures.requests import typed_keys
from tubeless import define_agent, define_tool
from tubeless import errors as codes
from tubeless.errors import TemplateError, TubelessError, deepest_source_code
from tubeless.project import load_project
from tubeless.providers import append_outcomes, question_state
from tubeless.providers._calls import wrap_parameters
from tubeless.providers.openai import responses, strict_problems

ROOT = Path(__file__).resolve().parents[2]
PROJECT = ROOT / "projects" / "openai-agent.yaml"


# -- fixture shapes are real ones -----------------------------------------------------------------
REAL_SHAPES = [
    pytest.param(THREE_TURNS[0], id="turn-1-two-calls"),
    pytest.param(THREE_TURNS[1], id="turn-2-count"),
    pytest.param(THREE_TURNS[2], id="turn-3-reasoning-then-finish"),
    pytest.param(response(), id="empty-output"),
    pytest.param(
        response(status="incomplete", incomplete_details={"reason": "max_output_tokens"}),
        id="incomplete",
    ),
    pytest.param(response(message(refusal("No."))), id="refusal"),
    pytest.param(
        response(message(output_text("Thinking aloud.")), finish_call("done")),
        id="message-then-finish",
    ),
    pytest.param(
        response(function_call("uppercase", '{"input": "red"', "a")), id="unparseable-arguments"
    ),
    pytest.param(response(function_call("uppercase", {}, "a")), id="empty-arguments"),
    pytest.param(response(tool_call("delete", "red", "a")), id="unknown-tool"),
    pytest.param(
        response(reasoning(), tool_call("count", "a", "a"), finish_call(42)), id="finish-mixed"
    ),
]


@pytest.mark.parametrize("fixture", REAL_SHAPES)
def test_every_well_formed_fixture_is_a_valid_openai_response(fixture: dict[str, Any]) -> None:
    parsed = Response.model_validate(fixture)
    assert parsed.model_dump(mode="json", exclude_unset=True)["output"] == fixture["output"]


@pytest.mark.parametrize(
    "fixture",
    [
        pytest.param(None, id="null"),
        pytest.param(response({"type": "function_call"}), id="bare-function-call"),
    ],
)
def test_the_openai_types_reject_the_malformed_fixtures_too(fixture: Any) -> None:
    with pytest.raises(ValidationError):
        Response.model_validate(fixture)


async def test_request_bodies_use_the_openai_create_params_fields() -> None:
    server = ScriptedServer(*THREE_TURNS)
    decide = responses(transport=server.transport)
    agent = load_project(PROJECT, overrides={"openai-agent": {"decide": decide}}).entry()

    await agent.run({"question": "q"})

    function_tool = TypeAdapter(FunctionToolParam)
    for body in server.bodies:
        assert set(body) <= typed_keys(ResponseCreateParamsNonStreaming)
        TypeAdapter(ResponseCreateParamsNonStreaming).validate_python(body)
        for tool in body["tools"]:
            assert typed_keys(FunctionToolParam) >= set(tool) >= FunctionToolParam.__required_keys__
            function_tool.validate_python(tool)


# -- strict schemas -------------------------------------------------------------------------------
class Inner(BaseModel):
    x: int


class Closed(BaseModel):
    model_config = {"extra": "forbid"}
    inner: Inner
    tags: list[str]


class Loose(BaseModel):
    name: str
    size: int = 3


def test_wrapping_hoists_defs_so_references_still_resolve() -> None:
    schema = Closed.model_json_schema()

    wrapped = wrap_parameters("input", schema)

    assert wrapped["$defs"] == schema["$defs"]
    assert wrapped["properties"]["input"]["properties"]["inner"] == {"$ref": "#/$defs/Inner"}
    assert "$defs" not in wrapped["properties"]["input"]
    assert (
        wrap_parameters("input", {"$ref": "#/properties/a", "properties": {"a": {}}})["properties"][
            "input"
        ]["$ref"]
        == "#/properties/input/properties/a"
    )


@pytest.mark.parametrize(
    ("schema", "problems"),
    [
        pytest.param({"type": "string"}, [], id="string"),
        pytest.param(
            {
                "type": "object",
                "properties": {"a": {"type": ["string", "null"]}},
                "required": ["a"],
                "additionalProperties": False,
            },
            [],
            id="closed-object",
        ),
        pytest.param(
            Closed.model_json_schema(),
            ["/$defs/Inner: an object needs additionalProperties: false"],
            id="nested-open-object",
        ),
        pytest.param(
            Loose.model_json_schema(),
            [
                "/properties/input/properties/size: keyword 'default' is not supported in "
                "strict mode",
                "/properties/input: an object needs additionalProperties: false",
                "/properties/input: property 'size' must be required",
            ],
            id="optional-with-default",
        ),
        pytest.param({}, ["/properties/input: a schema needs a type"], id="any-value"),
        pytest.param(
            {"type": "string", "minLength": 1},
            ["/properties/input: keyword 'minLength' is not supported in strict mode"],
            id="unsupported-keyword",
        ),
    ],
)
def test_strict_problems_say_why_a_wrapped_schema_is_not_strict(
    schema: dict[str, Any], problems: list[str]
) -> None:
    assert sorted(strict_problems(wrap_parameters("input", schema))) == sorted(problems)


async def test_a_tool_outside_the_strict_subset_is_sent_with_strict_false() -> None:
    async def run(value: Any, ctx: Any) -> str:
        return "ok"

    tools = {
        "closed": define_tool(description="c", input_schema=str, output_schema=str, run=run),
        "loose": define_tool(description="l", input_schema=Loose, output_schema=str, run=run),
    }
    server = ScriptedServer(response(finish_call("done")))
    agent = define_agent(
        id="mixed",
        input_schema=dict,
        result_schema=str,
        initial_state=lambda validated: {"observations": []},
        decide=responses(transport=server.transport),
        tools=tools,
    )

    assert await agent.run_or_raise({}) == "done"
    assert [(t["name"], t["strict"]) for t in server.bodies[0]["tools"]] == [
        ("closed", True),
        ("loose", False),
        ("_finish", True),
    ]
    assert (
        server.bodies[0]["tools"][1]["parameters"]["properties"]["input"]["properties"]
        == (Loose.model_json_schema()["properties"])
    )


# -- instructions ---------------------------------------------------------------------------------
async def test_instructions_render_with_input_turn_and_capabilities() -> None:
    server = ScriptedServer(
        response(tool_call("uppercase", "a", "a")), response(finish_call("done"))
    )
    template = (
        "Turn {{ turn }} of {{ input.question | length }}-char question; tools: "
        "{{ capabilities | map(attribute='name') | join(', ') }}"
    )
    decide = responses(instructions=template, transport=server.transport)
    agent = load_project(PROJECT, overrides={"openai-agent": {"decide": decide}}).entry()

    await agent.run_or_raise({"question": "abc"})

    assert [body["instructions"] for body in server.bodies] == [
        "Turn 1 of 3-char question; tools: count, uppercase",
        "Turn 2 of 3-char question; tools: count, uppercase",
    ]


def test_an_instructions_template_that_does_not_parse_fails_in_the_factory() -> None:
    with pytest.raises(TemplateError, match=r"responses\(instructions=\.\.\.\): invalid template"):
        responses(instructions="{{ turn ")


async def test_an_undefined_name_in_the_instructions_fails_the_run_before_any_request() -> None:
    server = ScriptedServer()
    decide = responses(instructions="{{ nothing.here }}", transport=server.transport)
    agent = load_project(PROJECT, overrides={"openai-agent": {"decide": decide}}).entry()

    run = await agent.run({"question": "q"})

    assert run.status == "failed"
    assert deepest_source_code(run.errors[0]) == codes.TEMPLATE_INVALID
    assert server.requests == []


def test_instructions_from_yaml_are_checked_when_the_project_loads(tmp_path: Path) -> None:
    text = PROJECT.read_text(encoding="utf-8")
    text = text.replace("python_path: [..]", f"python_path: [{ROOT}]")
    text = text.replace("with: {timeout_s: 30,", "with: {instructions: '{% if %}', timeout_s: 30,")
    path = tmp_path / "openai-agent.yaml"
    path.write_text(text, encoding="utf-8")

    with pytest.raises(TubelessError) as caught:
        load_project(path)

    assert caught.value.code == codes.REFERENCE_INVALID
    assert "invalid template" in str(caught.value)


# -- factory arguments ----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("options", "fragment"),
    [
        pytest.param(
            {"timeout_s": 0}, "responses(timeout_s=...) must be a number > 0", id="timeout"
        ),
        pytest.param({"timeout_s": "30"}, "must be a number > 0", id="timeout-text"),
        pytest.param({"max_request_bytes": 0}, "responses(max_request_bytes=...)", id="body"),
        pytest.param({"max_output_tokens": 2.5}, "responses(max_output_tokens=...)", id="tokens"),
        pytest.param({"max_retries": -1}, "must be an integer >= 0", id="retries"),
        pytest.param({"model": ""}, "responses(model=...) must be a nonblank string", id="model"),
        pytest.param({"base_url": 5}, "responses(base_url=...)", id="base-url"),
        pytest.param({"api_key_env": None}, "responses(api_key_env=...) must name", id="key-env"),
        pytest.param({"transport": object()}, "httpx.AsyncBaseTransport", id="transport"),
    ],
)
def test_factory_arguments_are_checked_when_the_factory_runs(
    options: dict[str, Any], fragment: str
) -> None:
    with pytest.raises(ValueError) as caught:
        responses(**options)
    assert fragment in str(caught.value)


def test_the_helpers_and_the_adapter_are_plain_callables_for_yaml() -> None:
    assert callable(responses())
    assert callable(question_state(max_bytes=4096))
    assert callable(append_outcomes(max_bytes=16384))


# -- no key, no request ---------------------------------------------------------------------------
def _tubeless(*args: str) -> subprocess.CompletedProcess[str]:
    """A real process without any OpenAI variable and with a base URL nothing listens on."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENAI_")}
    env["OPENAI_BASE_URL"] = "http://127.0.0.1:9/v1"
    return subprocess.run(
        [sys.executable, "-m", "tubeless", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize(
    "args",
    [
        pytest.param(("validate", "--resolve", "projects/openai-agent.yaml"), id="validate"),
        pytest.param(("plan", "projects/openai-agent.yaml"), id="plan"),
        pytest.param(("plan", "--dry-run", "projects/openai-agent.yaml"), id="plan-dry-run"),
        pytest.param(("inspect", "projects/openai-agent.yaml"), id="inspect"),
        pytest.param(("graph", "projects/openai-agent.yaml"), id="graph"),
        pytest.param(("graph", "--format", "json", "projects/openai-agent.yaml"), id="graph-json"),
    ],
)
def test_looking_at_the_live_project_needs_no_key(args: tuple[str, ...]) -> None:
    done = _tubeless(*args)
    assert (done.returncode, done.stderr) == (0, "")
    assert "OPENAI_API_KEY" not in done.stdout


def test_a_dry_run_of_the_live_project_skips_the_agent_and_fails_finalization() -> None:
    done = _tubeless("run", "projects/openai-agent.yaml", "--dry-run", "--question", "hi")

    assert done.returncode == 6
    assert "TUBELESS_REQUIRED_OUTPUTS_MISSING" in done.stderr
    assert "OPENAI_API_KEY" not in done.stderr


def test_a_live_run_without_a_key_fails_before_any_request() -> None:
    done = _tubeless("run", "projects/openai-agent.yaml", "--question", "hi")

    assert done.returncode == 6
    assert "TUBELESS_PROVIDER_NOT_CONFIGURED" in done.stderr
    assert "OPENAI_API_KEY is required" in done.stderr


def test_the_runtime_never_imports_the_openai_sdk_and_tubeless_never_imports_providers() -> None:
    script = (
        "import sys, tubeless, tubeless.agent, tubeless.pipeline\n"
        "assert not any(m.startswith('tubeless.providers') for m in sys.modules)\n"
        "from tubeless.project import load_project\n"
        "project = load_project('projects/openai-agent.yaml')\n"
        "project.entry().plan()\n"
        "assert 'tubeless.providers.openai' in sys.modules\n"
        "assert 'openai' not in sys.modules, 'the OpenAI SDK was imported'\n"
        "print(sorted(m for m in sys.modules if m.startswith('tubeless.providers')))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=ROOT,
        env={k: v for k, v in os.environ.items() if not k.startswith("OPENAI_")},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.replace("'", '"')) == [
        "tubeless.providers",
        "tubeless.providers._budgets",
        "tubeless.providers._calls",
        "tubeless.providers._errors",
        "tubeless.providers._http",
        "tubeless.providers._settings",
        "tubeless.providers.openai",
    ]


def test_an_incomplete_reason_of_the_wrong_type_is_an_invalid_response_not_a_crash() -> None:
    from tubeless.providers import ProviderError
    from tubeless.providers.openai import parse_response

    with pytest.raises(ProviderError) as caught:
        parse_response({"status": "incomplete", "incomplete_details": {"reason": ["x"]}})
    assert "did not return a completed response" in str(caught.value)
