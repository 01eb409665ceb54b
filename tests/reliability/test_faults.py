"""Faults: misbehaving handlers, trace destinations that break, and processes that die
(issue 9, "Faults"; DESIGN.md §3 cancellation, §6 signals and sink warnings, §7 traces).

Every scenario checks the same invariants: the run ends with its documented status and code, no
asyncio task is left, every handler invocation has finished by the time the run returns (and
every thread it used is joined once the loop closes), and the trace is complete: each run that
started has completed, the root's ``pipeline.completed`` is the last record, and every
``step.running`` attempt has exactly one terminal record.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import pytest
from pydantic import BeforeValidator

from tests.fixtures.processes import assert_trace_complete
from tests.fixtures.traces import sink_warnings as _sink_warnings
from tubeless import (
    CancelToken,
    Pipeline,
    PipelineRun,
    ToolError,
    define_agent,
    define_pipeline,
    define_tool,
    step,
)
from tubeless import errors as codes
from tubeless.testing import call, capture_trace, continue_with, finish, scripted
from tubeless.tracing import NdjsonSink, SqliteSink, read_trace
from tubeless.tracing.ndjson import read_ndjson
from tubeless.tracing.reader import TraceReadError
from tubeless.tracing.sqlite import read_sqlite

ROOT = Path(__file__).resolve().parents[2]
HANG_GUARD = 30  # seconds; hang guards only (DESIGN.md §9)
TERMINAL = {"step.complete", "step.failed", "step.cancelled", "step.skipped"}


# -- trace completeness ----------------------------------------------------------------------------
def root_status(records: list[dict[str, Any]]) -> str:
    return str(records[-1]["payload"]["status"])


# -- handlers that misbehave -----------------------------------------------------------------------
@dataclass
class Probe:
    """Records every handler invocation: where it ran and whether it has returned."""

    started: threading.Event = field(default_factory=threading.Event)
    invocations: list[tuple[str, bool]] = field(default_factory=list)
    threads: list[threading.Thread] = field(default_factory=list)
    finished: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    @contextlib.contextmanager
    def invocation(self, kind: str) -> Iterator[None]:
        thread = threading.current_thread()
        with self.lock:
            self.invocations.append((kind, thread is threading.main_thread()))
            if thread is not threading.main_thread():
                self.threads.append(thread)
        self.started.set()
        try:
            yield
        finally:
            with self.lock:
                self.finished += 1

    @property
    def all_finished(self) -> bool:
        with self.lock:
            return self.finished == len(self.invocations)


def _raise_tool_error(value: Any) -> Any:
    raise ToolError("NOT_FOUND", "raised by a validator")


@dataclass(frozen=True)
class Fault:
    """A misbehaving handler and how the run is driven."""

    name: str
    build: Callable[[Probe], Callable[..., Any]]
    drive: str = "wait"  # "wait" | "cancel-token" | "cancel-task"
    output_schema: Any = str
    input_schema: Any = str


def _raises(probe: Probe) -> Callable[..., Any]:
    async def handler(value: Any, ctx: Any) -> Any:
        with probe.invocation("async"):
            raise RuntimeError("the handler broke")

    return handler


def _raises_in_thread(probe: Probe) -> Callable[..., Any]:
    def handler(value: Any, ctx: Any) -> Any:
        with probe.invocation("sync"):
            raise RuntimeError("the handler broke in its thread")

    return handler


def _hangs_until_cancelled(probe: Probe) -> Callable[..., Any]:
    async def handler(value: Any, ctx: Any) -> Any:
        with probe.invocation("async"):
            await ctx.signal.wait()
            ctx.signal.raise_if_cancelled()

    return handler


def _hangs_ignoring_the_signal(probe: Probe) -> Callable[..., Any]:
    async def handler(value: Any, ctx: Any) -> Any:
        with probe.invocation("async"):
            await asyncio.Event().wait()  # only a task cancellation ends this

    return handler


def _ignores_cancellation_for_a_while(probe: Probe) -> Callable[..., Any]:
    def handler(value: Any, ctx: Any) -> Any:
        with probe.invocation("sync"):
            deadline = time.monotonic() + HANG_GUARD
            while not ctx.signal.cancelled and time.monotonic() < deadline:
                time.sleep(0.005)
            time.sleep(0.3)  # cancelled: a sync handler in a thread that ignores it for a while
            return "late"

    return handler


def _invalid_output(probe: Probe) -> Callable[..., Any]:
    async def handler(value: Any, ctx: Any) -> Any:
        with probe.invocation("async"):
            return 12345  # the output schema wants a string

    return handler


def _returns(probe: Probe) -> Callable[..., Any]:
    def handler(value: Any, ctx: Any) -> Any:
        with probe.invocation("sync"):
            return "fine"

    return handler


def _tool_error(probe: Probe) -> Callable[..., Any]:
    async def handler(value: Any, ctx: Any) -> Any:
        with probe.invocation("async"):
            raise ToolError("NOT_FOUND", "nothing there")

    return handler


REJECTING = Annotated[str, BeforeValidator(_raise_tool_error)]

FAULTS = {
    "raises": Fault("raises", _raises),
    "raises-in-thread": Fault("raises-in-thread", _raises_in_thread),
    "hangs-until-token-cancelled": Fault(
        "hangs-until-token-cancelled", _hangs_until_cancelled, drive="cancel-token"
    ),
    "hangs-until-task-cancelled": Fault(
        "hangs-until-task-cancelled", _hangs_ignoring_the_signal, drive="cancel-task"
    ),
    "ignores-token-cancellation": Fault(
        "ignores-token-cancellation", _ignores_cancellation_for_a_while, drive="cancel-token"
    ),
    "ignores-task-cancellation": Fault(
        "ignores-task-cancellation", _ignores_cancellation_for_a_while, drive="cancel-task"
    ),
    "invalid-output": Fault("invalid-output", _invalid_output),
    "validator-tool-error": Fault(
        "validator-tool-error", _returns, output_schema=REJECTING, input_schema=REJECTING
    ),
    "handler-tool-error": Fault("handler-tool-error", _tool_error),
}

# (status, source code of the first error) per fault; None: the awaiting task is cancelled.
PIPELINE_EXPECTED: dict[str, tuple[str, str | None] | None] = {
    "raises": ("failed", codes.STEP_FAILED),
    "raises-in-thread": ("failed", codes.STEP_FAILED),
    "hangs-until-token-cancelled": ("cancelled", codes.RUN_CANCELLED),
    "hangs-until-task-cancelled": None,
    "ignores-token-cancellation": ("cancelled", codes.RUN_CANCELLED),
    "ignores-task-cancellation": None,
    "invalid-output": ("failed", codes.STEP_OUTPUT_VALIDATION_FAILED),
    "validator-tool-error": ("failed", "NOT_FOUND"),
    "handler-tool-error": ("failed", "NOT_FOUND"),
}
AGENT_EXPECTED: dict[str, tuple[str, str | None] | None] = {
    **PIPELINE_EXPECTED,
    # The tool's input validator runs before any handler: a fatal failure, not an outcome.
    "validator-tool-error": ("failed", "NOT_FOUND"),
    # A ToolError from the handler itself is an outcome the agent recovers from.
    "handler-tool-error": ("completed", None),
}


def _pipeline_with(fault: Fault, probe: Probe) -> Pipeline:
    handler = fault.build(probe)
    if asyncio.iscoroutinefunction(handler):

        async def work(inputs: dict[str, Any], ctx: Any) -> Any:
            return await handler(ctx.options, ctx)

    else:

        def work(inputs: dict[str, Any], ctx: Any) -> Any:  # type: ignore[misc]
            return handler(ctx.options, ctx)

    return define_pipeline(
        id="faulty-pipeline",
        options_schema=str,
        steps=[
            step("before", lambda inputs, ctx: "ready"),
            step("work", work, depends_on=["before"], output_schema=fault.output_schema),
            step("after", lambda inputs, ctx: "after", depends_on=["work"]),
        ],
    )


def faulty_agent(fault: Fault, probe: Probe) -> Pipeline:
    """Turn 1 calls ``ok`` and ``work`` (the fault); turn 2 finishes with the outcomes."""
    ok_probe = Probe()

    def reduce(state: Any, outcomes: Any) -> Any:
        return {"outcomes": [dict(o) for o in outcomes]}

    return define_agent(
        id="faulty-agent",
        input_schema=str,
        result_schema=Any,
        initial_state=lambda validated: {"outcomes": []},
        decide=scripted(
            continue_with(call("ok", "x", "c-ok"), call("work", "x", "c-work")),
            lambda state, ctx: finish(len(state["outcomes"])),
        ),
        reduce=reduce,
        tools={
            "ok": define_tool(
                description="Fine.", input_schema=str, output_schema=str, run=_returns(ok_probe)
            ),
            "work": define_tool(
                description="Faulty.",
                input_schema=fault.input_schema,
                output_schema=fault.output_schema,
                run=fault.build(probe),
            ),
        },
        limits={"max_concurrency": 2},
    )


BUILDERS = {"pipeline": _pipeline_with, "agent": faulty_agent}
EXPECTED = {"pipeline": PIPELINE_EXPECTED, "agent": AGENT_EXPECTED}


async def _drive(
    target: Pipeline, fault: Fault, probe: Probe
) -> tuple[PipelineRun | None, list[dict[str, Any]]]:
    token = CancelToken()
    with capture_trace() as trace:
        task = asyncio.create_task(target.run("x", trace=trace, signal=token))
        if fault.drive != "wait":
            await asyncio.wait_for(asyncio.to_thread(probe.started.wait, HANG_GUARD), HANG_GUARD)
            if fault.drive == "cancel-token":
                token.cancel("stopped by the test")
            else:
                task.cancel()
        try:
            run = await asyncio.wait_for(asyncio.shield(task), HANG_GUARD)
        except asyncio.CancelledError:
            run = None
        # The run has returned (or re-raised): no handler may still be running.
        assert probe.all_finished, "a handler was still running when the run returned"
    others = asyncio.all_tasks() - {asyncio.current_task()}
    assert others == set(), f"tasks left behind: {others}"
    return run, trace.records


@pytest.mark.parametrize("kind", sorted(BUILDERS))
@pytest.mark.parametrize("name", sorted(FAULTS))
def test_a_faulty_handler_ends_the_run_cleanly_with_a_complete_trace(kind: str, name: str) -> None:
    fault = FAULTS[name]
    probe = Probe()
    target = BUILDERS[kind](fault, probe)
    threads_before = set(threading.enumerate())

    run, records = asyncio.run(_drive(target, fault, probe))

    # asyncio.run has shut the default executor down: every worker thread is joined.
    assert set(threading.enumerate()) == threads_before
    assert all(not thread.is_alive() for thread in probe.threads)
    expected = EXPECTED[kind][name]
    if expected is None:
        assert run is None, "cancelling the awaiting task re-raises CancelledError"
        assert root_status(records) == "cancelled"
    else:
        assert run is not None
        status, source = expected
        first = run.errors[0] if run.errors else None
        found = None if first is None else first.source_code or first.code
        assert (run.status, found) == (status, source), [e.format() for e in run.errors]
        assert root_status(records) == status
    if name == "validator-tool-error" and kind == "agent":
        assert probe.invocations == [], "a rejected argument let its handler start"
    assert_trace_complete(records)


# -- trace destinations that break mid-run ---------------------------------------------------------
def _long_pipeline(on_middle: Callable[[], None]) -> Pipeline:
    """200 steps; the 100th calls ``on_middle`` (so every sink has exported and committed
    records before the destination breaks, and keeps receiving records after)."""

    def middle(inputs: dict[str, Any], ctx: Any) -> int:
        on_middle()
        return 1

    steps = [step(f"s{i}", lambda inputs, ctx: 1) for i in range(100)]
    steps.append(step("middle", middle))
    steps += [step(f"t{i}", lambda inputs, ctx: 1) for i in range(100)]
    return define_pipeline(id="long", steps=steps)


def test_an_ndjson_stream_closed_and_its_folder_removed_mid_run_does_not_fail_the_run(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    folder = tmp_path / "traces"
    folder.mkdir()
    stream = (folder / "run.ndjson").open("a", encoding="utf-8")
    broken = NdjsonSink(stream)

    def break_it() -> None:
        shutil.rmtree(folder)
        stream.close()

    with caplog.at_level(logging.WARNING), capture_trace() as healthy:
        run = asyncio.run(_long_pipeline(break_it).run(None, trace=[broken, healthy]))
    with pytest.raises(ValueError):  # its stream is closed: the opener's close says so
        broken.close()

    assert run.status == "completed"
    (warning,) = _sink_warnings(caplog)
    assert "NdjsonSink" in warning
    assert_trace_complete(healthy.records)


def test_a_sqlite_store_deleted_mid_run_is_reported_once_and_does_not_fail_the_run(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "run.sqlite"
    store = SqliteSink(path)

    def delete() -> None:
        for suffix in ("", "-wal", "-shm"):
            with contextlib.suppress(FileNotFoundError):
                os.remove(f"{path}{suffix}")

    with caplog.at_level(logging.WARNING), capture_trace() as healthy:
        run = asyncio.run(_long_pipeline(delete).run(None, trace=[store, healthy]))
    store.close()

    assert run.status == "completed"
    assert_trace_complete(healthy.records)
    (warning,) = _sink_warnings(caplog)
    assert "SqliteSink" in warning


def test_a_sqlite_store_deleted_mid_run_does_not_fail_the_run(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The part of the above that holds today: the run completes, at most one warning."""
    path = tmp_path / "run.sqlite"
    store = SqliteSink(path)

    def delete() -> None:
        for suffix in ("", "-wal", "-shm"):
            with contextlib.suppress(FileNotFoundError):
                os.remove(f"{path}{suffix}")

    with caplog.at_level(logging.WARNING), capture_trace() as healthy:
        run = asyncio.run(_long_pipeline(delete).run(None, trace=[store, healthy]))
    store.close()

    assert run.status == "completed"
    assert_trace_complete(healthy.records)
    assert len(_sink_warnings(caplog)) <= 1


def test_a_full_device_does_not_fail_the_run_and_is_reported_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """``/dev/full`` fails every write with ENOSPC: a trace destination that has filled up."""
    if not os.path.exists("/dev/full"):
        pytest.skip("needs /dev/full")
    (tmp_path / "full.ndjson").symlink_to("/dev/full")
    full = NdjsonSink(tmp_path / "full.ndjson")

    with caplog.at_level(logging.WARNING), capture_trace() as healthy:
        run = asyncio.run(_long_pipeline(lambda: None).run(None, trace=[full, healthy]))
    with contextlib.suppress(OSError):
        full.close()

    assert run.status == "completed"
    (warning,) = _sink_warnings(caplog)
    assert "No space left" in warning
    assert_trace_complete(healthy.records)


@pytest.mark.skipif(os.geteuid() == 0, reason="root ignores directory permissions")
def test_a_folder_made_read_only_mid_run_does_not_fail_the_run(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    folder = tmp_path / "traces"
    ndjson, store = NdjsonSink(folder / "run.ndjson"), SqliteSink(folder / "run.sqlite")

    def lock() -> None:
        for path in folder.iterdir():
            path.chmod(0o444)
        folder.chmod(0o555)

    try:
        with caplog.at_level(logging.WARNING), capture_trace() as healthy:
            run = asyncio.run(_long_pipeline(lock).run(None, trace=[ndjson, store, healthy]))
        with contextlib.suppress(Exception):
            ndjson.close()
        with contextlib.suppress(Exception):
            store.close()
    finally:
        folder.chmod(0o755)

    assert run.status == "completed"
    assert len(_sink_warnings(caplog)) <= 2
    assert_trace_complete(healthy.records)


# -- the CLI: destinations that fill up, signals, kill -9 ------------------------------------------
SLOW_PROJECT = """\
version: 1
project: {id: slow}
python_path: [.]
agents:
  slow:
    input: {schema: {type: object}}
    result: {schema: {}}
    initial_state: {turns: "0"}
    decide: "MODULE:decide"
    reduce: "MODULE:reduce"
    limits: {max_turns: 5, max_calls: 200, max_decisions: 5, max_concurrency: 4}
    tools:
      fast: {run: "MODULE:fast", description: Fast., input: {schema: {type: string}},
             output: {schema: {type: string}}}
      slow: {run: "MODULE:slow", description: Slow., input: {schema: {type: string}},
             output: {schema: {type: string}}}
"""
SLOW_MODULE = """\
import asyncio, pathlib

READY = pathlib.Path(__file__).with_name("READY")
BATCH = {batch}


def decide(state, ctx):
    if ctx.turn == 1:
        calls = [{{"id": f"c{{i}}", "tool": "fast", "input": f"w{{i}}"}} for i in range(BATCH)]
        return {{"kind": "continue", "calls": calls}}
    if ctx.turn == 2:
        return {{"kind": "continue", "calls": [{{"id": "s", "tool": "slow", "input": "x"}}]}}
    return {{"kind": "finish", "result": "done"}}


def reduce(state, outcomes):
    return {{"turns": str(int(state["turns"]) + 1)}}


async def fast(value, ctx):
    ctx.log.info("fast call %s", value)
    return value.upper()


async def slow(value, ctx):
    READY.write_text("ready")
    try:
        await ctx.signal.wait()
    finally:
        ctx.log.info("slow call ends")
    ctx.signal.raise_if_cancelled()
    return value
"""


def _slow_project(tmp_path: Path, batch: int = 60, *, slow_waits: bool = True) -> Path:
    """The slow project; its turn-2 call waits for cancellation unless ``slow_waits`` is off."""
    module = f"slow_{uuid.uuid4().hex}"
    source = SLOW_MODULE.format(batch=batch)
    if not slow_waits:
        source = source.replace("await ctx.signal.wait()", "await asyncio.sleep(0)")
    (tmp_path / f"{module}.py").write_text(source, encoding="utf-8")
    path = tmp_path / "slow.yaml"
    path.write_text(SLOW_PROJECT.replace("MODULE", module), encoding="utf-8")
    return path


def _start(
    tmp_path: Path, *args: str, preexec: Callable[[], None] | None = None
) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "tubeless", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        preexec_fn=preexec,
    )


def _wait_ready(process: subprocess.Popen[str], ready: Path) -> None:
    deadline = time.monotonic() + 60  # a hang guard, not a timing assertion
    while not ready.exists() and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert ready.exists(), process.communicate(timeout=10)


def _is_prefix(shorter: list[Any], longer: list[Any]) -> bool:
    return len(shorter) <= len(longer) and longer[: len(shorter)] == shorter


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_leaves_both_stored_traces_complete_and_equal(tmp_path: Path, signum: int) -> None:
    """Deeper than tests/cli/test_run_cli.py: an agent mid-batch, SQLite and NDJSON at once."""
    path = _slow_project(tmp_path)
    sqlite_path, ndjson_path = tmp_path / "run.sqlite", tmp_path / "run.ndjson"
    process = _start(
        tmp_path, "run", str(path), "--trace", str(sqlite_path), "--trace", str(ndjson_path), "-q"
    )
    _wait_ready(process, tmp_path / "READY")
    process.send_signal(signum)
    out, err = process.communicate(timeout=60)

    assert process.returncode == 7, err
    assert out == ""
    stored = read_sqlite(sqlite_path)
    assert stored == read_ndjson(ndjson_path)
    assert_trace_complete(stored)
    assert root_status(stored) == "cancelled"


def _exceeds_file_size() -> None:
    import resource

    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG
    resource.setrlimit(resource.RLIMIT_FSIZE, (192 * 1024, 192 * 1024))


@pytest.mark.skipif(sys.platform != "linux", reason="RLIMIT_FSIZE behaviour differs elsewhere")
def test_cli_traces_that_fill_up_leave_the_exit_code_alone_with_one_warning_each(
    tmp_path: Path,
) -> None:
    """Every file the process writes is capped at 192 KiB, so both traces fill up mid-run."""
    path = _slow_project(tmp_path, batch=150, slow_waits=False)
    process = _start(
        tmp_path,
        "run",
        str(path),
        "--trace",
        "run.sqlite",
        "--trace",
        "run.ndjson",
        "-q",
        preexec=_exceeds_file_size,
    )
    out, err = process.communicate(timeout=120)

    assert process.returncode == 0, err
    assert json.loads(out) == "done"
    lines = err.splitlines()
    assert len(lines) == 2, err
    assert all(line.startswith("warning: ") for line in lines), err
    assert any("run.sqlite" in line for line in lines)
    assert any("run.ndjson" in line for line in lines)


@pytest.mark.skipif(sys.platform != "linux", reason="RLIMIT_FSIZE behaviour differs elsewhere")
def test_cli_traces_that_fill_up_leave_the_exit_code_alone(tmp_path: Path) -> None:
    """The part of the above that holds today: exit 0, the result, readable prefixes."""
    path = _slow_project(tmp_path, batch=150, slow_waits=False)
    process = _start(
        tmp_path,
        "run",
        str(path),
        "--trace",
        "run.sqlite",
        "--trace",
        "run.ndjson",
        "-q",
        preexec=_exceeds_file_size,
    )
    out, err = process.communicate(timeout=120)

    assert process.returncode == 0, err
    assert json.loads(out) == "done"
    assert "Traceback" not in err
    assert "run.sqlite" in err and "run.ndjson" in err
    stored = read_sqlite(tmp_path / "run.sqlite")  # committed batches only, every row decodes
    assert stored and stored[0]["name"] == "pipeline.started"


def _whole_lines(path: Path) -> tuple[list[dict[str, Any]], bytes]:
    """The records of the whole lines of an NDJSON file, and the partial tail (maybe b"")."""
    data = path.read_bytes()
    whole, _, tail = data.rpartition(b"\n")
    records = [json.loads(line) for line in whole.split(b"\n") if line.strip()]
    return records, tail


def test_kill_9_mid_run_leaves_a_readable_sqlite_prefix_and_whole_ndjson_lines(
    tmp_path: Path,
) -> None:
    """SIGKILL once the 60 calls of turn 1 are done and turn 2's call is running."""
    path = _slow_project(tmp_path, batch=60)
    sqlite_path, ndjson_path = tmp_path / "run.sqlite", tmp_path / "run.ndjson"
    process = _start(
        tmp_path, "run", str(path), "--trace", str(sqlite_path), "--trace", str(ndjson_path), "-q"
    )
    _wait_ready(process, tmp_path / "READY")
    process.kill()
    process.communicate(timeout=60)
    assert process.returncode == -signal.SIGKILL

    stored = read_sqlite(sqlite_path)  # opens read-only despite the -wal; every row decodes
    assert len(stored) >= 64, "whole batches of 64 were committed before the kill"
    with sqlite3.connect(f"{sqlite_path.resolve().as_uri()}?mode=ro", uri=True) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    lines, tail = _whole_lines(ndjson_path)
    assert lines, "the NDJSON sink had flushed whole buffers before the kill"
    # Both sinks saw the same records in the same order: one holds a prefix of the other.
    assert _is_prefix(stored, lines) or _is_prefix(lines, stored)
    assert stored[0]["name"] == "pipeline.started" and "parentRunId" not in stored[0]
    if tail:
        with pytest.raises(TraceReadError) as caught:
            read_ndjson(ndjson_path)
        assert caught.value.line == len(ndjson_path.read_bytes().split(b"\n"))
    else:
        assert read_ndjson(ndjson_path) == lines


def _crashed_ndjson(tmp_path: Path) -> tuple[Path, list[dict[str, Any]]]:
    """A whole NDJSON trace cut in the middle of a line, as a crash leaves it."""
    path = tmp_path / "crashed.ndjson"
    with capture_trace() as trace:
        asyncio.run(_long_pipeline(lambda: None).run(None, trace=trace))
    with NdjsonSink(path) as sink:
        for record in trace.records:
            sink.export(record)
    data = path.read_bytes()
    lines = data.split(b"\n")
    cut = len(data) - len(lines[-2]) // 2 - 1  # half of the last record's line
    path.write_bytes(data[:cut])
    whole = len(lines) - 2  # every line but the cut one (and the empty end)
    return path, trace.records[:whole]


def test_the_reader_names_the_partial_last_line_a_crash_left(tmp_path: Path) -> None:
    path, records = _crashed_ndjson(tmp_path)
    with pytest.raises(TraceReadError) as caught:
        read_ndjson(path)
    assert caught.value.line == len(records) + 1
    assert f"{path}:{len(records) + 1}:" in str(caught.value)


def test_the_reader_skips_a_partial_last_line_on_request(tmp_path: Path) -> None:
    path, records = _crashed_ndjson(tmp_path)
    assert read_ndjson(path, allow_partial_tail=True) == records
    complete = tmp_path / "complete.ndjson"
    complete.write_bytes(path.read_bytes().rpartition(b"\n")[0] + b"\n")
    assert read_ndjson(complete, allow_partial_tail=True) == records
    corrupt = tmp_path / "corrupt.ndjson"
    lines = path.read_bytes().split(b"\n")
    lines[3] = b"{not json"
    corrupt.write_bytes(b"\n".join(lines))
    with pytest.raises(TraceReadError) as caught:  # only the last line may be partial
        read_ndjson(corrupt, allow_partial_tail=True)
    assert caught.value.line == 4
    assert read_trace(complete) == records
