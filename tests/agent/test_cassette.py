"""Record and replay at the decision level, from Python (``tubeless.testing.record/replay``)."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tubeless import PipelineRun, define_agent, define_tool, pipeline_tool
from tubeless.agent._cassette import first_difference
from tubeless.errors import (
    CASSETTE_INVALID,
    CASSETTE_MISMATCH,
    REPLAY_DIVERGED,
    CassetteError,
    ReplayDivergedError,
    deepest_source_code,
)
from tubeless.testing import call, capture_trace, continue_with, finish, record, replay, scripted


def _tools(ran: list[str], *, suffix: str = "") -> dict[str, Any]:
    def shout(text: str, ctx: Any) -> dict[str, Any]:
        ran.append(text)
        return {"text": text.upper() + suffix, "length": len(text)}

    return {
        "shout": define_tool(
            description="Shout the text.", input_schema=str, output_schema=dict, run=shout
        )
    }


def _reduce(state: Any, outcomes: Any) -> Any:
    return {"seen": [*state["seen"], *(o["value"]["text"] for o in outcomes)]}


def _agent(
    decide: Any,
    ran: list[str] | None = None,
    *,
    suffix: str = "",
    reduce: Any = _reduce,
    implementation_version: str | None = None,
    tools: dict[str, Any] | None = None,
) -> Any:
    return define_agent(
        id="shouter",
        input_schema=dict,
        result_schema=str,
        initial_state=lambda _: {"seen": []},
        decide=decide,
        tools=tools if tools is not None else _tools(ran if ran is not None else [], suffix=suffix),
        reduce=reduce,
        implementation_version=implementation_version,
        limits={"max_concurrency": 2},
    )


def _script() -> Any:
    return scripted(
        continue_with(call("shout", "red", id="a"), call("shout", "blue", id="b")),
        continue_with(call("shout", "green", id="c")),
        finish("done"),
    )


def _never(state: Any, ctx: Any) -> Any:
    raise AssertionError("a replay never calls decide")


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


async def _recorded(tmp_path: Path) -> tuple[Path, PipelineRun]:
    path = tmp_path / "run.cassette"
    with record(path):
        run = await _agent(_script()).run({"q": 1})
    assert run.status == "completed"
    return path, run


def _divergence(run: PipelineRun) -> ReplayDivergedError:
    assert run.status == "failed"
    assert deepest_source_code(run.errors[0]) == REPLAY_DIVERGED
    error = run.errors[0].exception
    while error is not None and not isinstance(error, ReplayDivergedError):
        error = getattr(error, "__cause__", None) or _first_child_error(error)
    assert isinstance(error, ReplayDivergedError)
    return error


def _first_child_error(error: Any) -> Any:
    run = getattr(error, "run", None)
    return run.errors[0].exception if run is not None and run.errors else None


async def test_a_recorded_run_replays_without_calling_decide_and_gives_the_same_result(
    tmp_path: Path,
) -> None:
    path, recorded = await _recorded(tmp_path)
    ran: list[str] = []

    with replay(path) as cassette:
        run = await _agent(_never, ran).run({"q": 1})

    assert (run.status, run.value) == ("completed", recorded.value)
    assert sorted(ran) == ["blue", "green", "red"]  # the tools ran for real
    assert cassette.divergence is None


async def test_the_cassette_holds_header_decisions_outcomes_states_and_result(
    tmp_path: Path,
) -> None:
    path, _ = await _recorded(tmp_path)
    lines = _lines(path)

    header = lines[0]
    assert header["kind"] == "header"
    assert header["route"] == "shouter"
    assert header["definition"] == _agent(_never).identity.to_wire()
    assert header["input_digest"].startswith("sha256:")
    assert {"implementation_version", "tubeless_version", "format"} <= header.keys()
    kinds = [(line["kind"], line.get("turn"), line.get("call_id")) for line in lines[1:]]
    assert sorted(kinds, key=str) == sorted(
        [
            ("decision", 1, None),
            ("outcome", 1, "a"),
            ("outcome", 1, "b"),
            ("state", 1, None),
            ("decision", 2, None),
            ("outcome", 2, "c"),
            ("state", 2, None),
            ("decision", 3, None),
            ("result", None, None),
        ],
        key=str,
    )
    assert lines[-1] == {"kind": "result", "route": "shouter", "ok": True, "result": "done"}


async def test_the_cassette_file_is_created_0600_even_over_a_readable_file(
    tmp_path: Path,
) -> None:
    path = tmp_path / "run.cassette"
    path.write_text("old")
    path.chmod(0o644)

    with record(path):
        await _agent(_script()).run({"q": 1})

    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert "old" not in path.read_text()


async def test_a_changed_tool_output_diverges_naming_route_turn_call_and_pointer(
    tmp_path: Path,
) -> None:
    path, _ = await _recorded(tmp_path)

    with replay(path) as cassette:
        run = await _agent(_never, suffix="!").run({"q": 1})

    error = _divergence(run)
    assert (error.route, error.turn, error.pointer) == ("shouter", 1, "/value/text")
    assert error.call_id in {"a", "b"}
    assert cassette.divergence is error
    assert error.message.startswith(
        f"replay diverged at route 'shouter' turn 1 call {error.call_id!r}: the outcome differs "
        "at /value/text"
    )
    assert "RED" not in error.message and "!" not in error.message  # values only when asked


async def test_show_values_quotes_the_recorded_and_the_live_value(tmp_path: Path) -> None:
    path, _ = await _recorded(tmp_path)

    with replay(path, show_values=True):
        run = await _agent(_never, suffix="!").run({"q": 1})

    message = _divergence(run).message
    assert ': recorded "RED", got "RED!"' in message or ': recorded "BLUE", got "BLUE!"' in message


async def test_a_changed_reducer_diverges_at_the_reduced_state(tmp_path: Path) -> None:
    path, _ = await _recorded(tmp_path)

    def reduce(state: Any, outcomes: Any) -> Any:
        return {"seen": [*state["seen"], *(o["value"]["text"].lower() for o in outcomes)]}

    with replay(path):
        run = await _agent(_never, reduce=reduce).run({"q": 1})

    error = _divergence(run)
    assert (error.route, error.turn, error.call_id, error.pointer) == (
        "shouter",
        1,
        None,
        "/seen/0",
    )
    assert "the reduced state differs" in error.message


async def test_replay_outcomes_runs_no_tool(tmp_path: Path) -> None:
    path, recorded = await _recorded(tmp_path)
    ran: list[str] = []

    with replay(path, outcomes=True):
        run = await _agent(_never, ran, suffix="would diverge").run({"q": 1})

    assert (run.status, run.value, ran) == ("completed", recorded.value, [])


async def test_a_changed_definition_is_refused_before_any_tool_runs(tmp_path: Path) -> None:
    path, _ = await _recorded(tmp_path)
    ran: list[str] = []

    with replay(path):
        run = await _agent(_never, ran, implementation_version="2").run({"q": 1})

    assert run.status == "failed"
    assert deepest_source_code(run.errors[0]) == CASSETTE_MISMATCH
    text = run.errors[0].format()
    assert (
        "agent 'shouter' was recorded for another definition: implementation_version: None -> "
        "'2'; record it again, or replay with --allow-changed-definition"
    ) in text
    assert ran == []


async def test_a_changed_tool_description_is_named_not_shown_as_two_digests(
    tmp_path: Path,
) -> None:
    path, _ = await _recorded(tmp_path)
    ran: list[str] = []
    tools = _tools(ran)
    tools["shout"] = define_tool(
        description="Shout the text, loudly.",
        input_schema=str,
        output_schema=dict,
        run=lambda text, ctx: {"text": text.upper(), "length": len(text)},
    )
    tools["whisper"] = tools["shout"]

    with replay(path):
        run = await _agent(_never, ran, tools=tools, implementation_version="2").run({"q": 1})

    assert deepest_source_code(run.errors[0]) == CASSETTE_MISMATCH
    assert (
        run.errors[0]
        .format()
        .endswith(
            f"{path}: agent 'shouter' was recorded for another definition: implementation_version: "
            "None -> '2', tool 'whisper' added, tool 'shout': description changed; record it "
            "again, or replay with --allow-changed-definition"
        )
    )
    assert ran == []


async def test_a_cassette_recorded_without_parts_still_says_which_ids_changed(
    tmp_path: Path,
) -> None:
    path, _ = await _recorded(tmp_path)
    lines = _lines(path)
    del lines[0]["parts"]  # as cassettes recorded before parts were kept
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))

    with replay(path):
        run = await _agent(_never, implementation_version="2").run({"q": 1})

    text = run.errors[0].format()
    assert "agent 'shouter' was recorded for another definition: definitionId" in text
    assert "implementationVersion None -> '2'" in text


async def test_allow_changed_definition_replays_and_reports_what_changed(tmp_path: Path) -> None:
    path, recorded = await _recorded(tmp_path)

    with replay(path, allow_changed_definition=True) as cassette:
        run = await _agent(_never, implementation_version="2").run({"q": 1})

    assert (run.status, run.value) == ("completed", recorded.value)
    assert cassette.differences == [
        "agent 'shouter' was recorded for another definition: implementation_version: None -> '2'"
    ]


async def test_another_input_is_refused(tmp_path: Path) -> None:
    path, _ = await _recorded(tmp_path)

    with replay(path):
        run = await _agent(_never).run({"q": 2})

    assert deepest_source_code(run.errors[0]) == CASSETTE_MISMATCH
    assert "agent 'shouter' was recorded for another input" in run.errors[0].format()


async def test_a_run_going_past_the_recording_diverges_at_the_missing_decision(
    tmp_path: Path,
) -> None:
    path = tmp_path / "run.cassette"
    with record(path):
        await _agent(scripted(finish("early"))).run({"q": 1})
    lines = path.read_text().splitlines()
    # The recording finished at turn 1; drop its finish decision and result, keep it readable.
    path.write_text(
        lines[0]
        + "\n"
        + json.dumps({"kind": "result", "route": "shouter", "ok": True, "result": "x"})
        + "\n"
    )

    with replay(path):
        run = await _agent(_never).run({"q": 1})

    error = _divergence(run)
    assert (error.turn, error.call_id, error.pointer) == (1, None, "")
    assert "the recording has no decision for this turn" in error.message


@pytest.mark.parametrize(
    ("damage", "line", "problem"),
    [
        pytest.param(lambda t: t[: len(t) - 7], 10, "the last line is cut short", id="mid-line"),
        pytest.param(
            lambda t: "".join(t.splitlines(keepends=True)[:-1]),
            9,
            "the recording of 'shouter' ends without its result (the cassette is truncated)",
            id="at-a-line",
        ),
        pytest.param(
            lambda t: t.replace('"kind":"state"', '"kind":"state', 1),
            5,
            "not a JSON line (the cassette is corrupt)",
            id="corrupt",
        ),
        pytest.param(
            lambda t: "\n".join(t.splitlines()[1:]) + "\n",
            1,
            "the first line is not a cassette header",
            id="headless",
        ),
    ],
)
async def test_a_damaged_cassette_is_refused_naming_file_and_line(
    tmp_path: Path, damage: Any, line: int, problem: str
) -> None:
    path, _ = await _recorded(tmp_path)
    path.write_text(damage(path.read_text()))

    with pytest.raises(CassetteError) as caught, replay(path):
        pass

    assert caught.value.code == CASSETTE_INVALID
    assert (caught.value.path, caught.value.line) == (str(path), line)
    assert caught.value.message.startswith(f"{path}:{line}: {problem}")


async def test_a_missing_cassette_is_refused(tmp_path: Path) -> None:
    with pytest.raises(CassetteError) as caught, replay(tmp_path / "absent.cassette"):
        pass
    assert caught.value.code == CASSETTE_INVALID
    assert "cannot read the cassette" in caught.value.message


async def test_a_child_agent_run_as_a_tool_is_recorded_under_its_route_and_replays(
    tmp_path: Path,
) -> None:
    ran: list[str] = []
    child_decide = scripted(continue_with(call("shout", "inner", id="x")), finish("child done"))
    child = _agent(child_decide, ran)
    child_tool = pipeline_tool(child, description="Ask the child.")

    def parent(decide: Any) -> Any:
        return define_agent(
            id="parent",
            input_schema=dict,
            result_schema=str,
            initial_state=lambda _: {},
            decide=decide,
            tools={"child": child_tool},
            reduce=lambda state, outcomes: {"got": outcomes[0]["value"]},
        )

    path = tmp_path / "run.cassette"
    with record(path):
        first = await parent(
            scripted(continue_with(call("child", {}, id="ask")), finish("all done"))
        ).run({})
    assert first.status == "completed"
    routes = {line["route"] for line in _lines(path)}
    assert routes == {"parent", "parent/1/ask/shouter"}
    assert [line["route"] for line in _lines(path) if line["kind"] == "header"] == ["parent"]

    child_decide_replay = _never
    replayed_child = pipeline_tool(_agent(child_decide_replay, ran), description="Ask the child.")
    again = define_agent(
        id="parent",
        input_schema=dict,
        result_schema=str,
        initial_state=lambda _: {},
        decide=_never,
        tools={"child": replayed_child},
        reduce=lambda state, outcomes: {"got": outcomes[0]["value"]},
    )
    with replay(path) as cassette:
        run = await again.run({})
    assert (run.status, run.value, cassette.divergence) == ("completed", "all done", None)
    assert ran == ["inner", "inner"]


async def test_recording_changes_no_trace_record_and_puts_nothing_of_it_in_traces(
    tmp_path: Path,
) -> None:
    path = tmp_path / "secret-name.cassette"
    with capture_trace() as plain:
        await _agent(_script()).run({"q": 1}, run_id="r", correlation_id="c")
    with capture_trace() as traced, record(path):
        await _agent(_script()).run({"q": 1}, run_id="r", correlation_id="c")

    def shape(records: list[dict[str, Any]]) -> list[Any]:
        return [(r["name"], r.get("pipelineId"), r.get("stepId")) for r in records]

    assert shape(traced.records) == shape(plain.records)
    text = json.dumps(traced.records)
    assert "secret-name" not in text and "cassette" not in text
    assert "RED" not in text and "done" not in text


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=3),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=2), inner, max_size=3)
    ),
    max_leaves=12,
)


class _Absent:
    def __repr__(self) -> str:
        return "(absent)"


def _at(value: Any, pointer: str) -> Any:
    """The value at ``pointer``, or something whose repr is ``(absent)``."""
    for part in pointer.split("/")[1:]:
        key = part.replace("~1", "/").replace("~0", "~")
        if isinstance(value, list):
            index = int(key)
            if index >= len(value):
                return _Absent()
            value = value[index]
        elif key in value:
            value = value[key]
        else:
            return _Absent()
    return value


@pytest.mark.slow
@given(_JSON, _JSON)
def test_first_difference_finds_a_difference_exactly_when_the_values_differ_and_points_at_it(
    recorded: Any, live: Any
) -> None:
    found = first_difference(recorded, live)
    same = json.dumps(recorded, sort_keys=True) == json.dumps(live, sort_keys=True)
    assert (found is None) == same
    if found is not None:
        pointer, old, new = found
        assert repr(_at(recorded, pointer)) == repr(old)
        assert repr(_at(live, pointer)) == repr(new)


async def test_one_agent_run_twice_is_recorded_under_the_routes_its_checkpoint_uses(
    tmp_path: Path,
) -> None:
    """A pipeline running ``shouter`` twice: ``shouter`` and ``shouter#2``, as in the
    checkpoint; a second run recorded into the same cassette goes on with ``#3`` and ``#4``,
    and replaying both runs in the same order finds each one's lines."""
    from tubeless import define_pipeline, from_pipeline
    from tubeless.durable import MemoryCheckpoints

    def decide(state: Any, ctx: Any) -> Any:
        if ctx.turn == 1:
            return {"kind": "continue", "calls": [{"id": "a", "tool": "shout", "input": "hi"}]}
        return {"kind": "finish", "result": state["seen"][0]}

    def twice(choose: Any) -> Any:
        agent = _agent(choose)
        return define_pipeline(
            id="twice",
            options_schema=dict,
            steps=[from_pipeline("first", agent), from_pipeline("second", agent)],
        )

    path = tmp_path / "run.cassette"
    store = MemoryCheckpoints()
    with record(path):
        first = await twice(decide).run({"q": 1}, checkpoints=store, checkpoint_key="k")
        second = await twice(decide).run({"q": 1})
    assert (first.status, second.status) == ("completed", "completed")
    headers = [line["route"] for line in _lines(path) if line["kind"] == "header"]
    assert headers == ["shouter", "shouter#2", "shouter#3", "shouter#4"]
    assert sorted(json.loads(store.list()[0].document)["agents"]) == ["shouter", "shouter#2"]

    with replay(path) as cassette:
        again = [await twice(_never).run({"q": 1}) for _ in range(2)]
    assert [run.status for run in again] == ["completed", "completed"]
    assert cassette.divergence is None
