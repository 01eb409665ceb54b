"""AG-UI over real HTTP (uvicorn on 127.0.0.1, httpx reading the SSE stream): every event
validates against ag-ui-protocol's models in an allowed order; approvals interrupt and resume;
refusals come before RUN_STARTED; a client that goes away cancels the run."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.serve.protocols.agents import agents_project
from tests.serve.protocols.conftest import APPROVALS, HANG_GUARD_S, SCRIPTED, make_runner, serving
from tests.serve.protocols.sse import check_order, parse_sse
from tubeless.durable import SqliteCheckpoints
from tubeless.serve.protocols import LocalRunner, bearer_identity
from tubeless.serve.protocols._ag_ui import ag_ui_routes


@pytest.fixture
def scripted(tmp_path: Path) -> Iterator[str]:
    runner = make_runner(SCRIPTED, tmp_path / "runs.sqlite")
    with serving(runner, ag_ui_routes(runner)) as url:
        yield url


@pytest.fixture
def approvals(tmp_path: Path) -> Iterator[str]:
    runner = make_runner(APPROVALS, tmp_path / "runs.sqlite")
    with serving(runner, ag_ui_routes(runner)) as url:
        yield url


@pytest.fixture
def python_agents(tmp_path: Path) -> Iterator[tuple[str, LocalRunner]]:
    store = SqliteCheckpoints(tmp_path / "runs.sqlite")
    runner = LocalRunner(agents_project(tmp_path), checkpoints=store)
    with serving(runner, ag_ui_routes(runner)) as url:
        yield url, runner


def _body(thread: str, **fields: Any) -> dict[str, Any]:
    return {"threadId": thread, "runId": str(uuid.uuid4()), "messages": [], **fields}


def _post(url: str, body: Any, token: str = "one") -> tuple[httpx.Response, list[Any]]:
    headers = {"Authorization": f"Bearer {token}"}
    with (
        httpx.Client(timeout=HANG_GUARD_S, headers=headers) as client,
        client.stream("POST", url, json=body) as response,
    ):
        response.read()
        lines = list(response.iter_lines())
    if response.headers["content-type"].startswith("text/event-stream"):
        return response, parse_sse(lines)
    return response, []


def test_a_full_run_streams_steps_calls_results_state_and_the_result(scripted: str) -> None:
    response, events = _post(
        f"{scripted}/ag-ui/scripted-agent",
        _body("thread-1", forwardedProps={"input": {"question": "hi there"}}),
    )
    assert response.status_code == 200
    check_order(events)
    kinds = [event.type.value for event in events]
    assert kinds[:3] == ["RUN_STARTED", "STEP_STARTED", "STEP_FINISHED"]
    assert events[0].thread_id == "thread-1"
    starts = [e for e in events if e.type.value == "TOOL_CALL_START"]
    assert [(e.tool_call_id, e.tool_call_name) for e in starts] == [
        ("1/length", "count"),
        ("1/word-0", "uppercase"),
        ("1/word-1", "uppercase"),
    ]
    args = {e.tool_call_id: e.delta for e in events if e.type.value == "TOOL_CALL_ARGS"}
    assert args["1/word-1"] == '"there"'
    results = [e for e in events if e.type.value == "TOOL_CALL_RESULT"]
    assert len(results) == 3
    # the state is snapshotted right after each reduce step
    reduce_end = kinds.index("STEP_FINISHED", kinds.index("TOOL_CALL_RESULT"))
    assert events[reduce_end].step_name == "reduce"
    assert kinds[reduce_end + 1] == "STATE_SNAPSHOT"
    final = events[-1]
    assert final.type.value == "RUN_FINISHED"
    assert final.outcome.type == "success"
    assert final.result == {"answer": "8 characters; HI; THERE"}


def test_an_approval_interrupts_the_run_and_resume_continues_it(approvals: str) -> None:
    url = f"{approvals}/ag-ui/approvals"
    start = _body("thread-a", forwardedProps={"input": {"to": "ops@elsewhere.org"}})
    response, first = _post(url, start)
    assert response.status_code == 200
    check_order(first)
    final = first[-1]
    assert final.type.value == "RUN_FINISHED"
    assert final.outcome.type == "interrupt"  # never reported as a success
    assert final.result is None
    interrupts = {i.metadata["call_id"]: i for i in final.outcome.interrupts}
    assert set(interrupts) == {"publish", "mail"}
    assert all(i.id.startswith("sha256:") for i in interrupts.values())
    assert interrupts["publish"].tool_call_id == "1/publish"
    assert "RUN_ERROR" not in [event.type.value for event in first]

    resume = [
        {
            "interruptId": interrupts["publish"].id,
            "status": "resolved",
            "payload": {"approve": True},
        },
        # a malformed answer denies
        {"interruptId": interrupts["mail"].id, "status": "resolved", "payload": "yes please"},
    ]
    response, second = _post(url, _body("thread-a", resume=resume))
    assert response.status_code == 200
    check_order(second)
    final = second[-1]
    assert final.type.value == "RUN_FINISHED"
    assert final.outcome.type == "success"
    assert final.result == {
        "drafted": "RELEASE NOTES",
        "published": True,
        "mailed": False,
        "denied": ["mail"],
    }
    snapshots = [e.snapshot for e in second if e.type.value == "STATE_SNAPSHOT"]
    denied = [o for o in snapshots[0]["outcomes"] if not o["ok"]]
    assert [o["error"]["code"] for o in denied] == ["TUBELESS_TOOL_DENIED"]


@pytest.mark.parametrize(
    ("path", "body", "status", "code"),
    [
        pytest.param(
            "/ag-ui/approvals",
            _body("t", forwardedProps={"input": {"title": ""}}),
            422,
            "TUBELESS_OPTIONS_VALIDATION_FAILED",
            id="input-refused-by-the-schema",
        ),
        pytest.param(
            "/ag-ui/approvals",
            {"runId": "r", "messages": []},
            422,
            "TUBELESS_OPTIONS_VALIDATION_FAILED",
            id="not-a-run-agent-input",
        ),
        pytest.param("/ag-ui/nope", _body("t"), 404, "TUBELESS_SERVE_NOT_FOUND", id="no-entry"),
        pytest.param(
            "/ag-ui/approvals",
            _body("t", resume=[{"interruptId": "sha256:0", "status": "resolved"}]),
            409,
            "TUBELESS_SERVE_CONFLICT",
            id="resume-without-a-waiting-run",
        ),
    ],
)
def test_invalid_requests_are_refused_before_run_started(
    approvals: str, path: str, body: Any, status: int, code: str
) -> None:
    response, events = _post(approvals + path, body)
    assert response.status_code == status
    assert events == []
    assert response.json()["error"]["code"] == code


def test_the_input_comes_from_the_last_user_message_when_the_schema_allows(
    python_agents: tuple[str, LocalRunner],
) -> None:
    url, _ = python_agents
    messages = [
        {"id": "m1", "role": "user", "content": "first"},
        {"id": "m2", "role": "assistant", "content": "ok"},
        {"id": "m3", "role": "user", "content": [{"type": "text", "text": "second"}]},
    ]
    _, events = _post(f"{url}/ag-ui/echo", _body("t-echo", messages=messages))
    check_order(events)
    assert events[-1].result == {"echo": "second"}


def test_a_client_that_goes_away_mid_run_cancels_it(
    python_agents: tuple[str, LocalRunner],
) -> None:
    url, runner = python_agents
    body = _body("t-hang", forwardedProps={"input": {"text": "x"}})
    with (
        httpx.Client(timeout=HANG_GUARD_S, headers={"Authorization": "Bearer one"}) as client,
        client.stream("POST", f"{url}/ag-ui/hanging", json=body) as response,
    ):
        for line in response.iter_lines():
            if '"TOOL_CALL_END"' in line:
                break  # the tool is running now: leave
    deadline = time.monotonic() + HANG_GUARD_S
    while True:
        view = runner.find("t-hang", caller=bearer_identity({"authorization": "Bearer one"}))
        if view is not None and view.status == "cancelled":
            break
        assert time.monotonic() < deadline, view
        time.sleep(0.02)
    assert view.error is not None


def test_a_thread_is_its_token_s_alone(approvals: str) -> None:
    url = f"{approvals}/ag-ui/approvals"
    start = _body("thread-b", forwardedProps={"input": {"to": "ops@elsewhere.org"}})
    _, first = _post(url, start, token="one")
    interrupt = first[-1].outcome.interrupts[0]
    answer = {"interruptId": interrupt.id, "status": "resolved", "payload": {"approve": True}}
    stolen, events = _post(url, _body("thread-b", resume=[answer]), token="two")
    taken, _ = _post(url, start, token="two")
    assert (stolen.status_code, stolen.json()["error"]["code"]) == (409, "TUBELESS_SERVE_CONFLICT")
    assert events == []
    assert (taken.status_code, taken.json()["error"]["code"]) == (409, "TUBELESS_SERVE_CONFLICT")


def test_a_failed_run_ends_with_run_error_and_its_code(
    python_agents: tuple[str, LocalRunner],
) -> None:
    url, _ = python_agents
    body = _body("t-loop", forwardedProps={"input": {"text": "x"}})
    _, events = _post(f"{url}/ag-ui/looping", body)
    check_order(events)
    final = events[-1]
    assert final.type.value == "RUN_ERROR"  # the file's limits apply
    assert final.code == "TUBELESS_AGENT_LIMIT_REACHED"
    assert "max_turns" in final.message


def test_a_thread_runs_again_on_a_new_input_and_a_waiting_one_takes_only_answers(
    scripted: str, approvals: str
) -> None:
    first = _body("t-chat", forwardedProps={"input": {"question": "one two"}})
    second = _body("t-chat", forwardedProps={"input": {"question": "three"}})
    _, one = _post(f"{scripted}/ag-ui/scripted-agent", first)
    _, two = _post(f"{scripted}/ag-ui/scripted-agent", second)
    assert one[-1].result == {"answer": "7 characters; ONE; TWO"}
    assert two[-1].result == {"answer": "5 characters; THREE"}

    start = _body("t-wait", forwardedProps={"input": {"to": "ops@elsewhere.org"}})
    _, stopped = _post(f"{approvals}/ag-ui/approvals", start)
    assert stopped[-1].outcome.type == "interrupt"
    refused, events = _post(f"{approvals}/ag-ui/approvals", start)
    assert refused.status_code == 409
    assert "resume[]" in refused.json()["error"]["message"]
    assert events == []
