"""The pages as a host mounts them (``tubeless serve`` at ``/ui``): a start-a-run form made from
the entry's input schema, approvals answered through the host, live updates over its events."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote

from starlette.applications import Starlette
from starlette.routing import Mount
from starlette.testclient import TestClient

from tests.fixtures import ui as made
from tubeless.errors import OPTIONS_VALIDATION_FAILED, TubelessError
from tubeless.tracing import read_trace, run_trees
from tubeless.ui import UiActions, UiEntry, create_ui_app

SCHEMA = {
    "type": "object",
    "properties": {
        "question": {"type": "string", "description": "What to ask."},
        "n": {"type": "integer", "default": 3},
        "mode": {"enum": ["fast", "slow"]},
        "loud": {"type": "boolean"},
        "tags": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["question"],
}


class FakeHost:
    """A host that records what the pages asked of it."""

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        self.started: list[tuple[str, Any]] = []
        self.answers: list[tuple[str, str, str, bool, str | None]] = []

    def entries(self) -> Sequence[UiEntry]:
        return [UiEntry(id="ask", description="Ask <b>it</b>.", input_schema=SCHEMA)]

    async def start_run(self, entry: str, raw_input: Any) -> str:
        if raw_input.get("question") == "bad":
            raise TubelessError(OPTIONS_VALIDATION_FAILED, "input rejected at /question")
        self.started.append((entry, raw_input))
        return self.run_id

    async def pending_approvals(self) -> Sequence[Mapping[str, Any]]:
        return [
            {
                "run_id": self.run_id,
                "key": "ask:1",
                "route": "ask",
                "turn": 1,
                "call_id": "c1",
                "tool": "publish",
                "input": {"text": "<b>hi</b>"},
                "digest": "sha256:abc",
                "requested_at": 1,
            }
        ]

    async def answer_approval(
        self, run_id: str, call_id: str, *, digest: str, approve: bool, reason: str | None
    ) -> None:
        self.answers.append((run_id, call_id, digest, approve, reason))

    def events_url(self, run_id: str) -> str | None:
        return f"/v1/runs/{quote(run_id, safe='')}/events"


def _mounted(trace: Path, host: FakeHost) -> TestClient:
    actions: UiActions = host
    ui = create_ui_app([str(trace)], checkpoints=None, token=made.TOKEN, actions=actions)
    app = Starlette(routes=[Mount("/ui", app=ui)])
    client = TestClient(app, base_url="http://127.0.0.1", follow_redirects=False)
    sent = client.get("/ui/approvals?x=1")
    assert sent.headers["location"] == "/ui/login?next=%2Fapprovals%3Fx%3D1"
    login = client.get("/ui/login")
    assert login.status_code == 200 and 'action="/ui/login"' in login.text
    csrf = client.cookies["tubeless_csrf"]
    done = client.post("/ui/login", data={"token": made.TOKEN, "csrf": csrf, "next": "/"})
    assert done.status_code == 303 and done.headers["location"] == "/ui/"
    assert "Path=/;" in done.headers["set-cookie"] or done.headers["set-cookie"].endswith("Path=/")
    return client


def test_the_start_form_is_generated_from_the_input_schema(tmp_path: Path) -> None:
    trace = made.delegation_trace(tmp_path)
    client = _mounted(trace, FakeHost("ask:1"))
    page = client.get("/ui/new").text
    assert 'name="question"' in page and 'type="number"' in page and 'name="n" value="3"' in page
    assert "<option>fast</option>" in page and 'type="checkbox" name="loud"' in page
    assert 'name="tags"' in page and "Ask &lt;b&gt;it&lt;/b&gt;." in page
    assert 'href="/ui/static/ui.css"' in page


def test_posting_the_form_starts_a_run_and_opens_its_page(tmp_path: Path) -> None:
    trace = made.delegation_trace(tmp_path)
    host = FakeHost(run_trees(read_trace(trace))[0].run_id)
    client = _mounted(trace, host)
    client.get("/ui/new")
    form = {
        "csrf": client.cookies["tubeless_csrf"],
        "entry": "ask",
        "question": "why",
        "n": "5",
        "mode": "slow",
        "loud__present": "1",
        "loud": "on",
        "tags": '["a", "b"]',
        "__json": "",
    }
    answer = client.post("/ui/new", data=form)
    assert answer.status_code == 303
    assert answer.headers["location"] == f"/ui/runs/{quote(host.run_id, safe='')}"
    assert host.started == [
        ("ask", {"question": "why", "n": 5, "mode": "slow", "loud": True, "tags": ["a", "b"]})
    ]
    rejected = client.post("/ui/new", data={**form, "question": "bad"})
    assert rejected.status_code == 422
    assert "TUBELESS_OPTIONS_VALIDATION_FAILED: input rejected" in rejected.text
    broken = client.post("/ui/new", data={**form, "n": "five"})
    assert broken.status_code == 422 and "field &#39;n&#39;: expected integer" in broken.text


def test_approvals_are_listed_and_answered_through_the_host(tmp_path: Path) -> None:
    trace = made.delegation_trace(tmp_path)
    host = FakeHost("ask:1")
    client = _mounted(trace, host)
    page = client.get("/ui/approvals").text
    assert "&lt;b&gt;hi&lt;/b&gt;" in page and "sha256:abc" in page
    form = {
        "csrf": client.cookies["tubeless_csrf"],
        "run_id": "ask:1",
        "call_id": "c1",
        "digest": "sha256:abc",
        "decision": "deny",
        "reason": "no",
    }
    answer = client.post("/ui/approvals", data=form)
    assert answer.status_code == 303 and answer.headers["location"].startswith("/ui/approvals?")
    assert host.answers == [("ask:1", "c1", "sha256:abc", False, "no")]


def test_a_live_run_page_follows_the_hosts_event_stream(tmp_path: Path) -> None:
    trace, _ = made.waiting_approval(tmp_path)
    run_id = run_trees(read_trace(trace))[0].run_id
    client = _mounted(trace, FakeHost(run_id))
    page = client.get(f"/ui/runs/{quote(run_id, safe='')}").text
    assert f'data-events="/v1/runs/{quote(run_id, safe="")}/events"' in page
    missing = client.get("/ui/runs/not-yet:1")
    assert missing.status_code == 200 and "data-events=" in missing.text  # records on the way


def test_a_finished_run_and_tubeless_ui_alone_stream_nothing(tmp_path: Path) -> None:
    trace = made.delegation_trace(tmp_path)
    run_id = run_trees(read_trace(trace))[0].run_id
    client = _mounted(trace, FakeHost(run_id))
    assert "data-events" not in client.get(f"/ui/runs/{quote(run_id, safe='')}").text
    alone = create_ui_app([str(trace)], checkpoints=None, token=None)
    with TestClient(alone) as plain:
        assert plain.get("/new").status_code == 404
        assert 'href="/new"' not in plain.get("/").text


def test_a_host_accepts_the_pages_login_on_its_event_stream(tmp_path: Path) -> None:
    """The session cookie is sent to the whole site (an EventSource outside the mount sends
    it) and ``session_ok`` tells a host whether it is the pages' login."""
    from tubeless.ui import SESSION_COOKIE, session_ok

    trace = made.delegation_trace(tmp_path)
    client = _mounted(trace, FakeHost("x:1"))
    cookie = client.cookies.get(SESSION_COOKIE)
    assert session_ok(made.TOKEN, cookie, None)
    assert not session_ok(made.TOKEN, "forged", None) and not session_ok(made.TOKEN, None, None)
