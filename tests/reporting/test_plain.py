"""The plain run reporter (UPSTREAM §3.10): records captured from real runs, replayed into
``PlainReporter``, give exactly the documented lines; progress is throttled per step on a fake
clock; colour and symbols follow the terminal, ``NO_COLOR`` and ``FORCE_COLOR``; and no record,
however malformed, makes the reporter raise."""

from __future__ import annotations

import io
import re
import textwrap
from collections.abc import Iterable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from examples.scripted_agent import scripted_agent
from examples.text import Question, uppercase
from tubeless import CancelToken, Pipeline, define_pipeline, step
from tubeless.agent import define_agent
from tubeless.reporting import PlainReporter, choose_reporter
from tubeless.testing import capture_trace
from tubeless.tracing.records import RECORD_NAMES

Records = list[dict[str, Any]]
DURATION = re.compile(r"\b\d+(?:\.\d+)?(?:ms|s)\b|\b\d+m\d+s\b")
RUN_ID = re.compile(r"(?m)^(Pipeline .*: starting .*), run \S+$")


def normal(text: str) -> str:
    """``text`` with durations as ``<d>`` and the run id of the first line as ``<id>``."""
    return RUN_ID.sub(r"\1, run <id>", DURATION.sub("<d>", text))


class FakeClock:
    """Monotonic seconds that move only when told (by ``step`` on every reading)."""

    def __init__(self, step: float = 0.0) -> None:
        self.now = 0.0
        self.step = step

    def __call__(self) -> float:
        now = self.now
        self.now += self.step
        return now


class FakeTty(io.StringIO):
    """A stream that says it is a terminal."""

    def __init__(self, encoding: str = "utf-8") -> None:
        super().__init__()
        self._encoding = encoding

    def isatty(self) -> bool:
        return True

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return self._encoding


async def capture(pipeline: Pipeline, *args: Any, **kwargs: Any) -> Records:
    with capture_trace() as trace:
        await pipeline.run(*args, trace=trace, **kwargs)
    return trace.records


def replay(records: Iterable[dict[str, Any]], **options: Any) -> str:
    """The reporter's output for ``records``, durations replaced by ``<d>``."""
    stream = io.StringIO()
    options = {"unicode": False, "color": False, "clock": FakeClock(), **options}
    reporter = PlainReporter(stream, **options)
    for record in records:
        reporter.export(record)
    reporter.close()
    assert reporter.dropped == 0
    return normal(stream.getvalue())


def lines(text: str) -> str:
    """An indented triple-quoted block as the exact output it stands for."""
    return textwrap.dedent(text).strip("\n") + "\n"


# -- whole outputs of real runs -----------------------------------------------------------------
async def test_scripted_agent_prints_steps_turns_and_calls() -> None:
    records = await capture(scripted_agent, {"question": "hello tubeless"})
    assert replay(records) == lines("""
    Pipeline scripted-agent: starting (1 step, dryRun=false), run <id>
      -> agent
        turn 1: 3 calls
          ok count [length] (<d>)
          ok uppercase [word-0] (<d>)
          ok uppercase [word-1] (<d>)
        turn 2: finish
      ok agent (<d>)
      -> finalize
      ok finalize (<d>)
    Pipeline scripted-agent: done in <d> (status=completed, steps=1, errors=0)
    """)


async def test_attached_to_a_run_it_prints_the_same_lines_as_a_replay() -> None:
    stream = io.StringIO()
    reporter = PlainReporter(stream, unicode=False, color=False)
    with capture_trace() as trace:
        await scripted_agent.run({"question": "hello tubeless"}, trace=[trace, reporter])
    reporter.close()
    assert normal(stream.getvalue()) == replay(trace.records)


async def test_a_failing_call_shows_its_tool_error_code_ascii_and_unicode() -> None:
    records = await capture(scripted_agent, {"question": "missing word"})
    expected = """
    Pipeline scripted-agent: starting (1 step, dryRun=false), run <id>
      -> agent
        turn 1: 3 calls
          ok count [length] (<d>)
          fail uppercase [word-0]: NOT_FOUND: Word unavailable
          ok uppercase [word-1] (<d>)
        turn 2: finish
      ok agent (<d>)
      -> finalize
      ok finalize (<d>)
    Pipeline scripted-agent: done in <d> (status=completed, steps=1, errors=0)
    """
    assert replay(records) == lines(expected)
    unicode = expected.replace("->", "→").replace(" ok ", " ✓ ").replace(" fail ", " ✗ ")
    assert replay(records, unicode=True) == lines(unicode)


async def test_dry_run_of_an_agent_without_preview_skips_it_and_fails_finalize() -> None:
    agent = define_agent(
        id="no-preview",
        input_schema=Question,
        result_schema=str,
        initial_state=lambda validated: {},
        decide=lambda state, ctx: {"kind": "finish", "result": "never"},
        tools={"uppercase": uppercase},
    )
    records = await capture(agent, {}, dry_run=True)
    assert replay(records) == lines("""
    Pipeline no-preview: starting (1 step, dryRun=true), run <id>
      - agent (dry-run)
      -> finalize
      fail finalize: Required pipeline outputs missing: agent
    Pipeline no-preview: done in <d> (status=failed, steps=1, errors=1)
    """)


async def ok(inputs: dict[str, Any], ctx: Any) -> int:
    return 1


async def test_failure_with_fail_fast_skips_names_reasons_and_dependencies() -> None:
    async def broken(inputs: dict[str, Any], ctx: Any) -> None:
        raise ValueError("b broke")

    pipeline = define_pipeline(
        id="fail-fast",
        steps=[
            step("a", ok, name="Load", description="reads the input"),
            step("b", broken),
            step("c", ok),
            step("d", ok, depends_on="b"),
            step("s", ok, dry_run="skip"),
            step("t", ok, depends_on="s"),
        ],
        finalize=lambda outputs, ctx: None,
    )
    assert replay(await capture(pipeline, dry_run=True)) == lines("""
    Pipeline fail-fast: starting (6 steps, dryRun=true), run <id>
      -> Load - reads the input
      ok Load (<d>)
      -> b
      fail b: ValueError: b broke
      - c (fail-fast: b)
      - d (fail-fast: b)
      - s (dry-run)
      - t (unmet-dependency: s)
    Pipeline fail-fast: done in <d> (status=failed, steps=6, errors=1)
    """)


async def test_cancelled_run_marks_the_running_and_remaining_steps() -> None:
    token = CancelToken()

    async def cancels(inputs: dict[str, Any], ctx: Any) -> None:
        token.cancel("stop requested")
        await ctx.signal.wait()
        ctx.signal.raise_if_cancelled()

    pipeline = define_pipeline(
        id="cancel",
        steps=[step("a", ok), step("w", cancels, depends_on="a"), step("z", ok, depends_on="w")],
    )
    assert replay(await capture(pipeline, signal=token)) == lines("""
    Pipeline cancel: starting (3 steps, dryRun=false), run <id>
      -> a
      ok a (<d>)
      -> w
      - w: cancelled: stop requested
      - z: cancelled: stop requested
    Pipeline cancel: done in <d> (status=cancelled, steps=3, errors=1)
    """)


def reporting(count: int) -> Any:
    def run(inputs: dict[str, Any], ctx: Any) -> int:
        ctx.log.info("handler logs are not the reporter's business")
        for n in range(1, count + 1):
            ctx.report_progress(n, count, f"item {n}")
        return count

    return run


async def test_progress_is_throttled_per_step_and_completion_is_always_shown() -> None:
    pipeline = define_pipeline(
        id="progress",
        steps=[step("p", reporting(12)), step("q", reporting(3), depends_on="p")],
    )
    records = await capture(pipeline)
    # Every progress record reads the clock once; readings 0, 0.25, 0.5, ... seconds.
    assert replay(records, clock=FakeClock(step=0.25)) == lines("""
    Pipeline progress: starting (2 steps, dryRun=false), run <id>
      -> p
      ... p 1/12 item 1
      ... p 4/12 item 4
      ... p 7/12 item 7
      ... p 10/12 item 10
      ... p 12/12 item 12
      ok p (<d>)
      -> q
      ... q 1/3 item 1
      ... q 3/3 item 3
      ok q (<d>)
      -> finalize
      ok finalize (<d>)
    Pipeline progress: done in <d> (status=completed, steps=2, errors=0)
    """)
    # A clock that never moves shows each step's first report and its completion only.
    assert replay(records).count(" ... ") == 4
    # With no throttle every report is a line.
    assert replay(records, progress_interval_s=0).count(" ... ") == 15


async def test_the_first_line_names_the_run_id_to_look_up_later() -> None:
    """``run <id>`` on the first line: the id ``tubeless trace show`` takes (issue 13)."""
    records = await capture(scripted_agent, {"question": "hi"}, run_id="my-run\x1b[2J")
    stream = io.StringIO()
    reporter = PlainReporter(stream, unicode=False, color=False)
    for record in records:
        reporter.export(record)
    first = stream.getvalue().splitlines()[0]
    assert first == "Pipeline scripted-agent: starting (1 step, dryRun=false), run my-run [2J"


def progress_agent(*counts: int) -> Any:
    """One turn calling ``work`` once per count (call ids ``c0``, ...); each call reports
    ``1..count`` of ``count`` items, then the agent finishes."""
    from tubeless.agent import define_tool

    def work(count: int, ctx: Any) -> int:
        for n in range(1, count + 1):
            ctx.report_progress(n, count, f"item {n}")
        return count

    return define_agent(
        id="progress-agent",
        input_schema=dict,
        result_schema=int,
        initial_state=lambda validated: {"done": False},
        decide=lambda state, ctx: (
            {"kind": "finish", "result": 0}
            if state["done"]
            else {
                "kind": "continue",
                "calls": [
                    {"id": f"c{i}", "tool": "work", "input": c} for i, c in enumerate(counts)
                ],
            }
        ),
        reduce=lambda state, outcomes: {"done": True},
        tools={
            "work": define_tool(description="Works.", input_schema=int, output_schema=int, run=work)
        },
    )


async def test_a_tool_s_progress_is_printed_under_its_call_throttled_per_call() -> None:
    """``ctx.report_progress`` in a tool prints like a step's, under the turn (issue 13)."""
    records = await capture(progress_agent(7, 2), {})
    assert replay(records, clock=FakeClock(step=0.25)) == lines("""
    Pipeline progress-agent: starting (1 step, dryRun=false), run <id>
      -> agent
        turn 1: 2 calls
          ... work [c0] 1/7 item 1
          ... work [c0] 4/7 item 4
          ... work [c0] 7/7 item 7
          ok work [c0] (<d>)
          ... work [c1] 1/2 item 1
          ... work [c1] 2/2 item 2
          ok work [c1] (<d>)
        turn 2: finish
      ok agent (<d>)
      -> finalize
      ok finalize (<d>)
    Pipeline progress-agent: done in <d> (status=completed, steps=1, errors=0)
    """)
    assert replay(records, progress_interval_s=0).count(" ... work ") == 9


# -- defaults: symbols and colour ---------------------------------------------------------------
SYNTHETIC: Records = [
    {
        "name": "pipeline.started",
        "runId": "r",
        "pipelineId": "p",
        "payload": {"dryRun": False, "stepCount": 1},
    },
    {"name": "step.running", "runId": "r", "stepId": "a", "payload": {}},
    {"name": "step.complete", "runId": "r", "stepId": "a", "durationMs": 1500.0, "payload": {}},
    {
        "name": "pipeline.completed",
        "runId": "r",
        "durationMs": 61000.0,
        "payload": {"status": "completed", "stepCount": 1, "errorCount": 0},
    },
]


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in ("NO_COLOR", "FORCE_COLOR"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("TERM", "xterm-256color")
    return monkeypatch


def emit(stream: io.StringIO) -> str:
    reporter = PlainReporter(stream)
    for record in SYNTHETIC:
        reporter.export(record)
    return stream.getvalue()


@pytest.mark.parametrize(
    ("tty", "env", "colour", "unicode"),
    [
        pytest.param(True, {}, True, True, id="terminal"),
        pytest.param(False, {}, False, False, id="pipe"),
        pytest.param(True, {"NO_COLOR": "1"}, False, True, id="no-color"),
        pytest.param(True, {"NO_COLOR": ""}, True, True, id="empty-no-color-ignored"),
        pytest.param(False, {"FORCE_COLOR": "1"}, True, False, id="force-color-on-a-pipe"),
        pytest.param(True, {"FORCE_COLOR": "1", "NO_COLOR": "1"}, True, True, id="force-wins"),
        pytest.param(True, {"FORCE_COLOR": "0"}, False, True, id="force-color-0"),
        pytest.param(True, {"TERM": "dumb"}, False, False, id="dumb-terminal"),
    ],
)
def test_colour_and_symbol_defaults(
    clean_env: pytest.MonkeyPatch, tty: bool, env: dict[str, str], colour: bool, unicode: bool
) -> None:
    for name, value in env.items():
        clean_env.setenv(name, value)
    out = emit(FakeTty() if tty else io.StringIO())
    assert ("\x1b[" in out) is colour
    plain = re.sub(r"\x1b\[[0-9;]*m", "", out)
    start, done = ("→", "✓") if unicode else ("->", "ok")
    assert plain == (
        "Pipeline p: starting (1 step, dryRun=false), run r\n"
        f"  {start} a\n"
        f"  {done} a (1.5s)\n"
        "Pipeline p: done in 1m1s (status=completed, steps=1, errors=0)\n"
    )


def test_a_terminal_that_cannot_encode_the_symbols_gets_ascii(clean_env: Any) -> None:
    out = re.sub(r"\x1b\[[0-9;]*m", "", emit(FakeTty(encoding="ascii")))
    assert "  -> a\n" in out


def test_colour_paints_symbols_and_the_done_line(clean_env: Any) -> None:
    out = emit(FakeTty())
    assert "  \x1b[36m→\x1b[0m a\n" in out
    assert "  \x1b[32m✓\x1b[0m a (1.5s)\n" in out
    assert out.endswith(
        "\x1b[32mPipeline p: done in 1m1s (status=completed, steps=1, errors=0)\x1b[0m\n"
    )


def test_choose_reporter_prefers_plain_lines_off_a_terminal(clean_env: Any) -> None:
    assert choose_reporter(io.StringIO(), quiet=True) is None
    assert isinstance(choose_reporter(io.StringIO(), quiet=False), PlainReporter)
    assert isinstance(choose_reporter(FakeTty(), quiet=False, live=False), PlainReporter)
    clean_env.setenv("TERM", "dumb")
    assert isinstance(choose_reporter(FakeTty(), quiet=False), PlainReporter)


def test_recorded_text_is_made_terminal_safe() -> None:
    records = [
        {"name": "pipeline.started", "runId": "r", "pipelineId": "p\x1b[31m", "payload": {}},
        {
            "name": "step.planned",
            "runId": "r",
            "stepId": "a",
            "payload": {"name": "evil\x1b]0;title\x07", "description": "two\nlines"},
        },
        {"name": "step.running", "runId": "r", "stepId": "a", "payload": {}},
        {
            "name": "step.failed",
            "runId": "r",
            "stepId": "a",
            "error": {"message": "bad\r\u202eword"},
            "payload": {},
        },
    ]
    out = replay(records)
    assert "\x1b" not in out and "\r" not in out and "\u202e" not in out and "\x07" not in out
    assert out == (
        "Pipeline p [31m: starting (? steps, dryRun=false), run <id>\n"
        "  -> evil ]0;title  - two lines\n"
        "  fail evil ]0;title : bad  word\n"
    )


# -- never raising ------------------------------------------------------------------------------
GARBAGE: list[Any] = [
    None,
    [],
    "pipeline.started",
    {},
    {"name": 3, "runId": "r"},
    {"name": "step.running"},
    {"name": "pipeline.started", "runId": "r", "payload": "nope", "pipelineId": 7},
    {"name": "step.planned", "runId": "r", "stepId": "a", "payload": {"name": ["x"]}},
    {"name": "step.running", "runId": "r", "stepId": "a", "payload": {"progress": "half"}},
    {
        "name": "step.running",
        "runId": "r",
        "stepId": "a",
        "payload": {"progress": {"completed": "1", "total": True, "message": 5}},
    },
    {"name": "step.running", "runId": "r", "stepId": None, "payload": None},
    {"name": "step.complete", "runId": "r", "stepId": "a", "durationMs": "fast"},
    {"name": "step.failed", "runId": "r", "stepId": "a", "error": "boom"},
    {"name": "step.skipped", "runId": "r", "stepId": "a", "payload": {"reason": 1}},
    {
        "name": "pipeline.started",
        "runId": "t",
        "parentRunId": "r",
        "iteration": {"runId": "r", "stepId": None, "index": "one"},
    },
    {
        "name": "step.attempted",
        "runId": "t",
        "stepId": "decide",
        "payload": {"attributes": {"agent.turn": "x", "agent.callCount": None}},
    },
    {
        "name": "step.attempted",
        "runId": "t",
        "stepId": "calls",
        "payload": {"attributes": {"agent.turn": 1, "agent.callId": 5, "agent.tool": []}},
    },
    {"name": "pipeline.started", "runId": "c", "parentRunId": "t", "itemKey": 9},
    {"name": "pipeline.started", "runId": "c2", "parentRunId": "t", "itemKey": "k"},
    {"name": "pipeline.completed", "runId": "c2", "payload": {"status": "failed"}, "error": []},
    {"name": "pipeline.completed", "runId": "t", "payload": []},
    {"name": "pipeline.finalize.failed", "runId": "r", "error": None},
    {"name": "pipeline.completed", "runId": "r", "durationMs": float("nan"), "payload": {}},
]


def test_garbage_records_never_raise_and_print_placeholders() -> None:
    stream = io.StringIO()
    reporter = PlainReporter(stream, unicode=False, color=False)
    for record in GARBAGE:
        reporter.export(record)
    # Only the records without a string ``name`` and ``runId`` are dropped; the rest are read
    # with placeholders for what is missing or mistyped.
    assert reporter.dropped == 6
    assert stream.getvalue().splitlines()[0] == (
        "Pipeline ?: starting (? steps, dryRun=false), run r"
    )
    assert stream.getvalue().splitlines()[-1] == (
        "Pipeline ?: done in ? (status=?, steps=?, errors=?)"
    )


class BrokenStream(io.StringIO):
    def write(self, text: str) -> int:
        raise OSError("disk full")

    def flush(self) -> None:
        raise ValueError("closed")


def test_a_broken_stream_never_raises() -> None:
    reporter = PlainReporter(BrokenStream(), unicode=False, color=False)
    for record in SYNTHETIC:
        reporter.export(record)
    reporter.flush()
    reporter.close()
    assert reporter.dropped == len(SYNTHETIC)


JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.just(10**400)
    | st.floats()
    | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=8,
)
RECORD = st.fixed_dictionaries(
    {"name": st.sampled_from(RECORD_NAMES), "runId": st.sampled_from(["r", "t", "c"])},
    optional={
        "parentRunId": st.sampled_from(["r", "t"]) | JSON,
        "stepId": st.sampled_from(["agent", "decide", "calls"]) | JSON,
        "itemKey": st.sampled_from(["k"]) | JSON,
        "iteration": st.fixed_dictionaries(
            {"runId": st.just("r")}, optional={"stepId": JSON, "index": JSON}
        )
        | JSON,
        "durationMs": JSON,
        "error": st.fixed_dictionaries({}, optional={"message": JSON, "code": JSON}) | JSON,
        "payload": st.fixed_dictionaries(
            {},
            optional={
                "progress": st.fixed_dictionaries(
                    {}, optional={"completed": JSON, "total": JSON, "message": JSON}
                )
                | JSON,
                "attributes": st.fixed_dictionaries(
                    {"agent.turn": JSON},
                    optional={
                        "agent.callId": JSON,
                        "agent.tool": JSON,
                        "agent.decision": JSON,
                        "agent.callCount": JSON,
                    },
                )
                | JSON,
                "status": st.sampled_from(["completed", "failed", "cancelled"]) | JSON,
                "reason": JSON,
                "dependencyId": JSON,
                "message": JSON,
                "stepCount": JSON,
                "definitionSnapshot": JSON,
                "name": JSON,
                "description": JSON,
            },
        )
        | JSON,
    },
)


@pytest.mark.slow
@settings(max_examples=150, deadline=None)
@given(st.lists(RECORD, max_size=25))
def test_mistyped_fields_are_read_without_dropping_the_record(records: Records) -> None:
    """Whatever the field types, a record with a string name and run id is handled, not
    swallowed by the catch-all."""
    reporter = PlainReporter(io.StringIO(), unicode=True, color=True, clock=FakeClock(0.5))
    for record in records:
        reporter.export(record)
    assert reporter.dropped == 0
