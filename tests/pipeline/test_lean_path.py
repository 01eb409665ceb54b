"""The lean child-run path gives exactly the records of the executor, for every outcome.

Each scenario runs twice without trace sinks: once as shipped (straight-line children take the
lean path) and once with the lean path switched off by the public switch ``lean_path(False)``.
The run records, including every nested child record reachable through the errors, must be the
same apart from fresh run ids and clock readings, and every handler must run the same number
of times (a hand-over never repeats one).
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Callable
from dataclasses import asdict, is_dataclass
from typing import Any

import pytest

from tubeless import (
    PipelineRun,
    ToolError,
    define_agent,
    define_pipeline,
    define_tool,
    for_each_pipeline,
    from_pipeline,
    iterate_pipeline,
    pipeline_tool,
    step,
)
from tubeless.pipeline import lean_path
from tubeless.testing import call, continue_with, finish, scripted

Scenario = Callable[[dict[str, int]], tuple[Any, Any]]
_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}")


def _count(calls: dict[str, int], name: str) -> None:
    calls[name] = calls.get(name, 0) + 1


def _snapshot(run: PipelineRun, ids: dict[str, str]) -> dict[str, Any]:
    def rid(value: str | None) -> str | None:
        if value is None:
            return None
        return ids.setdefault(value, f"run-{len(ids)}")

    def attempt(value: str | None) -> str | None:
        if value is None:
            return None
        run_id, _, n = value.rpartition(":attempt:")
        return f"{rid(run_id)}:attempt:{n}"

    def error(e: Any) -> dict[str, Any]:
        exc = e.exception
        nested: list[dict[str, Any]] = []
        for child in getattr(exc, "runs", None) or (
            (exc.run,) if isinstance(getattr(exc, "run", None), PipelineRun) else ()
        ):
            nested.append(_snapshot(child, ids))
        return {
            "code": e.code,
            "kind": e.kind,
            "phase": e.phase,
            "message": e.message,
            "step_id": e.step_id,
            "source_code": e.source_code,
            "cause": asdict(e.cause) if e.cause is not None else None,
            "issues": [asdict(i) if is_dataclass(i) else repr(i) for i in e.issues],
            "fan_out": e.fan_out,
            "exception": type(exc).__name__,
            "from_handler": e.from_handler,
            "children": nested,
        }

    return {
        "run_id": rid(run.run_id),
        "pipeline_id": run.pipeline_id,
        "parent_run_id": rid(run.parent_run_id),
        "item_key": run.item_key,
        "status": run.status,
        "finalized": run.finalized,
        "value": repr(run.value),
        "errors": [error(e) for e in run.errors],
        "steps": [
            {
                "id": s.id,
                "status": s.status,
                "reason": s.reason,
                "message": s.message,
                "dependency_id": s.dependency_id,
                "attempt_id": attempt(s.attempt_id),
                "timed": (s.started_at_ms is not None, s.finished_at_ms is not None),
                "error": error(s.error) if s.error is not None else None,
            }
            for s in run.steps
        ],
    }


async def _observe(scenario: Scenario) -> tuple[dict[str, Any], dict[str, int]]:
    calls: dict[str, int] = {}
    pipeline, raw = scenario(calls)
    run = await pipeline.run(raw)
    # Messages may quote run ids, which are fresh in every run.
    text = _UUID.sub("<id>", json.dumps(_snapshot(run, {}), default=repr))
    return json.loads(text), calls


# -- pipeline scenarios ------------------------------------------------------------------------
def _chain(calls: dict[str, int], *, fail_at: str, how: str) -> Any:
    async def a(inputs: dict[str, Any], ctx: Any) -> int:
        _count(calls, "a")
        return ctx.options

    async def b(inputs: dict[str, Any], ctx: Any) -> Any:
        _count(calls, "b")
        if fail_at == "b" and inputs["a"] == 2:
            if how == "raise":
                raise ValueError("b broke on 2")
            if how == "cancel":
                ctx.signal.cancel("stop after b")
            if how == "invalid":
                return "not a number"
        return inputs["a"] * 10

    def c(inputs: dict[str, Any], ctx: Any) -> int:  # sync: worker thread
        _count(calls, "c")
        if fail_at == "c" and inputs["a"] == 2:
            if how == "cancel":
                ctx.signal.cancel("stop during c")
            else:
                raise RuntimeError("c broke on 2")
        return inputs["b"] + inputs.get("a", 0)

    return define_pipeline(
        id="child",
        options_schema=int,
        steps=[
            step("a", a),
            step("b", b, depends_on=["a"], output_schema=int),
            step("c", c, depends_on=["b"], optional_depends_on=["a"]),
        ],
        finalize="c",
    )


def _iterate(fail_at: str, how: str) -> Scenario:
    def build(calls: dict[str, int]) -> tuple[Any, Any]:
        loop = iterate_pipeline(
            "loop",
            _chain(calls, fail_at=fail_at, how=how),
            max_iterations=5,
            initial_state=lambda inputs, ctx: 1,
            map_options=lambda state, inputs, ctx: state,
            transition=lambda result, state, ctx: (
                {"kind": "finish", "result": result}
                if state >= 3
                else {"kind": "next", "state": state + 1}
            ),
        )
        return define_pipeline(id="outer", steps=[loop], finalize="loop"), None

    return build


def _for_each(how: str) -> Scenario:
    def build(calls: dict[str, int]) -> tuple[Any, Any]:
        fan = for_each_pipeline(
            "fan",
            _chain(calls, fail_at="b", how=how),
            items=lambda inputs, ctx: [1, 2, 3],
            key=lambda item, index: f"item-{item}",
            map_options=lambda item, index, inputs, ctx: item,
        )
        return define_pipeline(id="outer", steps=[fan], finalize="fan"), None

    return build


def _single(raw: Any) -> Scenario:
    def build(calls: dict[str, int]) -> tuple[Any, Any]:
        child = from_pipeline(
            "child", _chain(calls, fail_at="none", how="none"), map_options=lambda i, c: raw
        )
        return define_pipeline(id="outer", steps=[child], finalize="child"), None

    return build


# -- agent scenarios ---------------------------------------------------------------------------
def _agent(*decisions: Any, tool: Callable[..., Any] | None = None) -> Scenario:
    def build(calls: dict[str, int]) -> tuple[Any, Any]:
        async def upper(text: str, ctx: Any) -> str:
            _count(calls, "upper")
            if tool is not None:
                return tool(text)  # type: ignore[no-any-return]
            return text.upper()

        def size(text: str, ctx: Any) -> int:
            _count(calls, "size")
            if text == "boom":
                raise ToolError("TOO_BIG", "no")
            return len(text)

        inner = define_pipeline(
            id="inner",
            options_schema=str,
            steps=[step("echo", lambda inputs, ctx: ctx.options + "!")],
            finalize="echo",
        )
        agent = define_agent(
            id="agent",
            input_schema=dict,
            result_schema=str,
            initial_state=lambda _: {"seen": ()},
            decide=scripted(*decisions),
            reduce=lambda state, outcomes: {"seen": state["seen"] + outcomes},
            tools={
                "upper": define_tool(
                    description="Upper.", input_schema=str, output_schema=str, run=upper
                ),
                "size": define_tool(
                    description="Size.", input_schema=str, output_schema=int, run=size
                ),
                "echo": pipeline_tool(inner, description="Echo."),
            },
            limits={"max_turns": 4},
        )
        return agent, {}

    return build


def _raise(exc: BaseException) -> Callable[[str], str]:
    def fail(text: str) -> str:
        raise exc

    return fail


SCENARIOS: dict[str, Scenario] = {
    "iterate completes": _iterate("none", "none"),
    "iterate step raises": _iterate("b", "raise"),
    "iterate output rejected": _iterate("b", "invalid"),
    "iterate sync step raises": _iterate("c", "raise"),
    "iterate signal cancelled between steps": _iterate("b", "cancel"),
    "iterate signal cancelled in last step": _iterate("c", "cancel"),
    "fan-out item raises": _for_each("raise"),
    "fan-out item rejected": _for_each("invalid"),
    "child input rejected": _single("not an int"),
    "child completes": _single(2),
    "agent finishes": _agent(
        continue_with(call("upper", "a"), call("size", "bb"), call("echo", "x")), finish("ok")
    ),
    "agent tool error is an outcome": _agent(
        continue_with(call("size", "boom")), finish("recovered")
    ),
    "agent tool raises": _agent(
        continue_with(call("upper", "a")), finish("never"), tool=_raise(RuntimeError("bad tool"))
    ),
    "agent tool output rejected": _agent(
        continue_with(call("upper", "a")), finish("never"), tool=lambda text: 42
    ),
    "agent tool raises a tool error with a code": _agent(
        continue_with(call("upper", "a")), finish("fine"), tool=_raise(ToolError("NOPE", "x"))
    ),
    "agent invalid decision": _agent({"kind": "dance"}),
    "agent unknown tool": _agent(continue_with(call("missing", "a"))),
    "agent bad argument": _agent(continue_with(call("upper", 3))),
    "agent delegated child input rejected": _agent(continue_with(call("echo", 5))),
    "agent finish result rejected": _agent(finish(7)),
    "agent out of turns": _agent(*[continue_with(call("upper", "a"))] * 5),
}


@pytest.mark.parametrize("name", sorted(SCENARIOS))
async def test_lean_path_records_match_the_executor(name: str) -> None:
    with lean_path() as lean:
        lean_result, lean_calls = await _observe(SCENARIOS[name])
    assert lean.runs, "the scenario never took the lean path"
    with lean_path(False) as off:
        full, full_calls = await _observe(SCENARIOS[name])
    assert off.runs == 0
    assert lean_result == full
    assert lean_calls == full_calls


async def test_a_cancelled_task_stops_a_lean_child_and_leaves_nothing_running() -> None:
    started = asyncio.Event()
    after: list[str] = []

    async def slow(inputs: dict[str, Any], ctx: Any) -> int:
        started.set()
        await asyncio.sleep(30)
        return 1

    async def later(inputs: dict[str, Any], ctx: Any) -> int:
        after.append("ran")
        return 2

    child = define_pipeline(
        id="child",
        steps=[step("slow", slow), step("later", later, depends_on=["slow"])],
        finalize="later",
    )
    outer = define_pipeline(id="outer", steps=[from_pipeline("child", child)], finalize="child")
    task = asyncio.ensure_future(outer.run(None))
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert after == []
    pending = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    assert pending == []


async def test_tracing_always_takes_the_executor() -> None:
    from tubeless.testing import capture_trace

    pipeline, raw = SCENARIOS["agent finishes"]({})
    with capture_trace() as trace, lean_path() as lean:
        run = await pipeline.run(raw, trace=trace)
    assert run.status == "completed"
    assert lean.runs == 0
    assert any(
        r["name"] == "pipeline.started" and r["pipelineId"] == "agent/turn" for r in trace.records
    )
