"""The web pages mounted by serve at ``/ui``, in process: login and cookie, CSRF on the forms,
a run started from the form, approvals answered on the page, and the event stream taking the
pages' session cookie (and no other)."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from tests.fixtures.processes import HANG_GUARD
from tests.serve.conftest import TOKEN, Served
from tubeless.errors import (
    OPTIONS_VALIDATION_FAILED,
    SERVE_CONFLICT,
    SERVE_UNAUTHORIZED,
)

BEARER = {"authorization": f"Bearer {TOKEN}"}


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, Served]]:
    """``create_app`` over the serve tests' project, its lifespan running for the module."""
    from tubeless.serve import create_app

    folder = tmp_path_factory.mktemp("served-ui")
    served = Served(folder)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SERVE_TEST_DIR", str(served.marks_dir))
        patch.syspath_prepend(str(folder))
        made = create_app(str(served.project), token=TOKEN)
        with TestClient(made, base_url="http://127.0.0.1", follow_redirects=False) as client:
            yield client, served


def _client(app: tuple[Any, Served]) -> TestClient:
    """The module's client with no cookies (each test logs in for itself)."""
    client: TestClient = app[0]
    client.cookies.clear()
    return client


def _login(client: TestClient) -> str:
    """Log in through ``/ui/login``; the CSRF value the forms then carry."""
    page = client.get("/ui/login")
    assert page.status_code == 200 and 'action="/ui/login"' in page.text
    csrf = client.cookies["tubeless_csrf"]
    done = client.post("/ui/login", data={"token": TOKEN, "csrf": csrf, "next": "/approvals"})
    assert done.status_code == 303 and done.headers["location"] == "/ui/approvals"
    # The session cookie covers the whole server: the event streams live outside /ui.
    assert re.search(
        r"tubeless_ui=[0-9a-f]+; HttpOnly; Path=/; SameSite=strict",
        done.headers["set-cookie"],
        re.IGNORECASE,
    )
    return csrf


def _wait(client: TestClient, run_id: str, statuses: set[str]) -> dict[str, Any]:
    deadline = time.monotonic() + HANG_GUARD
    while True:
        run: dict[str, Any] = client.get(f"/v1/runs/{run_id}", headers=BEARER).json()
        if run["status"] in statuses:
            return run
        assert time.monotonic() < deadline, f"run stayed {run['status']}"
        time.sleep(0.05)


def _start(client: TestClient, csrf: str, **fields: str) -> str:
    answer = client.post("/ui/new", data={"csrf": csrf, "entry": "worker", **fields})
    assert answer.status_code == 303, answer.text
    location = answer.headers["location"]
    assert location.startswith("/ui/runs/run_")
    return location.removeprefix("/ui/runs/")


def test_the_pages_need_the_session_cookie_and_redirect_to_the_login(
    app: tuple[Any, Served],
) -> None:
    client = _client(app)
    for path in ("/ui/", "/ui/approvals", "/ui/new?entry=worker", "/ui/graph"):
        answer = client.get(path)
        assert answer.status_code == 303
        assert answer.headers["location"].startswith("/ui/login?next=")
    assert client.post("/ui/new", data={"entry": "worker"}).status_code == 401
    _login(client)
    runs = client.get("/ui/")
    assert runs.status_code == 200
    for link in ('href="/ui/approvals"', 'href="/ui/new"', 'href="/ui/static/ui.css"'):
        assert link in runs.text
    graph = client.get("/ui/graph")
    assert graph.status_code == 200 and "worker" in graph.text and "<svg" in graph.text
    # The API itself still wants the bearer token: the cookie opens only the pages and streams.
    api = client.get("/v1/runs")
    assert api.status_code == 401 and api.json()["error"]["code"] == SERVE_UNAUTHORIZED


def test_every_form_refuses_a_missing_or_foreign_csrf_value(app: tuple[Any, Served]) -> None:
    client = _client(app)
    csrf = _login(client)
    posts = {
        "/ui/new": {"entry": "worker", "text": "x"},
        "/ui/approvals": {"run_id": "run_x", "call_id": "c1", "digest": "d", "decision": "approve"},
    }
    for path, form in posts.items():
        for value in (None, "forged-" + csrf):
            sent = form if value is None else {**form, "csrf": value}
            answer = client.post(path, data=sent)
            assert answer.status_code == 403, (path, value)
            assert "The form expired" in answer.text
    login = client.post("/ui/login", data={"token": TOKEN, "csrf": "forged"})
    assert login.status_code == 403


def test_the_form_generated_from_the_input_schema_starts_a_run(app: tuple[Any, Served]) -> None:
    client = _client(app)
    csrf = _login(client)
    form = client.get("/ui/new?entry=worker").text
    assert 'name="text"' in form and 'name="steps"' in form and "<option>publish</option>" in form
    assert 'action="/ui/new"' in form
    run_id = _start(client, csrf, text="form", steps="2", mode="safe")
    run = _wait(client, run_id, {"completed", "failed"})
    assert run["status"] == "completed" and run["result"] == {"outs": ["FORM-1", "FORM-2"]}
    page = client.get(f"/ui/runs/{run_id}")
    assert page.status_code == 200 and "status-completed" in page.text
    assert "data-events" not in page.text  # an ended run is not followed
    listed = client.get("/ui/").text
    assert run_id in listed


def test_an_input_the_schema_refuses_is_shown_on_the_form(app: tuple[Any, Served]) -> None:
    client = _client(app)
    csrf = _login(client)
    answer = client.post("/ui/new", data={"csrf": csrf, "entry": "worker", "steps": "99"})
    assert answer.status_code == 422
    problem = re.search(r"<p class=\"problem\"[^>]*>(.*?)</p>", answer.text)
    assert problem is not None, answer.text[-600:]
    assert (
        OPTIONS_VALIDATION_FAILED in problem[1]
        and "steps: must be less than or equal to 20" in problem[1]
    )


def test_an_approval_answered_on_the_page_resumes_the_run(app: tuple[Any, Served]) -> None:
    client = _client(app)
    csrf = _login(client)
    run_id = _start(client, csrf, text="notes", steps="1", mode="publish")
    waiting = _wait(client, run_id, {"waiting", "failed", "completed"})
    assert waiting["status"] == "waiting"
    pending = waiting["pending_approvals"][0]
    run_page = client.get(f"/ui/runs/{run_id}").text
    assert f'data-events="/v1/runs/{run_id}/events"' in run_page  # followed while it waits
    listed = client.get("/ui/approvals").text
    assert pending["digest"] in listed and "notes-1" in listed
    answer = {"csrf": csrf, "run_id": run_id, "call_id": pending["call_id"], "key": "k"}
    wrong = client.post(
        "/ui/approvals", data={**answer, "digest": "sha256:0", "decision": "approve"}
    )
    assert wrong.status_code == 200 and f"Not recorded: {SERVE_CONFLICT}" in wrong.text
    right = client.post(
        "/ui/approvals", data={**answer, "digest": pending["digest"], "decision": "approve"}
    )
    assert right.status_code == 303
    assert right.headers["location"].startswith("/ui/approvals?notice=Call+c1+approved")
    done = _wait(client, run_id, {"completed", "failed"})
    assert done["status"] == "completed" and done["result"] == {"outs": ["published notes-1"]}
    # The resumed attempt is a root run of its own; the served run's page shows the latest.
    page = client.get(f"/ui/runs/{run_id}")
    assert "status-completed" in page.text and 'class="attempts"' in page.text
    first = client.get(f"/ui/runs/{run_id}?attempt=this")
    assert "status-waiting" in first.text


def test_the_event_stream_takes_the_pages_cookie_but_not_a_foreign_one(
    app: tuple[Any, Served],
) -> None:
    from tubeless.ui import SESSION_COOKIE

    client = _client(app)
    csrf = _login(client)
    run_id = _start(client, csrf, text="e", steps="1", mode="safe")
    _wait(client, run_id, {"completed", "failed"})
    with client.stream("GET", f"/v1/runs/{run_id}/events") as stream:
        assert stream.status_code == 200
        text = "".join(stream.iter_text())
    assert "event: record" in text and "event: end" in text
    own = client.cookies[SESSION_COOKIE]
    client.cookies.clear()
    foreign = {"cookie": f"{SESSION_COOKIE}={'0' * len(own)}"}
    for headers in (foreign, {}):
        refused = client.get(f"/v1/runs/{run_id}/events", headers=headers)
        assert refused.status_code == 401
        assert refused.json()["error"]["code"] == SERVE_UNAUTHORIZED
    mine = {"cookie": f"{SESSION_COOKIE}={own}"}
    # The cookie opens the streams only: not the rest of the API.
    assert client.get("/v1/runs", headers=mine).status_code == 401
    assert client.get(f"/v1/runs/{run_id}", headers=mine).status_code == 401
    with client.stream("GET", f"/v1/runs/{run_id}/events", headers=mine) as again:
        assert again.status_code == 200


def test_create_app_without_the_pages(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tubeless.serve import create_app

    served = Served(tmp_path)
    monkeypatch.setenv("SERVE_TEST_DIR", str(served.marks_dir))
    monkeypatch.syspath_prepend(str(tmp_path))
    app = create_app(str(served.project), token=TOKEN, ui=False)
    with TestClient(app, base_url="http://127.0.0.1") as client:
        assert client.get("/ui/login").status_code == 401
        assert client.get("/ui/login", headers=BEARER).status_code == 404


def test_a_run_this_server_does_not_know_is_not_followed(app: tuple[Any, Served]) -> None:
    client = _client(app)
    _login(client)
    missing = client.get("/ui/runs/run_0123")
    assert missing.status_code == 404 and "data-events" not in missing.text


def test_every_link_and_form_of_the_pages_stays_under_the_mount(app: tuple[Any, Served]) -> None:
    client = _client(app)
    csrf = _login(client)
    run_id = _start(client, csrf, text="links", steps="1", mode="safe")
    _wait(client, run_id, {"completed", "failed"})
    pages = ["/ui/", f"/ui/runs/{run_id}", "/ui/approvals", "/ui/graph", "/ui/new"]
    pages += [f"/ui/compare?a={run_id}&b={run_id}", "/ui/runs/run_0123"]
    seen = 0
    for path in pages:
        text = client.get(path).text
        for target in re.findall(r'(?:href|action|src)="([^"]*)"', text):
            seen += 1
            assert target.startswith(("/ui/", "#", "data:")), (path, target)
    assert seen > 40
    client.cookies.clear()
    login = client.get("/ui/login").text
    assert 'action="/ui/login"' in login and 'href="/ui/static/ui.css"' in login


def test_without_a_token_the_pages_need_no_login(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tubeless.serve import create_app

    served = Served(tmp_path)
    monkeypatch.setenv("SERVE_TEST_DIR", str(served.marks_dir))
    monkeypatch.syspath_prepend(str(tmp_path))
    app = create_app(str(served.project), token=None)
    with TestClient(app, base_url="http://127.0.0.1", follow_redirects=False) as client:
        runs = client.get("/ui/")
        assert runs.status_code == 200 and 'href="/ui/new"' in runs.text
