"""A run's ``turns`` and ``calls`` while it runs: shown by the worker running it at once, and by
any other worker (another server on the same stores) from the registry, written about once a
second. Real ``tubeless serve`` processes; every wait is a hang guard."""

from __future__ import annotations

import time
from typing import Any

import httpx
import pytest

from tests.fixtures.processes import HANG_GUARD
from tests.serve.conftest import Served, read_stream, sse_events, wait_status


def _until_counted(client: httpx.Client, run_id: str) -> dict[str, Any]:
    """The run once it shows a turn and a call (hang guard only)."""
    deadline = time.monotonic() + HANG_GUARD
    while True:
        run = client.get(f"/v1/runs/{run_id}").json()
        if run["turns"] >= 1 and run["calls"] >= 1:
            return run
        assert time.monotonic() < deadline, f"the run never showed its progress: {run}"
        time.sleep(0.05)


def test_the_worker_running_a_run_shows_its_turns_and_calls_while_a_call_blocks(
    served: Served,
) -> None:
    served.hold()
    server = served.start()
    with server.client() as client:
        run = client.post(
            "/v1/entries/worker/runs", json={"input": {"text": "q", "steps": 2}}
        ).json()
        served.wait_holding()  # turn 1's call is running and blocks
        here = _until_counted(client, run["run_id"])
        assert (here["status"], here["turns"], here["calls"]) == ("running", 1, 1)
        with client.stream("GET", f"/v1/runs/{run['run_id']}/events") as response:
            status = next(e for e in sse_events(response) if e["event"] == "status")
        assert status["data"] == {
            "run_id": run["run_id"],
            "status": "running",
            "turns": 1,
            "calls": 1,
        }
        served.release()
        done = wait_status(client, run["run_id"], {"completed", "failed"})
        assert (done["status"], done["calls"]) == ("completed", 2), done
        assert done["turns"] >= 2


@pytest.mark.slow
def test_a_running_run_shows_its_turns_and_calls_here_and_on_another_server(
    served: Served,
) -> None:
    served.hold()
    a = served.start()
    b = served.start()
    with a.client() as client_a, b.client() as client_b:
        run = client_a.post(
            "/v1/entries/worker/runs", json={"input": {"text": "p", "steps": 2}}
        ).json()
        assert (run["turns"], run["calls"]) == (0, 0)
        served.wait_holding()  # turn 1's call is running and blocks
        here = _until_counted(client_a, run["run_id"])
        assert here["status"] == "running"
        assert (here["turns"], here["calls"]) == (1, 1)
        listed = client_a.get("/v1/runs").json()["runs"]
        mine = next(r for r in listed if r["run_id"] == run["run_id"])
        assert (mine["turns"], mine["calls"]) == (1, 1)
        # The other server reads what the running worker wrote to the shared registry.
        there = _until_counted(client_b, run["run_id"])
        assert there["status"] == "running"
        assert (there["turns"], there["calls"]) == (1, 1)
        served.release()
        done = wait_status(client_a, run["run_id"], {"completed", "failed"})
        assert done["status"] == "completed", done
        assert done["calls"] == 2 and done["turns"] >= 2
        assert client_b.get(f"/v1/runs/{run['run_id']}").json()["calls"] == 2


def test_status_events_carry_the_counts_and_the_last_one_the_final_counts(served: Served) -> None:
    server = served.start()
    with server.client() as client:
        run = client.post(
            "/v1/entries/worker/runs", json={"input": {"text": "e", "steps": 2}, "wait_s": 30}
        ).json()
        assert run["status"] == "completed"
        events = read_stream(client, run["run_id"])
    statuses = [e["data"] for e in events if e["event"] == "status"]
    assert statuses[-1] == {
        "run_id": run["run_id"],
        "status": "completed",
        "turns": run["turns"],
        "calls": 2,
    }
    assert events[-1] == {"event": "end", "data": {"run_id": run["run_id"], "status": "completed"}}
