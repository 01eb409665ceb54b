"""The API of one ``tubeless serve`` process (started once for this module), driven with httpx."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.serve.conftest import TOKEN, Served, read_stream, wait_status

RUN_KEYS = {
    "run_id", "entry", "key", "status", "turns", "calls", "usage", "pending_approvals",
    "created_at", "updated_at",
}  # fmt: skip


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Served, httpx.Client]]:
    found = Served(tmp_path_factory.mktemp("served"))
    try:
        server = found.start()
        with server.client() as client:
            yield found, client
    finally:
        for server in found.servers:
            server.kill()


def _start(client: httpx.Client, body: dict[str, Any], **headers: str) -> httpx.Response:
    return client.post("/v1/entries/worker/runs", json=body, headers=headers)


def test_a_waited_run_answers_200_with_the_run_object_and_its_result(
    shared: tuple[Served, httpx.Client],
) -> None:
    _, client = shared
    answer = _start(client, {"input": {"text": "a", "steps": 2}, "wait_s": 30})
    assert answer.status_code == 200, answer.text
    run = answer.json()
    assert set(run) == RUN_KEYS | {"result"}
    assert (run["entry"], run["status"], run["turns"], run["calls"]) == (
        "worker",
        "completed",
        3,
        2,
    )
    assert run["result"] == {"outs": ["A-1", "A-2"]}
    assert run["key"].startswith("worker:") and run["pending_approvals"] == []
    assert client.get(f"/v1/runs/{run['run_id']}").json() == run
    served, _ = shared  # the token was in the server's environment: its tools never see it
    assert (served.marks_dir / "environment.txt").read_text() == ""


def test_without_wait_s_a_run_is_202_and_then_completes(
    shared: tuple[Served, httpx.Client],
) -> None:
    _, client = shared
    answer = _start(client, {"input": {"text": "b"}})
    assert answer.status_code == 202, answer.text
    assert answer.headers["location"] == f"/v1/runs/{answer.json()['run_id']}"
    assert answer.json()["status"] in ("queued", "running", "completed")
    done = wait_status(client, answer.json()["run_id"], {"completed"})
    assert done["result"] == {"outs": ["B-1"]}


def test_the_stream_sends_every_record_with_its_sequence_then_status_and_end(
    shared: tuple[Served, httpx.Client],
) -> None:
    _, client = shared
    run = _start(client, {"input": {"text": "c", "steps": 2}, "wait_s": 30}).json()
    events = read_stream(client, run["run_id"])
    records = [e for e in events if e["event"] == "record"]
    ids = [int(e["id"]) for e in records]
    assert ids == sorted(set(ids)) and len(ids) > 10
    assert records[0]["data"]["name"] == "pipeline.started"
    assert all(e["data"]["correlationId"] == run["run_id"] for e in records)
    assert [e["event"] for e in events[-2:]] == ["status", "end"]
    assert events[-1]["data"] == {"run_id": run["run_id"], "status": "completed"}
    # Resuming after a record sends exactly the ones after it, with ?since= or Last-Event-ID.
    middle = ids[len(ids) // 2]
    again = read_stream(client, run["run_id"], headers={"last-event-id": str(middle)})
    assert [int(e["id"]) for e in again if e["event"] == "record"] == ids[ids.index(middle) + 1 :]
    since = client.get(f"/v1/runs/{run['run_id']}/events", params={"since": str(ids[-1])})
    assert "event: record" not in since.text and "event: end" in since.text


def test_an_idempotency_key_returns_the_same_run(shared: tuple[Served, httpx.Client]) -> None:
    _, client = shared
    first = _start(client, {"input": {"text": "d"}, "wait_s": 30}, **{"idempotency-key": "k-1"})
    again = _start(client, {"input": {"text": "other"}}, **{"idempotency-key": "k-1"})
    assert first.status_code == again.status_code == 200
    assert again.json()["run_id"] == first.json()["run_id"]
    assert again.json()["result"] == {"outs": ["D-1"]}


def test_limits_may_tighten_but_never_loosen(shared: tuple[Served, httpx.Client]) -> None:
    _, client = shared
    loose = _start(client, {"input": {"text": "e"}, "limits": {"max_calls": 11}})
    assert loose.status_code == 422
    error = loose.json()["error"]
    assert error["code"] == "TUBELESS_AGENT_INVALID_DEFINITION"
    assert "max_calls=11" in error["message"] and error["limit"] == "max_calls"
    # max_depth is unset in the file: bounded by the default, 4.
    unset = _start(client, {"input": {"text": "e"}, "limits": {"max_depth": 5}})
    assert unset.status_code == 422 and "max_depth" in unset.json()["error"]["message"]
    tight = _start(
        client, {"input": {"text": "e", "steps": 3}, "limits": {"max_calls": 1}, "wait_s": 30}
    )
    assert tight.status_code == 200
    assert tight.json()["status"] == "failed"
    assert tight.json()["error"]["code"] == "TUBELESS_AGENT_LIMIT_REACHED"
    assert "max_calls=1" in tight.json()["error"]["message"]


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        ({"input": {"text": 5}}, 422, "TUBELESS_OPTIONS_VALIDATION_FAILED"),
        ({"input": {}, "surprise": 1}, 400, "TUBELESS_SERVE_BAD_REQUEST"),
        ({"input": {}, "wait_s": -1}, 400, "TUBELESS_SERVE_BAD_REQUEST"),
        ({"input": {}, "key": " "}, 422, "TUBELESS_AGENT_INVALID_CHECKPOINT_KEY"),
    ],
)
def test_refused_bodies_say_why_with_a_code(
    shared: tuple[Served, httpx.Client], body: dict[str, Any], status: int, code: str
) -> None:
    _, client = shared
    answer = _start(client, body)
    assert (answer.status_code, answer.json()["error"]["code"]) == (status, code)
    assert "Traceback" not in answer.text


def test_malformed_and_deep_json_is_400_and_unknown_things_404(
    shared: tuple[Served, httpx.Client],
) -> None:
    _, client = shared
    bad = client.post("/v1/entries/worker/runs", content=b"{nope")
    assert (bad.status_code, bad.json()["error"]["code"]) == (400, "TUBELESS_SERVE_BAD_REQUEST")
    deep = client.post("/v1/entries/worker/runs", content=b"[" * 5000 + b"]" * 5000)
    assert deep.status_code == 400 and "nests deeper" in deep.json()["error"]["message"]
    for path in ("/v1/runs/nope", "/v1/nothing-here"):
        answer = client.get(path)
        assert (answer.status_code, answer.json()["error"]["code"]) == (
            404,
            "TUBELESS_SERVE_NOT_FOUND",
        )
    missing = _start_entry(client, "nobody")
    assert missing.status_code == 404 and "nobody" in missing.json()["error"]["message"]


def _start_entry(client: httpx.Client, entry: str) -> httpx.Response:
    return client.post(f"/v1/entries/{entry}/runs", json={"input": {}})


def test_a_token_is_required_except_on_open_paths(shared: tuple[Served, httpx.Client]) -> None:
    served, _client = shared
    url = served.servers[0].url
    for headers in (
        {},
        {"authorization": "Bearer wrong-token-0123456789"},
        {"authorization": TOKEN},
    ):
        answer = httpx.get(f"{url}/v1/runs", headers=headers)
        assert answer.status_code == 401
        assert answer.json()["error"]["code"] == "TUBELESS_SERVE_UNAUTHORIZED"
        assert answer.headers["www-authenticate"].startswith("Bearer")
    assert httpx.get(f"{url}/healthz").status_code == 200
    assert httpx.get(f"{url}/openapi.json").json()["openapi"] == "3.1.0"


def test_a_foreign_host_header_is_403(shared: tuple[Served, httpx.Client]) -> None:
    _, client = shared
    answer = client.get("/v1/runs", headers={"host": "attacker.example:8421"})
    assert (answer.status_code, answer.json()["error"]["code"]) == (
        403, "TUBELESS_SERVE_FORBIDDEN_HOST"
    )  # fmt: skip
    assert client.get("/healthz", headers={"host": "localhost:1"}).status_code == 200


def test_a_body_over_1_mib_is_413_before_it_is_parsed(shared: tuple[Served, httpx.Client]) -> None:
    _, client = shared
    big = b'{"input": "' + b"x" * (1024 * 1024) + b'"}'
    answer = client.post("/v1/entries/worker/runs", content=big)
    assert (answer.status_code, answer.json()["error"]["code"]) == (413, "TUBELESS_SERVE_TOO_LARGE")

    def chunks() -> Iterator[bytes]:  # no Content-Length: refused once the count passes 1 MiB
        for _ in range(20):
            yield b" " * 65536

    streamed = client.post("/v1/entries/worker/runs", content=chunks())
    assert streamed.status_code == 413


def test_cross_origin_requests_are_closed_by_default(shared: tuple[Served, httpx.Client]) -> None:
    _, client = shared
    preflight = client.options(
        "/v1/runs",
        headers={"origin": "https://app.example", "access-control-request-method": "POST"},
    )
    assert preflight.status_code == 403
    plain = client.get("/v1/runs", headers={"origin": "https://app.example"})
    assert "access-control-allow-origin" not in plain.headers


def test_entries_metrics_and_listing(shared: tuple[Served, httpx.Client]) -> None:
    _, client = shared
    # Three completed runs of its own: the listing below pages them whatever ran before here
    # (xdist spreads this module's tests over workers, each with its own server).
    for text in ("f", "g", "h"):
        _start(client, {"input": {"text": text}, "wait_s": 30})
    (entry,) = client.get("/v1/entries").json()["entries"]
    assert entry["id"] == "worker" and entry["kind"] == "agent"
    assert entry["limits"]["max_calls"] == 10
    assert [t["name"] for t in entry["tools"]] == ["publish", "safe", "work"]
    assert entry["input_schema"]["properties"]["steps"]["maximum"] == 20
    metrics = client.get("/metrics")
    assert metrics.headers["content-type"].startswith("text/plain")
    assert 'tubeless_serve_runs{status="completed"}' in metrics.text
    assert "tubeless_serve_call_duration_seconds_count" in metrics.text
    page = client.get("/v1/runs", params={"limit": "2", "status": "completed"}).json()
    assert len(page["runs"]) == 2 and page["next_cursor"] is not None
    rest = client.get("/v1/runs", params={"cursor": page["next_cursor"]}).json()["runs"]
    assert {r["run_id"] for r in rest}.isdisjoint(r["run_id"] for r in page["runs"])
