"""``PostgresCheckpoints`` and ``--checkpoints postgresql://...`` (DESIGN.md §20, §24): the
commands that take a checkpoint file take the URL; tables are versioned; the password of a DSN
is never printed; a missing driver names the extra to install."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import psycopg
import pytest

from tests.fixtures.cli import tubeless
from tests.fixtures.postgres import (  # noqa: F401 (fixtures)
    PostgresServer,
    postgres_dsn,
    postgres_server,
)
from tests.fixtures.processes import GATED, write_project
from tubeless.durable import (
    PostgresCheckpoints,
    is_database_url,
    open_checkpoints,
    redact_dsn,
)
from tubeless.errors import CHECKPOINT_INVALID, CheckpointError

SECRET = "pa55-w0rd-never-shown"

MODULE = """\
    def initial(validated):
        return {"seen": None}

    def decide(state, ctx):
        if state["seen"] is not None:
            return {"kind": "finish", "result": state["seen"]}
        return {"kind": "continue", "calls": [
            {"id": "d1", "tool": "draft", "input": "x"},
            {"id": "go", "tool": "launch", "input": "rocket"},
        ]}

    def reduce(state, outcomes):
        return {"seen": [o["value"] if o["ok"] else o["error"]["code"] for o in outcomes]}

    def draft(text, ctx):
        return text.upper()

    def launch(text, ctx):
        return "launched " + text
"""


@pytest.fixture
def secret_dsn(postgres_server: PostgresServer) -> str:  # noqa: F811
    """A fresh database's URL with a password in it (the test server trusts every login)."""
    return postgres_server.dsn(postgres_server.create_database(), password=SECRET)


def test_urls_open_postgres_and_paths_sqlite(tmp_path: Path, secret_dsn: str) -> None:
    assert is_database_url("postgresql://h/db") and is_database_url("postgres://h/db")
    assert not is_database_url(str(tmp_path / "runs.sqlite"))
    store = open_checkpoints(secret_dsn, lease_ttl_s=5)
    assert isinstance(store, PostgresCheckpoints) and store.lease_ttl_s == 5
    assert SECRET not in repr(store) and "***" in repr(store)
    store.close()
    assert type(open_checkpoints(tmp_path / "runs.sqlite")).__name__ == "SqliteCheckpoints"


@pytest.mark.parametrize(
    ("dsn", "shown"),
    [
        ("postgresql://ann:pw@db:5432/runs", "postgresql://ann:***@db:5432/runs"),
        ("postgres://ann@db/runs", "postgres://ann@db/runs"),
        (
            "postgresql://db/runs?password=pw&sslmode=require",
            "postgresql://db/runs?password=***&sslmode=require",
        ),
        ("host=db password='p w' user=ann", "host=db password=*** user=ann"),
        ("host=db password=pw user=ann", "host=db password=*** user=ann"),
    ],
)
def test_a_dsn_is_shown_without_its_password(dsn: str, shown: str) -> None:
    assert redact_dsn(dsn) == shown


def test_tables_are_created_once_with_a_schema_version(postgres_dsn: str) -> None:  # noqa: F811
    for _ in range(2):
        store = PostgresCheckpoints(postgres_dsn)
        with store.acquire("k") as lease:
            lease.write("{}")
        store.close()
    with psycopg.connect(postgres_dsn) as conn:
        tables = {
            row[0]
            for row in conn.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public'"
            )
        }
        versions = [
            row[0] for row in conn.execute("SELECT version FROM tubeless_checkpoint_migrations")
        ]
        conn.execute("INSERT INTO tubeless_checkpoint_migrations (version) VALUES (99)")
    assert tables == {
        "tubeless_checkpoints",
        "tubeless_checkpoint_leases",
        "tubeless_checkpoint_migrations",
    }
    assert versions == [1]
    newer = PostgresCheckpoints(postgres_dsn)
    with pytest.raises(CheckpointError) as caught:
        newer.list()
    assert caught.value.code == CHECKPOINT_INVALID
    assert "schema version 99, newer than this release reads (1): upgrade tubeless" in str(
        caught.value
    )


def test_an_unreachable_database_is_a_clear_error_without_the_password(
    postgres_server: PostgresServer,  # noqa: F811
) -> None:
    dsn = f"postgresql://ann:{SECRET}@127.0.0.1:1/nowhere?connect_timeout=5"
    store = PostgresCheckpoints(dsn)
    with pytest.raises(CheckpointError) as caught:
        store.acquire("k")
    assert caught.value.code == CHECKPOINT_INVALID
    assert caught.value.message.startswith(
        "postgresql://ann:***@127.0.0.1:1/nowhere?connect_timeout=5: cannot connect to the "
        "checkpoint database ("
    )
    assert SECRET not in caught.value.message


MISSING_DRIVER = (
    "PostgreSQL checkpoints need psycopg 3, which is not installed: "
    "pip install 'tubeless[postgres]'"
)


def test_without_psycopg_the_error_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    """An ImportError naming the extra, as ``PostgresSink`` raises (not a checkpoint problem)."""
    monkeypatch.setitem(sys.modules, "psycopg", None)  # import psycopg now raises ImportError
    for opening in (
        lambda: PostgresCheckpoints("postgresql://db/runs"),
        lambda: open_checkpoints("postgresql://db/runs?lease_ttl_s=5"),
    ):
        with pytest.raises(ImportError) as caught:
            opening()
        assert str(caught.value) == MISSING_DRIVER
        assert caught.value.name == "psycopg"


def test_without_psycopg_a_checkpoints_url_is_a_usage_error_naming_the_extra(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Exit 1 and one line naming the install command, as ``--trace postgresql://...`` gives,
    from every command that opens a checkpoint store; the password is never printed."""
    monkeypatch.setitem(sys.modules, "psycopg", None)
    url = f"postgresql://app:{SECRET}@127.0.0.1:1/runs"
    project = write_project(tmp_path, GATED, MODULE)
    inputs = tmp_path / "in.jsonl"
    inputs.write_text("{}\n", encoding="utf-8")
    for args in [
        ("run", project, "--checkpoints", url, "-q"),
        ("batch", project, inputs, "--output", tmp_path / "o.jsonl", "--checkpoints", url),
        ("checkpoints", "list", url),
        ("checkpoints", "show", url, "k1"),
    ]:
        outcome = tubeless(capsys, *args)
        assert outcome.code == 1, (args, outcome.err)
        assert outcome.err.splitlines()[0] == f"error: {MISSING_DRIVER}", (args, outcome.err)
        assert SECRET not in outcome.err + outcome.out


def test_run_checkpoints_approve_and_delete_take_a_url(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], secret_dsn: str
) -> None:
    """The whole approval round trip against a database; the password never appears."""
    project = write_project(tmp_path, GATED, MODULE)
    run = ("run", project, "--checkpoints", secret_dsn, "--key", "k1", "-q")
    waiting = tubeless(capsys, *run)
    assert waiting.code == 8, waiting.err
    assert "checkpoint: k1 (new)" in waiting.err
    listed = tubeless(capsys, "checkpoints", "list", secret_dsn, "--json")
    assert listed.code == 0, listed.err
    [row] = json.loads(listed.out)["checkpoints"]
    assert (row["key"], row["status"]) == ("k1", "waiting")
    approved = tubeless(capsys, "approve", secret_dsn, "k1", "go")
    assert approved.code == 0, approved.err
    done = tubeless(capsys, *run)
    assert done.code == 0, done.err
    assert json.loads(done.out) == ["X", "launched rocket"]
    shown = tubeless(capsys, "checkpoints", "show", secret_dsn, "k1", "--json")
    assert json.loads(shown.out)["status"] == "completed"
    unknown = tubeless(capsys, "checkpoints", "show", secret_dsn, "nope")
    assert unknown.code == 2
    assert "no checkpoint 'nope' in postgresql://tubeless:***@" in unknown.err
    deleted = tubeless(capsys, "checkpoints", "delete", secret_dsn, "k1")
    assert (deleted.code, deleted.out) == (0, "deleted k1\n")
    assert tubeless(capsys, "checkpoints", "list", secret_dsn).out == "no checkpoints\n"
    for outcome in (waiting, listed, approved, done, shown, unknown, deleted):
        assert SECRET not in outcome.out + outcome.err


def test_a_url_for_checkpoints_and_trace_is_not_one_file(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    postgres_dsn: str,  # noqa: F811
) -> None:
    """Checkpoints in a database beside an NDJSON trace: no same-file refusal for URLs."""
    project = write_project(tmp_path, GATED, MODULE)
    trace = tmp_path / "t.ndjson"
    outcome = tubeless(
        capsys,
        "run",
        project,
        "--checkpoints",
        postgres_dsn,
        "--trace",
        trace,
        "--approve-all",
        "-q",
    )
    assert outcome.code == 0, outcome.err
    assert trace.exists()


@pytest.mark.parametrize("engine", ["local", pytest.param("process", marks=pytest.mark.slow)])
def test_batch_rows_commit_to_the_database_and_a_rerun_runs_nothing(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    postgres_dsn: str,  # noqa: F811
    engine: str,
) -> None:
    """Workers get the URL itself; every row's checkpoint lands in the one database."""
    from tests.fixtures.batch import rows_project, write_inputs

    project = rows_project(tmp_path)
    inputs = write_inputs(tmp_path / "in.jsonl", [{"n": n} for n in range(4)])
    args = ("batch", project, inputs, "-c", "2", "--engine", engine, "--checkpoints", postgres_dsn)
    first = tubeless(capsys, *args)
    assert first.code == 0, first.err
    store = PostgresCheckpoints(postgres_dsn)
    assert len(store.list()) == 4
    assert all(json.loads(c.document)["status"] == "completed" for c in store.list())
    store.close()
    again = tubeless(capsys, *args)
    assert again.code == 0, again.err
    rows = [json.loads(line) for line in again.out.splitlines()]
    assert sorted(row["result"]["square"] for row in rows) == [0, 1, 4, 9]
    assert {row["calls"] for row in rows} == {0}  # saved results: nothing ran again
