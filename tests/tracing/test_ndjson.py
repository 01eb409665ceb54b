"""NDJSON traces: the sink writes one compact record per line; the reader is bounded and strict
(UPSTREAM §2.6)."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest

from tubeless import define_pipeline, step
from tubeless.tracing import NdjsonSink, TraceReadError, read_trace
from tubeless.tracing.ndjson import read_ndjson
from tubeless.tracing.reader import TRACE_INVALID


def record(index: int = 0, **extra: Any) -> dict[str, Any]:
    return {
        "version": 3,
        "name": "pipeline.log",
        "runId": "p:1",
        "pipelineId": "p",
        "timestampMs": 1_700_000_000_000 + index,
        "stepId": "s",
        "payload": {"level": "log", "message": f"line {index} ✓"},
        **extra,
    }


def line(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode() + b"\n"


def two_steps() -> Any:
    return define_pipeline(
        id="two",
        steps=[
            step("a", lambda inputs, ctx: 1),
            step("b", lambda inputs, ctx: inputs["a"] + 1, depends_on=["a"]),
        ],
    )


# -- the sink ---------------------------------------------------------------------------------


async def test_a_run_writes_one_compact_line_per_record(tmp_path: Path) -> None:
    """Every record is `json.dumps(record, separators=(",", ":"), ensure_ascii=False)` + LF."""
    path = tmp_path / "trace.ndjson"
    with NdjsonSink(path) as sink:
        await two_steps().run(trace=sink)

    lines = path.read_bytes().split(b"\n")
    assert lines[-1] == b""
    records = [json.loads(text) for text in lines[:-1]]
    assert [r["name"] for r in records][:3] == ["pipeline.started", "step.planned", "step.planned"]
    assert records[-1]["name"] == "pipeline.completed"
    for text, parsed in zip(lines, records, strict=False):
        assert text.decode() == json.dumps(parsed, separators=(",", ":"), ensure_ascii=False)
    assert read_ndjson(path) == records


def test_non_ascii_text_is_written_as_utf8_not_escaped(tmp_path: Path) -> None:
    """ensure_ascii=False: the file holds the characters themselves."""
    path = tmp_path / "t.ndjson"
    with NdjsonSink(path) as sink:
        sink.export(record())
    assert "✓".encode() in path.read_bytes()
    assert b"\\u" not in path.read_bytes()


def test_the_sink_appends_to_an_existing_file(tmp_path: Path) -> None:
    """A second sink on the same path adds lines after the first sink's."""
    path = tmp_path / "t.ndjson"
    for index in range(2):
        with NdjsonSink(path) as sink:
            sink.export(record(index))
    assert [r["timestampMs"] for r in read_ndjson(path)] == [
        1_700_000_000_000,
        1_700_000_000_001,
    ]


def test_parent_folders_are_created(tmp_path: Path) -> None:
    """A path in folders that do not exist yet works."""
    path = tmp_path / "a" / "b" / "t.ndjson"
    with NdjsonSink(str(path)) as sink:
        sink.export(record())
    assert read_ndjson(path) == [record()]


def test_writes_are_buffered_until_flush(tmp_path: Path) -> None:
    """Nothing need reach the file before flush; everything has after it."""
    path = tmp_path / "t.ndjson"
    sink = NdjsonSink(path)
    sink.export(record())
    assert path.read_bytes() == b""
    sink.flush()
    assert path.read_bytes() == line(record())
    sink.close()


def test_dash_writes_to_stdout_and_close_leaves_it_open(capsys: pytest.CaptureFixture[str]) -> None:
    """`-` is standard output; closing the sink flushes but never closes stdout."""
    sink = NdjsonSink("-")
    sink.export(record())
    sink.close()
    out = capsys.readouterr().out
    assert out == line(record()).decode()
    print("still open")
    assert capsys.readouterr().out == "still open\n"


def test_a_stream_given_to_the_sink_is_not_closed_by_it() -> None:
    """The opener closes: a caller's stream stays open after close()."""
    stream = io.StringIO()
    sink = NdjsonSink(stream)
    sink.export(record())
    sink.close()
    assert not stream.closed
    assert stream.getvalue() == line(record()).decode()


def test_a_stream_that_cannot_encode_utf8_gets_ascii_escapes() -> None:
    """A latin-1 stream receives `\\uXXXX` escapes rather than failing on `✓`."""
    raw = io.BytesIO()
    stream = io.TextIOWrapper(raw, encoding="latin-1")
    with NdjsonSink(stream) as sink:
        sink.export(record())
    assert json.loads(raw.getvalue()) == record()
    assert b"\\u2713" in raw.getvalue()


def test_exporting_after_close_raises(tmp_path: Path) -> None:
    """A closed sink refuses records (the fan-out then retires it); close is idempotent."""
    sink = NdjsonSink(tmp_path / "t.ndjson")
    sink.close()
    sink.close()
    sink.flush()
    with pytest.raises(ValueError, match="closed"):
        sink.export(record())


# -- the reader -------------------------------------------------------------------------------


def test_crlf_and_blank_or_whitespace_lines_are_tolerated(tmp_path: Path) -> None:
    """CRLF line ends, empty lines and whitespace-only lines are read past."""
    path = tmp_path / "t.ndjson"
    path.write_bytes(
        b"\r\n"
        + line(record(0)).replace(b"\n", b"\r\n")
        + b"   \t \n\n"
        + line(record(1))
        + "\u00a0\u2003\n".encode()
        + line(record(2)).rstrip(b"\n")
    )
    assert [r["timestampMs"] % 10 for r in read_ndjson(path)] == [0, 1, 2]


def test_an_empty_file_has_no_records(tmp_path: Path) -> None:
    """Zero bytes: zero records."""
    path = tmp_path / "t.ndjson"
    path.write_bytes(b"")
    assert read_ndjson(path) == []


def test_a_missing_file_is_file_not_found(tmp_path: Path) -> None:
    """Not a TraceReadError: nothing was read."""
    with pytest.raises(FileNotFoundError):
        read_ndjson(tmp_path / "missing.ndjson")


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        pytest.param(b"\xff\xfe{}\n", "invalid UTF-8 at byte 1", id="invalid-utf8"),
        pytest.param(b'{"version": 3,\n', "invalid JSON: ", id="invalid-json"),
        pytest.param(b"[1, 2]\n", "expected a JSON object", id="array"),
        pytest.param(b"42\n", "expected a JSON object", id="number"),
        pytest.param(line({**record(), "name": "step.nope"}), "'name'", id="unknown-name"),
        pytest.param(line({**record(), "version": 4}), "'version' must be 2 or 3", id="version"),
        pytest.param(line({**record(), "version": True}), "'version'", id="bool-version"),
        pytest.param(line({**record(), "runId": 5}), "'runId' must be a string", id="run-id"),
        pytest.param(
            line({k: v for k, v in record().items() if k != "pipelineId"}),
            "'pipelineId'",
            id="no-pipeline-id",
        ),
        pytest.param(
            line({**record(), "timestampMs": 1.5}), "'timestampMs' must be an integer", id="ts"
        ),
        pytest.param(line({**record(), "payload": None}), "'payload'", id="payload"),
        pytest.param(line({**record(), "stepId": None}), "'stepId'", id="null-step-id"),
        pytest.param(
            line({**record(), "version": 2, "iteration": {}}), "version-2", id="v2-iteration"
        ),
    ],
)
def test_a_bad_line_is_reported_with_file_and_line_number(
    tmp_path: Path, bad: bytes, message: str
) -> None:
    """Invalid UTF-8, invalid JSON, non-objects and bad envelopes name `<file>:<line>`."""
    path = tmp_path / "t.ndjson"
    path.write_bytes(line(record(0)) + b"\n" + line(record(1)) + bad + line(record(2)))

    with pytest.raises(TraceReadError) as caught:
        read_ndjson(path)

    error = caught.value
    assert (error.code, error.path, error.line) == (TRACE_INVALID, str(path), 4)
    assert str(error).startswith(f"{path}:4: ")
    assert message in str(error)


def test_version_2_records_are_read(tmp_path: Path) -> None:
    """Readers accept version 2 as well as 3."""
    path = tmp_path / "t.ndjson"
    path.write_bytes(line({**record(), "version": 2}))
    assert read_ndjson(path)[0]["version"] == 2


def test_the_file_size_bound(tmp_path: Path) -> None:
    """A file over max_bytes is refused before parsing; at the bound it is read."""
    path = tmp_path / "t.ndjson"
    data = line(record(0)) + line(record(1))
    path.write_bytes(data)
    assert len(read_ndjson(path, max_bytes=len(data))) == 2
    with pytest.raises(TraceReadError, match=f"more than the {len(data) - 1} allowed") as caught:
        read_ndjson(path, max_bytes=len(data) - 1)
    assert caught.value.line is None


def test_the_line_length_bound(tmp_path: Path) -> None:
    """A line over max_line_bytes (not counting its CR LF) names its line; at the bound it fits."""
    path = tmp_path / "t.ndjson"
    first = line(record(0))
    second = line(record(1, payload={"level": "log", "message": "x" * 200}))
    path.write_bytes(first.replace(b"\n", b"\r\n") + second)
    content = len(first) - 1

    assert len(read_ndjson(path, max_line_bytes=len(second) - 1)) == 2
    with pytest.raises(TraceReadError, match="the line has more than the") as caught:
        read_ndjson(path, max_line_bytes=content - 1)
    assert caught.value.line == 1
    with pytest.raises(TraceReadError) as caught:
        read_ndjson(path, max_line_bytes=content)
    assert caught.value.line == 2


def test_the_record_count_bound(tmp_path: Path) -> None:
    """More than max_records records is refused, naming the first line past the bound."""
    path = tmp_path / "t.ndjson"
    path.write_bytes(b"".join(line(record(i)) for i in range(3)))
    assert len(read_ndjson(path, max_records=3)) == 3
    with pytest.raises(TraceReadError, match="more than the 2 records allowed") as caught:
        read_ndjson(path, max_records=2)
    assert caught.value.line == 3


def test_the_default_bounds_are_the_upstream_ones() -> None:
    """64 MiB per file, 1 MiB per line, 100,000 records: the bounds callers may pass."""
    from tubeless.tracing.ndjson import MAX_LINE_BYTES, MAX_RECORDS, MAX_TRACE_BYTES

    assert (MAX_TRACE_BYTES, MAX_LINE_BYTES, MAX_RECORDS) == (64 << 20, 1 << 20, 100_000)


@pytest.mark.parametrize("suffix", [".ndjson", ".jsonl", ".NDJSON"])
def test_read_trace_reads_ndjson_by_extension(tmp_path: Path, suffix: str) -> None:
    """`.ndjson` and `.jsonl` (any case) are NDJSON."""
    path = tmp_path / f"t{suffix}"
    path.write_bytes(line(record()))
    assert read_trace(path) == [record()]


def test_read_trace_refuses_other_extensions_naming_the_accepted_ones(tmp_path: Path) -> None:
    """`.json` is not a trace extension; the message lists the ones that are."""
    path = tmp_path / "t.json"
    path.write_bytes(line(record()))
    with pytest.raises(TraceReadError, match=r"'\.json'.*\.ndjson, \.jsonl, \.sqlite, "):
        read_trace(path)


async def test_lines_are_exactly_the_compact_json_of_each_record(tmp_path: Path) -> None:
    """The sink reuses each run's encoded relation fields; the bytes are json.dumps's own."""
    from examples.agent_delegation import delegating_agent
    from tubeless.testing import capture_trace

    path = tmp_path / "trace.ndjson"
    with capture_trace() as trace, NdjsonSink(path) as sink:
        run = await delegating_agent.run(
            {"question": "red blue é"}, trace=[sink, trace], correlation_id="corr-ü"
        )
    assert run.status == "completed"
    expected = "".join(
        json.dumps(r, separators=(",", ":"), ensure_ascii=False) + "\n" for r in trace.records
    )
    assert {r["name"] for r in trace.records} >= {"step.attempted", "step.running"}
    assert any("iteration" in r and "correlationId" in r for r in trace.records)
    assert path.read_text(encoding="utf-8") == expected


async def test_a_plans_constant_payloads_are_encoded_once_for_every_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``step.planned`` and ``pipeline.started`` payloads are shared by every run of a plan
    and encoded once, and each line is still the compact JSON of its record."""
    import tubeless.tracing.records as records

    encoded: list[int] = []
    real = records.compact_json

    def counting(value: Any) -> str:
        if type(value) is records.ConstantPayload:
            encoded.append(id(value))
        return real(value)

    monkeypatch.setattr(records, "compact_json", counting)
    pipeline = two_steps()
    path = tmp_path / "t.ndjson"
    with NdjsonSink(path) as sink:
        for _ in range(3):
            await pipeline.run(trace=sink)
    lines = path.read_bytes().splitlines(keepends=True)
    assert all(line(json.loads(text)) == text for text in lines)
    names = [json.loads(text)["name"] for text in lines]
    assert names.count("step.planned") == 6 and names.count("pipeline.started") == 3
    assert len(encoded) == len(set(encoded)) == 3  # two plan steps and one run start


async def test_every_record_shape_is_the_compact_json_of_its_record(tmp_path: Path) -> None:
    """Progress, attempt attributes with and without a duration, a failure, a skip, a failed
    run and non-ASCII ids: each line is still `json.dumps` of its record."""
    from tubeless.testing import capture_trace

    def busy(inputs: Any, ctx: Any) -> int:
        ctx.report_progress(1, 3, "one ✓", [{"id": "r", "name": "é", "depth": 0}])
        ctx.report_progress(2.5)
        ctx.report_progress(2, 3, "two", [{"id": "a", "depth": 1}, {"id": "b", "n": 2.5}])
        ctx.report_progress(3, None, None, [{"id": str(i)} for i in range(130)])
        ctx.report_attempt(2, {"k": "vé", "n": 1, "f": 0.5, "b": True, "none": None})
        ctx.report_attempt(1, {"k": 1}, duration_ms=1.25)
        ctx.log.info("hello %s", "wörld")
        return 1

    def broken(inputs: Any, ctx: Any) -> int:
        raise ValueError("no ✗")

    pipeline = define_pipeline(
        id="shapes-é",
        steps=[
            step("bü", busy),
            step("x", broken, depends_on=["bü"]),
            step("after", lambda inputs, ctx: 2, depends_on=["x"]),
        ],
    )
    path = tmp_path / "trace.ndjson"
    with capture_trace() as trace, NdjsonSink(path) as sink:
        run = await pipeline.run(trace=[sink, trace], correlation_id="c-ü")
    assert run.status == "failed"
    names = {r["name"] for r in trace.records}
    assert {"step.failed", "step.skipped", "pipeline.log", "step.attempted"} <= names
    expected = "".join(
        json.dumps(r, separators=(",", ":"), ensure_ascii=False) + "\n" for r in trace.records
    )
    assert path.read_text(encoding="utf-8") == expected


async def test_a_finished_iterations_progress_row_is_encoded_once_for_all_reports(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every later progress report shows a finished iteration's row again; its JSON is made
    once, and each line is still the compact JSON of its record."""
    import tubeless.tracing._bounds as bounds
    import tubeless.tracing.records as records
    from tubeless.pipeline import iterate_pipeline

    encoded: list[str] = []

    def counting(real: Any) -> Any:
        def encode(value: Any) -> str:
            rows = value if isinstance(value, list) else [value]
            encoded.extend(
                row["id"]
                for row in rows
                if isinstance(row, dict) and row.get("status") == "completed"
            )
            return str(real(value))

        return encode

    monkeypatch.setattr(records, "compact_json", counting(records.compact_json))
    monkeypatch.setattr(bounds, "compact_json", counting(bounds.compact_json))
    child = define_pipeline(id="child", steps=[step("add", lambda inputs, ctx: ctx.options + 1)])
    parent = define_pipeline(
        id="parent",
        steps=[
            iterate_pipeline(
                "loop",
                child,
                max_iterations=20,
                initial_state=lambda inputs, ctx: 0,
                map_options=lambda state, inputs, ctx: state,
                transition=lambda result, state, ctx: (
                    {"kind": "finish", "result": result}
                    if result >= 12
                    else {"kind": "next", "state": result}
                ),
            )
        ],
    )
    path = tmp_path / "t.ndjson"
    with NdjsonSink(path) as sink:
        run = await parent.run(trace=sink)
    assert run.status == "completed", run.errors
    lines = path.read_bytes().splitlines(keepends=True)
    assert all(line(json.loads(text)) == text for text in lines)
    shown = [
        row["id"]
        for text in lines
        for row in json.loads(text)["payload"].get("progress", {}).get("details", [])
        if row.get("status") == "completed"
    ]
    assert len(shown) > 12 * 5  # the rows are shown again and again
    assert sorted(encoded) == sorted(set(shown))  # and encoded once each
