"""The graph renderers on pipelines built in Python: Mermaid exactly as UPSTREAM §3.6 (node ids,
label escaping, the four edge styles, one trailing newline), composed-step suffixes, the agent
layout (turn subgraph, loop edge, tools), Graphviz DOT that parses, and the JSON node/edge list.
Nothing is run while drawing."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import textwrap
from dataclasses import replace
from typing import Any

import pytest
from inline_snapshot import snapshot

from examples.agent_delegation import delegating_agent
from examples.scripted_agent import scripted_agent
from tubeless import (
    Pipeline,
    StepContext,
    define_pipeline,
    for_each_pipeline,
    from_pipeline,
    iterate_pipeline,
    step,
)
from tubeless._cli import look
from tubeless.reporting.graph import (
    DIRECTIONS,
    FORMATS,
    agent_tools,
    build_graph,
    render_graph,
    to_dot,
    to_json,
    to_mermaid,
)

CALLS: list[str] = []


def record(name: str) -> Any:
    """A handler (or callback) that records being called; drawing must never call one."""

    def handler(*args: Any, **kwargs: Any) -> str:
        CALLS.append(name)
        return name

    return handler


@pytest.fixture(autouse=True)
def _no_calls() -> Any:
    CALLS.clear()
    yield
    assert CALLS == [], "drawing a graph called a handler"


def diagrammed() -> Pipeline:
    """UPSTREAM's own toMermaid example: escaping, optional and optional+gate edges."""
    source = step(
        "source",
        record("source"),
        name='Load "Rows" #1 & <raw>',
        description="Read safely.\nNo mutation.",
    )
    hint = step("hint", record("hint"))
    validate = step("validate", record("validate"))
    publish = step(
        "publish",
        record("publish"),
        depends_on=[source],
        optional_depends_on=[hint, validate],
        skip_after_failure_of=[validate],
    )
    return define_pipeline(id="diagrammed", steps=[source, hint, validate, publish])


def child() -> Pipeline:
    return define_pipeline(id="child", steps=[step("only", record("only"))])


# -- Mermaid, as upstream ---------------------------------------------------------------------
def test_mermaid_matches_upstream_escaping_and_edges() -> None:
    """The upstream fixture, byte for byte: LR, descriptions, escaped label, two dotted styles."""
    text = render_graph(diagrammed(), direction="LR", descriptions=True)
    assert text == (
        "flowchart LR\n"
        '  step0["Load #quot;Rows#quot; #35;1 #38; #60;raw#62; — Read safely. No mutation."]\n'
        '  step1["hint"]\n'
        '  step2["validate"]\n'
        '  step3["publish"]\n'
        "\n"
        "  step0 --> step3\n"
        "  step1 -. optional input .-> step3\n"
        "  step2 -. optional input + failure gate .-> step3\n"
    )


def test_mermaid_defaults_to_td_and_names_without_descriptions() -> None:
    """No edges means no blank line and no edge block; descriptions only on request."""
    pipeline = define_pipeline(
        id="defaults",
        steps=[step("normalize-data", record("n"), name="Normalize Data", description="Hidden.")],
    )
    assert render_graph(pipeline) == 'flowchart TD\n  step0["Normalize Data"]\n'


def test_all_four_edge_styles_and_required_wins() -> None:
    """Per step, per distinct upstream (required, optional, gate order): a required dependency
    that is also a failure gate is drawn once, as required."""
    a = step("a", record("a"))
    b = step("b", record("b"))
    c = step("c", record("c"))
    d = step(
        "d",
        record("d"),
        depends_on=[a],
        optional_depends_on=[b, c],
        skip_after_failure_of=[c, a],
    )
    e = step("e", record("e"), skip_after_failure_of=[b])
    pipeline = define_pipeline(id="styles", steps=[a, b, c, d, e])
    assert render_graph(pipeline).split("\n\n")[1] == (
        "  step0 --> step3\n"
        "  step1 -. optional input .-> step3\n"
        "  step2 -. optional input + failure gate .-> step3\n"
        "  step1 -. failure gate .-> step4\n"
    )


def test_labels_replace_control_characters() -> None:
    pipeline = define_pipeline(id="ctl", steps=[step("x", record("x"), name="a\tb\r\nc\x85d")])
    assert render_graph(pipeline) == 'flowchart TD\n  step0["a b c d"]\n'


@pytest.mark.parametrize("direction", DIRECTIONS)
def test_every_direction_is_the_first_line(direction: str) -> None:
    assert render_graph(child(), direction=direction).splitlines()[0] == f"flowchart {direction}"


@pytest.mark.parametrize("bad", ["td", "sideways", ""])
def test_unknown_direction_is_rejected(bad: str) -> None:
    with pytest.raises(ValueError, match="Invalid flowchart direction"):
        build_graph(child(), direction=bad)


def test_unknown_format_is_rejected() -> None:
    with pytest.raises(ValueError, match="Unknown graph format 'svg'"):
        render_graph(child(), format="svg")


def test_cli_choices_match_the_renderer() -> None:
    """The CLI keeps its own copies (to stay cheap to import); they must agree."""
    assert look._DIRECTIONS == DIRECTIONS
    assert look._FORMATS == FORMATS


def test_composed_steps_name_their_child() -> None:
    kid = child()
    single = from_pipeline("single", kid, name="Single")
    fan = for_each_pipeline(
        "fan", kid, items=record("items"), key=record("key"), map_options=record("map")
    )
    loop = iterate_pipeline(
        "loop",
        kid,
        max_iterations=4,
        initial_state=record("init"),
        map_options=record("map"),
        transition=record("transition"),
        depends_on=[single, fan],
    )
    pipeline = define_pipeline(id="composed", steps=[single, fan, loop])
    assert render_graph(pipeline) == textwrap.dedent(
        """\
        flowchart TD
          step0["Single (child: child)"]
          step1["fan (fan-out: child)"]
          step2["loop (iteration: child, at most 4)"]

          step0 --> step2
          step1 --> step2
        """
    )
    kinds = [(n.id, n.kind, n.pipeline_id) for n in build_graph(pipeline).nodes]
    assert kinds == [
        ("step0", "child", "child"),
        ("step1", "fan-out", "child"),
        ("step2", "iteration", "child"),
    ]


# -- agents -----------------------------------------------------------------------------------
SCRIPTED_MERMAID = """\
flowchart TD
  subgraph step0["agent (agent: scripted-agent/turn)"]
    step0_0["Decide"]
    step0_1["Calls"]
    step0_2["Reduce"]
    step0_tool0(["count"])
    step0_tool1(["uppercase"])
  end

  step0_0 --> step0_1
  step0_0 --> step0_2
  step0_1 --> step0_2
  step0_2 -. next turn (at most 3) .-> step0_0
  step0_1 -. count .-> step0_tool0
  step0_1 -. uppercase .-> step0_tool1
"""


def test_agent_renders_its_turn_loop_and_tools() -> None:
    assert render_graph(scripted_agent) == SCRIPTED_MERMAID


def test_agent_tools_name_their_child_pipeline_or_agent() -> None:
    text = render_graph(delegating_agent, descriptions=True)
    assert (
        '    step0_tool0(["agent: scripted-agent — Count and uppercase one word with the '
        'scripted agent."])' in text
    )
    assert '    step0_tool1(["pipeline: agent-summary — Summarize text."])' in text
    assert "  step0_1 -. process_word .-> step0_tool0" in text
    assert "  step0_1 -. summarize .-> step0_tool1" in text
    tools = agent_tools(delegating_agent.get_step("agent"))
    assert [(t.name, t.kind, t.pipeline_id) for t in tools] == [
        ("process_word", "agent", "scripted-agent"),
        ("summarize", "pipeline", "agent-summary"),
    ]
    assert [(t.name, t.kind, t.pipeline_id) for t in agent_tools(scripted_agent.order[0])] == [
        ("count", "function", "scripted-agent/tool/count"),
        ("uppercase", "function", "scripted-agent/tool/uppercase"),
    ]


def hosted() -> Pipeline:
    """An agent step between two ordinary steps: edges attach to the agent's subgraph."""
    prep = step("prep", record("prep"), name="Prepare")
    agent = replace(scripted_agent.get_step("agent"), depends_on=("prep",))
    after = step("after", record("after"), optional_depends_on=["agent"])
    return define_pipeline(id='host "x"', steps=[prep, agent, after])


def test_agent_inside_a_pipeline_connects_to_the_subgraph() -> None:
    text = render_graph(hosted(), direction="LR")
    assert text.startswith('flowchart LR\n  step0["Prepare"]\n  subgraph step1["agent (agent: ')
    assert '  end\n  step2["after"]\n\n  step0 --> step1\n  step1_0 --> step1_1\n' in text
    assert text.endswith("  step1 -. optional input .-> step2\n")


# -- DOT --------------------------------------------------------------------------------------
_QUOTED = r'"(?:[^"\\]|\\.)*"'
_NODE = re.compile(rf"\s*({_QUOTED}) \[label={_QUOTED}(?:, style=rounded)?\];")
_EDGE = re.compile(rf"\s*({_QUOTED}) -> ({_QUOTED})(?: \[[^\]]*\])?;")
_OTHER = re.compile(
    rf"\s*(?:rankdir=(?:TB|BT|LR|RL);|compound=true;|node \[shape=box\];|"
    rf"subgraph \"cluster_[^\"]+\" \{{|label={_QUOTED};|\}})"
)


def assert_valid_dot(source: str) -> None:
    """Run Graphviz when it is installed; otherwise check the structure with regexes."""
    if shutil.which("dot"):
        done = subprocess.run(
            ["dot", "-Tsvg"], input=source, capture_output=True, text=True, check=False
        )
        assert done.returncode == 0 and not done.stderr, done.stderr
    lines = source.splitlines()
    assert source.endswith("}\n") and not source.endswith("\n\n")
    assert re.fullmatch(rf"digraph {_QUOTED} \{{", lines[0]), lines[0]
    unquoted = re.sub(_QUOTED, '""', source)
    assert unquoted.count("{") == unquoted.count("}")
    declared: set[str] = set()
    endpoints: list[str] = []
    for line in lines[1:]:
        if node := _NODE.fullmatch(line):
            declared.add(node.group(1))
        elif edge := _EDGE.fullmatch(line):
            endpoints += [edge.group(1), edge.group(2)]
        else:
            assert _OTHER.fullmatch(line), f"unexpected DOT line: {line!r}"
    assert set(endpoints) <= declared, set(endpoints) - declared


def test_dot_for_a_pipeline() -> None:
    text = to_dot(build_graph(diagrammed(), direction="TD", descriptions=True))
    assert text == snapshot("""\
digraph "diagrammed" {
  rankdir=TB;
  node [shape=box];
  "step0" [label="Load \\"Rows\\" #1 & <raw> — Read safely. No mutation."];
  "step1" [label="hint"];
  "step2" [label="validate"];
  "step3" [label="publish"];
  "step0" -> "step3";
  "step1" -> "step3" [style=dashed, label="optional input"];
  "step2" -> "step3" [style=dashed, label="optional input + failure gate"];
}
""")
    assert_valid_dot(text)


def test_dot_for_an_agent() -> None:
    text = render_graph(scripted_agent, format="dot", direction="LR")
    assert text == snapshot("""\
digraph "scripted-agent" {
  rankdir=LR;
  compound=true;
  node [shape=box];
  subgraph "cluster_step0" {
    label="agent (agent: scripted-agent/turn)";
    "step0_0" [label="Decide"];
    "step0_1" [label="Calls"];
    "step0_2" [label="Reduce"];
    "step0_tool0" [label="count", style=rounded];
    "step0_tool1" [label="uppercase", style=rounded];
  }
  "step0_0" -> "step0_1";
  "step0_0" -> "step0_2";
  "step0_1" -> "step0_2";
  "step0_2" -> "step0_0" [style=dashed, label="next turn (at most 3)"];
  "step0_1" -> "step0_tool0" [style=dotted, label="count"];
  "step0_1" -> "step0_tool1" [style=dotted, label="uppercase"];
}
""")
    assert_valid_dot(text)


def test_dot_clips_edges_at_an_agent_cluster() -> None:
    text = render_graph(hosted(), format="dot")
    assert text.startswith('digraph "host \\"x\\"" {\n')
    assert '  "step0" -> "step1_0" [lhead="cluster_step1"];\n' in text
    assert (
        '  "step1_2" -> "step2" [style=dashed, label="optional input", ltail="cluster_step1"];\n'
        in text
    )
    assert_valid_dot(text)


@pytest.mark.parametrize(
    "pipeline",
    [diagrammed(), scripted_agent, delegating_agent, hosted()],
    ids=["diagrammed", "scripted", "delegating", "hosted"],
)
def test_dot_is_valid(pipeline: Pipeline) -> None:
    assert_valid_dot(render_graph(pipeline, format="dot", descriptions=True))


def test_dot_escapes_backslashes_and_quotes() -> None:
    pipeline = define_pipeline(id="esc", steps=[step("x", record("x"), name='a\\b"c')])
    text = render_graph(pipeline, format="dot")
    assert '  "step0" [label="a\\\\b\\"c"];\n' in text
    assert_valid_dot(text)


# -- JSON and markdown ------------------------------------------------------------------------
def test_json_lists_nodes_and_edges() -> None:
    data = json.loads(to_json(build_graph(scripted_agent, direction="BT")))
    assert data["id"] == "scripted-agent"
    assert data["direction"] == "BT"
    assert data["nodes"][0] == {
        "id": "step0",
        "step_id": "agent",
        "label": "agent (agent: scripted-agent/turn)",
        "kind": "agent",
        "pipeline_id": "scripted-agent/turn",
    }
    assert [(n["id"], n["kind"], n.get("parent")) for n in data["nodes"][1:]] == [
        ("step0_0", "turn-step", "step0"),
        ("step0_1", "turn-step", "step0"),
        ("step0_2", "turn-step", "step0"),
        ("step0_tool0", "tool", "step0"),
        ("step0_tool1", "tool", "step0"),
    ]
    assert data["nodes"][4]["tool"] == "count"
    assert data["nodes"][4]["step_id"] is None
    assert data["edges"] == [
        {"from": "step0_0", "to": "step0_1", "kind": "required"},
        {"from": "step0_0", "to": "step0_2", "kind": "required"},
        {"from": "step0_1", "to": "step0_2", "kind": "required"},
        {"from": "step0_2", "to": "step0_0", "kind": "next-turn", "label": "next turn (at most 3)"},
        {"from": "step0_1", "to": "step0_tool0", "kind": "tool", "label": "count"},
        {"from": "step0_1", "to": "step0_tool1", "kind": "tool", "label": "uppercase"},
    ]


def test_json_edge_kinds_for_dependencies() -> None:
    edges = build_graph(diagrammed()).to_dict()["edges"]
    assert [edge["kind"] for edge in edges] == ["required", "optional", "optional+failure-gate"]


@pytest.mark.parametrize("fmt", FORMATS)
def test_markdown_fences_the_text(fmt: str) -> None:
    plain = render_graph(child(), format=fmt)
    fenced = render_graph(child(), format=fmt, markdown=True)
    assert fenced == f"```{fmt}\n{plain}```\n"
    assert to_mermaid(build_graph(child())) == render_graph(child())


def test_drawing_runs_nothing() -> None:
    """Handlers, callbacks and agent callables are never called (the fixture checks CALLS)."""

    async def boom(inputs: dict[str, Any], ctx: StepContext) -> None:
        CALLS.append("boom")

    pipeline = define_pipeline(id="quiet", steps=[step("boom", boom, skip=record("skip"))])
    for fmt in FORMATS:
        render_graph(pipeline, format=fmt, descriptions=True)
        render_graph(scripted_agent, format=fmt, descriptions=True)
