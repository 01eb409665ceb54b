"""A failed run's ``error:`` line speaks the user's terms (issue 13: errors users can act on).

Every test runs ``tubeless`` in process through ``main()`` on a real project in ``tmp_path``:
one ``error: <CODE>[ (<source code>)]: <where>: <what>`` line, where ``<where>`` names the
agent, turn, tool and call id (or the step, or ``finalize``) and ``<what>`` is the handler's
exception as ``<Type>: <message>``, a limit said as the decision that hit it, or the rejected
input with the flag to pass.
"""

from __future__ import annotations

import json
import textwrap
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tubeless import CancelToken, PipelineExecutionError, define_pipeline, from_pipeline, step
from tubeless._cli import main, report_error
from tubeless.pipeline import for_each_pipeline

AGENT = """\
  {name}:
    input: {{schema: "helpers:In"}}
    result: {{schema: "builtins:str"}}
    initial_state: "helpers:state"
    decide: "helpers:{decide}"
    {limits}
    tools: {tools}
"""

MODULE = """\
from typing import Any

from pydantic import BaseModel

from tubeless.agent import define_tool
from tubeless.testing import call, continue_with, finish, scripted


class In(BaseModel):
    text: str
    count: int = 1


def state(validated: Any) -> dict[str, Any]:
    return {}


def _lookup(text: str, ctx: Any) -> str:
    return {"a": "1"}["b"]


def _inner(text: str) -> None:
    raise ValueError("bad inner")


def _wrapped(text: str, ctx: Any) -> str:
    try:
        _inner(text)
    except ValueError as exc:
        raise RuntimeError("Outer failed.") from exc
    return text


def _noisy(text: str, ctx: Any) -> str:
    raise ValueError("first line\\nsecond line\\x1b[31m red")


def _echo(text: str, ctx: Any) -> str:
    return text


lookup = define_tool(description="Look up.", input_schema=str, output_schema=str, run=_lookup)
wrapped = define_tool(description="Wrap.", input_schema=str, output_schema=str, run=_wrapped)
noisy = define_tool(description="Noisy.", input_schema=str, output_schema=str, run=_noisy)
echo = define_tool(description="Echo.", input_schema=str, output_schema=str, run=_echo)

decide_lookup = scripted(continue_with(call("lookup", "x", id="c1")), finish("done"))
decide_wrapped = scripted(continue_with(call("wrapped", "x", id="c1")), finish("done"))
decide_noisy = scripted(continue_with(call("noisy", "x", id="c1")), finish("done"))
decide_delegate = scripted(continue_with(call("delegate", {"text": "x"}, id="d")), finish("done"))


def decide_greedy(state: Any, ctx: Any) -> Any:
    return continue_with(*[call("echo", "x") for _ in range(4)])


def decide_bad(state: Any, ctx: Any) -> Any:
    return {"kind": "continue", "calls": [{"id": "c1", "tool": "nope", "input": "x"}]}


def step_lookup(inputs: Any, ctx: Any) -> str:
    return {"a": "1"}["b"]


def finalize_lookup(outputs: Any, ctx: Any) -> str:
    return {}["x"]
"""


@dataclass(frozen=True)
class Outcome:
    code: int
    out: str
    err: list[str]


def tubeless(capsys: pytest.CaptureFixture[str], *args: str | Path) -> Outcome:
    code = main([str(arg) for arg in args])
    captured = capsys.readouterr()
    return Outcome(code, captured.out, captured.err.splitlines())


def agent(name: str, decide: str, tools: str, limits: str = "") -> str:
    return AGENT.format(name=name, decide=decide, tools=tools, limits=limits)


def project(tmp_path: Path, agents: str = "", pipelines: str = "") -> Path:
    """A project whose ``helpers:`` references name a module unique to this test."""
    module = f"helpers_{uuid.uuid4().hex}"
    (tmp_path / f"{module}.py").write_text(MODULE, encoding="utf-8")
    body = "version: 1\nproject: {id: errors}\npython_path: [.]\n"
    if agents:
        body += "agents:\n" + agents
    if pipelines:
        body += "pipelines:\n" + textwrap.indent(textwrap.dedent(pipelines), "  ")
    path = tmp_path / "project.yaml"
    path.write_text(body.replace('"helpers:', f'"{module}:'), encoding="utf-8")
    return path


LOOKUP = agent("lookup-agent", "decide_lookup", '{lookup: "helpers:lookup"}')
WRAPPED = agent("wrapped-agent", "decide_wrapped", '{wrapped: "helpers:wrapped"}')


def test_a_tool_handler_exception_names_agent_turn_tool_call_and_type(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    outcome = tubeless(capsys, "run", project(tmp_path, LOOKUP), "--text", "t", "-q")

    assert (outcome.code, outcome.out) == (6, "")
    assert outcome.err == [
        "error: TUBELESS_CHILD_FAILED (TUBELESS_STEP_FAILED): agent lookup-agent, turn 1, "
        "tool lookup, call c1: KeyError: 'b'"
    ]


def test_the_report_shows_the_exception_type_on_the_failing_lines(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    outcome = tubeless(capsys, "run", project(tmp_path, LOOKUP), "--text", "t")

    assert "      fail lookup [c1]: TUBELESS_STEP_FAILED: KeyError: 'b'" in outcome.err
    assert "    fail turn 1: KeyError: 'b'" in outcome.err
    assert "  fail agent: KeyError: 'b'" in outcome.err
    assert not any("Child pipeline" in line for line in outcome.err)


def test_a_chained_handler_exception_adds_its_innermost_cause_without_a_stray_period(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = project(tmp_path, WRAPPED)

    outcome = tubeless(capsys, "run", path, "--text", "t", "-q")

    assert outcome.err == [
        "error: TUBELESS_CHILD_FAILED (TUBELESS_STEP_FAILED): agent wrapped-agent, turn 1, "
        "tool wrapped, call c1: RuntimeError: Outer failed; caused by: ValueError: bad inner"
    ]


def test_a_message_with_line_breaks_and_controls_stays_one_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = project(tmp_path, agent("noisy-agent", "decide_noisy", '{noisy: "helpers:noisy"}'))

    outcome = tubeless(capsys, "run", path, "--text", "t", "-q")

    assert len(outcome.err) == 1
    assert "\x1b" not in outcome.err[0]
    assert outcome.err[0].endswith("call c1: ValueError: first line second line [31m red")


def test_debug_prints_the_handlers_own_traceback_with_its_cause(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = project(tmp_path, WRAPPED)

    outcome = tubeless(capsys, "--debug", "run", path, "--text", "t", "-q")
    text = "\n".join(outcome.err)

    assert outcome.code == 6
    assert "in _inner" in text and "in _wrapped" in text
    assert "ValueError: bad inner" in text
    assert "The above exception was the direct cause of the following exception:" in text
    assert "RuntimeError: Outer failed." in text
    assert outcome.err[-1].startswith("error: TUBELESS_CHILD_FAILED (TUBELESS_STEP_FAILED): ")


def test_without_debug_no_traceback_is_printed(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    outcome = tubeless(capsys, "run", project(tmp_path, LOOKUP), "--text", "t", "-q")

    assert not any("Traceback" in line for line in outcome.err)


def test_a_pipeline_step_names_the_step_and_the_exception_type(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = project(
        tmp_path,
        pipelines="""\
        failing:
          steps:
            - {id: s, run: "helpers:step_lookup"}
    """,
    )

    outcome = tubeless(capsys, "run", path, "-q")

    assert outcome.code == 6
    assert outcome.err == ["error: TUBELESS_STEP_FAILED: step s: KeyError: 'b'"]


def test_a_finalizer_failure_says_finalize_not_a_reserved_step_id(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = project(
        tmp_path,
        pipelines="""\
        finishing:
          steps:
            - {id: s, run: "helpers:decide_greedy"}
          finalize: {run: "helpers:finalize_lookup"}
    """,
    )

    outcome = tubeless(capsys, "run", path, "-q")

    assert outcome.code == 6
    assert outcome.err == ["error: TUBELESS_FINALIZATION_FAILED: finalize: KeyError: 'x'"]


def test_a_limit_hit_says_which_turn_asked_for_how_many_calls(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = project(
        tmp_path,
        agent("turns-agent", "decide_greedy", '{echo: "helpers:echo"}', "limits: {max_turns: 3}"),
    )

    outcome = tubeless(capsys, "run", path, "--text", "t", "-q")

    assert outcome.code == 6
    assert outcome.err == [
        "error: TUBELESS_CHILD_FAILED (TUBELESS_AGENT_LIMIT_REACHED): agent turns-agent: "
        "turn 3 asked to continue with 4 calls but max_turns=3"
    ]


def test_a_call_budget_hit_says_how_many_calls_were_left(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = project(
        tmp_path,
        agent("calls-agent", "decide_greedy", '{echo: "helpers:echo"}', "limits: {max_calls: 6}"),
    )

    outcome = tubeless(capsys, "run", path, "--text", "t", "-q")

    assert outcome.err == [
        "error: TUBELESS_CHILD_FAILED (TUBELESS_AGENT_LIMIT_REACHED): agent calls-agent: "
        "turn 2 asked for 4 calls but max_calls=6 has 2 left"
    ]


def test_a_delegated_failure_shows_the_path_through_both_agents(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    parent = agent(
        "parent-agent",
        "decide_delegate",
        "{delegate: {agent: lookup-agent, description: Delegate.}}",
    )

    outcome = tubeless(
        capsys, "run", project(tmp_path, parent + LOOKUP), "parent-agent", "--text", "t", "-q"
    )

    assert outcome.err == [
        "error: TUBELESS_CHILD_FAILED (TUBELESS_STEP_FAILED): agent parent-agent, turn 1, "
        "tool delegate, call d > agent lookup-agent, turn 1, tool lookup, call c1: "
        "KeyError: 'b'"
    ]


def test_a_rejected_decision_names_the_agent_and_turn(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = project(tmp_path, agent("bad-agent", "decide_bad", '{echo: "helpers:echo"}'))

    outcome = tubeless(capsys, "run", path, "--text", "t", "-q")

    [line] = outcome.err
    assert line.startswith(
        "error: TUBELESS_CHILD_FAILED (TUBELESS_AGENT_INVALID_DECISION): agent bad-agent, turn 1: "
    )
    assert "Child pipeline" not in line and "step decide" not in line


def test_a_missing_required_input_names_the_flag_to_pass(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    outcome = tubeless(capsys, "run", project(tmp_path, LOOKUP), "-q")

    assert outcome.code == 4
    assert outcome.err == [
        "error: TUBELESS_OPTIONS_VALIDATION_FAILED: input rejected: text: Field required "
        "(pass --text or --input)"
    ]


def test_a_rejected_input_value_says_input_not_options(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    outcome = tubeless(
        capsys, "run", project(tmp_path, LOOKUP), "--input", json.dumps({"text": 5}), "-q"
    )

    assert outcome.code == 4
    assert outcome.err == [
        "error: TUBELESS_OPTIONS_VALIDATION_FAILED: input rejected: text: Input should be a "
        "valid string"
    ]


def test_trace_show_names_the_exception_type_of_the_run_and_the_call(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    trace = tmp_path / "run.ndjson"
    tubeless(capsys, "run", project(tmp_path, LOOKUP), "--text", "t", "-q", "--trace", trace)
    records = [json.loads(line) for line in trace.read_text(encoding="utf-8").splitlines()]
    root = records[0]["runId"]

    outcome = tubeless(capsys, "trace", "show", trace, root)

    assert outcome.code == 0
    lines = outcome.out.splitlines()
    assert lines[1] == "  error TUBELESS_CHILD_FAILED  KeyError: 'b'"
    [call_line] = [line for line in lines if line.strip().startswith("call c1")]
    assert call_line.endswith("TUBELESS_STEP_FAILED  KeyError: 'b'")


def test_a_shared_budget_hit_names_the_agent_whose_budget_refused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    parent = agent(
        "parent-agent",
        "decide_delegate",
        "{delegate: {agent: greedy-child, description: Delegate.}}",
        "limits: {max_calls: 3}",
    )
    child = agent("greedy-child", "decide_greedy", '{echo: "helpers:echo"}')

    outcome = tubeless(
        capsys, "run", project(tmp_path, parent + child), "parent-agent", "--text", "t", "-q"
    )

    assert outcome.err == [
        "error: TUBELESS_CHILD_FAILED (TUBELESS_AGENT_LIMIT_REACHED): agent parent-agent, "
        "turn 1, tool delegate, call d > agent greedy-child: turn 1 asked for 4 calls but "
        "max_calls=3 of agent parent-agent has 2 left"
    ]


def failing_store(inputs: Any, ctx: Any) -> None:
    raise OSError("disk full")


CHILD = define_pipeline(id="child", options_schema=dict, steps=[step("store", failing_store)])


@pytest.mark.parametrize(
    ("pipeline", "line"),
    [
        pytest.param(
            define_pipeline(id="parent", steps=[from_pipeline("nested", CHILD)]),
            "error: TUBELESS_CHILD_FAILED (TUBELESS_STEP_FAILED): step nested > pipeline child, "
            "step store: OSError: disk full",
            id="child-pipeline",
        ),
        pytest.param(
            define_pipeline(
                id="fan",
                steps=[
                    for_each_pipeline(
                        "each",
                        CHILD,
                        items=lambda inputs, ctx: ["a", "b"],
                        key=lambda item, index: item,
                        map_options=lambda item, index, inputs, ctx: {},
                    )
                ],
            ),
            "error: TUBELESS_CHILD_FAILED (TUBELESS_STEP_FAILED): step each > pipeline child, "
            "item a, step store: OSError: disk full",
            id="fan-out",
        ),
    ],
)
async def test_a_composed_pipeline_failure_shows_the_path_to_the_failing_step(
    pipeline: Any, line: str, capsys: pytest.CaptureFixture[str]
) -> None:
    run = await pipeline.run({})

    report_error(PipelineExecutionError(run), debug=False)

    assert capsys.readouterr().err.splitlines() == [line]


async def test_a_cancelled_run_keeps_its_plain_line(capsys: pytest.CaptureFixture[str]) -> None:
    token = CancelToken()

    async def stops(inputs: Any, ctx: Any) -> None:
        token.cancel("stop requested")
        await ctx.signal.wait()
        ctx.signal.raise_if_cancelled()

    run = await define_pipeline(id="c", steps=[step("w", stops)]).run(signal=token)

    report_error(PipelineExecutionError(run), debug=False)

    assert capsys.readouterr().err == "error: TUBELESS_RUN_CANCELLED: step w: stop requested\n"


def test_a_dry_run_of_an_agent_without_a_preview_says_what_is_missing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 15: the dry-run error names the agent that has no dry_run decision source."""
    path = project(tmp_path, agents=LOOKUP)
    outcome = tubeless(capsys, "run", path, "--text", "x", "--dry-run", "--quiet")
    assert outcome.code == 6
    assert outcome.err == [
        "error: TUBELESS_FINALIZATION_FAILED (TUBELESS_REQUIRED_OUTPUTS_MISSING): finalize: "
        "Required pipeline outputs missing: agent (agent lookup-agent has no dry_run decision "
        "source, so the dry run skipped it and there is no result)"
    ]


def test_a_step_selection_that_starves_finalization_says_so_in_run_and_plan(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Issue 15: `--step words` skips what the finalizer reads; run and plan both say so."""
    text = Path(__file__).resolve().parents[2] / "projects" / "text-pipeline.yaml"
    outcome = tubeless(capsys, "run", text, "--step", "words", "--question", "a b", "--quiet")
    assert outcome.code == 6
    assert outcome.err == [
        "error: TUBELESS_FINALIZATION_FAILED: finalize: KeyError: 'count' (the selection "
        "skipped count, uppercase, report, so finalization saw only the selected steps' outputs)"
    ]
    planned = tubeless(capsys, "plan", text, "--step", "words")
    assert planned.code == 0
    assert planned.out.splitlines()[-1] == (
        "  note: finalization sees only the selected steps' outputs (count, uppercase, report "
        "are skipped); a finalizer that reads them will fail"
    )
    targeted = tubeless(capsys, "plan", text, "--target", "count")
    assert "note:" not in targeted.out


def test_plan_says_when_a_selection_skips_a_required_output(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 15: with `finalize: <step>`, selecting another step is a finalization failure."""
    path = project(
        tmp_path,
        pipelines="""\
        pipe:
          finalize: b
          steps:
            - {id: a, run: "helpers:step_lookup"}
            - {id: b, run: "helpers:step_lookup"}
        """,
    )
    planned = tubeless(capsys, "plan", path, "--step", "a")
    assert planned.out.splitlines()[-1] == (
        "  note: finalization needs the outputs of b, which this selection skips: the run will "
        "fail in finalization (select a --target instead)"
    )
