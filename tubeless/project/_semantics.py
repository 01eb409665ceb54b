"""Checks that need the whole document but no imports: ids, step references, cycles, templates.

``tubeless validate`` runs these after the meta-schema check; they import nothing and execute
nothing from the project.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import jsonschema

from tubeless.errors import AGENT_INVALID_DEFINITION, DOCUMENT_INVALID, TEMPLATE_INVALID
from tubeless.project._issues import did_you_mean
from tubeless.project._problem import Problem
from tubeless.project._step_graph import step_graph_problems
from tubeless.project._template_check import template_problems
from tubeless.project._template_inputs import undeclared_reads
from tubeless.project.spec import (
    AgentSpec,
    AgentToolSpec,
    FinalizeSpec,
    McpToolSpec,
    PipelineSpec,
    PipelineToolSpec,
    ProjectSpec,
    SchemaSpec,
)

__all__ = ["Problem", "check_semantics", "composition_order", "escape"]


def escape(part: str) -> str:
    """One JSON-pointer segment."""
    return part.replace("~", "~0").replace("/", "~1")


def _edges(spec: ProjectSpec) -> Iterator[tuple[str, str, str]]:
    """``(from id, to id, pointer of the reference)`` for every use of one entry by another."""
    for agent_id, agent in spec.agents.items():
        for name, tool in agent.tools.items():
            pointer = f"/agents/{escape(agent_id)}/tools/{escape(name)}"
            if isinstance(tool, PipelineToolSpec) and tool.pipeline in spec.pipelines:
                yield agent_id, tool.pipeline, pointer + "/pipeline"
            elif isinstance(tool, AgentToolSpec) and tool.agent in spec.agents:
                yield agent_id, tool.agent, pointer + "/agent"
    for pipeline_id, pipeline in spec.pipelines.items():
        for index, step in enumerate(pipeline.steps):
            pointer = f"/pipelines/{escape(pipeline_id)}/steps/{index}"
            if step.from_pipeline is not None:
                yield pipeline_id, step.from_pipeline.pipeline, pointer + "/from_pipeline/pipeline"
            if step.for_each_pipeline is not None:
                yield (
                    pipeline_id,
                    step.for_each_pipeline.pipeline,
                    pointer + "/for_each_pipeline/pipeline",
                )


def composition_order(spec: ProjectSpec) -> list[str]:
    """Entry ids with every entry after the entries it uses (assumes no cycles)."""
    uses: dict[str, list[str]] = {key: [] for key in (*spec.pipelines, *spec.agents)}
    for source, target, _ in _edges(spec):
        if target in uses:
            uses[source].append(target)
    order: list[str] = []
    done: set[str] = set()

    def visit(node: str) -> None:
        if node in done:
            return
        done.add(node)
        for target in uses[node]:
            visit(target)
        order.append(node)

    for node in uses:
        visit(node)
    return order


def _cycles(spec: ProjectSpec) -> list[Problem]:
    uses: dict[str, list[tuple[str, str]]] = {key: [] for key in (*spec.pipelines, *spec.agents)}
    for source, target, pointer in _edges(spec):
        if target in uses:
            uses[source].append((target, pointer))
    found: list[Problem] = []
    state: dict[str, int] = {}
    reported: set[frozenset[str]] = set()

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for target, pointer in uses[node]:
            if state.get(target) == 1:
                cycle = [*path[path.index(target) :], target]
                if frozenset(cycle) not in reported:
                    reported.add(frozenset(cycle))
                    found.append(
                        Problem(
                            pointer,
                            f"entries use each other in a cycle: {' -> '.join(cycle)}",
                            DOCUMENT_INVALID,
                        )
                    )
            elif target not in state:
                visit(target, [*path, target])
        state[node] = 2

    for node in uses:
        if node not in state:
            visit(node, [node])
    return found


def _inline_schema(schema: SchemaSpec, pointer: str) -> list[Problem]:
    if not isinstance(schema.schema_, dict):
        return []
    try:
        jsonschema.Draft202012Validator.check_schema(schema.schema_)
    except jsonschema.SchemaError as exc:
        where = "".join(f"/{escape(str(p))}" for p in exc.absolute_path)
        return [
            Problem(
                f"{pointer}/schema{where}",
                f"not a valid JSON Schema: {exc.message}",
                DOCUMENT_INVALID,
            )
        ]
    return []


def _agent(agent_id: str, agent: AgentSpec, spec: ProjectSpec) -> list[Problem]:
    base = f"/agents/{escape(agent_id)}"
    found = [
        *_inline_schema(agent.input, f"{base}/input"),
        *_inline_schema(agent.result, f"{base}/result"),
    ]
    if isinstance(agent.initial_state, dict):
        invalid = template_problems(agent.initial_state, f"{base}/initial_state")
        found.extend(Problem(where, message, TEMPLATE_INVALID) for where, message in invalid)
        if not invalid and isinstance(agent.input.schema_, dict):
            found.extend(
                Problem(where, message, TEMPLATE_INVALID)
                for where, message in undeclared_reads(
                    agent.initial_state, f"{base}/initial_state", agent.input.schema_
                )
            )
    for name, tool in agent.tools.items():
        pointer = f"{base}/tools/{escape(name)}"
        if isinstance(tool, PipelineToolSpec) and tool.pipeline not in spec.pipelines:
            found.append(
                Problem(
                    f"{pointer}/pipeline",
                    _unknown("pipeline", tool.pipeline, spec.pipelines),
                    DOCUMENT_INVALID,
                    False,
                )
            )
        elif (
            isinstance(tool, PipelineToolSpec)
            and tool.input is None
            and spec.pipelines[tool.pipeline].input is None
        ):
            # What pipeline_tool(...) refuses when compiling, said in the file's terms.
            found.append(
                Problem(
                    f"{pointer}/pipeline",
                    f"Pipeline {tool.pipeline!r} has no input "
                    "schema: give the pipeline an input:, or give this tool input: and "
                    "map_options:.",
                    AGENT_INVALID_DEFINITION,
                    False,
                )
            )
        if isinstance(tool, AgentToolSpec) and tool.agent not in spec.agents:
            found.append(
                Problem(
                    f"{pointer}/agent",
                    _unknown("agent", tool.agent, spec.agents),
                    DOCUMENT_INVALID,
                    False,
                )
            )
        if isinstance(tool, McpToolSpec) and tool.mcp not in spec.mcp_servers:
            found.append(
                Problem(
                    f"{pointer}/mcp",
                    _unknown("MCP server", tool.mcp, spec.mcp_servers),
                    DOCUMENT_INVALID,
                    False,
                )
            )
        schema = getattr(tool, "input", None)
        if isinstance(schema, SchemaSpec):
            found.extend(_inline_schema(schema, f"{pointer}/input"))
        output = getattr(tool, "output", None)
        if isinstance(output, SchemaSpec):
            found.extend(_inline_schema(output, f"{pointer}/output"))
    return found


def _unknown(kind: str, name: str, known: Mapping[str, Any], owner: str = "project") -> str:
    choices = ", ".join(map(repr, known)) or "none"
    plural = "entries" if kind == "entry" else f"{kind}s"
    if kind == "MCP server":
        plural = "mcp_servers"
    listed = f"this {owner}'s {plural}: {choices}"
    hint = did_you_mean(name, known)
    if hint is not None:
        return f"unknown {kind} {name!r}; {hint} ({listed})"
    return f"unknown {kind} {name!r}; {listed}"


def _pipeline(pipeline_id: str, pipeline: PipelineSpec, spec: ProjectSpec) -> list[Problem]:
    base = f"/pipelines/{escape(pipeline_id)}"
    found: list[Problem] = []
    if pipeline.input is not None:
        found.extend(_inline_schema(pipeline.input, f"{base}/input"))
    if pipeline.result is not None:
        found.extend(_inline_schema(pipeline.result, f"{base}/result"))
    ids: dict[str, int] = {}
    for index, step in enumerate(pipeline.steps):
        if step.id in ids:
            found.append(
                Problem(
                    f"{base}/steps/{index}/id",
                    f"step id {step.id!r} is already used by step {ids[step.id]}",
                    DOCUMENT_INVALID,
                    False,
                )
            )
        ids.setdefault(step.id, index)
    entries = {**spec.pipelines, **spec.agents}
    for index, step in enumerate(pipeline.steps):
        pointer = f"{base}/steps/{index}"
        for field in ("depends_on", "optional_depends_on", "skip_after_failure_of"):
            for position, dep in enumerate(getattr(step, field)):
                if dep not in ids:
                    found.append(
                        Problem(
                            f"{pointer}/{field}/{position}",
                            _unknown("step", dep, ids, "pipeline"),
                            DOCUMENT_INVALID,
                            False,
                        )
                    )
        composed = step.from_pipeline or step.for_each_pipeline
        if composed is not None:
            if composed.pipeline not in entries:
                key = "from_pipeline" if step.from_pipeline is not None else "for_each_pipeline"
                found.append(
                    Problem(
                        f"{pointer}/{key}/pipeline",
                        _unknown("pipeline", composed.pipeline, entries),
                        DOCUMENT_INVALID,
                        False,
                    )
                )
            if step.output is not None:
                found.append(
                    Problem(
                        f"{pointer}/output",
                        "only run steps take an output schema (a child pipeline "
                        "validates its own result)",
                        DOCUMENT_INVALID,
                        True,
                    )
                )
            if step.dry_run is not None and step.dry_run != "skip":
                found.append(
                    Problem(
                        f"{pointer}/dry_run",
                        "composed steps support only dry_run: skip (children run their "
                        "own previews)",
                        DOCUMENT_INVALID,
                        False,
                    )
                )
        if step.output is not None:
            found.extend(_inline_schema(step.output, f"{pointer}/output"))
    for position, target in enumerate(pipeline.targets or ()):
        if target not in ids:
            found.append(
                Problem(
                    f"{base}/targets/{position}",
                    _unknown("step", target, ids, "pipeline"),
                    DOCUMENT_INVALID,
                    False,
                )
            )
    finalize = pipeline.finalize
    if isinstance(finalize, str) and finalize not in ids:
        found.append(
            Problem(
                f"{base}/finalize",
                _unknown("step", finalize, ids, "pipeline"),
                DOCUMENT_INVALID,
                False,
            )
        )
    if isinstance(finalize, FinalizeSpec):
        for position, required in enumerate(finalize.require_outputs):
            if required not in ids:
                found.append(
                    Problem(
                        f"{base}/finalize/require_outputs/{position}",
                        _unknown("step", required, ids, "pipeline"),
                        DOCUMENT_INVALID,
                        False,
                    )
                )
    found.extend(step_graph_problems(base, pipeline))
    return found


def check_semantics(spec: ProjectSpec) -> list[Problem]:
    """Every cross-reference problem of a schema-valid project, without importing anything."""
    found: list[Problem] = []
    if not spec.agents and not spec.pipelines:
        found.append(
            Problem(
                "/project",
                "the project has no entries: add an agent under agents: or "
                "a pipeline under pipelines:",
                DOCUMENT_INVALID,
                True,
            )
        )
    for agent_id in spec.agents:
        if agent_id in spec.pipelines:
            found.append(
                Problem(
                    f"/agents/{escape(agent_id)}",
                    f"{agent_id!r} is both an agent and a pipeline; ids share one namespace",
                    DOCUMENT_INVALID,
                    True,
                )
            )
    default = spec.project.default
    if default is not None and default not in spec.agents and default not in spec.pipelines:
        found.append(
            Problem(
                "/project/default",
                _unknown("entry", default, {**spec.agents, **spec.pipelines}),
                DOCUMENT_INVALID,
                False,
            )
        )
    for agent_id, agent in spec.agents.items():
        found.extend(_agent(agent_id, agent, spec))
    for pipeline_id, pipeline in spec.pipelines.items():
        found.extend(_pipeline(pipeline_id, pipeline, spec))
    found.extend(_cycles(spec))
    return found
