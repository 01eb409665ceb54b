"""OtelSink over whole span trees of every shipped project: children nest in their parents in
time, every span has an OpenInference kind, pipelines an operation name, the root a session."""

from __future__ import annotations

import asyncio
import math
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.cli import tubeless
from tests.fixtures.openai_cassette import RUN, SHIPPED
from tests.fixtures.otel import memory_provider
from tubeless.project import load_project
from tubeless.testing import capture_trace
from tubeless.tracing import read_trace
from tubeless.tracing.otel import export_records

ROOT = Path(__file__).resolve().parents[2]
PROJECTS = sorted((ROOT / "projects").glob("*.yaml"))
#: The input each shipped project runs on (openai-agent replays its shipped cassette).
INPUTS: dict[str, dict[str, Any]] = {
    "approvals": {"to": "ops@elsewhere.org"},
    "delegation": {"question": "red blue"},
    "mcp-notes": {"question": "hello tubeless"},
    "scripted-agent": {"question": "missing word"},
    "text-pipeline": {"question": "hello tubeless"},
}
KINDS = {
    "invoke_agent": "AGENT",
    "execute_tool": "TOOL",
    "chat": "LLM",
    "turn": "CHAIN",
    "run_pipeline": "CHAIN",
}

Records = list[dict[str, Any]]


def project_records(name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Records:
    """The trace records of one run of ``projects/<name>.yaml``."""
    if name == "openai-agent":
        path = tmp_path / "trace.ndjson"
        done = tubeless(capsys, *RUN, "--replay", SHIPPED, "--trace", path)
        assert done.code == 0, done.err
        return [dict(record) for record in read_trace(path)]
    entry = load_project(ROOT / "projects" / f"{name}.yaml").entry()
    with capture_trace() as trace:
        run = asyncio.run(
            entry.run(
                INPUTS[name],
                trace=trace,
                correlation_id="session-7",
                approver=lambda request: True,
            )
        )
    assert run.status == "completed"
    return trace.records


def retimed(records: Records) -> Records:
    """``records`` with the times a millisecond clock could give them, chosen so that flooring
    each run's start makes a child that ends just before its parent end after it."""
    depth: dict[str, int] = {}
    out = []
    for record in records:
        run_id = record["runId"]
        if run_id not in depth:
            parent = record.get("parentRunId")
            depth[run_id] = depth.get(parent, -1) + 1 if parent else 0
        d = depth[run_id]
        start = 1000.9 + 0.2 * d  # each run starts later than its parent...
        end = 1010.0 - 0.05 * d  # ...and ends earlier
        copy = dict(record)
        copy["timestampMs"] = math.floor(start) + (0 if record["name"] == "pipeline.started" else 1)
        if record["name"] == "pipeline.completed":
            copy["timestampMs"] = math.floor(end)
            copy["durationMs"] = end - start
        out.append(copy)
    return out


def exported(records: Records) -> list[Any]:
    provider, exporter = memory_provider()
    export_records(records, provider)
    return list(exporter.get_finished_spans())


def outside_their_parent(spans: list[Any]) -> list[str]:
    by_id = {span.context.span_id: span for span in spans}
    bad = []
    for span in spans:
        parent = None if span.parent is None else by_id.get(span.parent.span_id)
        if parent is None:
            continue
        if not parent.start_time <= span.start_time <= span.end_time <= parent.end_time:
            bad.append(f"{span.name} in {parent.name}")
    return bad


@pytest.mark.parametrize("name", [path.stem for path in PROJECTS])
def test_every_span_of_every_shipped_project_lies_within_its_parent(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    records = project_records(name, tmp_path, capsys)

    for trace in (records, retimed(records)):
        spans = exported(trace)
        assert len([s for s in spans if s.parent is not None]) >= 1
        assert outside_their_parent(spans) == []


@pytest.mark.parametrize("name", [path.stem for path in PROJECTS])
def test_every_span_has_its_openinference_kind_and_pipelines_invoke_a_workflow(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spans = exported(project_records(name, tmp_path, capsys))

    for span in spans:
        attributes = dict(span.attributes or {})
        prefix = span.name.split(" ")[0]
        assert attributes.get("openinference.span.kind") == KINDS[prefix], span.name
        if prefix == "run_pipeline":
            assert attributes["gen_ai.operation.name"] == "invoke_workflow"
            assert attributes["gen_ai.workflow.name"] == span.name.removeprefix("run_pipeline ")
        elif prefix != "turn":
            assert attributes["gen_ai.operation.name"] == prefix


@pytest.mark.parametrize("name", sorted(INPUTS))
def test_the_root_span_alone_carries_the_correlation_id_as_session_id(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spans = exported(project_records(name, tmp_path, capsys))

    sessions = {span.name: (span.attributes or {}).get("session.id") for span in spans}
    roots = [span.name for span in spans if span.parent is None]
    assert [sessions[root] for root in roots] == ["session-7"]
    assert [n for n, s in sessions.items() if s is not None and n not in roots] == []


def test_an_agent_used_as_a_tool_is_an_execute_tool_span_with_an_invoke_agent_child(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spans = exported(project_records("delegation", tmp_path, capsys))
    by_id = {span.context.span_id: span for span in spans}

    def parent_name(span: Any) -> str | None:
        return None if span.parent is None else by_id[span.parent.span_id].name

    children = [s for s in spans if s.name == "invoke_agent scripted-agent"]
    assert [parent_name(s) for s in children] == ["execute_tool process_word"] * 2
    tools = [s for s in spans if s.name == "execute_tool process_word"]
    assert all("gen_ai.agent.id" not in (s.attributes or {}) for s in tools)
    for child in children:
        assert (child.start_time, child.end_time) == (
            by_id[child.parent.span_id].start_time,
            by_id[child.parent.span_id].end_time,
        )
        assert child.attributes["gen_ai.agent.id"] == "scripted-agent"
        assert child.attributes["tubeless.turns"] == 2
    turns = {parent_name(s) for s in spans if s.name.startswith("turn ")}
    assert turns == {"invoke_agent delegating-agent", "invoke_agent scripted-agent"}
