"""What a recorded agent run holds (issue 4, "Done when"): the exact records in order, how the
runs relate, the agent attributes, a recovered ``ToolError``, nothing private, and a file that
another process reads back to the same run tree (UPSTREAM §2.3-§2.5, §2.8)."""

from __future__ import annotations

import asyncio
import json
import os
import re
import sqlite3
import subprocess
import sys
import textwrap
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from examples.agent_delegation import delegating_agent
from examples.scripted_agent import scripted_agent
from tests.fixtures.traces import Records, documented_sequence, relabel, run_labels
from tubeless import Pipeline
from tubeless.testing import capture_trace
from tubeless.tracing import NdjsonSink, SqliteSink, format_tree, read_trace, run_trees

ROOT = Path(__file__).resolve().parents[2]
Entry = tuple[str, str, str | None]
TERMINAL = ("step.complete", "step.skipped", "step.failed", "step.cancelled")


# -- helpers ----------------------------------------------------------------------------------
async def record(agent: Pipeline, question: str, **kwargs: Any) -> Records:
    """The wire records of one run of ``agent`` on ``question``."""
    with capture_trace() as trace:
        run = await agent.run({"question": question}, trace=trace, **kwargs)
    assert run.status == "completed", run.errors
    return trace.records


def sequence(records: Records) -> list[Entry]:
    """``(run label, record name, stepId)`` for every record, in order."""
    labels = run_labels(records)
    return [(labels[r["runId"]], r["name"], r.get("stepId")) for r in records]


def relations(records: Records) -> dict[str, dict[str, Any]]:
    """Each run's relation fields, asserting that every record of a run carries the same."""
    labels = run_labels(records)
    found: dict[str, dict[str, Any]] = {}
    for r in records:
        fields = {
            k: r[k] for k in ("parentRunId", "correlationId", "itemKey", "iteration") if k in r
        }
        fields = relabel(fields, labels)
        assert found.setdefault(labels[r["runId"]], fields) == fields, r
    return found


def attributes(records: Records) -> list[tuple[str, str, str, int, dict[str, Any]]]:
    """``(run, stepId, attemptId, attempt, attributes)`` of every ``step.attempted``, labelled."""
    labels = run_labels(records)
    return [
        (
            labels[r["runId"]],
            r["stepId"],
            relabel(r["attemptId"], labels),
            r["payload"]["attempt"],
            relabel(r["payload"]["attributes"], labels),
        )
        for r in records
        if r["name"] == "step.attempted"
    ]


def emission_problems(records: Records) -> list[str]:
    """Where the records of any run break the per-run order of UPSTREAM §2.3.

    ``pipeline.started`` first and ``pipeline.completed`` last; every ``step.planned`` before
    any other record; per step ``step.running``, then only progress ``step.running`` and
    ``step.attempted``, then exactly one terminal record (or a lone ``step.skipped``), all with
    one attempt id, ``durationMs`` on the terminal record exactly when the step started;
    ``pipeline.finalize.*`` only after the last step ended.
    """
    by_run: dict[str, Records] = {}
    for r in records:
        by_run.setdefault(r["runId"], []).append(r)
    problems: list[str] = []
    for run_id, rs in by_run.items():
        names = [r["name"] for r in rs]
        if names[0] != "pipeline.started" or names[-1] != "pipeline.completed":
            problems.append(f"{run_id}: starts with {names[0]}, ends with {names[-1]}")
        planning = 1 + sum(1 for n in names[1:] if n == "step.planned")
        if any(n == "step.planned" for n in names[planning:]):
            problems.append(f"{run_id}: step.planned after the plan")
        steps: dict[str, Records] = {}
        for r in rs[planning:]:
            if "stepId" in r and r["name"] != "pipeline.log":
                steps.setdefault(r["stepId"], []).append(r)
        for step_id, srs in steps.items():
            sn = [r["name"] for r in srs]
            started = sn[0] == "step.running"
            middle_ok = set(sn[1:-1]) <= {"step.running", "step.attempted"}
            if not ((started and middle_ok and sn[-1] in TERMINAL) or sn == ["step.skipped"]):
                problems.append(f"{run_id}/{step_id}: {sn}")
            if ("durationMs" in srs[-1]) != started:
                problems.append(f"{run_id}/{step_id}: durationMs on a step that never started")
            if len({r.get("attemptId") for r in srs}) != 1:
                problems.append(f"{run_id}/{step_id}: several attempt ids")
        last_step = max(i for i, n in enumerate(names) if n in TERMINAL)
        if any(n.startswith("pipeline.finalize.") for n in names[:last_step]):
            problems.append(f"{run_id}: finalization before the last step ended")
    return problems


# -- the exact records --------------------------------------------------------------------------
def tool_run(run: str) -> list[Entry]:
    """The records of one handler-tool run that completes: one ``tool`` step, finalized."""
    return [
        (run, "pipeline.started", None),
        (run, "step.planned", "tool"),
        (run, "step.running", "tool"),
        (run, "step.attempted", "tool"),
        (run, "step.complete", "tool"),
        (run, "pipeline.finalize.started", None),
        (run, "pipeline.finalize.completed", None),
        (run, "pipeline.completed", None),
    ]


#: The scripted agent's records, commented group by group, are the example of docs/traces.md
#: ("One agent run, record by record"); tests/docs/test_trace_example.py checks its layout.
SCRIPTED_SEQUENCE: list[Entry] = documented_sequence()

DELEGATION_SEQUENCE: list[Entry] = [
    # The delegating agent starts and reports turn 1.
    ("delegating-agent#0", "pipeline.started", None),
    ("delegating-agent#0", "step.planned", "agent"),
    ("delegating-agent#0", "step.running", "agent"),
    ("delegating-agent#0", "step.running", "agent"),
    # Turn 1 decides two process_word calls (max_concurrency 2).
    ("delegating-agent/turn#1", "pipeline.started", None),
    ("delegating-agent/turn#1", "step.planned", "decide"),
    ("delegating-agent/turn#1", "step.planned", "calls"),
    ("delegating-agent/turn#1", "step.planned", "reduce"),
    ("delegating-agent/turn#1", "step.running", "decide"),
    ("delegating-agent/turn#1", "step.attempted", "decide"),
    ("delegating-agent/turn#1", "step.complete", "decide"),
    ("delegating-agent/turn#1", "step.running", "calls"),
    ("delegating-agent/turn#1", "step.attempted", "calls"),
    ("delegating-agent/turn#1", "step.attempted", "calls"),
    # Call 'word-0' is a whole scripted-agent run (a child agent, itemKey word-0) ...
    ("scripted-agent#2", "pipeline.started", None),
    ("scripted-agent#2", "step.planned", "agent"),
    ("scripted-agent#2", "step.running", "agent"),
    ("scripted-agent#2", "step.running", "agent"),
    ("scripted-agent/turn#3", "pipeline.started", None),
    ("scripted-agent/turn#3", "step.planned", "decide"),
    ("scripted-agent/turn#3", "step.planned", "calls"),
    ("scripted-agent/turn#3", "step.planned", "reduce"),
    ("scripted-agent/turn#3", "step.running", "decide"),
    ("scripted-agent/turn#3", "step.attempted", "decide"),
    ("scripted-agent/turn#3", "step.complete", "decide"),
    ("scripted-agent/turn#3", "step.running", "calls"),
    ("scripted-agent/turn#3", "step.attempted", "calls"),
    # ... and while its first turn dispatches, call 'word-1' starts a second child agent.
    ("delegating-agent/turn#1", "step.attempted", "calls"),
    ("scripted-agent#4", "pipeline.started", None),
    ("scripted-agent#4", "step.planned", "agent"),
    ("scripted-agent#4", "step.running", "agent"),
    ("scripted-agent#4", "step.running", "agent"),
    ("scripted-agent/turn#5", "pipeline.started", None),
    ("scripted-agent/turn#5", "step.planned", "decide"),
    ("scripted-agent/turn#5", "step.planned", "calls"),
    ("scripted-agent/turn#5", "step.planned", "reduce"),
    ("scripted-agent/turn#5", "step.running", "decide"),
    ("scripted-agent/turn#5", "step.attempted", "decide"),
    ("scripted-agent/turn#5", "step.complete", "decide"),
    ("scripted-agent/turn#5", "step.running", "calls"),
    ("scripted-agent/turn#5", "step.attempted", "calls"),
    ("scripted-agent/turn#3", "step.attempted", "calls"),
    # The two child agents' tool runs, interleaved as their turns dispatch them.
    *tool_run("scripted-agent/tool/count#6"),
    ("scripted-agent/turn#3", "step.running", "calls"),
    ("scripted-agent/turn#3", "step.attempted", "calls"),
    *tool_run("scripted-agent/tool/uppercase#7"),
    ("scripted-agent/turn#3", "step.running", "calls"),
    ("scripted-agent/turn#5", "step.attempted", "calls"),
    *tool_run("scripted-agent/tool/count#8"),
    ("scripted-agent/turn#5", "step.running", "calls"),
    ("scripted-agent/turn#5", "step.attempted", "calls"),
    *tool_run("scripted-agent/tool/uppercase#9"),
    # Child word-1 reports progress; child word-0 reduces, finishes in its turn 2, completes.
    ("scripted-agent/turn#5", "step.running", "calls"),
    ("scripted-agent/turn#3", "step.complete", "calls"),
    ("scripted-agent/turn#3", "step.running", "reduce"),
    ("scripted-agent/turn#3", "step.attempted", "reduce"),
    ("scripted-agent/turn#3", "step.complete", "reduce"),
    ("scripted-agent/turn#3", "pipeline.finalize.started", None),
    ("scripted-agent/turn#3", "pipeline.finalize.completed", None),
    ("scripted-agent/turn#3", "pipeline.completed", None),
    ("scripted-agent#2", "step.running", "agent"),
    ("scripted-agent/turn#10", "pipeline.started", None),
    ("scripted-agent/turn#10", "step.planned", "decide"),
    ("scripted-agent/turn#10", "step.planned", "calls"),
    ("scripted-agent/turn#10", "step.planned", "reduce"),
    ("scripted-agent/turn#10", "step.running", "decide"),
    ("scripted-agent/turn#10", "step.attempted", "decide"),
    ("scripted-agent/turn#10", "step.complete", "decide"),
    ("scripted-agent/turn#10", "step.running", "calls"),
    ("scripted-agent/turn#10", "step.complete", "calls"),
    ("scripted-agent/turn#10", "step.running", "reduce"),
    ("scripted-agent/turn#10", "step.complete", "reduce"),
    ("scripted-agent/turn#10", "pipeline.finalize.started", None),
    ("scripted-agent/turn#10", "pipeline.finalize.completed", None),
    ("scripted-agent/turn#10", "pipeline.completed", None),
    ("scripted-agent#2", "step.running", "agent"),
    ("scripted-agent#2", "step.complete", "agent"),
    ("scripted-agent#2", "pipeline.finalize.started", None),
    ("scripted-agent#2", "pipeline.finalize.completed", None),
    ("scripted-agent#2", "pipeline.completed", None),
    # Progress in the delegating calls step; child word-1 reduces, finishes, completes.
    ("delegating-agent/turn#1", "step.running", "calls"),
    ("scripted-agent/turn#5", "step.complete", "calls"),
    ("scripted-agent/turn#5", "step.running", "reduce"),
    ("scripted-agent/turn#5", "step.attempted", "reduce"),
    ("scripted-agent/turn#5", "step.complete", "reduce"),
    ("scripted-agent/turn#5", "pipeline.finalize.started", None),
    ("scripted-agent/turn#5", "pipeline.finalize.completed", None),
    ("scripted-agent/turn#5", "pipeline.completed", None),
    ("scripted-agent#4", "step.running", "agent"),
    ("scripted-agent/turn#11", "pipeline.started", None),
    ("scripted-agent/turn#11", "step.planned", "decide"),
    ("scripted-agent/turn#11", "step.planned", "calls"),
    ("scripted-agent/turn#11", "step.planned", "reduce"),
    ("scripted-agent/turn#11", "step.running", "decide"),
    ("scripted-agent/turn#11", "step.attempted", "decide"),
    ("scripted-agent/turn#11", "step.complete", "decide"),
    ("scripted-agent/turn#11", "step.running", "calls"),
    ("scripted-agent/turn#11", "step.complete", "calls"),
    ("scripted-agent/turn#11", "step.running", "reduce"),
    ("scripted-agent/turn#11", "step.complete", "reduce"),
    ("scripted-agent/turn#11", "pipeline.finalize.started", None),
    ("scripted-agent/turn#11", "pipeline.finalize.completed", None),
    ("scripted-agent/turn#11", "pipeline.completed", None),
    ("scripted-agent#4", "step.running", "agent"),
    ("scripted-agent#4", "step.complete", "agent"),
    ("scripted-agent#4", "pipeline.finalize.started", None),
    ("scripted-agent#4", "pipeline.finalize.completed", None),
    ("scripted-agent#4", "pipeline.completed", None),
    # Progress; the delegating batch settled: reduce.
    ("delegating-agent/turn#1", "step.running", "calls"),
    ("delegating-agent/turn#1", "step.complete", "calls"),
    ("delegating-agent/turn#1", "step.running", "reduce"),
    ("delegating-agent/turn#1", "step.attempted", "reduce"),
    ("delegating-agent/turn#1", "step.complete", "reduce"),
    ("delegating-agent/turn#1", "pipeline.finalize.started", None),
    ("delegating-agent/turn#1", "pipeline.finalize.completed", None),
    ("delegating-agent/turn#1", "pipeline.completed", None),
    # Turn 2 calls the summarize pipeline tool: an ordinary pipeline run, no tool step.
    ("delegating-agent#0", "step.running", "agent"),
    ("delegating-agent/turn#12", "pipeline.started", None),
    ("delegating-agent/turn#12", "step.planned", "decide"),
    ("delegating-agent/turn#12", "step.planned", "calls"),
    ("delegating-agent/turn#12", "step.planned", "reduce"),
    ("delegating-agent/turn#12", "step.running", "decide"),
    ("delegating-agent/turn#12", "step.attempted", "decide"),
    ("delegating-agent/turn#12", "step.complete", "decide"),
    ("delegating-agent/turn#12", "step.running", "calls"),
    ("delegating-agent/turn#12", "step.attempted", "calls"),
    ("delegating-agent/turn#12", "step.attempted", "calls"),
    ("agent-summary#13", "pipeline.started", None),
    ("agent-summary#13", "step.planned", "summarize"),
    ("agent-summary#13", "step.running", "summarize"),
    ("agent-summary#13", "step.complete", "summarize"),
    ("agent-summary#13", "pipeline.finalize.started", None),
    ("agent-summary#13", "pipeline.finalize.completed", None),
    ("agent-summary#13", "pipeline.completed", None),
    ("delegating-agent/turn#12", "step.running", "calls"),
    ("delegating-agent/turn#12", "step.complete", "calls"),
    ("delegating-agent/turn#12", "step.running", "reduce"),
    ("delegating-agent/turn#12", "step.attempted", "reduce"),
    ("delegating-agent/turn#12", "step.complete", "reduce"),
    ("delegating-agent/turn#12", "pipeline.finalize.started", None),
    ("delegating-agent/turn#12", "pipeline.finalize.completed", None),
    ("delegating-agent/turn#12", "pipeline.completed", None),
    # Turn 3 finishes; the delegating agent completes.
    ("delegating-agent#0", "step.running", "agent"),
    ("delegating-agent/turn#14", "pipeline.started", None),
    ("delegating-agent/turn#14", "step.planned", "decide"),
    ("delegating-agent/turn#14", "step.planned", "calls"),
    ("delegating-agent/turn#14", "step.planned", "reduce"),
    ("delegating-agent/turn#14", "step.running", "decide"),
    ("delegating-agent/turn#14", "step.attempted", "decide"),
    ("delegating-agent/turn#14", "step.complete", "decide"),
    ("delegating-agent/turn#14", "step.running", "calls"),
    ("delegating-agent/turn#14", "step.complete", "calls"),
    ("delegating-agent/turn#14", "step.running", "reduce"),
    ("delegating-agent/turn#14", "step.complete", "reduce"),
    ("delegating-agent/turn#14", "pipeline.finalize.started", None),
    ("delegating-agent/turn#14", "pipeline.finalize.completed", None),
    ("delegating-agent/turn#14", "pipeline.completed", None),
    ("delegating-agent#0", "step.running", "agent"),
    ("delegating-agent#0", "step.complete", "agent"),
    ("delegating-agent#0", "pipeline.finalize.started", None),
    ("delegating-agent#0", "pipeline.finalize.completed", None),
    ("delegating-agent#0", "pipeline.completed", None),
]

# UPSTREAM §2.5: one step.attempted (attempt 1) per agent step, with exactly these attributes.
Attempted = tuple[str, str, str, int, dict[str, Any]]


def decided(
    turn_run: str, agent: str, turn: int, *, version: int, admitted: int, decision: str, count: int
) -> Attempted:
    """``decide``: the state version and calls admitted before, the decision and its size."""
    attrs = {"agent.runId": agent, "agent.turn": turn, "agent.stateVersion": version}
    attrs |= {"agent.callsAdmitted": admitted, "agent.decision": decision, "agent.callCount": count}
    return (turn_run, "decide", f"{turn_run}:attempt:1", 1, attrs)


def admitted(turn_run: str, agent: str, turn: int, *, admitted: int, count: int) -> Attempted:
    """``calls``, once per batch: the calls admitted after admission and the batch size."""
    attrs = {"agent.runId": agent, "agent.turn": turn}
    attrs |= {"agent.callsAdmitted": admitted, "agent.callCount": count}
    return (turn_run, "calls", f"{turn_run}:attempt:2", 1, attrs)


def call_attributes(
    turn_run: str, agent: str, turn: int, call_id: str, tool: str
) -> dict[str, Any]:
    return {
        "agent.runId": agent,
        "agent.turn": turn,
        "agent.callId": call_id,
        "agent.tool": tool,
        "agent.parentAttemptId": f"{turn_run}:attempt:2",
    }


def dispatched(turn_run: str, agent: str, turn: int, call_id: str, tool: str) -> Attempted:
    """``calls``, once per dispatched call: which call, which tool alias, which attempt."""
    attrs = call_attributes(turn_run, agent, turn, call_id, tool)
    return (turn_run, "calls", f"{turn_run}:attempt:2", 1, attrs)


def handled(
    tool_run: str, turn_run: str, agent: str, turn: int, call_id: str, tool: str
) -> Attempted:
    """The ``tool`` step of a handler-tool run: the same attribution as its dispatch."""
    attrs = call_attributes(turn_run, agent, turn, call_id, tool)
    return (tool_run, "tool", f"{tool_run}:attempt:1", 1, attrs)


def reduced(turn_run: str, agent: str, turn: int, *, version: int, admitted: int) -> Attempted:
    """``reduce``: the state version after the reduction and the calls admitted."""
    attrs = {"agent.runId": agent, "agent.turn": turn, "agent.stateVersion": version}
    attrs |= {"agent.callsAdmitted": admitted}
    return (turn_run, "reduce", f"{turn_run}:attempt:3", 1, attrs)


S_AGENT, S_TURN1, S_TURN2 = "scripted-agent#0", "scripted-agent/turn#1", "scripted-agent/turn#5"
SCRIPTED_ATTRIBUTES: list[Attempted] = [
    decided(S_TURN1, S_AGENT, 1, version=0, admitted=0, decision="continue", count=3),
    admitted(S_TURN1, S_AGENT, 1, admitted=3, count=3),
    dispatched(S_TURN1, S_AGENT, 1, "length", "count"),
    handled("scripted-agent/tool/count#2", S_TURN1, S_AGENT, 1, "length", "count"),
    dispatched(S_TURN1, S_AGENT, 1, "word-0", "uppercase"),
    handled("scripted-agent/tool/uppercase#3", S_TURN1, S_AGENT, 1, "word-0", "uppercase"),
    dispatched(S_TURN1, S_AGENT, 1, "word-1", "uppercase"),
    handled("scripted-agent/tool/uppercase#4", S_TURN1, S_AGENT, 1, "word-1", "uppercase"),
    reduced(S_TURN1, S_AGENT, 1, version=1, admitted=3),
    # A finishing turn records decide only: its calls and reduce steps do no agent work.
    decided(S_TURN2, S_AGENT, 2, version=1, admitted=3, decision="finish", count=0),
]

D_AGENT = "delegating-agent#0"
D_TURN1, D_TURN2, D_TURN3 = (f"delegating-agent/turn#{n}" for n in (1, 12, 14))
# The two child scripted agents (calls word-0 and word-1) and their turns.
C0, C0_TURN1, C0_TURN2 = "scripted-agent#2", "scripted-agent/turn#3", "scripted-agent/turn#10"
C1, C1_TURN1, C1_TURN2 = "scripted-agent#4", "scripted-agent/turn#5", "scripted-agent/turn#11"
DELEGATION_ATTRIBUTES: list[Attempted] = [
    decided(D_TURN1, D_AGENT, 1, version=0, admitted=0, decision="continue", count=2),
    admitted(D_TURN1, D_AGENT, 1, admitted=2, count=2),
    dispatched(D_TURN1, D_AGENT, 1, "word-0", "process_word"),
    decided(C0_TURN1, C0, 1, version=0, admitted=0, decision="continue", count=2),
    admitted(C0_TURN1, C0, 1, admitted=2, count=2),
    dispatched(D_TURN1, D_AGENT, 1, "word-1", "process_word"),
    decided(C1_TURN1, C1, 1, version=0, admitted=0, decision="continue", count=2),
    admitted(C1_TURN1, C1, 1, admitted=2, count=2),
    dispatched(C0_TURN1, C0, 1, "length", "count"),
    handled("scripted-agent/tool/count#6", C0_TURN1, C0, 1, "length", "count"),
    dispatched(C0_TURN1, C0, 1, "word-0", "uppercase"),
    handled("scripted-agent/tool/uppercase#7", C0_TURN1, C0, 1, "word-0", "uppercase"),
    dispatched(C1_TURN1, C1, 1, "length", "count"),
    handled("scripted-agent/tool/count#8", C1_TURN1, C1, 1, "length", "count"),
    dispatched(C1_TURN1, C1, 1, "word-0", "uppercase"),
    handled("scripted-agent/tool/uppercase#9", C1_TURN1, C1, 1, "word-0", "uppercase"),
    reduced(C0_TURN1, C0, 1, version=1, admitted=2),
    decided(C0_TURN2, C0, 2, version=1, admitted=2, decision="finish", count=0),
    reduced(C1_TURN1, C1, 1, version=1, admitted=2),
    decided(C1_TURN2, C1, 2, version=1, admitted=2, decision="finish", count=0),
    reduced(D_TURN1, D_AGENT, 1, version=1, admitted=2),
    decided(D_TURN2, D_AGENT, 2, version=1, admitted=2, decision="continue", count=1),
    admitted(D_TURN2, D_AGENT, 2, admitted=3, count=1),
    # A pipeline tool's run has no tool step: its dispatch is its only attribution.
    dispatched(D_TURN2, D_AGENT, 2, "summary", "summarize"),
    reduced(D_TURN2, D_AGENT, 2, version=2, admitted=3),
    decided(D_TURN3, D_AGENT, 3, version=2, admitted=3, decision="finish", count=0),
]

SCRIPTED_RELATIONS = {
    "scripted-agent#0": {},
    "scripted-agent/turn#1": {
        "parentRunId": "scripted-agent#0",
        "itemKey": "iteration-1",
        "iteration": {
            "runId": "scripted-agent#0",
            "stepId": "agent",
            "attemptId": "scripted-agent#0:attempt:1",
            "index": 1,
        },
    },
    "scripted-agent/tool/count#2": {"parentRunId": "scripted-agent/turn#1", "itemKey": "length"},
    "scripted-agent/tool/uppercase#3": {
        "parentRunId": "scripted-agent/turn#1",
        "itemKey": "word-0",
    },
    "scripted-agent/tool/uppercase#4": {
        "parentRunId": "scripted-agent/turn#1",
        "itemKey": "word-1",
    },
    "scripted-agent/turn#5": {
        "parentRunId": "scripted-agent#0",
        "itemKey": "iteration-2",
        "iteration": {
            "runId": "scripted-agent#0",
            "stepId": "agent",
            "attemptId": "scripted-agent#0:attempt:1",
            "index": 2,
        },
    },
}


def _turn(agent: str, index: int) -> dict[str, Any]:
    iteration = {"runId": agent, "stepId": "agent", "attemptId": f"{agent}:attempt:1"}
    return {
        "parentRunId": agent,
        "itemKey": f"iteration-{index}",
        "iteration": {**iteration, "index": index},
    }


DELEGATION_RELATIONS = {
    "delegating-agent#0": {},
    "delegating-agent/turn#1": _turn("delegating-agent#0", 1),
    "scripted-agent#2": {"parentRunId": "delegating-agent/turn#1", "itemKey": "word-0"},
    "scripted-agent/turn#3": _turn("scripted-agent#2", 1),
    "scripted-agent#4": {"parentRunId": "delegating-agent/turn#1", "itemKey": "word-1"},
    "scripted-agent/turn#5": _turn("scripted-agent#4", 1),
    "scripted-agent/tool/count#6": {"parentRunId": "scripted-agent/turn#3", "itemKey": "length"},
    "scripted-agent/tool/uppercase#7": {
        "parentRunId": "scripted-agent/turn#3",
        "itemKey": "word-0",
    },
    "scripted-agent/tool/count#8": {"parentRunId": "scripted-agent/turn#5", "itemKey": "length"},
    "scripted-agent/tool/uppercase#9": {
        "parentRunId": "scripted-agent/turn#5",
        "itemKey": "word-0",
    },
    "scripted-agent/turn#10": _turn("scripted-agent#2", 2),
    "scripted-agent/turn#11": _turn("scripted-agent#4", 2),
    "delegating-agent/turn#12": _turn("delegating-agent#0", 2),
    "agent-summary#13": {"parentRunId": "delegating-agent/turn#12", "itemKey": "summary"},
    "delegating-agent/turn#14": _turn("delegating-agent#0", 3),
}

EXAMPLES = [
    pytest.param(
        scripted_agent,
        "hello tubeless",
        SCRIPTED_SEQUENCE,
        SCRIPTED_RELATIONS,
        SCRIPTED_ATTRIBUTES,
        id="scripted",
    ),
    pytest.param(
        delegating_agent,
        "red blue",
        DELEGATION_SEQUENCE,
        DELEGATION_RELATIONS,
        DELEGATION_ATTRIBUTES,
        id="delegation",
    ),
]
EXAMPLE_ARGS = (
    "agent",
    "question",
    "expected_sequence",
    "expected_relations",
    "expected_attributes",
)


# -- tests ------------------------------------------------------------------------------------
@pytest.mark.parametrize(EXAMPLE_ARGS, EXAMPLES)
async def test_an_agent_run_records_exactly_these_records_in_this_order(
    agent: Pipeline,
    question: str,
    expected_sequence: list[Entry],
    expected_relations: dict[str, Any],
    expected_attributes: list[Any],
) -> None:
    assert sequence(await record(agent, question)) == expected_sequence


@pytest.mark.parametrize(
    ("agent", "question", "dry_run"),
    [
        pytest.param(scripted_agent, "hello tubeless", False, id="scripted"),
        pytest.param(delegating_agent, "red blue", False, id="delegation"),
        pytest.param(scripted_agent, "missing word", False, id="tool-error"),
        pytest.param(scripted_agent, "hello tubeless", True, id="scripted-dry"),
        pytest.param(delegating_agent, "red blue", True, id="delegation-dry"),
    ],
)
async def test_every_run_of_the_tree_follows_the_v3_emission_order(
    agent: Pipeline, question: str, dry_run: bool
) -> None:
    records = await record(agent, question, dry_run=dry_run)

    assert emission_problems(records) == []
    assert {r["version"] for r in records} == {3}
    stamps = [r["timestampMs"] for r in records]
    assert stamps == sorted(stamps)
    started = [r for r in records if r["name"] == "pipeline.started"]
    assert {r["payload"]["dryRun"] for r in started} == {dry_run}


@pytest.mark.parametrize(EXAMPLE_ARGS, EXAMPLES)
async def test_runs_are_linked_by_parent_run_id_item_key_and_iteration(
    agent: Pipeline,
    question: str,
    expected_sequence: list[Entry],
    expected_relations: dict[str, Any],
    expected_attributes: list[Any],
) -> None:
    records = await record(agent, question)
    found = relations(records)

    assert found == expected_relations
    # The rules behind the table: a turn's iteration points at its parent (the agent run) ...
    for fields in found.values():
        if "iteration" in fields:
            assert fields["iteration"]["runId"] == fields["parentRunId"]
            assert fields["itemKey"] == f"iteration-{fields['iteration']['index']}"
    # ... and every run a turn started is keyed by a call id its calls step dispatched.
    dispatched = {
        (run, attrs["agent.callId"])
        for run, step_id, _, _, attrs in attributes(records)
        if step_id == "calls" and "agent.callId" in attrs
    }
    started_by_turns = {
        (fields["parentRunId"], fields["itemKey"])
        for fields in found.values()
        if fields.get("parentRunId", "").split("#")[0].endswith("/turn")
    }
    assert started_by_turns == dispatched


@pytest.mark.parametrize(EXAMPLE_ARGS, EXAMPLES)
async def test_decide_calls_reduce_and_tool_steps_carry_the_agent_attributes(
    agent: Pipeline,
    question: str,
    expected_sequence: list[Entry],
    expected_relations: dict[str, Any],
    expected_attributes: list[Any],
) -> None:
    records = await record(agent, question)
    found = attributes(records)

    assert found == expected_attributes
    # A tool step repeats the attribution its call got on the dispatching calls step.
    calls = {
        (a["agent.runId"], a["agent.callId"]): a
        for _, s, _, _, a in found
        if s == "calls" and "agent.callId" in a
    }
    for _, step_id, _, _, attrs in found:
        if step_id == "tool":
            assert calls[attrs["agent.runId"], attrs["agent.callId"]] == attrs


async def test_a_tool_error_call_keeps_its_failed_lifecycle_while_the_agent_completes() -> None:
    """'missing' makes the uppercase tool raise ToolError('NOT_FOUND'); the agent recovers."""
    records = await record(scripted_agent, "missing word")
    labels = run_labels(records)
    call = [
        r
        for r in records
        if r["pipelineId"] == "scripted-agent/tool/uppercase" and r.get("itemKey") == "word-0"
    ]
    error = {
        "code": "TUBELESS_STEP_FAILED",
        "kind": "step",
        "phase": "execution",
        "message": "Word unavailable",
        "sourceCode": "NOT_FOUND",
        "cause": {"message": "Word unavailable", "name": "ToolError", "sourceCode": "NOT_FOUND"},
    }

    assert [(r["name"], r.get("stepId")) for r in call] == [
        ("pipeline.started", None),
        ("step.planned", "tool"),
        ("step.running", "tool"),
        ("step.attempted", "tool"),
        ("step.failed", "tool"),
        ("pipeline.completed", None),
    ]
    assert (call[-2]["error"], call[-2]["payload"]) == (error, {"status": "failed"})
    assert (call[-1]["error"], call[-1]["payload"]) == (
        error,
        {"status": "failed", "dryRun": False, "errorCount": 1, "finalized": False, "stepCount": 1},
    )
    assert {
        labels[r["runId"]]: r["payload"]["status"]
        for r in records
        if r["name"] == "pipeline.completed"
    } == {
        "scripted-agent/tool/count#2": "completed",
        "scripted-agent/tool/uppercase#3": "failed",
        "scripted-agent/tool/uppercase#4": "completed",
        "scripted-agent/turn#1": "completed",
        "scripted-agent/turn#5": "completed",
        "scripted-agent#0": "completed",
    }
    tree = run_trees(records)[0]
    assert tree.agent is not None and tree.agent.termination == "finish"
    assert [
        (c.call_id, c.tool, c.status, c.error_code, c.source_code)
        for c in tree.agent.turns[0].calls
    ] == [
        ("length", "count", "completed", None, None),
        ("word-0", "uppercase", "failed", "TUBELESS_STEP_FAILED", "NOT_FOUND"),
        ("word-1", "uppercase", "completed", None, None),
    ]


# -- nothing private is recorded ----------------------------------------------------------------
SECRET = "sk-tubeless-canary-7f3a9c41e2"
QUESTION = "zebra quokka7731"
#: The question, each word (tool inputs), their uppercase forms (tool outputs), the count
#: observations and summary (state, tool outputs, results) and the credential.
NEVER_RECORDED = (
    QUESTION,
    "zebra",
    "quokka7731",
    "16 characters",
    "5 characters",
    "10 characters",
    "Summary: ",
    SECRET,
)


def leaks(data: bytes) -> list[str]:
    """The private values found in ``data`` (ASCII case-insensitively)."""
    lowered = data.lower()
    return [value for value in NEVER_RECORDED if value.lower().encode() in lowered]


@pytest.mark.parametrize("dry_run", [False, True], ids=["live", "dry"])
async def test_no_record_holds_the_question_tool_values_state_or_a_credential(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, dry_run: bool
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    ndjson, store = tmp_path / "trace.ndjson", tmp_path / "trace.sqlite"
    with NdjsonSink(ndjson) as lines, SqliteSink(store) as rows:
        for agent in (scripted_agent, delegating_agent):
            run = await agent.run({"question": QUESTION}, trace=[lines, rows], dry_run=dry_run)
            assert run.status == "completed", run.errors
            # The values exist (the answers hold them); the trace just never sees them.
            assert leaks(json.dumps(run.value).encode())

    files = {path.name: path.read_bytes() for path in sorted(tmp_path.iterdir())}
    with sqlite3.connect(store.resolve().as_uri() + "?mode=ro", uri=True) as conn:
        stored = conn.execute("SELECT * FROM pipeline_run_events ORDER BY id").fetchall()
    conn.close()
    records = read_trace(ndjson)

    assert records == read_trace(store) and len(records) == len(stored) > 250
    # The searches can see recorded text in both encodings (a call id and a tool alias).
    assert all(b"word-0" in files[name] and b"uppercase" in files[name] for name in files)
    assert {name: leaks(data) for name, data in files.items()} == {name: [] for name in files}
    assert leaks(json.dumps(stored).encode()) == []


# -- another process ----------------------------------------------------------------------------
WRITER = textwrap.dedent(
    """
    import sys
    from examples.scripted_agent import scripted_agent
    from tubeless.tracing.reader import open_sink

    sink = open_sink(sys.argv[1])
    try:
        scripted_agent.run_sync({"question": "hello tubeless"}, trace=sink)
    finally:
        sink.close()
    """
)


def timeless(value: Any) -> Any:
    """``value`` with timestamps and durations (wire or projection names) replaced."""
    if isinstance(value, Mapping):
        return {
            key: "<time>"
            if key in ("timestampMs", "durationMs", "started_at_ms", "duration_ms")
            and item is not None
            else timeless(item)
            for key, item in value.items()
        }
    if isinstance(value, list | tuple):
        return [timeless(item) for item in value]
    return value


@pytest.mark.parametrize("name", ["trace.ndjson", "trace.sqlite"])
def test_a_trace_written_by_another_process_reads_back_to_the_same_run_tree(
    tmp_path: Path, name: str
) -> None:
    path = tmp_path / "elsewhere" / name
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    }
    subprocess.run(
        [sys.executable, "-c", WRITER, str(path)], cwd=ROOT, env=env, check=True, timeout=60
    )
    theirs = read_trace(path)
    ours = asyncio.run(record(scripted_agent, "hello tubeless"))

    def normal(records: Records) -> Any:
        return timeless(relabel(records, run_labels(records)))

    def tree_text(records: Records) -> str:
        text = relabel(format_tree(run_trees(records)[0]), run_labels(records))
        return re.sub(r"  \d+(\.\d)?(ms|s)\b", "  <duration>", text)

    assert normal(theirs) == normal(ours)
    their_trees, our_trees = run_trees(theirs), run_trees(ours)
    assert len(their_trees) == len(our_trees) == 1
    assert timeless(relabel(their_trees[0].to_dict(), run_labels(theirs))) == timeless(
        relabel(our_trees[0].to_dict(), run_labels(ours))
    )
    assert tree_text(theirs) == tree_text(ours)
    assert tree_text(theirs).startswith(
        "Run scripted-agent#0  scripted-agent  completed  <duration>\n"
        "  step agent  completed  <duration>\n"
        "  agent  finish\n"
        "  turn 1  continue  3 calls  completed  <duration>\n"
    )
