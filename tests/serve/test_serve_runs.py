"""Runs that wait, are held mid-call, cancelled, killed with the server, or moved between
servers: each on its own ``tubeless serve`` process(es)."""

from __future__ import annotations

import signal
from collections import Counter

import pytest

from tests.fixtures.processes import HANG_GUARD
from tests.serve.conftest import Served, read_stream, wait_status


def test_an_approval_needs_the_pending_calls_digest_and_the_run_then_resumes_by_itself(
    served: Served,
) -> None:
    server = served.start()
    with server.client() as client:
        run = client.post(
            "/v1/entries/worker/runs",
            json={"input": {"text": "p", "mode": "publish"}, "wait_s": 30},
        )
        assert run.status_code == 202 and run.json()["status"] == "waiting"
        (pending,) = run.json()["pending_approvals"]
        assert set(pending) == {
            "run_id", "key", "route", "turn", "call_id", "tool", "input", "digest", "requested_at"
        }  # fmt: skip
        assert (pending["tool"], pending["input"], pending["call_id"]) == ("publish", "p-1", "c1")
        assert client.get("/v1/approvals").json()["approvals"] == [pending]
        assert served.marks() == []  # nothing ran
        url = f"/v1/runs/{pending['run_id']}/approvals/c1"
        wrong = client.post(url, json={"approve": True, "digest": "sha256:" + "0" * 64})
        assert (wrong.status_code, wrong.json()["error"]["code"]) == (
            409,
            "TUBELESS_SERVE_CONFLICT",
        )
        assert served.marks() == []
        right = client.post(url, json={"approve": True, "digest": pending["digest"]})
        assert right.status_code in (200, 202), right.text
        done = wait_status(client, pending["run_id"], {"completed", "failed"})
        assert done["result"] == {"outs": ["published p-1"]}
        assert len(served.marks()) == 1
        assert client.get("/v1/approvals").json()["approvals"] == []
        again = client.post(url, json={"approve": True, "digest": pending["digest"]})
        assert again.status_code == 404


def test_a_denied_call_becomes_an_outcome_and_a_quiet_stream_gets_keep_alive_comments(
    served: Served,
) -> None:
    server = served.start(env={"TUBELESS_SERVE_KEEPALIVE_S": "0.2"})
    with server.client() as client:
        run = client.post(
            "/v1/entries/worker/runs",
            json={"input": {"text": "q", "mode": "publish"}, "wait_s": 30},
        ).json()
        (pending,) = run["pending_approvals"]
        seen: list[str] = []
        with client.stream("GET", f"/v1/runs/{run['run_id']}/events") as response:
            for line in response.iter_lines():  # a waiting run writes nothing for a while
                seen.append(line)
                if line.startswith(":"):
                    break
        assert "event: status" in seen and seen[-1].startswith(": ping")
        client.post(
            f"/v1/runs/{run['run_id']}/approvals/c1",
            json={"approve": False, "digest": pending["digest"], "reason": "not today"},
        )
        done = wait_status(client, run["run_id"], {"completed", "failed"})
        assert done["result"] == {"outs": ["TUBELESS_TOOL_DENIED"]}
        assert served.marks() == []


def test_a_held_run_conflicts_on_its_key_is_cancelled_and_max_runs_answers_429(
    served: Served,
) -> None:
    served.hold()
    server = served.start("--max-runs", "1")
    with server.client() as client:
        first = client.post("/v1/entries/worker/runs", json={"input": {"text": "h"}}).json()
        served.wait_holding()
        same = client.post("/v1/entries/worker/runs", json={"input": {"text": "h"}})
        assert same.status_code == 409
        assert same.json()["error"] == {
            "code": "TUBELESS_SERVE_CONFLICT",
            "message": same.json()["error"]["message"],
            "run_id": first["run_id"],
        }
        other = client.post("/v1/entries/worker/runs", json={"input": {"text": "other"}})
        assert (other.status_code, other.json()["error"]["code"]) == (429, "TUBELESS_SERVE_BUSY")
        assert int(other.headers["retry-after"]) >= 1
        cancel = client.post(f"/v1/runs/{first['run_id']}/cancel")
        assert cancel.status_code in (200, 202)
        served.release()
        done = wait_status(client, first["run_id"], {"cancelled", "completed", "failed"})
        assert done["status"] == "cancelled"
        assert done["error"]["code"] == "TUBELESS_RUN_CANCELLED"
        events = read_stream(client, first["run_id"])
        assert events[-1] == {
            "event": "end",
            "data": {"run_id": first["run_id"], "status": "cancelled"},
        }


@pytest.mark.slow
def test_kill_9_mid_call_then_restart_finishes_the_run_without_repeating_the_unsafe_call(
    served: Served,
) -> None:
    served.hold()
    server = served.start()
    with server.client() as client:
        run = client.post(
            "/v1/entries/worker/runs", json={"input": {"text": "k", "steps": 2}}
        ).json()
        served.wait_holding()
        before = read_stream(client, run["run_id"], stop_after=5)
    last_id = before[-1]["id"]
    server.kill()
    served.release()
    again = served.start(port=server.port)
    with again.client() as client:
        done = wait_status(client, run["run_id"], {"completed", "failed"})
        assert done["status"] == "completed", done
        # The call running at the kill was unsafe: interrupted, never run again.
        assert done["result"] == {"outs": ["TUBELESS_AGENT_CALL_INTERRUPTED", "K-2"]}
        counts = Counter(served.marks())
        assert all(n == 1 for n in counts.values()) and len(counts) == 2
        # The stream resumes after the last record seen before the kill: none repeated, none lost.
        rest = read_stream(client, run["run_id"], headers={"last-event-id": last_id})
        whole = read_stream(client, run["run_id"])
    ids = [e["id"] for e in before + rest if e["event"] == "record"]
    assert ids == [e["id"] for e in whole if e["event"] == "record"]
    assert len(ids) == len(set(ids))
    assert rest[-1]["event"] == "end"


@pytest.mark.slow
def test_two_servers_share_one_store_and_b_finishes_what_a_started(served: Served) -> None:
    served.hold()
    a = served.start()
    b = served.start()
    with a.client() as client_a, b.client() as client_b:
        run = client_a.post(
            "/v1/entries/worker/runs",
            # Tighter limits: B rebuilds the same agent from them, so the checkpoint matches.
            json={"input": {"text": "s", "mode": "safe"}, "limits": {"max_calls": 5}},
        ).json()
        served.wait_holding()
        assert client_b.get(f"/v1/runs/{run['run_id']}").json()["status"] == "running"
        a.kill()
        served.release()
        done = wait_status(client_b, run["run_id"], {"completed", "failed"})
    # A safe call interrupted by the kill runs again on B.
    assert done["result"] == {"outs": ["S-1"]}
    assert len(served.marks()) == 2


@pytest.mark.slow
def test_sigterm_during_a_sync_tool_call_stops_the_server_and_the_run_resumes_at_the_next_start(
    served: Served,
) -> None:
    served.hold()
    server = served.start()
    with server.client() as client:
        run = client.post("/v1/entries/worker/runs", json={"input": {"text": "t"}}).json()
        served.wait_holding()
    server.process.send_signal(signal.SIGTERM)
    assert server.process.wait(HANG_GUARD) == 0  # after the grace period, not the tool's end
    assert "they resume at the next start" in server.stderr()
    served.release()
    again = served.start(port=server.port)
    with again.client() as client:
        done = wait_status(client, run["run_id"], {"completed", "failed"})
    assert done["result"] == {"outs": ["TUBELESS_AGENT_CALL_INTERRUPTED"]}
    assert len(served.marks()) == 1
