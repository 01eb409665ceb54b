"""Run trees projected from real traces: steps, agent turns and calls, and the CLI text."""

from __future__ import annotations

import asyncio
import functools
import re
from collections.abc import Mapping
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from inline_snapshot import snapshot

from examples.agent_delegation import delegating_agent
from examples.scripted_agent import scripted_agent
from examples.text import count
from tubeless import errors as codes
from tubeless.agent import ToolContext, define_agent, define_tool
from tubeless.pipeline import CancelToken, define_pipeline, from_pipeline, step
from tubeless.testing import call, capture_trace, continue_with, finish, scripted
from tubeless.tracing.projection import (
    RunTree,
    find_run,
    format_duration,
    format_run_list,
    format_tree,
    run_trees,
    terminal_safe,
)

Records = list[dict[str, Any]]


# -- helpers ----------------------------------------------------------------------------------
class CodedError(Exception):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


async def _record(pipeline: Any, raw: Any = None, **kwargs: Any) -> Records:
    with capture_trace() as trace:
        await pipeline.run(raw, trace=trace, **kwargs)
    return trace.records


@functools.cache
def _recorded(name: str) -> tuple[dict[str, Any], ...]:
    """Records of one example run, made once (for sync and property tests)."""
    pipeline = {"scripted": scripted_agent, "delegation": delegating_agent}[name]
    question = {"scripted": "hello tubeless", "delegation": "red blue"}[name]
    return tuple(asyncio.run(_record(pipeline, {"question": question})))


def _labels(trees: list[RunTree]) -> dict[str, str]:
    """``<pipelineId>#<n>`` per run id, numbered per pipeline in depth-first order."""
    labels: dict[str, str] = {}
    counts: dict[str, int] = {}
    for tree in trees:
        for run in tree.walk():
            counts[run.pipeline_id] = counts.get(run.pipeline_id, 0) + 1
            labels.setdefault(run.run_id, f"{run.pipeline_id}#{counts[run.pipeline_id]}")
    return labels


def _normal(value: Any, labels: Mapping[str, str]) -> Any:
    """Run ids (also inside attempt ids) replaced by labels, times by ``"<ms>"``."""
    if isinstance(value, Mapping):
        return {
            k: "<ms>"
            if k in ("duration_ms", "started_at_ms") and v is not None
            else _normal(v, labels)
            for k, v in value.items()
        }
    if isinstance(value, (list, tuple)):
        return [_normal(v, labels) for v in value]
    if isinstance(value, str):
        if value in labels:
            return labels[value]
        run_id, sep, rest = value.partition(":attempt:")
        if sep and run_id in labels:
            return f"{labels[run_id]}:attempt:{rest}"
    return value


def _shape(trees: list[RunTree]) -> list[Any]:
    """Every tree as normalised data."""
    labels = _labels(trees)
    return [_normal(tree.to_dict(), labels) for tree in trees]


def _outline(tree: RunTree, labels: Mapping[str, str]) -> Any:
    """Labels, statuses and steps of a tree, children nested: its structure at a glance."""
    return (
        labels[tree.run_id],
        tree.status,
        " ".join(f"{s.id}:{s.status}" for s in tree.steps),
        [_outline(child, labels) for child in tree.children],
    )


def _agent(trees: list[RunTree], index: int = 0) -> Any:
    tree = trees[index]
    assert tree.agent is not None
    return _normal(tree.agent.to_dict(), _labels(trees))


def _text(text: str, trees: list[RunTree]) -> str:
    """Text with run ids labelled and durations replaced by ``<d>``."""
    for run_id, label in sorted(_labels(trees).items(), key=lambda kv: -len(kv[0])):
        text = text.replace(run_id, label)
    text = re.sub(
        r"(?<=  )\d+(?:\.\d)?m?s(?=  |$)|(?<=  )\d+m\d+s(?=  |$)", "<d>", text, flags=re.M
    )
    return re.sub(r"started \S+", "started <iso>", text)


#: The last progress of a delegated scripted agent (two turns, at most three).
_AGENT_PROGRESS = {
    "completed": 2,
    "total": None,
    "message": "Turn 2 of at most 3",
    "fraction": None,
}


def _call(call_id: str, tool: str | None, run: str | None, status: str, **extra: Any) -> Any:
    """A normalised call dict; ``run`` is the label of the call run."""
    return {
        "call_id": call_id,
        "tool": tool,
        "run_id": run,
        "pipeline_id": None if run is None else run.rsplit("#", 1)[0],
        "status": status,
        "duration_ms": None if run is None else "<ms>",
        "error_code": None,
        "source_code": None,
        "parent_attempt_id": extra.pop("parent", None),
        "child_agent_run_ids": [],
        "marked": None,
        "reason_given": False,
        "progress": None,
        **extra,
    }


def _turn(run: str, index: int, decision: str | None, calls: list[Any], **extra: Any) -> Any:
    return {
        "run_id": run,
        "index": index,
        "status": "completed",
        "decision": decision,
        "call_count": len(calls),
        "calls_admitted": None,
        "state_version": None,
        "next_state_version": None,
        "error_code": None,
        "calls": calls,
        **extra,
    }


LIMITS = {"max_turns": 3, "max_calls": 5, "max_decisions": 5, "max_depth": 2, "max_concurrency": 1}
SCRIPTED_LIMITS = {
    "max_turns": 3,
    "max_calls": 100,
    "max_decisions": 3,
    "max_depth": 4,
    "max_concurrency": 2,
}


def _scripted_history(word_0: dict[str, Any] | None = None) -> dict[str, Any]:
    """The expected history of the (root) scripted agent on a two-word question."""
    parent = "scripted-agent/turn#1:attempt:2"
    return {
        "step_id": "agent",
        "termination": "finish",
        "limits": SCRIPTED_LIMITS,
        "capabilities": ["count", "uppercase"],
        "resumed_turn": None,
        "checkpoint_key": None,
        "usage": None,
        "turns": [
            _turn(
                "scripted-agent/turn#1",
                1,
                "continue",
                [
                    _call(
                        "length", "count", "scripted-agent/tool/count#1", "completed", parent=parent
                    ),
                    _call(
                        "word-0",
                        "uppercase",
                        "scripted-agent/tool/uppercase#1",
                        "completed",
                        parent=parent,
                    )
                    | (word_0 or {}),
                    _call(
                        "word-1",
                        "uppercase",
                        "scripted-agent/tool/uppercase#2",
                        "completed",
                        parent=parent,
                    ),
                ],
                calls_admitted=3,
                state_version=0,
                next_state_version=1,
            ),
            _turn("scripted-agent/turn#2", 2, "finish", [], calls_admitted=3, state_version=1),
        ],
    }


def _slow_tool() -> Any:
    started = asyncio.Event()

    async def wait(text: str, ctx: ToolContext) -> str:
        started.set()
        while not ctx.signal.cancelled:
            await asyncio.sleep(0.005)
        ctx.signal.raise_if_cancelled()
        return text

    return started, define_tool(
        description="Wait for cancellation.", input_schema=str, output_schema=str, run=wait
    )


def _tiny_agent(id: str, *decisions: Any, **kwargs: Any) -> Any:
    return define_agent(
        id=id,
        input_schema=dict,
        result_schema=str,
        initial_state=lambda validated: {},
        decide=scripted(*decisions),
        **kwargs,
    )


# -- plain pipelines --------------------------------------------------------------------------
async def test_plain_pipeline_projects_steps_with_statuses_reasons_and_error_codes() -> None:
    """Completed, failed (code and source code), dependency-skipped and fail-fast steps."""

    def broken(inputs: dict[str, Any], ctx: Any) -> None:
        raise CodedError("DISK_FULL", "no space left")

    pipeline = define_pipeline(
        id="plain",
        steps=[
            step("fetch", lambda inputs, ctx: 1),
            step("store", broken, depends_on=["fetch"]),
            step("report", lambda inputs, ctx: 2, depends_on=["store"]),
            step("cleanup", lambda inputs, ctx: 3),
        ],
    )
    trees = run_trees(await _record(pipeline))

    assert _shape(trees) == snapshot(
        [
            {
                "run_id": "plain#1",
                "pipeline_id": "plain",
                "parent_run_id": None,
                "item_key": None,
                "iteration_index": None,
                "status": "failed",
                "dry_run": False,
                "started_at_ms": "<ms>",
                "duration_ms": "<ms>",
                "error_code": "TUBELESS_STEP_FAILED",
                "error_message": "no space left",
                "error_summary": "no space left",
                "steps": [
                    {
                        "id": "fetch",
                        "status": "completed",
                        "reason": None,
                        "attempt_id": "plain#1:attempt:1",
                        "duration_ms": "<ms>",
                        "error_code": None,
                        "source_code": None,
                    },
                    {
                        "id": "store",
                        "status": "failed",
                        "reason": None,
                        "attempt_id": "plain#1:attempt:2",
                        "duration_ms": "<ms>",
                        "error_code": "TUBELESS_STEP_FAILED",
                        "source_code": "DISK_FULL",
                    },
                    {
                        "id": "report",
                        "status": "skipped",
                        "reason": "fail-fast",
                        "attempt_id": None,
                        "duration_ms": None,
                        "error_code": None,
                        "source_code": None,
                    },
                    {
                        "id": "cleanup",
                        "status": "skipped",
                        "reason": "fail-fast",
                        "attempt_id": None,
                        "duration_ms": None,
                        "error_code": None,
                        "source_code": None,
                    },
                ],
                "children": [],
                "agent": None,
            }
        ]
    )


async def test_a_dry_run_marks_the_run_and_keeps_skip_reasons() -> None:
    """Steps without a preview are skipped with reason dry-run; the run says it was dry."""
    pipeline = define_pipeline(
        id="dry",
        steps=[step("a", lambda inputs, ctx: 1, dry_run="skip"), step("b", lambda i, c: 2)],
    )
    [tree] = run_trees(await _record(pipeline, dry_run=True))

    assert (tree.status, tree.dry_run) == ("completed", True)
    assert [(s.id, s.status, s.reason) for s in tree.steps] == [
        ("a", "skipped", "dry-run"),
        ("b", "completed", None),
    ]
    assert format_tree(tree).splitlines()[0].endswith("  dry run")


# -- agents -----------------------------------------------------------------------------------
def test_scripted_agent_finishes_after_one_batch_of_three_calls() -> None:
    """hello tubeless: turn 1 continues with length/word-0/word-1, turn 2 finishes."""
    trees = run_trees(_recorded("scripted"))

    assert len(trees) == 1
    assert _agent(trees) == _scripted_history()
    assert _outline(trees[0], _labels(trees)) == snapshot(
        (
            "scripted-agent#1",
            "completed",
            "agent:completed",
            [
                (
                    "scripted-agent/turn#1",
                    "completed",
                    "decide:completed calls:completed reduce:completed",
                    [
                        ("scripted-agent/tool/count#1", "completed", "tool:completed", []),
                        ("scripted-agent/tool/uppercase#1", "completed", "tool:completed", []),
                        ("scripted-agent/tool/uppercase#2", "completed", "tool:completed", []),
                    ],
                ),
                (
                    "scripted-agent/turn#2",
                    "completed",
                    "decide:completed calls:completed reduce:completed",
                    [],
                ),
            ],
        )
    )


async def test_a_recovered_tool_error_fails_the_call_run_but_the_agent_finishes() -> None:
    """missing word: the word-0 call run failed with source code NOT_FOUND; termination finish."""
    trees = run_trees(await _record(scripted_agent, {"question": "missing word"}))

    assert trees[0].status == "completed"
    assert _agent(trees) == _scripted_history(
        {"status": "failed", "error_code": codes.STEP_FAILED, "source_code": "NOT_FOUND"}
    )


async def test_subagent_calls_link_their_agent_runs_which_hang_under_the_call_runs() -> None:
    """Delegation: each process_word call names its scripted-agent run; no tree is duplicated."""
    trees = run_trees(await _record(delegating_agent, {"question": "red blue"}))
    labels = _labels(trees)

    assert len(trees) == 1
    history = _agent(trees)
    t1, t2, t3 = (f"delegating-agent/turn#{i}" for i in (1, 2, 3))
    assert history == {
        "step_id": "agent",
        "termination": "finish",
        "limits": {
            "max_turns": 3,
            "max_calls": 100,
            "max_decisions": 50,
            "max_depth": 1,
            "max_concurrency": 2,
        },
        "capabilities": ["process_word", "summarize"],
        "resumed_turn": None,
        "checkpoint_key": None,
        "usage": None,
        "turns": [
            _turn(
                t1,
                1,
                "continue",
                [
                    # Pipeline-tool calls are named by the per-call records of the calls step.
                    _call(
                        "word-0",
                        "process_word",
                        "scripted-agent#1",
                        "completed",
                        parent=f"{t1}:attempt:2",
                        child_agent_run_ids=["scripted-agent#1"],
                        # A pipeline tool's call run is the child agent: its turn progress.
                        progress=_AGENT_PROGRESS,
                    ),
                    _call(
                        "word-1",
                        "process_word",
                        "scripted-agent#2",
                        "completed",
                        parent=f"{t1}:attempt:2",
                        child_agent_run_ids=["scripted-agent#2"],
                        # A pipeline tool's call run is the child agent: its turn progress.
                        progress=_AGENT_PROGRESS,
                    ),
                ],
                calls_admitted=2,
                state_version=0,
                next_state_version=1,
            ),
            _turn(
                t2,
                2,
                "continue",
                [
                    _call(
                        "summary",
                        "summarize",
                        "agent-summary#1",
                        "completed",
                        parent=f"{t2}:attempt:2",
                    )
                ],
                calls_admitted=3,
                state_version=1,
                next_state_version=2,
            ),
            _turn(t3, 3, "finish", [], calls_admitted=3, state_version=2),
        ],
    }
    # Each child agent appears exactly once, below its call run, with its own history.
    everywhere = [run.run_id for run in trees[0].walk()]
    for n in (1, 2):
        [agent_id] = [k for k, v in labels.items() if v == f"scripted-agent#{n}"]
        assert everywhere.count(agent_id) == 1
        child = find_run(trees, agent_id)
        assert child is not None and child.item_key == f"word-{n - 1}"
        call_run = find_run(trees, child.parent_run_id or "")
        assert call_run is not None and call_run.pipeline_id == "delegating-agent/turn"
        t1, t2 = f"scripted-agent/turn#{2 * n - 1}", f"scripted-agent/turn#{2 * n}"
        parent = f"{t1}:attempt:2"
        assert child.agent is not None
        assert _normal(child.agent.to_dict(), labels) == {
            "step_id": "agent",
            "termination": "finish",
            # Agent runs carry their definition snapshot even when they are child runs.
            "limits": {
                "max_turns": 3,
                "max_calls": 100,
                "max_decisions": 3,
                "max_depth": 4,
                "max_concurrency": 2,
            },
            "capabilities": ["count", "uppercase"],
            "resumed_turn": None,
            "checkpoint_key": None,
            "usage": None,
            "turns": [
                _turn(
                    t1,
                    1,
                    "continue",
                    [
                        _call(
                            "length",
                            "count",
                            f"scripted-agent/tool/count#{n}",
                            "completed",
                            parent=parent,
                        ),
                        _call(
                            "word-0",
                            "uppercase",
                            f"scripted-agent/tool/uppercase#{n}",
                            "completed",
                            parent=parent,
                        ),
                    ],
                    calls_admitted=2,
                    state_version=0,
                    next_state_version=1,
                ),
                _turn(t2, 2, "finish", [], calls_admitted=2, state_version=1),
            ],
        }


async def test_an_agent_stopped_by_a_limit_terminates_with_limit() -> None:
    """max_turns=1 with a continuing decision: the turn's decide fails with the limit code."""
    agent = _tiny_agent(
        "limited",
        continue_with(call("count", "a")),
        tools={"count": count},
        limits=LIMITS | {"max_turns": 1},
    )
    trees = run_trees(await _record(agent, {}))

    assert (trees[0].status, trees[0].error_code) == ("failed", codes.CHILD_FAILED)
    assert _agent(trees) == {
        "step_id": "agent",
        "termination": "limit",
        "limits": LIMITS | {"max_turns": 1},
        "capabilities": ["count"],
        "resumed_turn": None,
        "checkpoint_key": None,
        "usage": None,
        "turns": [
            _turn(
                "limited/turn#1",
                1,
                "continue",
                [],
                status="failed",
                call_count=1,
                state_version=0,
                error_code=codes.STEP_FAILED,
            ),
        ],
    }
    [turn] = trees[0].children
    assert [(s.id, s.status, s.reason, s.source_code) for s in turn.steps] == [
        ("decide", "failed", None, codes.AGENT_LIMIT_REACHED),
        ("calls", "skipped", "fail-fast", None),
        ("reduce", "skipped", "fail-fast", None),
    ]


async def test_a_cancelled_agent_terminates_with_cancelled() -> None:
    """Cancelling the token while a call runs cancels the call, the turn and the agent."""
    started, wait = _slow_tool()
    agent = _tiny_agent("waiting", continue_with(call("wait", "x")), tools={"wait": wait})
    token = CancelToken()
    with capture_trace() as trace:
        task = asyncio.ensure_future(agent.run({}, trace=trace, signal=token))
        await started.wait()
        token.cancel("stop")
        await task
    trees = run_trees(trace.records)

    history = _agent(trees)
    assert history["termination"] == "cancelled"
    assert history["turns"] == [
        _turn(
            "waiting/turn#1",
            1,
            "continue",
            [
                _call(
                    "wait-0",
                    "wait",
                    "waiting/tool/wait#1",
                    "cancelled",
                    error_code=codes.RUN_CANCELLED,
                    source_code=codes.RUN_CANCELLED,
                    parent="waiting/turn#1:attempt:2",
                )
            ],
            status="cancelled",
            calls_admitted=1,
            state_version=0,
            error_code=codes.RUN_CANCELLED,
        ),
    ]


async def test_a_dry_run_of_an_agent_without_a_preview_is_skipped() -> None:
    """No dry_run decision source: the agent step is skipped and no turn runs."""
    agent = _tiny_agent("no-preview", finish("done"))
    trees = run_trees(await _record(agent, {}, dry_run=True))

    assert trees[0].status == "failed"  # finalization misses the agent's output
    assert [(s.id, s.status, s.reason) for s in trees[0].steps] == [("agent", "skipped", "dry-run")]
    history = _agent(trees)
    assert (history["termination"], history["turns"]) == ("skipped", [])


def test_a_trace_cut_off_mid_run_projects_running_runs_and_unfinished_steps() -> None:
    """Records up to the first tool run's completion: nothing above it has completed."""
    records = list(_recorded("scripted"))
    cut = next(
        i
        for i, r in enumerate(records)
        if r["name"] == "pipeline.completed" and r["pipelineId"].endswith("/tool/count")
    )
    trees = run_trees(records[: cut + 1])
    labels = _labels(trees)

    assert _outline(trees[0], labels) == (
        "scripted-agent#1",
        "running",
        "agent:running",
        [
            (
                "scripted-agent/turn#1",
                "running",
                "decide:completed calls:running reduce:planned",
                [("scripted-agent/tool/count#1", "completed", "tool:completed", [])],
            ),
        ],
    )
    assert trees[0].duration_ms is None
    assert _agent(trees) == {
        "step_id": "agent",
        "termination": "running",
        "limits": SCRIPTED_LIMITS,
        "capabilities": ["count", "uppercase"],
        "resumed_turn": None,
        "checkpoint_key": None,
        "usage": None,
        "turns": [
            _turn(
                "scripted-agent/turn#1",
                1,
                "continue",
                [
                    _call(
                        "length",
                        "count",
                        "scripted-agent/tool/count#1",
                        "completed",
                        parent="scripted-agent/turn#1:attempt:2",
                    )
                ],
                status="running",
                call_count=3,
                calls_admitted=3,
                state_version=0,
            ),
        ],
    }


def test_old_traces_without_agent_telemetry_keep_unknowns_and_guess_nothing() -> None:
    """No attributes and no snapshot: still an agent (by its turns), but every detail is None."""
    records = []
    for record in _recorded("scripted"):
        if record["name"] == "step.attempted":
            continue
        if record["name"] == "pipeline.started":
            payload = {k: v for k, v in record["payload"].items() if k != "definitionSnapshot"}
            record = record | {"payload": payload}
        records.append(record)
    trees = run_trees(records)

    def bare(call_id: str, run: str) -> Any:
        return _call(call_id, None, run, "completed")

    assert _agent(trees) == {
        "step_id": "agent",
        "termination": "completed",  # no recorded finish decision
        "limits": None,
        "capabilities": None,
        "resumed_turn": None,
        "checkpoint_key": None,
        "usage": None,
        "turns": [
            _turn(
                "scripted-agent/turn#1",
                1,
                None,
                [
                    bare("length", "scripted-agent/tool/count#1"),
                    bare("word-0", "scripted-agent/tool/uppercase#1"),
                    bare("word-1", "scripted-agent/tool/uppercase#2"),
                ],
                call_count=None,
            ),
            _turn("scripted-agent/turn#2", 2, None, [], call_count=None),
        ],
    }


def test_per_call_attributions_name_pipeline_tools_and_calls_that_never_started() -> None:
    """Newer writers attribute each call on the calls step; those names win over nothing."""
    records = list(_recorded("delegation"))
    trees = run_trees(records)
    turn_1 = trees[0].children[0]
    at, calls = next(
        (i, r)
        for i, r in enumerate(records)
        if r["runId"] == turn_1.run_id
        and r.get("stepId") == "calls"
        and r["name"] == "step.running"
    )
    extra = []
    for call_id in ("word-0", "word-1", "word-9"):
        attributes = {
            "agent.runId": trees[0].run_id,
            "agent.turn": 1,
            "agent.callId": call_id,
            "agent.tool": "process_word",
            "agent.parentAttemptId": calls["attemptId"],
        }
        extra.append(
            calls | {"name": "step.attempted", "payload": {"attempt": 1, "attributes": attributes}}
        )
    trees = run_trees([*records[: at + 1], *extra, *records[at + 1 :]])

    [turn] = _agent(trees)["turns"][:1]
    assert [(c["call_id"], c["tool"], c["status"], c["run_id"]) for c in turn["calls"]] == [
        ("word-0", "process_word", "completed", "scripted-agent#1"),
        ("word-1", "process_word", "completed", "scripted-agent#2"),
        ("word-9", "process_word", "unknown", None),
    ]
    assert turn["calls"][2]["parent_attempt_id"] == "delegating-agent/turn#1:attempt:2"
    assert (turn["call_count"], turn["calls_admitted"]) == (2, 2)


# -- many roots -------------------------------------------------------------------------------
# Tests never assert speed (DESIGN.md section 9), so no per-example deadline.
@settings(deadline=None)
@given(st.lists(st.booleans(), max_size=600))
def test_interleaved_runs_project_exactly_as_they_do_alone(choices: list[bool]) -> None:
    """Two whole run trees interleaved in any order give the same two trees as apart."""
    first, second = list(_recorded("scripted")), list(_recorded("delegation"))
    alone = [*run_trees(first), *run_trees(second)]
    merged: Records = []
    a, b = iter(first), iter(second)
    for pick_first in choices:
        record = next(a if pick_first else b, None)
        if record is not None:
            merged.append(record)
    merged.extend(a)
    merged.extend(b)

    together = run_trees(merged)
    assert {t.run_id for t in together} == {t.run_id for t in alone}
    by_id = {t.run_id: t for t in together}
    assert all(by_id[t.run_id] == t for t in alone)


async def test_roots_are_ordered_by_start() -> None:
    """Appended runs of one file list one root each, earliest first."""
    with capture_trace() as trace:
        await scripted_agent.run({"question": "one"}, trace=trace, run_id="first")
        await scripted_agent.run({"question": "two"}, trace=trace, run_id="second")
    trees = run_trees(trace.records)

    assert [(t.run_id, t.status) for t in trees] == [
        ("first", "completed"),
        ("second", "completed"),
    ]


async def test_a_reused_run_id_in_an_appended_file_stays_two_runs() -> None:
    """The same caller-supplied run id twice: two roots, each with its own children."""
    with capture_trace() as trace:
        await scripted_agent.run({"question": "one"}, trace=trace, run_id="nightly")
        await scripted_agent.run({"question": "missing"}, trace=trace, run_id="nightly")
    trees = run_trees(trace.records)

    assert [t.run_id for t in trees] == ["nightly", "nightly"]
    first, second = (t.agent for t in trees)
    assert first is not None and second is not None
    assert [c.status for c in first.turns[0].calls] == ["completed", "completed"]
    assert [c.status for c in second.turns[0].calls] == ["completed", "failed"]


def test_runs_whose_parent_is_missing_become_roots() -> None:
    """Drop the delegating agent's root and first turn: every other run is still projected."""
    records = list(_recorded("delegation"))
    tree = run_trees(records)[0]
    dropped = {tree.run_id, tree.children[0].run_id}
    kept = [r for r in records if r["runId"] not in dropped]
    trees = run_trees(kept)
    labels = _labels(trees)

    assert [labels[t.run_id] for t in trees] == [
        "scripted-agent#1",  # the process_word calls, now orphans
        "scripted-agent#2",
        "delegating-agent/turn#1",  # the later turns (labels renumber without the first)
        "delegating-agent/turn#2",
    ]
    assert {r.run_id for t in trees for r in t.walk()} == {r["runId"] for r in kept}
    assert [t.agent is not None for t in trees] == [True, True, False, False]


def test_a_parent_cycle_in_a_corrupt_file_loses_no_run() -> None:
    """a's parent is b and b's parent is a: one becomes the root, the other its child."""

    def started(run_id: str, parent: str, ts: int) -> dict[str, Any]:
        return {
            "version": 3,
            "name": "pipeline.started",
            "runId": run_id,
            "pipelineId": "p",
            "parentRunId": parent,
            "timestampMs": ts,
            "payload": {"dryRun": False, "planOk": True, "stepCount": 0, "targetIds": []},
        }

    trees = run_trees([started("a", "b", 1), started("b", "a", 2), {"runId": 3}, "junk"])  # type: ignore[list-item]

    assert [(t.run_id, [c.run_id for c in t.children]) for t in trees] == [("a", ["b"])]
    assert trees[0].status == "running"


def test_find_run_searches_every_tree_depth_first() -> None:
    """A deep call run is found; an unknown id gives None."""
    trees = run_trees(_recorded("delegation"))
    deepest = list(trees[0].walk())[-1]

    assert find_run(trees, deepest.run_id) is deepest
    assert find_run(trees, "nope") is None


# -- text -------------------------------------------------------------------------------------
async def test_format_tree_shows_steps_turns_calls_and_errors() -> None:
    """The scripted agent on "missing word": one line per step, turn and call."""
    trees = run_trees(await _record(scripted_agent, {"question": "missing word"}))

    assert _text(format_tree(trees[0]), trees) == (
        "Run scripted-agent#1  scripted-agent  completed  <d>\n"
        "  step agent  completed  <d>\n"
        "  agent  finish\n"
        "  turn 1  continue  3 calls  completed  <d>\n"
        "    call length  count  completed  <d>\n"
        f"    call word-0  uppercase  failed  <d>  {codes.STEP_FAILED} (NOT_FOUND)  "
        "Word unavailable\n"
        "    call word-1  uppercase  completed  <d>\n"
        "  turn 2  finish  0 calls  completed  <d>\n"
    )


def test_format_tree_nests_subagent_runs_under_their_calls() -> None:
    """Delegation: each process_word call is followed by its agent run's own block."""
    trees = run_trees(_recorded("delegation"))
    sub = [
        "step agent  completed  <d>",
        "agent  finish",
        "turn 1  continue  2 calls  completed  <d>",
        "  call length  count  completed  <d>",
        "  call word-0  uppercase  completed  <d>",
        "turn 2  finish  0 calls  completed  <d>",
    ]
    expected = [
        "Run delegating-agent#1  delegating-agent  completed  <d>",
        "  step agent  completed  <d>",
        "  agent  finish",
        "  turn 1  continue  2 calls  completed  <d>",
        "    call word-0  process_word  completed  <d>",
        "      Run scripted-agent#1  scripted-agent  completed  <d>",
        *("        " + line for line in sub),
        "    call word-1  process_word  completed  <d>",
        "      Run scripted-agent#2  scripted-agent  completed  <d>",
        *("        " + line for line in sub),
        "  turn 2  continue  1 call  completed  <d>",
        "    call summary  summarize  completed  <d>",
        "  turn 3  finish  0 calls  completed  <d>",
    ]
    assert _text(format_tree(trees[0]), trees).splitlines() == expected


async def test_format_tree_of_a_plain_pipeline_lists_child_runs_and_the_run_error() -> None:
    """A failed child pipeline: error line (the handler's error, looked up through the child's
    wrapper), step lines with codes, the child block indented."""

    def broken(inputs: dict[str, Any], ctx: Any) -> None:
        raise CodedError("DISK_FULL", "no space\nleft \x1b[31m\u202e")

    child = define_pipeline(id="child", steps=[step("store", broken)])
    parent = define_pipeline(id="parent", steps=[from_pipeline("nested", child)])
    trees = run_trees(await _record(parent))
    text = _text(format_tree(trees[0]), trees)

    assert text.splitlines() == [
        "Run parent#1  parent  failed  <d>",
        f"  error {codes.CHILD_FAILED}  no space left  [31m ",
        f"  step nested  failed  <d>  {codes.CHILD_FAILED} (DISK_FULL)",
        "  Run child#1  child  failed  <d>",
        f"    error {codes.STEP_FAILED}  no space left  [31m ",
        f"    step store  failed  <d>  {codes.STEP_FAILED} (DISK_FULL)",
    ]


def test_format_run_list_prints_one_line_per_root() -> None:
    """``<runId>  <pipelineId>  <status>  started <ISO-8601>  <duration>``."""
    trees = run_trees([*_recorded("scripted"), *_recorded("delegation")])
    text = format_run_list(trees)

    # One line per root, in the trees' order (by start: which example was recorded first
    # depends on the tests this process ran before).
    assert text.splitlines()[0].startswith(trees[0].run_id)
    assert sorted(_text(text, trees).splitlines()) == [
        "delegating-agent#1  delegating-agent  completed  started <iso>  <d>",
        "scripted-agent#1  scripted-agent  completed  started <iso>  <d>",
    ]
    started = re.findall(r"started (\S+)", text)
    assert all(re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", s) for s in started)
    assert format_run_list([]) == ""


def test_format_run_list_leaves_out_an_unknown_duration() -> None:
    """A running root has no duration; the start is printed in UTC."""
    record = {
        "version": 3,
        "name": "pipeline.started",
        "runId": "r\x1b[2J",
        "pipelineId": "p",
        "timestampMs": 0,
        "payload": {"dryRun": False},
    }

    assert format_run_list(run_trees([record])) == (
        "r [2J  p  running  started 1970-01-01T00:00:00.000Z\n"
    )


@pytest.mark.parametrize(
    ("ms", "text"),
    [
        pytest.param(0.4, "0ms", id="under-a-millisecond"),
        pytest.param(999.4, "999ms", id="just-under-a-second"),
        pytest.param(999.6, "1.0s", id="rounds-up-to-a-second"),
        pytest.param(1_500, "1.5s", id="seconds"),
        pytest.param(59_940, "59.9s", id="just-under-a-minute"),
        pytest.param(59_960, "1m0s", id="rounds-up-to-a-minute"),
        pytest.param(125_000, "2m5s", id="minutes"),
        pytest.param(-3, "0ms", id="negative-clock-skew"),
    ],
)
def test_format_duration(ms: float, text: str) -> None:
    """Milliseconds below a second, tenths of seconds below a minute, then minutes."""
    assert format_duration(ms) == text


@pytest.mark.parametrize(
    ("text", "safe"),
    [
        pytest.param("\x1b[31mred", " [31mred", id="escape"),
        pytest.param("abc\u202edef", "abc def", id="right-to-left-override"),
        pytest.param("a\x00b", "a b", id="nul"),
        pytest.param("\x9b2J", " 2J", id="c1-csi"),
        pytest.param("tab\there\x7f", "tab here ", id="tab-and-del"),
        pytest.param("\u2066x\u2069\u200e\u200f\u061c", " x    ", id="isolates-and-marks"),
        pytest.param("héllo wörld 日本", "héllo wörld 日本", id="printable-kept"),
    ],
)
def test_terminal_safe_replaces_control_and_bidi_characters(text: str, safe: str) -> None:
    """Each unsafe character becomes one space; everything else stays."""
    assert terminal_safe(text) == safe


def _unsafe(ch: str) -> bool:
    code = ord(ch)
    return (
        code < 0x20
        or 0x7F <= code <= 0x9F
        or 0x202A <= code <= 0x202E
        or 0x2066 <= code <= 0x2069
        or code in (0x200E, 0x200F, 0x061C)
        or code in (0x2028, 0x2029, 0x2060, 0xFEFF)  # separators, invisible characters
        or 0x200B <= code <= 0x200D
    )


@settings(deadline=None)
@given(st.text())
def test_terminal_safe_output_never_contains_a_control_character(text: str) -> None:
    """Same length as the input, no C0/C1/DEL/bidi control left, safe characters untouched."""
    safe = terminal_safe(text)

    assert len(safe) == len(text)
    assert not any(_unsafe(ch) for ch in safe)
    assert all(s == t for s, t in zip(safe, text, strict=True) if not _unsafe(t))
