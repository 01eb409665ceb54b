"""``run --otel`` and ``trace export-otel``: OTLP/HTTP to a collector on 127.0.0.1 (decoded from
protobuf), the same spans both ways, and a collector that is down changing nothing but one
warning line."""

from __future__ import annotations

import dataclasses
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.cli import ROOT, Outcome, tubeless, tubeless_process
from tests.fixtures.otlp import Receiver, closed_port, otlp_receiver, silent_port

SCRIPTED = ROOT / "projects" / "scripted-agent.yaml"
DELEGATION = ROOT / "projects" / "delegation.yaml"
RUN = ("run", DELEGATION, "--question", "red blue", "--quiet")


@pytest.fixture(autouse=True)
def otel_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Only the variables a test sets: none from the developer's environment."""
    for name in list(os.environ):
        if name.startswith("OTEL_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("OTEL_SERVICE_NAME", "tubeless-tests")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "2")
    yield


@pytest.fixture
def collector(monkeypatch: pytest.MonkeyPatch) -> Iterator[Receiver]:
    with otlp_receiver() as receiver:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint)
        yield receiver


def tree(spans: list[dict[str, Any]]) -> list[tuple[int, str, str | None]]:
    """``(depth, name, tubeless.run_id)`` depth first, parents by span id (the ids dropped);
    siblings in start order, then by item key (``length``, ``word-0``, ``iteration-1``, ...)."""
    children: dict[str | None, list[dict[str, Any]]] = {}
    known = {span["span_id"] for span in spans}
    for span in spans:
        parent = span["parent"] if span["parent"] in known else None
        children.setdefault(parent, []).append(span)
    out: list[tuple[int, str, str | None]] = []

    def walk(parent: str | None, depth: int) -> None:
        kids = children.get(parent, [])
        for span in sorted(
            kids, key=lambda s: (s["start"], s["attributes"].get("tubeless.item_key", ""))
        ):
            out.append((depth, span["name"], span["attributes"].get("tubeless.run_id")))
            walk(span["span_id"], depth + 1)

    walk(None, 0)
    return out


def without_notice(outcome: Outcome) -> Outcome:
    """``outcome`` without the ``exporting spans…`` line, which a wait longer than half a second
    prints (whether the SDK's retries take that long is not for these tests to say)."""
    return dataclasses.replace(outcome, err=outcome.err.replace("exporting spans…\n", ""))


def test_run_otel_sends_the_run_tree_to_the_collector(
    capsys: pytest.CaptureFixture[str], collector: Receiver
) -> None:
    plain = tubeless(capsys, *RUN)

    sent = tubeless(capsys, *RUN, "--otel")

    assert sent == Outcome(0, plain.out, "")
    spans = collector.spans()
    assert set(collector.paths) == {"/v1/traces"}
    assert set(collector.content_types) == {"application/x-protobuf"}
    assert {(s["service"], s["scope"]) for s in spans} == {("tubeless-tests", "tubeless")}
    assert [(d, name) for d, name, _ in tree(spans)] == [
        (0, "invoke_agent delegating-agent"),
        (1, "turn 1"),
        (2, "execute_tool process_word"),
        (3, "invoke_agent scripted-agent"),
        (4, "turn 1"),
        (5, "execute_tool count"),
        (5, "execute_tool uppercase"),
        (4, "turn 2"),
        (2, "execute_tool process_word"),
        (3, "invoke_agent scripted-agent"),
        (4, "turn 1"),
        (5, "execute_tool count"),
        (5, "execute_tool uppercase"),
        (4, "turn 2"),
        (1, "turn 2"),
        (2, "execute_tool summarize"),
        (1, "turn 3"),
    ]
    root = next(s for s in spans if s["parent"] is None)
    assert root["attributes"]["gen_ai.operation.name"] == "invoke_agent"
    assert root["attributes"]["tubeless.limits.max_turns"] == 3


def test_export_otel_of_the_stored_trace_sends_the_spans_run_otel_sent(
    capsys: pytest.CaptureFixture[str], collector: Receiver, tmp_path: Path
) -> None:
    stored = tmp_path / "runs.sqlite"
    assert tubeless(capsys, *RUN, "--otel", "--trace", stored).code == 0
    live = collector.spans()
    collector.requests.clear()

    exported = tubeless(capsys, "trace", "export-otel", stored)

    assert exported == Outcome(
        0, "", f"sent 17 spans of 15 runs to {collector.endpoint}/v1/traces\n"
    )
    later = collector.spans()

    def shape(spans: list[dict[str, Any]]) -> list[Any]:
        keep = ("name", "kind", "status", "start", "end", "attributes", "events")
        rows = sorted(spans, key=lambda s: (s["attributes"]["tubeless.run_id"], s["name"]))
        return [tree(spans), [{k: s[k] for k in keep} for s in rows]]

    assert shape(later) == shape(live)


def test_a_collector_that_is_down_leaves_the_exit_code_and_the_output_alone(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """One warning line; the SDK's own log lines stay off stderr."""
    plain = tubeless(capsys, *RUN)
    down = closed_port()
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", down)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "1")

    sent = tubeless(capsys, *RUN, "--otel")

    assert without_notice(sent) == Outcome(
        0,
        plain.out,
        f"warning: OpenTelemetry export to {down}/v1/traces failed: 17 of 17 spans were not sent\n",
    )


def test_a_failed_run_keeps_its_exit_code_with_a_collector_that_is_down(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    args = ("run", SCRIPTED, "--question", "a b c d", "--quiet")
    plain = tubeless(capsys, *args)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", closed_port())
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "1")

    sent = without_notice(tubeless(capsys, *args, "--otel"))

    assert (sent.code, sent.out) == (plain.code, plain.out)
    assert sent.err.startswith(plain.err + "warning: OpenTelemetry export to ")


def test_export_otel_to_a_collector_that_is_down_exits_2(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    stored = tmp_path / "runs.ndjson"
    assert tubeless(capsys, "run", SCRIPTED, "--quiet", "--trace", stored).code == 0
    down = closed_port()
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", f"{down}/v1/traces")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "1")

    assert without_notice(tubeless(capsys, "trace", "export-otel", stored)) == Outcome(
        2,
        "",
        f"error: {down}/v1/traces: OpenTelemetry export failed: 6 of 6 spans were not sent\n",
    )


def test_export_otel_of_a_missing_trace_exits_2(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    missing = tmp_path / "nope.ndjson"

    assert tubeless(capsys, "trace", "export-otel", missing) == Outcome(
        2, "", f"error: {missing}: No such file or directory\n"
    )


@pytest.mark.parametrize(
    "args",
    [
        pytest.param((*RUN, "--otel"), id="run"),
        pytest.param(("trace", "export-otel", SCRIPTED), id="export-otel"),
    ],
)
def test_without_the_sdk_the_error_names_the_extra(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, args: tuple[Any, ...]
) -> None:
    monkeypatch.setitem(sys.modules, "opentelemetry.sdk.trace", None)
    what = "--otel" if args[0] == "run" else "export-otel"

    outcome = tubeless(capsys, *args)

    assert (outcome.code, outcome.out) == (1, "")
    assert outcome.err.splitlines()[0] == (
        f"error: {what} needs the OpenTelemetry SDK, which is not installed: "
        "pip install 'tubeless[otel]'"
    )


def test_run_otel_as_a_process_delivers_every_span_before_it_exits(collector: Receiver) -> None:
    """The real command line: the batch processor's last spans leave before the process ends."""
    done = tubeless_process("run", SCRIPTED, "--question", "hello tubeless", "--quiet", "--otel")

    assert done == Outcome(0, '{"answer": "14 characters; HELLO; TUBELESS"}\n', "")
    assert sorted(s["name"] for s in collector.spans()) == [
        "execute_tool count",
        "execute_tool uppercase",
        "execute_tool uppercase",
        "invoke_agent scripted-agent",
        "turn 1",
        "turn 2",
    ]


# -- the standard variables (issue 29 item 12) ----------------------------------------------------
@pytest.mark.parametrize(
    ("variable", "value", "line"),
    [
        pytest.param(
            "OTEL_EXPORTER_OTLP_PROTOCOL",
            "grpc",
            "error: OTEL_EXPORTER_OTLP_PROTOCOL=grpc is not supported: tubeless exports over "
            "OTLP/HTTP; set OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf and point "
            "OTEL_EXPORTER_OTLP_ENDPOINT at the collector's OTLP/HTTP port (usually 4318)",
            id="grpc",
        ),
        pytest.param(
            "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
            "http/json",
            "error: OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=http/json is not supported: tubeless "
            "exports over OTLP/HTTP; set OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=http/protobuf and "
            "point OTEL_EXPORTER_OTLP_ENDPOINT at the collector's OTLP/HTTP port (usually 4318)",
            id="traces-http-json",
        ),
        pytest.param(
            "OTEL_TRACES_EXPORTER",
            "zipkin",
            "error: OTEL_TRACES_EXPORTER=zipkin is not supported: use otlp, console or none",
            id="zipkin",
        ),
    ],
)
@pytest.mark.parametrize("command", ["run", "export-otel"])
def test_an_exporter_setting_tubeless_cannot_honour_is_refused_in_one_line(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    collector: Receiver,
    variable: str,
    value: str,
    line: str,
    command: str,
) -> None:
    monkeypatch.setenv(variable, value)
    args = (*RUN, "--otel") if command == "run" else ("trace", "export-otel", SCRIPTED)

    outcome = tubeless(capsys, *args)

    assert (outcome.code, outcome.out, outcome.err.splitlines()[0]) == (1, "", line)
    assert collector.requests == []


def test_the_console_exporter_writes_the_spans_to_stderr_and_sends_nothing(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, collector: Receiver
) -> None:
    plain = tubeless(capsys, *RUN)
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "console")

    sent = tubeless(capsys, *RUN, "--otel")

    assert (sent.code, sent.out) == (0, plain.out)
    assert collector.requests == []
    assert sent.err.count('"name": "invoke_agent delegating-agent"') == 1
    assert sent.err.count('"name": "execute_tool process_word"') == 2
    assert "warning" not in sent.err


def test_the_none_exporter_sends_nothing_and_says_nothing(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, collector: Receiver
) -> None:
    plain = tubeless(capsys, *RUN)
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "none")

    assert tubeless(capsys, *RUN, "--otel") == Outcome(0, plain.out, "")
    assert collector.requests == []


def test_otlp_and_console_together_do_both(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, collector: Receiver
) -> None:
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "otlp,console")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")

    sent = tubeless(capsys, *RUN, "--otel")

    assert sent.code == 0
    assert len(collector.spans()) == 17
    assert sent.err.count('"name": "turn 1"') == 3


# -- a collector that never answers (issue 29 item 13) --------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("collector_kind", ["silent", "closed"])
def test_a_collector_that_hangs_or_is_down_costs_a_bounded_wait_that_is_announced(
    monkeypatch: pytest.MonkeyPatch, collector_kind: str
) -> None:
    """A real process; the SDK's own timeout (10 s) is left at its default. The process says
    it is exporting, gives up within its bound and warns (60 s hang guard only)."""
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_TIMEOUT")
    with silent_port() as silent:
        endpoint = silent if collector_kind == "silent" else closed_port()
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
        done = tubeless_process(
            "run", SCRIPTED, "--question", "hello tubeless", "--quiet", "--otel"
        )

    assert (done.code, done.out) == (0, '{"answer": "14 characters; HELLO; TUBELESS"}\n')
    assert done.err == (
        "exporting spans…\n"
        f"warning: OpenTelemetry export to {endpoint}/v1/traces failed: "
        "6 of 6 spans were not sent\n"
    )
