"""``tubeless trace show|convert`` on real NDJSON and SQLite traces: output, exit codes, safety."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from examples.agent_delegation import delegating_agent
from examples.scripted_agent import scripted_agent
from tests.fixtures.cli import ROOT, Outcome, tubeless, tubeless_process
from tests.fixtures.traces import run_labels
from tubeless import Pipeline, define_pipeline, step
from tubeless._cli import cli
from tubeless.testing import capture_trace
from tubeless.tracing import NdjsonSink, SqliteSink, read_trace, run_trees

Records = list[dict[str, Any]]

# Control characters (C0 but newline, DEL, C1) and the bidi controls terminal_safe replaces.
UNSAFE = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
DURATION = re.compile(r"(?<=  )\d+(\.\d)?(ms|s)\b")


@dataclass(frozen=True)
class Recorded:
    """One agent run recorded at once to NDJSON and SQLite (and in memory)."""

    records: Records
    ndjson: Path
    sqlite: Path

    @property
    def run_id(self) -> str:
        return str(self.records[0]["runId"])

    def path(self, storage: str) -> Path:
        return self.ndjson if storage == "ndjson" else self.sqlite


def record_to_files(pipeline: Pipeline, raw: Any, folder: Path, *, runs: int = 1) -> Recorded:
    folder.mkdir(parents=True, exist_ok=True)
    ndjson, store = folder / "trace.ndjson", folder / "trace.sqlite"

    async def go() -> Records:
        with capture_trace() as memory, NdjsonSink(ndjson) as lines, SqliteSink(store) as rows:
            for _ in range(runs):
                await pipeline.run(raw, trace=[memory, lines, rows])
        return memory.records

    return Recorded(asyncio.run(go()), ndjson, store)


@pytest.fixture(scope="module")
def scripted(tmp_path_factory: pytest.TempPathFactory) -> Recorded:
    folder = tmp_path_factory.mktemp("scripted")
    return record_to_files(scripted_agent, {"question": "hello tubeless"}, folder)


@pytest.fixture(scope="module")
def delegation(tmp_path_factory: pytest.TempPathFactory) -> Recorded:
    folder = tmp_path_factory.mktemp("delegation")
    return record_to_files(delegating_agent, {"question": "red blue"}, folder)


@pytest.fixture(params=["scripted", "delegation"])
def example(request: pytest.FixtureRequest) -> Recorded:
    recorded: Recorded = request.getfixturevalue(request.param)
    return recorded


def labelled(text: str, records: Records) -> str:
    """``text`` with run ids replaced by ``<pipelineId>#<n>`` and durations by ``<d>``."""
    for run_id, label in run_labels(records).items():
        text = text.replace(run_id, label)
    return DURATION.sub("<d>", text)


def iso(ms: int) -> str:
    from datetime import UTC, datetime

    moment = datetime.fromtimestamp(ms / 1000, tz=UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def completed_of(records: Records, run_id: str) -> Mapping[str, Any]:
    return next(r for r in records if r["runId"] == run_id and r["name"] == "pipeline.completed")


STORAGES = [pytest.param("ndjson", id="ndjson"), pytest.param("sqlite", id="sqlite")]

SCRIPTED_TREE = """\
Run scripted-agent#0  scripted-agent  completed  <d>
  step agent  completed  <d>
  agent  finish
  turn 1  continue  3 calls  completed  <d>
    call length  count  completed  <d>
    call word-0  uppercase  completed  <d>
    call word-1  uppercase  completed  <d>
  turn 2  finish  0 calls  completed  <d>
"""

DELEGATION_TREE = """\
Run delegating-agent#0  delegating-agent  completed  <d>
  step agent  completed  <d>
  agent  finish
  turn 1  continue  2 calls  completed  <d>
    call word-0  process_word  completed  <d>
      Run scripted-agent#2  scripted-agent  completed  <d>
        step agent  completed  <d>
        agent  finish
        turn 1  continue  2 calls  completed  <d>
          call length  count  completed  <d>
          call word-0  uppercase  completed  <d>
        turn 2  finish  0 calls  completed  <d>
    call word-1  process_word  completed  <d>
      Run scripted-agent#4  scripted-agent  completed  <d>
        step agent  completed  <d>
        agent  finish
        turn 1  continue  2 calls  completed  <d>
          call length  count  completed  <d>
          call word-0  uppercase  completed  <d>
        turn 2  finish  0 calls  completed  <d>
  turn 2  continue  1 call  completed  <d>
    call summary  summarize  completed  <d>
  turn 3  finish  0 calls  completed  <d>
"""


# -- show -------------------------------------------------------------------------------------
@pytest.mark.parametrize("storage", STORAGES)
def test_show_lists_the_root_run_with_status_start_and_duration(
    capsys: pytest.CaptureFixture[str], example: Recorded, storage: str
) -> None:
    started = example.records[0]["timestampMs"]
    pipeline_id = example.records[0]["pipelineId"]

    result = tubeless(capsys, "trace", "show", example.path(storage))

    assert (result.code, result.err) == (0, "")
    assert labelled(result.out, example.records) == (
        f"{pipeline_id}#0  {pipeline_id}  completed  started {iso(started)}  <d>\n"
    )


@pytest.mark.parametrize("storage", STORAGES)
def test_show_run_id_prints_the_run_as_a_tree_of_turns_and_calls(
    capsys: pytest.CaptureFixture[str], example: Recorded, storage: str
) -> None:
    result = tubeless(capsys, "trace", "show", example.path(storage), example.run_id)

    assert (result.code, result.err) == (0, "")
    trees = {"scripted-agent": SCRIPTED_TREE, "delegating-agent": DELEGATION_TREE}
    assert labelled(result.out, example.records) == trees[example.records[0]["pipelineId"]]


def test_show_accepts_any_run_of_the_file_such_as_a_turn(
    capsys: pytest.CaptureFixture[str], scripted: Recorded
) -> None:
    turn = next(r["runId"] for r in scripted.records if r.get("itemKey") == "iteration-1")

    result = tubeless(capsys, "trace", "show", scripted.sqlite, turn)

    assert (result.code, result.err) == (0, "")
    assert labelled(result.out, scripted.records) == (
        "Run scripted-agent/turn#1  scripted-agent/turn  completed  <d>\n"
        "  step decide  completed  <d>\n"
        "  step calls  completed  <d>\n"
        "  step reduce  completed  <d>\n"
        "  Run scripted-agent/tool/count#2  scripted-agent/tool/count  completed  <d>\n"
        "    step tool  completed  <d>\n"
        "  Run scripted-agent/tool/uppercase#3  scripted-agent/tool/uppercase  completed  <d>\n"
        "    step tool  completed  <d>\n"
        "  Run scripted-agent/tool/uppercase#4  scripted-agent/tool/uppercase  completed  <d>\n"
        "    step tool  completed  <d>\n"
    )


@pytest.mark.parametrize("storage", STORAGES)
def test_show_json_lists_run_summaries_pretty_printed(
    capsys: pytest.CaptureFixture[str], example: Recorded, storage: str
) -> None:
    first = example.records[0]
    expected = {
        "runs": [
            {
                "run_id": first["runId"],
                "pipeline_id": first["pipelineId"],
                "status": "completed",
                "started_at_ms": first["timestampMs"],
                "duration_ms": completed_of(example.records, first["runId"])["durationMs"],
            }
        ]
    }

    result = tubeless(capsys, "trace", "show", "--json", example.path(storage))

    assert (result.code, result.err) == (0, "")
    assert result.out == json.dumps(expected, indent=2) + "\n"


@pytest.mark.parametrize("storage", STORAGES)
def test_show_run_id_json_is_the_whole_projected_run(
    capsys: pytest.CaptureFixture[str], example: Recorded, storage: str
) -> None:
    tree = run_trees(example.records)[0]

    result = tubeless(capsys, "trace", "show", example.path(storage), example.run_id, "--json")

    assert (result.code, result.err) == (0, "")
    assert result.out == json.dumps(tree.to_dict(), indent=2) + "\n"
    shown = json.loads(result.out)
    assert shown["agent"]["termination"] == "finish"
    assert [turn["decision"] for turn in shown["agent"]["turns"]] == (
        ["continue", "finish"]
        if shown["pipeline_id"] == "scripted-agent"
        else ["continue", "continue", "finish"]
    )


def test_click_s_cli_runner_drives_show_as_main_does(scripted: Recorded) -> None:
    """The command is plain click: ``CliRunner`` runs it; errors surface as exceptions."""
    runner = CliRunner()

    listed = runner.invoke(cli, ["trace", "show", str(scripted.ndjson)])
    tree = runner.invoke(cli, ["trace", "show", str(scripted.ndjson), scripted.run_id])
    unknown = runner.invoke(
        cli, ["trace", "show", str(scripted.ndjson), "nope"], standalone_mode=False
    )

    assert (listed.exit_code, tree.exit_code) == (0, 0)
    assert listed.output.startswith(scripted.run_id + "  scripted-agent  completed  started ")
    assert labelled(tree.output, scripted.records) == SCRIPTED_TREE
    assert type(unknown.exception).__name__ == "CliLoadError"


def test_show_several_appended_runs_lists_each(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    recorded = record_to_files(scripted_agent, {"question": "hi"}, tmp_path, runs=3)
    roots = [
        r["runId"]
        for r in recorded.records
        if r["name"] == "pipeline.started" and "parentRunId" not in r
    ]

    result = tubeless(capsys, "trace", "show", recorded.ndjson)

    assert result.code == 0
    assert [line.split("  ")[0] for line in result.out.splitlines()] == roots


# -- show: finding a run (issue 13) -------------------------------------------------------------
@pytest.mark.parametrize("storage", STORAGES)
def test_show_accepts_a_unique_prefix_of_a_run_id(
    capsys: pytest.CaptureFixture[str], scripted: Recorded, storage: str
) -> None:
    path = scripted.path(storage)
    prefix = scripted.run_id[: len("scripted-agent:") + 4]

    by_prefix = tubeless(capsys, "trace", "show", path, prefix)
    as_json = tubeless(capsys, "trace", "show", path, prefix, "--json")

    assert by_prefix == tubeless(capsys, "trace", "show", path, scripted.run_id)
    assert as_json == tubeless(capsys, "trace", "show", path, scripted.run_id, "--json")
    assert by_prefix.code == 0


def test_an_exact_run_id_wins_over_longer_ids_it_begins(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """``a`` names run ``a`` even when run ``ab`` exists."""
    pipeline = define_pipeline(id="p", steps=[step("s", lambda inputs, ctx: 1)])
    path = tmp_path / "t.ndjson"

    async def go() -> None:
        with NdjsonSink(path) as sink:
            for run_id in ("p:a", "p:ab"):
                await pipeline.run(trace=sink, run_id=run_id)

    asyncio.run(go())
    result = tubeless(capsys, "trace", "show", path, "p:a")

    assert (result.code, result.out.split("  ")[0]) == (0, "Run p:a")


def test_an_ambiguous_prefix_is_an_error_listing_the_runs_it_begins(
    capsys: pytest.CaptureFixture[str], scripted: Recorded
) -> None:
    runs = [tree.run_id for tree in run_trees(scripted.records)[0].walk()]

    result = tubeless(capsys, "trace", "show", scripted.ndjson, "scripted-agent")

    assert (result.code, result.out) == (1, "")
    assert result.err == (
        f"error: run 'scripted-agent' is ambiguous: {len(runs)} runs in {scripted.ndjson} "
        f"begin with it: {', '.join(runs)}\n"
    )


@pytest.mark.parametrize("storage", STORAGES)
def test_show_last_shows_the_last_root_run(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, storage: str
) -> None:
    recorded = record_to_files(scripted_agent, {"question": "hi"}, tmp_path, runs=2)
    path = recorded.path(storage)
    last = run_trees(recorded.records)[-1].run_id

    result = tubeless(capsys, "trace", "show", path, "--last")
    as_json = tubeless(capsys, "trace", "show", "--json", "--last", path)

    assert result == tubeless(capsys, "trace", "show", path, last)
    assert result.out.startswith(f"Run {last}  ")
    assert as_json == tubeless(capsys, "trace", "show", path, last, "--json")


def test_show_last_needs_a_run_and_no_run_id(
    capsys: pytest.CaptureFixture[str], scripted: Recorded, tmp_path: Path
) -> None:
    (tmp_path / "empty.ndjson").write_bytes(b"")

    both = tubeless(capsys, "trace", "show", scripted.ndjson, scripted.run_id, "--last")
    empty = tubeless(capsys, "trace", "show", tmp_path / "empty.ndjson", "--last")

    assert (both.code, both.out) == (1, "")
    assert "give RUN_ID or --last, not both" in both.err
    assert empty == Outcome(1, "", f"error: {tmp_path / 'empty.ndjson'} holds no runs\n")


def test_run_prints_its_id_and_takes_run_and_correlation_ids_that_show_finds(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """``tubeless run`` names its run first; ``--run-id`` / ``--correlation-id`` are recorded."""
    trace = tmp_path / "runs.ndjson"
    project = ROOT / "projects" / "scripted-agent.yaml"

    chosen = tubeless(
        capsys,
        "run",
        project,
        "--question",
        "hi",
        "--trace",
        trace,
        "--run-id",
        "nightly-1",
        "--correlation-id",
        "batch-7",
    )
    default = tubeless(capsys, "run", project, "--question", "hi", "--trace", trace)

    assert (chosen.code, default.code) == (0, 0)
    assert chosen.err.splitlines()[0].endswith(", run nightly-1")
    records = read_trace(trace)
    second = records[-1]["runId"]
    assert default.err.splitlines()[0].endswith(f", run {second}")
    assert second.startswith("scripted-agent:")
    first_tree = [r for r in records if r.get("correlationId") == "batch-7"]
    assert first_tree[0]["runId"] == "nightly-1"
    assert {r["runId"] for r in first_tree} == {r["runId"] for r in records[: len(first_tree)]}
    shown = tubeless(capsys, "trace", "show", trace, "nightly-1")
    assert shown.out.startswith("Run nightly-1  scripted-agent  completed")


@pytest.mark.parametrize("option", ["--run-id", "--correlation-id"])
def test_a_blank_run_or_correlation_id_is_a_usage_error(
    capsys: pytest.CaptureFixture[str], option: str
) -> None:
    project = ROOT / "projects" / "scripted-agent.yaml"

    result = tubeless(capsys, "run", project, "--question", "hi", option, " ")

    assert (result.code, result.out) == (1, "")
    assert option in result.err and "must not be blank" in result.err


# -- show: failures ---------------------------------------------------------------------------
@pytest.mark.parametrize("storage", STORAGES)
def test_an_unknown_run_id_is_a_usage_error_listing_the_runs(
    capsys: pytest.CaptureFixture[str], scripted: Recorded, storage: str
) -> None:
    path = scripted.path(storage)

    result = tubeless(capsys, "trace", "show", path, "nope")

    assert (result.code, result.out) == (1, "")
    assert result.err == f"error: unknown run 'nope'; runs in {path}: {scripted.run_id}\n"


def test_an_unknown_run_id_lists_at_most_ten_runs(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    recorded = record_to_files(scripted_agent, {"question": "hi"}, tmp_path, runs=12)
    roots = [
        r["runId"]
        for r in recorded.records
        if r["name"] == "pipeline.started" and "parentRunId" not in r
    ]

    result = tubeless(capsys, "trace", "show", recorded.sqlite, "nope")

    assert result.code == 1
    assert result.err == (
        f"error: unknown run 'nope'; runs in {recorded.sqlite}: "
        f"{', '.join(roots[:10])} (and 2 more)\n"
    )


def test_an_unknown_run_id_in_an_empty_trace_says_there_are_none(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    (tmp_path / "empty.ndjson").write_bytes(b"")

    result = tubeless(capsys, "trace", "show", tmp_path / "empty.ndjson", "nope")

    assert (result.code, result.err) == (
        1,
        f"error: unknown run 'nope'; {tmp_path / 'empty.ndjson'} holds no runs\n",
    )


@pytest.mark.parametrize("name", ["gone.ndjson", "gone.jsonl", "gone.sqlite", "gone.db"])
def test_a_missing_trace_exits_2(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, name: str
) -> None:
    missing = tmp_path / name

    result = tubeless(capsys, "trace", "show", missing)

    assert result == Outcome(2, "", f"error: {missing}: No such file or directory\n")
    assert not missing.exists()  # a reader never creates the store it was asked to read


def test_a_corrupt_ndjson_line_exits_2_naming_the_line(
    capsys: pytest.CaptureFixture[str], scripted: Recorded, tmp_path: Path
) -> None:
    corrupt = tmp_path / "corrupt.ndjson"
    lines = scripted.ndjson.read_text(encoding="utf-8").splitlines(keepends=True)
    lines.insert(4, '{"version": 3, "name": "step.running"\n')
    corrupt.write_text("".join(lines), encoding="utf-8")

    result = tubeless(capsys, "trace", "show", corrupt)

    assert (result.code, result.out) == (2, "")
    assert result.err == (
        f"error: {corrupt}:5: invalid JSON: Expecting ',' delimiter (column 38)\n"
    )


@pytest.mark.parametrize(
    ("name", "content", "problem"),
    [
        pytest.param(
            "record.ndjson",
            b'{"version": 3, "name": "nope"}\n',
            ":1: not a trace record: 'name' must be a trace record name",
            id="not-a-record",
        ),
        pytest.param(
            "store.sqlite",
            b"not a database at all" * 100,
            ": not a tubeless trace store",
            id="not-sqlite",
        ),
        pytest.param("trace.txt", b"{}", ": unknown trace file extension '.txt'", id="extension"),
    ],
)
def test_an_unreadable_trace_exits_2_with_the_reader_s_message(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, name: str, content: bytes, problem: str
) -> None:
    (tmp_path / name).write_bytes(content)

    result = tubeless(capsys, "trace", "show", tmp_path / name)

    assert (result.code, result.out) == (2, "")
    assert result.err.startswith(f"error: {tmp_path / name}{problem}")
    assert result.err.count("\n") == 1


@pytest.mark.parametrize("storage", STORAGES)
def test_an_empty_trace_prints_nothing_and_exits_0(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, storage: str
) -> None:
    path = tmp_path / f"empty.{storage}"
    if storage == "sqlite":
        SqliteSink(path).close()
    else:
        path.write_bytes(b"")

    assert tubeless(capsys, "trace", "show", path) == Outcome(0, "", "")
    assert tubeless(capsys, "trace", "show", path, "--json") == Outcome(
        0, '{\n  "runs": []\n}\n', ""
    )


def test_trace_without_a_command_or_a_trace_is_a_usage_error(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert tubeless(capsys, "trace").code == 1
    assert tubeless(capsys, "trace", "show").code == 1
    assert tubeless(capsys, "trace", "show", "a.ndjson", "b", "c").code == 1


# -- show: SQLite stores in awkward places (issue 13) -------------------------------------------
def _folder_listing(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def _copy_store(source: Recorded, folder: Path) -> Path:
    folder.mkdir()
    copy = folder / "trace.sqlite"
    copy.write_bytes(source.sqlite.read_bytes())
    return copy


def _crashed_store(folder: Path) -> Path:
    """A store whose writer committed rows and never closed: its rows are in a ``-wal``."""
    folder.mkdir()
    live = folder / "live.sqlite"
    sink = SqliteSink(live)
    with capture_trace() as memory:
        asyncio.run(scripted_agent.run({"question": "hi"}, trace=[memory, sink]))
    crashed = folder / "crashed"
    crashed.mkdir()
    for suffix in ("", "-wal"):  # what a kill -9 leaves: the file and its write-ahead log
        (crashed / f"trace.sqlite{suffix}").write_bytes(Path(f"{live}{suffix}").read_bytes())
    sink.close()
    assert (crashed / "trace.sqlite-wal").stat().st_size > 0
    return crashed / "trace.sqlite"


def test_reading_a_sqlite_trace_leaves_no_files_behind(
    capsys: pytest.CaptureFixture[str], scripted: Recorded, tmp_path: Path
) -> None:
    """A closed store (no write-ahead log pending) is read without a ``-wal`` or ``-shm``."""
    store = _copy_store(scripted, tmp_path / "store")

    shown = tubeless(capsys, "trace", "show", store)
    tree = tubeless(capsys, "trace", "show", store, scripted.run_id, "--json")

    assert (shown.code, tree.code) == (0, 0)
    assert _folder_listing(tmp_path / "store") == ["trace.sqlite"]


def _uncreatable(*paths: str) -> None:
    """Make SQLite unable to create these files: dangling links into a missing folder (what a
    read-only folder amounts to for the reader, and unlike chmod this also stops root)."""
    for path in paths:
        os.symlink(Path(path).parent / "missing-folder" / "file", path)


def test_a_sqlite_trace_is_read_when_no_sidecar_file_can_be_created(
    capsys: pytest.CaptureFixture[str], scripted: Recorded, tmp_path: Path
) -> None:
    """Without a pending ``-wal`` the reader needs neither a ``-wal`` nor a ``-shm``."""
    store = _copy_store(scripted, tmp_path / "store")
    _uncreatable(f"{store}-wal", f"{store}-shm")

    result = tubeless(capsys, "trace", "show", store)

    assert result == tubeless(capsys, "trace", "show", scripted.sqlite)
    assert result.code == 0


def test_a_pending_wal_that_cannot_be_opened_is_a_clear_exit_2(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """A crashed writer's ``-wal`` needs a ``-shm`` beside it: when SQLite cannot make one, the
    error names the file and the fix, instead of a raw ``sqlite3.OperationalError``."""
    store = _crashed_store(tmp_path / "traces")
    _uncreatable(f"{store}-shm")

    result = tubeless(capsys, "trace", "show", store)

    assert (result.code, result.out) == (2, "")
    assert result.err == (
        f"error: {store}: a write-ahead log ({store}-wal) is pending and SQLite cannot open "
        f"{store}-shm beside it to read it: copy the store and its -wal file to a folder you "
        "can write to, and read the copy\n"
    )


@pytest.mark.skipif(os.geteuid() == 0, reason="root ignores directory permissions")
def test_a_sqlite_trace_in_a_read_only_folder_is_read(
    capsys: pytest.CaptureFixture[str], scripted: Recorded, tmp_path: Path
) -> None:
    """Documented exit codes in a read-only folder: 0 for a closed store, 2 for a pending WAL."""
    store = _copy_store(scripted, tmp_path / "store")
    crashed = _crashed_store(tmp_path / "traces")
    for folder in (store.parent, crashed.parent):
        folder.chmod(0o555)
    try:
        closed = tubeless(capsys, "trace", "show", store)
        pending = tubeless(capsys, "trace", "show", crashed)
    finally:
        for folder in (store.parent, crashed.parent):
            folder.chmod(0o755)

    assert closed == tubeless(capsys, "trace", "show", scripted.sqlite)
    assert (pending.code, pending.out) == (2, "")
    assert pending.err.startswith(f"error: {crashed}: a write-ahead log ({crashed}-wal) is pending")


# -- convert ----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("source", "target"),
    [
        pytest.param("ndjson", "out.sqlite", id="ndjson-to-sqlite"),
        pytest.param("sqlite", "out.ndjson", id="sqlite-to-ndjson"),
        pytest.param("sqlite", "out.db", id="sqlite-to-db"),
        pytest.param("ndjson", "out.jsonl", id="ndjson-to-jsonl"),
    ],
)
def test_convert_copies_every_record_and_show_prints_the_same(
    capsys: pytest.CaptureFixture[str],
    delegation: Recorded,
    tmp_path: Path,
    source: str,
    target: str,
) -> None:
    out = tmp_path / "nested" / target
    original = delegation.path(source)

    result = tubeless(capsys, "trace", "convert", original, out)

    count = len(delegation.records)
    assert result == Outcome(0, "", f"wrote {count} records to {out}\n")
    assert read_trace(out) == read_trace(original) == delegation.records
    for args in ([], [delegation.run_id], ["--json"], [delegation.run_id, "--json"]):
        assert tubeless(capsys, "trace", "show", out, *args) == tubeless(
            capsys, "trace", "show", original, *args
        )


def test_convert_there_and_back_reproduces_the_ndjson_bytes(
    capsys: pytest.CaptureFixture[str], delegation: Recorded, tmp_path: Path
) -> None:
    assert tubeless(capsys, "trace", "convert", delegation.ndjson, tmp_path / "a.sqlite").code == 0
    assert (
        tubeless(capsys, "trace", "convert", tmp_path / "a.sqlite", tmp_path / "b.ndjson").code == 0
    )

    assert (tmp_path / "b.ndjson").read_bytes() == delegation.ndjson.read_bytes()


def test_convert_to_dash_writes_ndjson_on_stdout(
    capsys: pytest.CaptureFixture[str], scripted: Recorded
) -> None:
    result = tubeless(capsys, "trace", "convert", scripted.sqlite, "-")

    assert (result.code, result.err) == (0, f"wrote {len(scripted.records)} records to -\n")
    assert [json.loads(line) for line in result.out.splitlines()] == scripted.records


def test_convert_refuses_an_existing_out_and_leaves_it_alone(
    capsys: pytest.CaptureFixture[str], scripted: Recorded, tmp_path: Path
) -> None:
    out = tmp_path / "taken.ndjson"
    out.write_text("mine\n", encoding="utf-8")

    result = tubeless(capsys, "trace", "convert", scripted.sqlite, out)

    assert result == Outcome(1, "", f"error: {out} exists; remove it or choose another path\n")
    assert out.read_text(encoding="utf-8") == "mine\n"


def test_convert_refuses_in_and_out_being_the_same_file(
    capsys: pytest.CaptureFixture[str], scripted: Recorded, tmp_path: Path
) -> None:
    link = tmp_path / "alias.sqlite"
    link.symlink_to(scripted.sqlite)
    before = scripted.sqlite.read_bytes()

    same = tubeless(capsys, "trace", "convert", scripted.sqlite, scripted.sqlite)
    aliased = tubeless(capsys, "trace", "convert", scripted.sqlite, link)

    assert same == Outcome(1, "", f"error: IN and OUT are the same file: {scripted.sqlite}\n")
    assert aliased == Outcome(1, "", f"error: IN and OUT are the same file: {link}\n")
    assert scripted.sqlite.read_bytes() == before


def test_convert_to_an_unknown_extension_is_a_usage_error(
    capsys: pytest.CaptureFixture[str], scripted: Recorded, tmp_path: Path
) -> None:
    result = tubeless(capsys, "trace", "convert", scripted.ndjson, tmp_path / "out.txt")

    assert result.code == 1
    assert result.err.startswith("error: Invalid value for OUT: ")
    assert "unknown trace file extension '.txt'" in result.err
    assert not (tmp_path / "out.txt").exists()


def test_convert_from_an_unreadable_trace_exits_2_and_writes_nothing(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    (tmp_path / "bad.ndjson").write_text("{not json\n", encoding="utf-8")

    missing = tubeless(capsys, "trace", "convert", tmp_path / "gone.ndjson", tmp_path / "a.db")
    corrupt = tubeless(capsys, "trace", "convert", tmp_path / "bad.ndjson", tmp_path / "b.db")

    assert missing == Outcome(
        2, "", f"error: {tmp_path / 'gone.ndjson'}: No such file or directory\n"
    )
    assert (corrupt.code, corrupt.err.startswith(f"error: {tmp_path / 'bad.ndjson'}:1: ")) == (
        2,
        True,
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.ndjson"]


# -- terminal safety --------------------------------------------------------------------------
def hostile(inputs: Any, ctx: Any) -> None:
    raise ValueError("\x1b[31mred\u202e")


HOSTILE = define_pipeline(
    id="evil\x1b]0;title\x07pipe\u202e",
    steps=[step("st\x9bep\u2066", hostile)],
)


@pytest.fixture(scope="module")
def hostile_trace(tmp_path_factory: pytest.TempPathFactory) -> Recorded:
    recorded = record_to_files(HOSTILE, None, tmp_path_factory.mktemp("hostile"))
    assert completed_of(recorded.records, recorded.run_id)["payload"]["status"] == "failed"
    return recorded


@pytest.mark.parametrize("storage", STORAGES)
@pytest.mark.parametrize(
    "args",
    [
        pytest.param([], id="list"),
        pytest.param(["--json"], id="list-json"),
        pytest.param(["<run>"], id="tree"),
        pytest.param(["<run>", "--json"], id="tree-json"),
    ],
)
def test_recorded_control_and_bidi_characters_never_reach_the_terminal(
    capsys: pytest.CaptureFixture[str], hostile_trace: Recorded, storage: str, args: list[str]
) -> None:
    argv = [hostile_trace.run_id if arg == "<run>" else arg for arg in args]

    result = tubeless(capsys, "trace", "show", hostile_trace.path(storage), *argv)

    assert result.code == 0
    assert UNSAFE.findall(result.out + result.err) == []
    if "--json" not in args:
        # Replaced by spaces (not stripped by click): the text around them is still there.
        assert " ]0;title pipe " in result.out
    if args == ["<run>"]:
        assert "  step st ep   failed  " in result.out
        assert "  error TUBELESS_STEP_FAILED  ValueError:  [31mred \n" in result.out
    if args == ["<run>", "--json"]:
        assert json.loads(result.out)["error_message"] == "\x1b[31mred\u202e"


def test_an_unknown_hostile_run_id_is_echoed_safely(
    capsys: pytest.CaptureFixture[str], hostile_trace: Recorded
) -> None:
    result = tubeless(capsys, "trace", "show", hostile_trace.ndjson, "x\x1b[2J\u202ey")

    assert result.code == 1
    assert UNSAFE.findall(result.err) == []
    assert result.err.startswith("error: unknown run 'x [2J y'; runs in ")


def test_a_real_process_keeps_hostile_text_off_stdout(hostile_trace: Recorded) -> None:
    result = tubeless_process("trace", "show", hostile_trace.ndjson, hostile_trace.run_id)

    assert result.code == 0
    assert UNSAFE.findall(result.out + result.err) == []
    assert "[31mred" in result.out


# -- end to end, as processes -----------------------------------------------------------------
@pytest.mark.slow
def test_exit_codes_as_a_real_process(scripted: Recorded, tmp_path: Path) -> None:
    corrupt = tmp_path / "corrupt.ndjson"
    corrupt.write_text("[]\n", encoding="utf-8")
    taken = tmp_path / "taken.sqlite"
    taken.write_bytes(b"")

    listed = tubeless_process("trace", "show", scripted.ndjson)
    tree = tubeless_process("trace", "show", scripted.sqlite, scripted.run_id)

    assert (listed.code, listed.out.split("  ")[0]) == (0, scripted.run_id)
    assert (tree.code, labelled(tree.out, scripted.records)) == (0, SCRIPTED_TREE)
    assert tubeless_process("trace", "show", scripted.ndjson, "nope").code == 1
    assert tubeless_process("trace", "show", tmp_path / "gone.ndjson").code == 2
    assert tubeless_process("trace", "show", corrupt).code == 2
    assert tubeless_process("trace", "convert", scripted.ndjson, taken).code == 1
    assert tubeless_process("trace", "convert", corrupt, tmp_path / "x.db").code == 2
    assert tubeless_process("trace", "bogus").code == 1
    converted = tubeless_process("trace", "convert", scripted.ndjson, tmp_path / "x.sqlite")
    assert converted == Outcome(
        0, "", f"wrote {len(scripted.records)} records to {tmp_path / 'x.sqlite'}\n"
    )


def test_trace_help_loads_no_tracing_storage() -> None:
    """``tubeless --help`` stays cheap: the trace commands import their modules when run."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "tubeless", "--help"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONWARNINGS": "ignore"},
        timeout=60,
        check=True,
    )
    imported = {line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines()}

    assert "trace" in done.stdout
    assert {"sqlite3", "pydantic", "jsonschema", "tubeless.tracing.projection"} & imported == set()
