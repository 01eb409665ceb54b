"""tubeless.tracing.OtelSink: one span per run, GenAI attributes, same spans live and stored."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

import pytest
from inline_snapshot import snapshot

from tests.fixtures.otel import every_text, memory_provider, span_rows, span_tree
from tubeless.project import load_project
from tubeless.testing import capture_trace
from tubeless.tracing import NdjsonSink, OtelSink, SqliteSink, TraceFold, read_trace
from tubeless.tracing.otel import export_records

ROOT = Path(__file__).resolve().parents[2]


def run_project(name: str, question: str, *sinks: Any) -> list[dict[str, Any]]:
    """Run ``projects/<name>.yaml`` on ``question`` into ``sinks``; its trace records."""
    entry = load_project(ROOT / "projects" / f"{name}.yaml").entry()
    with capture_trace() as trace:
        run = asyncio.run(entry.run({"question": question}, trace=[trace, *sinks]))
    assert run.status == "completed"
    return trace.records


def live_spans(name: str, question: str) -> tuple[list[Any], list[dict[str, Any]]]:
    provider, exporter = memory_provider()
    with OtelSink(provider) as sink:
        records = run_project(name, question, sink)
    return list(exporter.get_finished_spans()), records


def test_the_scripted_agent_is_an_invoke_agent_span_with_turn_and_execute_tool_children() -> None:
    spans, records = live_spans("scripted-agent", "hello tubeless")

    assert span_tree(spans, records) == snapshot(
        [
            {
                "name": "invoke_agent scripted-agent",
                "attributes": {
                    "tubeless.pipeline_id": "scripted-agent",
                    "tubeless.kind": "agent",
                    "tubeless.status": "completed",
                    "tubeless.step_count": 1,
                    "gen_ai.operation.name": "invoke_agent",
                    "openinference.span.kind": "AGENT",
                    "gen_ai.agent.id": "scripted-agent",
                    "gen_ai.agent.name": "scripted-agent",
                    "tubeless.limits.max_turns": 3,
                    "tubeless.limits.max_calls": 100,
                    "tubeless.limits.max_decisions": 3,
                    "tubeless.limits.max_depth": 4,
                    "tubeless.limits.max_concurrency": 2,
                    "tubeless.turns": 2,
                    "tubeless.calls_admitted": 3,
                },
                "events": [
                    "step.running",
                    "step.progress",
                    "step.progress",
                    "step.progress",
                    "step.complete",
                    "pipeline.finalize.started",
                    "pipeline.finalize.completed",
                ],
                "children": [
                    {
                        "name": "turn 1",
                        "attributes": {
                            "tubeless.pipeline_id": "scripted-agent/turn",
                            "tubeless.item_key": "iteration-1",
                            "tubeless.kind": "turn",
                            "tubeless.status": "completed",
                            "tubeless.step_count": 3,
                            "openinference.span.kind": "CHAIN",
                            "gen_ai.agent.id": "scripted-agent",
                            "tubeless.turn": 1,
                            "tubeless.decision": "continue",
                            "tubeless.call_count": 3,
                            "tubeless.calls_admitted": 3,
                            "tubeless.state_version": 0,
                        },
                        "events": [
                            "step.running",
                            "step.complete",
                            "step.running",
                            "step.progress",
                            "step.progress",
                            "step.progress",
                            "step.complete",
                            "step.running",
                            "step.complete",
                            "pipeline.finalize.started",
                            "pipeline.finalize.completed",
                        ],
                        "children": [
                            {
                                "name": "execute_tool count",
                                "attributes": {
                                    "tubeless.pipeline_id": "scripted-agent/tool/count",
                                    "tubeless.item_key": "length",
                                    "tubeless.kind": "call",
                                    "tubeless.status": "completed",
                                    "tubeless.step_count": 1,
                                    "gen_ai.operation.name": "execute_tool",
                                    "openinference.span.kind": "TOOL",
                                    "gen_ai.tool.name": "count",
                                    "gen_ai.tool.call.id": "length",
                                    "tubeless.turn": 1,
                                },
                                "events": [
                                    "step.running",
                                    "step.complete",
                                    "pipeline.finalize.started",
                                    "pipeline.finalize.completed",
                                ],
                                "children": [],
                            },
                            {
                                "name": "execute_tool uppercase",
                                "attributes": {
                                    "tubeless.pipeline_id": "scripted-agent/tool/uppercase",
                                    "tubeless.item_key": "word-0",
                                    "tubeless.kind": "call",
                                    "tubeless.status": "completed",
                                    "tubeless.step_count": 1,
                                    "gen_ai.operation.name": "execute_tool",
                                    "openinference.span.kind": "TOOL",
                                    "gen_ai.tool.name": "uppercase",
                                    "gen_ai.tool.call.id": "word-0",
                                    "tubeless.turn": 1,
                                },
                                "events": [
                                    "step.running",
                                    "step.complete",
                                    "pipeline.finalize.started",
                                    "pipeline.finalize.completed",
                                ],
                                "children": [],
                            },
                            {
                                "name": "execute_tool uppercase",
                                "attributes": {
                                    "tubeless.pipeline_id": "scripted-agent/tool/uppercase",
                                    "tubeless.item_key": "word-1",
                                    "tubeless.kind": "call",
                                    "tubeless.status": "completed",
                                    "tubeless.step_count": 1,
                                    "gen_ai.operation.name": "execute_tool",
                                    "openinference.span.kind": "TOOL",
                                    "gen_ai.tool.name": "uppercase",
                                    "gen_ai.tool.call.id": "word-1",
                                    "tubeless.turn": 1,
                                },
                                "events": [
                                    "step.running",
                                    "step.complete",
                                    "pipeline.finalize.started",
                                    "pipeline.finalize.completed",
                                ],
                                "children": [],
                            },
                        ],
                    },
                    {
                        "name": "turn 2",
                        "attributes": {
                            "tubeless.pipeline_id": "scripted-agent/turn",
                            "tubeless.item_key": "iteration-2",
                            "tubeless.kind": "turn",
                            "tubeless.status": "completed",
                            "tubeless.step_count": 3,
                            "openinference.span.kind": "CHAIN",
                            "gen_ai.agent.id": "scripted-agent",
                            "tubeless.turn": 2,
                            "tubeless.decision": "finish",
                            "tubeless.call_count": 0,
                            "tubeless.calls_admitted": 3,
                            "tubeless.state_version": 1,
                        },
                        "events": [
                            "step.running",
                            "step.complete",
                            "step.running",
                            "step.complete",
                            "step.running",
                            "step.complete",
                            "pipeline.finalize.started",
                            "pipeline.finalize.completed",
                        ],
                        "children": [],
                    },
                ],
            }
        ]
    )


def test_the_delegation_project_nests_the_child_agent_and_the_pipeline_tool_under_calls() -> None:
    """An agent used as a tool is its call's ``execute_tool`` span with an ``invoke_agent``
    child (DESIGN §24); its turns and calls hang below that; the pipeline tool is
    ``execute_tool`` too."""
    spans, records = live_spans("delegation", "red blue")

    assert span_tree(spans, records) == snapshot(
        [
            {
                "name": "invoke_agent delegating-agent",
                "attributes": {
                    "tubeless.pipeline_id": "delegating-agent",
                    "tubeless.kind": "agent",
                    "tubeless.status": "completed",
                    "tubeless.step_count": 1,
                    "gen_ai.operation.name": "invoke_agent",
                    "openinference.span.kind": "AGENT",
                    "gen_ai.agent.id": "delegating-agent",
                    "gen_ai.agent.name": "delegating-agent",
                    "tubeless.limits.max_turns": 3,
                    "tubeless.limits.max_calls": 100,
                    "tubeless.limits.max_decisions": 50,
                    "tubeless.limits.max_depth": 1,
                    "tubeless.limits.max_concurrency": 2,
                    "tubeless.turns": 3,
                    "tubeless.calls_admitted": 3,
                },
                "events": [
                    "step.running",
                    "step.progress",
                    "step.progress",
                    "step.progress",
                    "step.progress",
                    "step.complete",
                    "pipeline.finalize.started",
                    "pipeline.finalize.completed",
                ],
                "children": [
                    {
                        "name": "turn 1",
                        "attributes": {
                            "tubeless.pipeline_id": "delegating-agent/turn",
                            "tubeless.item_key": "iteration-1",
                            "tubeless.kind": "turn",
                            "tubeless.status": "completed",
                            "tubeless.step_count": 3,
                            "openinference.span.kind": "CHAIN",
                            "gen_ai.agent.id": "delegating-agent",
                            "tubeless.turn": 1,
                            "tubeless.decision": "continue",
                            "tubeless.call_count": 2,
                            "tubeless.calls_admitted": 2,
                            "tubeless.state_version": 0,
                        },
                        "events": [
                            "step.running",
                            "step.complete",
                            "step.running",
                            "step.progress",
                            "step.progress",
                            "step.complete",
                            "step.running",
                            "step.complete",
                            "pipeline.finalize.started",
                            "pipeline.finalize.completed",
                        ],
                        "children": [
                            {
                                "name": "execute_tool process_word",
                                "attributes": {
                                    "tubeless.pipeline_id": "scripted-agent",
                                    "tubeless.item_key": "word-0",
                                    "tubeless.kind": "call",
                                    "tubeless.status": "completed",
                                    "tubeless.step_count": 1,
                                    "gen_ai.operation.name": "execute_tool",
                                    "openinference.span.kind": "TOOL",
                                    "gen_ai.tool.name": "process_word",
                                    "gen_ai.tool.call.id": "word-0",
                                    "tubeless.turn": 1,
                                },
                                "events": [],
                                "children": [
                                    {
                                        "name": "invoke_agent scripted-agent",
                                        "attributes": {
                                            "tubeless.pipeline_id": "scripted-agent",
                                            "tubeless.item_key": "word-0",
                                            "tubeless.kind": "agent",
                                            "tubeless.status": "completed",
                                            "tubeless.step_count": 1,
                                            "gen_ai.operation.name": "invoke_agent",
                                            "openinference.span.kind": "AGENT",
                                            "gen_ai.agent.id": "scripted-agent",
                                            "gen_ai.agent.name": "scripted-agent",
                                            "tubeless.limits.max_turns": 3,
                                            "tubeless.limits.max_calls": 100,
                                            "tubeless.limits.max_decisions": 3,
                                            "tubeless.limits.max_depth": 4,
                                            "tubeless.limits.max_concurrency": 2,
                                            "tubeless.turns": 2,
                                            "tubeless.calls_admitted": 2,
                                        },
                                        "events": [
                                            "step.running",
                                            "step.progress",
                                            "step.progress",
                                            "step.progress",
                                            "step.complete",
                                            "pipeline.finalize.started",
                                            "pipeline.finalize.completed",
                                        ],
                                        "children": [
                                            {
                                                "name": "turn 1",
                                                "attributes": {
                                                    "tubeless.pipeline_id": "scripted-agent/turn",
                                                    "tubeless.item_key": "iteration-1",
                                                    "tubeless.kind": "turn",
                                                    "tubeless.status": "completed",
                                                    "tubeless.step_count": 3,
                                                    "openinference.span.kind": "CHAIN",
                                                    "gen_ai.agent.id": "scripted-agent",
                                                    "tubeless.turn": 1,
                                                    "tubeless.decision": "continue",
                                                    "tubeless.call_count": 2,
                                                    "tubeless.calls_admitted": 2,
                                                    "tubeless.state_version": 0,
                                                },
                                                "events": [
                                                    "step.running",
                                                    "step.complete",
                                                    "step.running",
                                                    "step.progress",
                                                    "step.progress",
                                                    "step.complete",
                                                    "step.running",
                                                    "step.complete",
                                                    "pipeline.finalize.started",
                                                    "pipeline.finalize.completed",
                                                ],
                                                "children": [
                                                    {
                                                        "name": "execute_tool count",
                                                        "attributes": {
                                                            "tubeless.pipeline_id": "scripted-agent/tool/count",  # noqa: E501
                                                            "tubeless.item_key": "length",
                                                            "tubeless.kind": "call",
                                                            "tubeless.status": "completed",
                                                            "tubeless.step_count": 1,
                                                            "gen_ai.operation.name": "execute_tool",
                                                            "openinference.span.kind": "TOOL",
                                                            "gen_ai.tool.name": "count",
                                                            "gen_ai.tool.call.id": "length",
                                                            "tubeless.turn": 1,
                                                        },
                                                        "events": [
                                                            "step.running",
                                                            "step.complete",
                                                            "pipeline.finalize.started",
                                                            "pipeline.finalize.completed",
                                                        ],
                                                        "children": [],
                                                    },
                                                    {
                                                        "name": "execute_tool uppercase",
                                                        "attributes": {
                                                            "tubeless.pipeline_id": "scripted-agent/tool/uppercase",  # noqa: E501
                                                            "tubeless.item_key": "word-0",
                                                            "tubeless.kind": "call",
                                                            "tubeless.status": "completed",
                                                            "tubeless.step_count": 1,
                                                            "gen_ai.operation.name": "execute_tool",
                                                            "openinference.span.kind": "TOOL",
                                                            "gen_ai.tool.name": "uppercase",
                                                            "gen_ai.tool.call.id": "word-0",
                                                            "tubeless.turn": 1,
                                                        },
                                                        "events": [
                                                            "step.running",
                                                            "step.complete",
                                                            "pipeline.finalize.started",
                                                            "pipeline.finalize.completed",
                                                        ],
                                                        "children": [],
                                                    },
                                                ],
                                            },
                                            {
                                                "name": "turn 2",
                                                "attributes": {
                                                    "tubeless.pipeline_id": "scripted-agent/turn",
                                                    "tubeless.item_key": "iteration-2",
                                                    "tubeless.kind": "turn",
                                                    "tubeless.status": "completed",
                                                    "tubeless.step_count": 3,
                                                    "openinference.span.kind": "CHAIN",
                                                    "gen_ai.agent.id": "scripted-agent",
                                                    "tubeless.turn": 2,
                                                    "tubeless.decision": "finish",
                                                    "tubeless.call_count": 0,
                                                    "tubeless.calls_admitted": 2,
                                                    "tubeless.state_version": 1,
                                                },
                                                "events": [
                                                    "step.running",
                                                    "step.complete",
                                                    "step.running",
                                                    "step.complete",
                                                    "step.running",
                                                    "step.complete",
                                                    "pipeline.finalize.started",
                                                    "pipeline.finalize.completed",
                                                ],
                                                "children": [],
                                            },
                                        ],
                                    }
                                ],
                            },
                            {
                                "name": "execute_tool process_word",
                                "attributes": {
                                    "tubeless.pipeline_id": "scripted-agent",
                                    "tubeless.item_key": "word-1",
                                    "tubeless.kind": "call",
                                    "tubeless.status": "completed",
                                    "tubeless.step_count": 1,
                                    "gen_ai.operation.name": "execute_tool",
                                    "openinference.span.kind": "TOOL",
                                    "gen_ai.tool.name": "process_word",
                                    "gen_ai.tool.call.id": "word-1",
                                    "tubeless.turn": 1,
                                },
                                "events": [],
                                "children": [
                                    {
                                        "name": "invoke_agent scripted-agent",
                                        "attributes": {
                                            "tubeless.pipeline_id": "scripted-agent",
                                            "tubeless.item_key": "word-1",
                                            "tubeless.kind": "agent",
                                            "tubeless.status": "completed",
                                            "tubeless.step_count": 1,
                                            "gen_ai.operation.name": "invoke_agent",
                                            "openinference.span.kind": "AGENT",
                                            "gen_ai.agent.id": "scripted-agent",
                                            "gen_ai.agent.name": "scripted-agent",
                                            "tubeless.limits.max_turns": 3,
                                            "tubeless.limits.max_calls": 100,
                                            "tubeless.limits.max_decisions": 3,
                                            "tubeless.limits.max_depth": 4,
                                            "tubeless.limits.max_concurrency": 2,
                                            "tubeless.turns": 2,
                                            "tubeless.calls_admitted": 2,
                                        },
                                        "events": [
                                            "step.running",
                                            "step.progress",
                                            "step.progress",
                                            "step.progress",
                                            "step.complete",
                                            "pipeline.finalize.started",
                                            "pipeline.finalize.completed",
                                        ],
                                        "children": [
                                            {
                                                "name": "turn 1",
                                                "attributes": {
                                                    "tubeless.pipeline_id": "scripted-agent/turn",
                                                    "tubeless.item_key": "iteration-1",
                                                    "tubeless.kind": "turn",
                                                    "tubeless.status": "completed",
                                                    "tubeless.step_count": 3,
                                                    "openinference.span.kind": "CHAIN",
                                                    "gen_ai.agent.id": "scripted-agent",
                                                    "tubeless.turn": 1,
                                                    "tubeless.decision": "continue",
                                                    "tubeless.call_count": 2,
                                                    "tubeless.calls_admitted": 2,
                                                    "tubeless.state_version": 0,
                                                },
                                                "events": [
                                                    "step.running",
                                                    "step.complete",
                                                    "step.running",
                                                    "step.progress",
                                                    "step.progress",
                                                    "step.complete",
                                                    "step.running",
                                                    "step.complete",
                                                    "pipeline.finalize.started",
                                                    "pipeline.finalize.completed",
                                                ],
                                                "children": [
                                                    {
                                                        "name": "execute_tool count",
                                                        "attributes": {
                                                            "tubeless.pipeline_id": "scripted-agent/tool/count",  # noqa: E501
                                                            "tubeless.item_key": "length",
                                                            "tubeless.kind": "call",
                                                            "tubeless.status": "completed",
                                                            "tubeless.step_count": 1,
                                                            "gen_ai.operation.name": "execute_tool",
                                                            "openinference.span.kind": "TOOL",
                                                            "gen_ai.tool.name": "count",
                                                            "gen_ai.tool.call.id": "length",
                                                            "tubeless.turn": 1,
                                                        },
                                                        "events": [
                                                            "step.running",
                                                            "step.complete",
                                                            "pipeline.finalize.started",
                                                            "pipeline.finalize.completed",
                                                        ],
                                                        "children": [],
                                                    },
                                                    {
                                                        "name": "execute_tool uppercase",
                                                        "attributes": {
                                                            "tubeless.pipeline_id": "scripted-agent/tool/uppercase",  # noqa: E501
                                                            "tubeless.item_key": "word-0",
                                                            "tubeless.kind": "call",
                                                            "tubeless.status": "completed",
                                                            "tubeless.step_count": 1,
                                                            "gen_ai.operation.name": "execute_tool",
                                                            "openinference.span.kind": "TOOL",
                                                            "gen_ai.tool.name": "uppercase",
                                                            "gen_ai.tool.call.id": "word-0",
                                                            "tubeless.turn": 1,
                                                        },
                                                        "events": [
                                                            "step.running",
                                                            "step.complete",
                                                            "pipeline.finalize.started",
                                                            "pipeline.finalize.completed",
                                                        ],
                                                        "children": [],
                                                    },
                                                ],
                                            },
                                            {
                                                "name": "turn 2",
                                                "attributes": {
                                                    "tubeless.pipeline_id": "scripted-agent/turn",
                                                    "tubeless.item_key": "iteration-2",
                                                    "tubeless.kind": "turn",
                                                    "tubeless.status": "completed",
                                                    "tubeless.step_count": 3,
                                                    "openinference.span.kind": "CHAIN",
                                                    "gen_ai.agent.id": "scripted-agent",
                                                    "tubeless.turn": 2,
                                                    "tubeless.decision": "finish",
                                                    "tubeless.call_count": 0,
                                                    "tubeless.calls_admitted": 2,
                                                    "tubeless.state_version": 1,
                                                },
                                                "events": [
                                                    "step.running",
                                                    "step.complete",
                                                    "step.running",
                                                    "step.complete",
                                                    "step.running",
                                                    "step.complete",
                                                    "pipeline.finalize.started",
                                                    "pipeline.finalize.completed",
                                                ],
                                                "children": [],
                                            },
                                        ],
                                    }
                                ],
                            },
                        ],
                    },
                    {
                        "name": "turn 2",
                        "attributes": {
                            "tubeless.pipeline_id": "delegating-agent/turn",
                            "tubeless.item_key": "iteration-2",
                            "tubeless.kind": "turn",
                            "tubeless.status": "completed",
                            "tubeless.step_count": 3,
                            "openinference.span.kind": "CHAIN",
                            "gen_ai.agent.id": "delegating-agent",
                            "tubeless.turn": 2,
                            "tubeless.decision": "continue",
                            "tubeless.call_count": 1,
                            "tubeless.calls_admitted": 3,
                            "tubeless.state_version": 1,
                        },
                        "events": [
                            "step.running",
                            "step.complete",
                            "step.running",
                            "step.progress",
                            "step.complete",
                            "step.running",
                            "step.complete",
                            "pipeline.finalize.started",
                            "pipeline.finalize.completed",
                        ],
                        "children": [
                            {
                                "name": "execute_tool summarize",
                                "attributes": {
                                    "tubeless.pipeline_id": "agent-summary",
                                    "tubeless.item_key": "summary",
                                    "tubeless.kind": "call",
                                    "tubeless.status": "completed",
                                    "tubeless.step_count": 1,
                                    "gen_ai.operation.name": "execute_tool",
                                    "openinference.span.kind": "TOOL",
                                    "gen_ai.tool.name": "summarize",
                                    "gen_ai.tool.call.id": "summary",
                                    "tubeless.turn": 2,
                                },
                                "events": [
                                    "step.running",
                                    "step.complete",
                                    "pipeline.finalize.started",
                                    "pipeline.finalize.completed",
                                ],
                                "children": [],
                            }
                        ],
                    },
                    {
                        "name": "turn 3",
                        "attributes": {
                            "tubeless.pipeline_id": "delegating-agent/turn",
                            "tubeless.item_key": "iteration-3",
                            "tubeless.kind": "turn",
                            "tubeless.status": "completed",
                            "tubeless.step_count": 3,
                            "openinference.span.kind": "CHAIN",
                            "gen_ai.agent.id": "delegating-agent",
                            "tubeless.turn": 3,
                            "tubeless.decision": "finish",
                            "tubeless.call_count": 0,
                            "tubeless.calls_admitted": 3,
                            "tubeless.state_version": 2,
                        },
                        "events": [
                            "step.running",
                            "step.complete",
                            "step.running",
                            "step.complete",
                            "step.running",
                            "step.complete",
                            "pipeline.finalize.started",
                            "pipeline.finalize.completed",
                        ],
                        "children": [],
                    },
                ],
            }
        ]
    )


def test_a_failed_call_is_an_error_span_with_its_code_and_the_recovering_turn_is_not() -> None:
    spans, records = live_spans("scripted-agent", "missing word")

    rows = span_rows(spans, records)
    assert [(r["name"], r["status"], r["attributes"].get("error.type")) for r in rows] == [
        ("invoke_agent scripted-agent", "UNSET", None),
        ("turn 1", "UNSET", None),
        ("execute_tool count", "UNSET", None),
        ("execute_tool uppercase", "ERROR", "TUBELESS_STEP_FAILED"),
        ("execute_tool uppercase", "UNSET", None),
        ("turn 2", "UNSET", None),
    ]
    failed = rows[3]
    assert failed["description"] == "Word unavailable"
    assert failed["attributes"]["tubeless.error.source_code"] == "NOT_FOUND"
    assert [(name, attrs.get("error.type")) for name, _, attrs in failed["events"]] == [
        ("step.running", None),
        ("step.failed", "TUBELESS_STEP_FAILED"),
    ]


@pytest.mark.parametrize("storage", ["trace.ndjson", "trace.sqlite"])
def test_export_of_the_stored_trace_gives_the_same_spans_as_the_live_run(
    tmp_path: Path, storage: str
) -> None:
    """Names, parents, kinds, statuses, attributes, events and every start, end and event time
    (relative to the first span) are equal; only span and trace ids differ."""
    path = tmp_path / storage
    live, exporter = memory_provider()
    opener = NdjsonSink if storage.endswith(".ndjson") else SqliteSink
    with OtelSink(live) as sink, opener(path) as stored:
        records = run_project("delegation", "red blue", sink, stored)
    later, replayed = memory_provider()

    assert export_records(read_trace(path), later) == 15
    live_rows = span_rows(exporter.get_finished_spans(), records)
    assert span_rows(replayed.get_finished_spans(), records) == live_rows
    assert len(live_rows) == 17  # 15 runs, and the invoke_agent spans of the 2 agents as tools


def test_no_span_carries_an_input_an_output_or_state() -> None:
    """The question, the tool outputs and the result appear nowhere in names, attributes,
    events or status descriptions (the call ids are the scripted ``word-<i>``)."""
    spans, _ = live_spans("delegation", "zebra quokka")
    text = every_text(spans)

    for secret in ("zebra", "quokka", "ZEBRA", "QUOKKA", "characters", "Summary"):
        assert secret not in text


def test_a_trace_cut_short_still_ends_every_span_at_its_last_record() -> None:
    provider, exporter = memory_provider()
    with capture_trace() as trace:
        run_project("scripted-agent", "hello tubeless", trace)
    cut = trace.records[: len(trace.records) // 2]

    export_records(cut, provider)

    rows = span_rows(exporter.get_finished_spans(), cut)
    assert {r["attributes"]["tubeless.status"] for r in rows[:2]} == {"running"}
    assert [r["name"] for r in rows][:2] == ["invoke_agent scripted-agent", "turn 1"]
    assert all(r["end"] >= r["start"] for r in rows)


def test_without_the_sdk_the_sink_names_the_extra_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "opentelemetry.sdk.trace", None)

    with pytest.raises(ImportError) as caught:
        OtelSink()
    assert str(caught.value) == (
        "tubeless.tracing.OtelSink needs the OpenTelemetry SDK, which is not installed: "
        "pip install 'tubeless[otel]'"
    )


def test_the_sinks_fold_lets_go_of_each_run_as_it_ends() -> None:
    """``TraceFold(keep=False)``: what the sink keeps follows the runs still open."""
    fold = TraceFold(keep=False)
    records = run_project("scripted-agent", "hello tubeless")
    for record in records[:5]:
        fold.add(record)
    root_id = records[0]["runId"]
    assert fold.run(root_id) is not None
    for record in records[5:]:
        fold.add(record)
    assert fold.run(root_id) is None
    assert fold.runs == []


def _usage_agent() -> Any:
    from tubeless import define_agent

    def decide(state: Any, ctx: Any) -> Any:
        ctx.report_model_request(
            provider="acme",
            model="m-1",
            duration_ms=2.5,
            input_tokens=3,
            output_tokens=4,
            finish_reasons=("stop", "length"),
            response_model="m-1-2026",
        )
        ctx.report_model_request(provider="acme", model="m-1", duration_ms=1.0, error_type="BUSY")
        return {"kind": "finish", "result": "done"}

    return define_agent(
        id="usage-agent",
        input_schema=dict[str, Any],
        result_schema=str,
        initial_state=lambda validated: {},
        decide=decide,
    )


def test_a_decide_of_your_own_reports_model_requests_as_chat_spans() -> None:
    provider, exporter = memory_provider()
    with OtelSink(provider) as sink, capture_trace() as trace:
        asyncio.run(_usage_agent().run({}, trace=[sink, trace]))

    rows = span_rows(exporter.get_finished_spans(), trace.records)
    chats = [
        (r["name"], r["kind"], r["status"], r["attributes"])
        for r in rows
        if r["kind"] != "INTERNAL"
    ]
    assert {rows[r["parent"]]["name"] for r in rows if r["kind"] != "INTERNAL"} == {"turn 1"}
    assert chats == [
        (
            "chat m-1",
            "CLIENT",
            "UNSET",
            {
                "gen_ai.operation.name": "chat",
                "gen_ai.provider.name": "acme",
                "gen_ai.request.model": "m-1",
                "gen_ai.response.model": "m-1-2026",
                "gen_ai.usage.input_tokens": 3,
                "gen_ai.usage.output_tokens": 4,
                "gen_ai.response.finish_reasons": ["stop", "length"],
                "tubeless.turn": 1,
                "openinference.span.kind": "LLM",
            },
        ),
        (
            "chat m-1",
            "CLIENT",
            "ERROR",
            {
                "gen_ai.operation.name": "chat",
                "gen_ai.provider.name": "acme",
                "gen_ai.request.model": "m-1",
                "error.type": "BUSY",
                "tubeless.turn": 1,
                "openinference.span.kind": "LLM",
            },
        ),
    ]
    reported = [r for r in trace.records if r["name"] == "step.attempted"][:2]
    assert [(r["stepId"], r["durationMs"]) for r in reported] == [("decide", 2.5), ("decide", 1.0)]
    turn = next(r for r in rows if r["name"] == "turn 1")
    assert all(
        turn["start"] <= r["start"] <= r["end"] <= turn["end"]
        for r in rows
        if r["kind"] == "CLIENT"
    )


def test_docs_observability_names_every_span_attribute_and_event() -> None:
    """Every attribute key and event name the sink sends is in docs/observability.md."""
    doc = (ROOT / "docs" / "observability.md").read_text(encoding="utf-8")
    spans = (
        live_spans("delegation", "red blue")[0] + live_spans("scripted-agent", "missing word")[0]
    )
    provider, exporter = memory_provider()
    with OtelSink(provider) as sink:
        asyncio.run(_usage_agent().run({}, trace=sink))
    spans += list(exporter.get_finished_spans())
    keys = {key for span in spans for key in (span.attributes or {})}
    keys |= {key for span in spans for event in span.events for key in (event.attributes or {})}
    names = {event.name for span in spans for event in span.events}

    def documented(key: str) -> bool:
        head, _, last = key.rpartition(".")
        return f"`{key}`" in doc or (f"`.{last}`" in doc and f"`{head}." in doc)

    assert sorted(k for k in keys | names if not documented(k)) == []
    assert len(keys) > 30
