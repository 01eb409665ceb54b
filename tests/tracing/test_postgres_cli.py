"""The CLI takes a ``postgresql://`` URL wherever it takes a trace: ``run``, ``batch`` and
``eval --trace``, ``trace show|convert|export-otel``; messages mask the DSN's password."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.batch import rows_project, write_inputs
from tests.fixtures.cli import ROOT, Outcome, tubeless
from tests.fixtures.otlp import Receiver, otlp_receiver
from tests.fixtures.postgres import postgres_dsn, postgres_server  # noqa: F401 (fixtures)
from tubeless.tracing import read_trace, run_trees

SCRIPTED = ROOT / "projects" / "scripted-agent.yaml"
CASES = ROOT / "projects" / "evals" / "scripted-agent.cases.yaml"
SECRET = "s3cret-Pa55"


def _with_password(dsn: str) -> str:
    """The same URL with a password (the test server trusts every local connection)."""
    return dsn.replace("postgresql://tubeless@", f"postgresql://tubeless:{SECRET}@")


def test_run_then_show_and_convert_a_postgres_trace(
    capsys: pytest.CaptureFixture[str],
    postgres_dsn: str,  # noqa: F811
    tmp_path: Path,
) -> None:
    dsn = _with_password(postgres_dsn)
    assert tubeless(capsys, "run", SCRIPTED, "--trace", dsn, "--quiet").code == 0
    records = read_trace(postgres_dsn)
    (root,) = run_trees(records)

    listed = tubeless(capsys, "trace", "show", dsn, "--json")
    assert listed.code == 0, listed.err
    assert [run["run_id"] for run in json.loads(listed.out)["runs"]] == [root.run_id]
    shown = tubeless(capsys, "trace", "show", dsn, "--last")
    assert shown.code == 0 and root.run_id in shown.out

    copy = tmp_path / "copy.ndjson"
    converted = tubeless(capsys, "trace", "convert", dsn, copy)
    assert converted == Outcome(0, "", f"wrote {len(records)} records to {copy}\n")
    assert read_trace(copy) == records

    # Into Postgres: the store is added to, like a run adds to it; the password stays hidden.
    back = tubeless(capsys, "trace", "convert", copy, dsn)
    masked = dsn.replace(SECRET, "***")
    assert back == Outcome(0, "", f"wrote {len(records)} records to {masked}\n")
    assert read_trace(postgres_dsn) == records + records
    same = tubeless(capsys, "trace", "convert", dsn, dsn)
    assert same.code == 1 and "IN and OUT are the same store" in same.err
    assert SECRET not in same.err


def test_messages_about_a_postgres_trace_mask_the_password(
    capsys: pytest.CaptureFixture[str],
    postgres_server: Any,  # noqa: F811
) -> None:
    empty = _with_password(postgres_server.dsn(postgres_server.create_database()))
    no_store = tubeless(capsys, "trace", "show", empty)
    assert no_store.code == 2 and "not a tubeless trace store" in no_store.err
    unreachable = _with_password(postgres_server.dsn("no_such_database"))
    refused = tubeless(capsys, "trace", "show", unreachable)
    assert refused.code == 2 and "cannot connect to the trace database" in refused.err
    run = tubeless(capsys, "run", SCRIPTED, "--trace", unreachable, "--quiet")
    assert run.code == 2 and "cannot connect to the trace database" in run.err
    for outcome in (no_store, refused, run):
        assert SECRET not in outcome.err + outcome.out and "tubeless:***@" in outcome.err

    # Once a run made the store, an unknown run id is refused naming the masked URL.
    assert tubeless(capsys, "run", SCRIPTED, "--trace", empty, "--quiet").code == 0
    unknown = tubeless(capsys, "trace", "show", empty, "nope")
    assert unknown.code == 1 and "tubeless:***@" in unknown.err and SECRET not in unknown.err


def test_batch_and_eval_record_into_postgres(
    capsys: pytest.CaptureFixture[str],
    postgres_dsn: str,  # noqa: F811
    tmp_path: Path,
) -> None:
    project = rows_project(tmp_path)
    inputs = write_inputs(tmp_path / "in.jsonl", [{"n": n} for n in range(3)])
    batch = tubeless(
        capsys,
        "batch",
        project,
        inputs,
        "--output",
        tmp_path / "out.jsonl",
        "--trace",
        postgres_dsn,
    )
    assert batch.code == 0, batch.err
    roots = run_trees(read_trace(postgres_dsn))
    assert len(roots) == 3 and {tree.status for tree in roots} == {"completed"}

    evaluated = tubeless(capsys, "eval", SCRIPTED, CASES, "--trace", postgres_dsn)
    assert evaluated.code == 0, evaluated.err
    assert len(run_trees(read_trace(postgres_dsn))) > 3


@pytest.fixture
def collector(monkeypatch: pytest.MonkeyPatch) -> Iterator[Receiver]:
    for name in list(os.environ):
        if name.startswith("OTEL_"):
            monkeypatch.delenv(name)
    with otlp_receiver() as receiver:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint)
        yield receiver


def test_export_otel_reads_a_postgres_trace(
    capsys: pytest.CaptureFixture[str],
    postgres_dsn: str,  # noqa: F811
    collector: Receiver,
) -> None:
    assert tubeless(capsys, "run", SCRIPTED, "--trace", postgres_dsn, "--quiet").code == 0
    exported = tubeless(capsys, "trace", "export-otel", postgres_dsn)
    assert exported.code == 0, exported.err
    assert exported.err.startswith("sent ") and collector.spans()


def test_without_psycopg_a_url_is_a_usage_error_naming_the_extra(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setitem(sys.modules, "psycopg", None)
    url = "postgresql://app@127.0.0.1:1/traces"
    hint = "need psycopg, which is not installed: pip install 'tubeless[postgres]'"
    project = rows_project(tmp_path)
    inputs = write_inputs(tmp_path / "in.jsonl", [{"n": 1}])
    local = tmp_path / "local.ndjson"
    assert tubeless(capsys, "run", SCRIPTED, "--trace", local, "--quiet").code == 0
    for args, option in [
        (("run", SCRIPTED, "--trace", url, "--quiet"), "--trace"),
        (("batch", project, inputs, "--output", tmp_path / "o.jsonl", "--trace", url), "--trace"),
        (("trace", "show", url), "TRACE"),
        (("trace", "convert", local, url), "OUT"),
    ]:
        outcome = tubeless(capsys, *args)
        assert outcome.code == 1, args
        assert f"error: {option}: Postgres trace stores {hint}" in outcome.err, outcome.err
