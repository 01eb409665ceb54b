"""``tubeless serve`` on a PostgreSQL database: several servers (think: hosts) on one database,
runs taken over through the checkpoint lease when their server dies, the DSN's password never
shown."""

from __future__ import annotations

import os
import signal
import time
from collections import Counter
from pathlib import Path

import psycopg
import pytest

from tests.fixtures.postgres import postgres_dsn, postgres_server
from tests.fixtures.processes import HANG_GUARD
from tests.serve.conftest import Served, read_stream, wait_status
from tubeless._cli._app import main

__all__ = ["postgres_dsn", "postgres_server"]

SECRET = "hunter2-not-shown"


def _with_password(dsn: str) -> str:
    return dsn.replace("postgresql://tubeless@", f"postgresql://tubeless:{SECRET}@")


def _stores(dsn: str, *extra: str) -> tuple[str, ...]:
    return ("--checkpoints", dsn, "--trace", dsn, *extra)


@pytest.mark.slow
def test_a_run_started_on_a_killed_host_is_finished_by_another_after_its_lease_expires(
    served: Served, postgres_dsn: str
) -> None:
    dsn = _with_password(postgres_dsn)
    served.hold()
    a = served.start(*_stores(dsn, "--lease-ttl", "2"))
    b = served.start(*_stores(dsn, "--lease-ttl", "2"))
    with a.client() as client_a, b.client() as client_b:
        run = client_a.post(
            "/v1/entries/worker/runs", json={"input": {"text": "k", "steps": 2}}
        ).json()
        served.wait_holding()
        # B answers for a run A executes: status and the event stream.
        assert client_b.get(f"/v1/runs/{run['run_id']}").json()["status"] == "running"
        before = read_stream(client_b, run["run_id"], stop_after=5)
        a.kill()
        served.release()
        done = wait_status(client_b, run["run_id"], {"completed", "failed", "cancelled"})
        assert done["status"] == "completed", done
        # The unsafe call running when A died is interrupted, never run again; the next ran once.
        assert done["result"] == {"outs": ["TUBELESS_AGENT_CALL_INTERRUPTED", "K-2"]}
        counts = Counter(served.marks())
        assert len(counts) == 2 and all(n == 1 for n in counts.values()), counts
        rest = read_stream(client_b, run["run_id"], headers={"last-event-id": before[-1]["id"]})
        whole = read_stream(client_b, run["run_id"])
    ids = [e["id"] for e in before + rest if e["event"] == "record"]
    assert ids == [e["id"] for e in whole if e["event"] == "record"]
    assert len(ids) == len(set(ids))
    assert rest[-1] == {"event": "end", "data": {"run_id": run["run_id"], "status": "completed"}}
    # The run's records are in the database once: one first invocation, one resumption.
    with psycopg.connect(postgres_dsn) as conn:
        tables = {r[0] for r in conn.execute("SELECT tablename FROM pg_tables")}
        runs = conn.execute(
            "SELECT run_id, status, claim_owner FROM tubeless_serve_runs"
        ).fetchall()
    assert {"tubeless_serve_runs", "tubeless_serve_a2a_tasks", "tubeless_serve_migrations"} <= (
        tables
    )
    assert runs == [(run["run_id"], "completed", None)]
    assert SECRET not in a.stderr_path.read_text() + b.stderr()


@pytest.mark.slow
def test_a_server_restarted_on_postgres_resumes_its_runs_and_answers_without_the_password(
    served: Served, postgres_dsn: str
) -> None:
    dsn = _with_password(postgres_dsn)
    served.hold()
    first = served.start(*_stores(dsn, "--lease-ttl", "1"))
    assert "checkpoints postgresql://tubeless:***@" in first.stderr()
    with first.client() as client:
        run = client.post(
            "/v1/entries/worker/runs", json={"input": {"text": "r", "mode": "safe"}}
        ).json()
        served.wait_holding()
    first.kill()
    served.release()
    again = served.start(*_stores(dsn, "--lease-ttl", "1"), port=first.port)
    with again.client() as client:
        done = wait_status(client, run["run_id"], {"completed", "failed"})
        assert done["result"] == {"outs": ["R-1"]}  # a safe call interrupted runs again
        health = client.get("/healthz").text
        metrics = client.get("/metrics").text
    assert SECRET not in health + metrics + first.stderr_path.read_text() + again.stderr()


def test_an_unreachable_database_fails_before_listening_without_its_password(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    served = Served(tmp_path)
    monkeypatch.setenv("SERVE_TEST_DIR", str(served.marks_dir))
    url = f"postgresql://tubeless:{SECRET}@127.0.0.1:1/nothing"
    code = main(["serve", str(served.project), "--checkpoints", url, "--trace", url])
    err = capsys.readouterr().err
    assert code != 0
    assert "127.0.0.1:1" in err and SECRET not in err
    assert "Traceback" not in err


def test_a_postgres_trace_needs_postgres_checkpoints(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    served = Served(tmp_path)
    code = main(["serve", str(served.project), "--trace", "postgresql://u@127.0.0.1:1/d"])
    assert code == 1
    assert "--checkpoints postgresql://" in capsys.readouterr().err


def test_lease_ttl_below_one_second_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    served = Served(tmp_path)
    assert main(["serve", str(served.project), "--lease-ttl", "0.5"]) == 1
    assert "--lease-ttl" in capsys.readouterr().err


@pytest.mark.slow
def test_a_run_waiting_on_one_host_is_approved_cancelled_and_retried_on_another(
    served: Served, postgres_dsn: str
) -> None:
    a = served.start(*_stores(postgres_dsn))
    b = served.start(*_stores(postgres_dsn))
    with a.client() as client_a, b.client() as client_b:
        started = client_a.post(
            "/v1/entries/worker/runs",
            json={"input": {"text": "p", "mode": "publish"}, "wait_s": 30},
            headers={"idempotency-key": "order-1"},
        ).json()
        assert started["status"] == "waiting"
        (pending,) = client_b.get("/v1/approvals").json()["approvals"]
        # The same Idempotency-Key on the other host answers the same run.
        again = client_b.post(
            "/v1/entries/worker/runs",
            json={"input": {"text": "p", "mode": "publish"}},
            headers={"idempotency-key": "order-1"},
        ).json()
        assert again["run_id"] == started["run_id"]
        url = f"/v1/runs/{started['run_id']}/approvals/c1"
        answered = client_b.post(url, json={"approve": True, "digest": pending["digest"]})
        assert answered.status_code in (200, 202), answered.text
        done = wait_status(client_a, started["run_id"], {"completed", "failed"})
        assert done["result"] == {"outs": ["published p-1"]}
        assert len(served.marks()) == 1
        # A run waiting on A is cancelled through B.
        other = client_a.post(
            "/v1/entries/worker/runs",
            json={"input": {"text": "q", "mode": "publish"}, "wait_s": 30},
        ).json()
        assert other["status"] == "waiting"
        cancelled = client_b.post(f"/v1/runs/{other['run_id']}/cancel").json()
        assert cancelled["status"] == "cancelled"
        assert client_a.get(f"/v1/runs/{other['run_id']}").json()["status"] == "cancelled"


@pytest.mark.slow
def test_a_host_paused_past_its_lease_loses_the_run_and_writes_nothing_more(
    served: Served, postgres_dsn: str
) -> None:
    served.hold()
    a = served.start(*_stores(postgres_dsn, "--lease-ttl", "1"))
    b = served.start(*_stores(postgres_dsn, "--lease-ttl", "1"))
    with b.client() as client_b:
        run = client_b.post(
            "/v1/entries/worker/runs", json={"input": {"text": "z", "steps": 2}}
        ).json()
        served.wait_holding()  # on B or on A: whichever runs it is paused next
        # Find who runs it: the other one answers "running" too, so ask the database.
        with psycopg.connect(postgres_dsn) as conn:
            (owner,) = conn.execute(
                "SELECT claim_owner FROM tubeless_serve_runs WHERE run_id = %s", (run["run_id"],)
            ).fetchone()
        holder, other = (b, a) if f":{b.process.pid}:" in owner else (a, b)
        os.kill(holder.process.pid, signal.SIGSTOP)  # no renewals: its lease and claim expire
        try:
            served.release()
            with other.client() as client:
                done = wait_status(client, run["run_id"], {"completed", "failed"})
        finally:
            os.kill(holder.process.pid, signal.SIGCONT)
        assert done["result"] == {"outs": ["TUBELESS_AGENT_CALL_INTERRUPTED", "Z-2"]}
        # The paused host wakes up, finds its run taken over and stops it (its call's result
        # is refused by the fence); the run stays as the new owner ended it.
        deadline = time.monotonic() + HANG_GUARD
        while "was taken over by another worker" not in holder.stderr():
            assert time.monotonic() < deadline, holder.stderr()
            time.sleep(0.05)
        with holder.client() as client:
            assert wait_status(client, run["run_id"], {"completed"}) == done
    counts = Counter(served.marks())
    assert len(counts) == 2 and all(n == 1 for n in counts.values()), counts


@pytest.mark.slow
def test_several_workers_on_two_hosts_run_every_run_once(served: Served, postgres_dsn: str) -> None:
    a = served.start(*_stores(postgres_dsn, "--workers", "2"))
    b = served.start(*_stores(postgres_dsn, "--workers", "2"))
    with a.client() as client_a, b.client() as client_b:
        ids = [
            (client_a if n % 2 else client_b)
            .post("/v1/entries/worker/runs", json={"input": {"text": f"w{n}"}})
            .json()["run_id"]
            for n in range(8)
        ]
        for n, run_id in enumerate(ids):
            done = wait_status(client_a if n % 2 else client_b, run_id, {"completed", "failed"})
            assert done["result"] == {"outs": [f"W{n}-1"]}
    counts = Counter(served.marks())
    assert len(counts) == 8 and all(n == 1 for n in counts.values()), counts
