"""The approvals page over a checkpoint store: pending calls with their arguments, answered
the way ``tubeless approve`` / ``deny`` answer them."""

from __future__ import annotations

import json
import re
from pathlib import Path
from urllib.parse import quote

from starlette.testclient import TestClient

from tests.fixtures import ui as made
from tests.ui.conftest import client_for
from tubeless.durable import SqliteCheckpoints
from tubeless.tracing import read_trace, run_trees


def _answer(client: TestClient, page: str, decision: str, **changes: str) -> dict[str, str]:
    form = re.search(r'<form method="post" action="/approvals".*?</form>', page, flags=re.S)
    assert form is not None
    fields = dict(re.findall(r'<input type="hidden" name="(\w+)" value="([^"]*)">', form[0]))
    return {**fields, "decision": decision, **changes}


def _document(store: Path) -> dict[str, object]:
    checkpoints = SqliteCheckpoints(store)
    try:
        (stored,) = checkpoints.list()
        return json.loads(stored.document)  # type: ignore[no-any-return]
    finally:
        checkpoints.close()


def test_a_waiting_call_is_listed_with_its_arguments_and_digest(tmp_path: Path) -> None:
    trace, store = made.waiting_approval(tmp_path)
    with client_for([trace], checkpoints=str(store)) as client:
        page = client.get("/approvals").text
    assert page.count('data-row="approval"') == 1
    assert "publish" in page and "&#34;Release notes&#34;" in page  # arguments, from the store
    pending = _document(store)["approvals"]["pending"][0]  # type: ignore[index]
    assert pending["digest"] in page
    run_id = run_trees(read_trace(trace))[0].run_id
    assert f'href="/runs/{quote(run_id, safe="")}"' in page  # the run that waits for it


def test_approving_records_the_decision_and_the_next_run_finishes(tmp_path: Path) -> None:
    trace, store = made.waiting_approval(tmp_path)
    with client_for([trace], checkpoints=str(store)) as client:
        page = client.get("/approvals").text
        answer = client.post("/approvals", data=_answer(client, page, "approve"))
        assert answer.status_code == 303
        done = client.get(answer.headers["location"]).text
        assert "Call publish approved" in done and 'data-row="approval"' not in done
    decisions = _document(store)["approvals"]["decisions"]  # type: ignore[index]
    assert [(d["call_id"], d["approved"]) for d in decisions] == [("publish", True)]
    assert made.resume_approvals(tmp_path) == 0
    statuses = [t.status for t in run_trees(read_trace(trace))]
    assert statuses == ["waiting", "completed"]


def test_denying_keeps_the_reason_in_the_checkpoint(tmp_path: Path) -> None:
    trace, store = made.waiting_approval(tmp_path)
    with client_for([trace], checkpoints=str(store)) as client:
        page = client.get("/approvals").text
        form = _answer(client, page, "deny", reason="not today")
        assert client.post("/approvals", data=form).status_code == 303
    decisions = _document(store)["approvals"]["decisions"]  # type: ignore[index]
    assert [(d["approved"], d.get("reason")) for d in decisions] == [(False, "not today")]


def test_an_answer_for_other_arguments_is_refused(tmp_path: Path) -> None:
    trace, store = made.waiting_approval(tmp_path)
    with client_for([trace], checkpoints=str(store)) as client:
        page = client.get("/approvals").text
        stale = _answer(client, page, "approve", digest="sha256:" + "0" * 64)
        answer = client.post("/approvals", data=stale)
        assert answer.status_code == 200 and "Not recorded" in answer.text
        assert "not waiting with these arguments" in answer.text
    assert _document(store)["approvals"]["decisions"] == []  # type: ignore[index]


def test_without_a_checkpoint_store_the_page_says_how_to_give_one(tmp_path: Path) -> None:
    trace, _ = made.waiting_approval(tmp_path)
    with client_for([trace]) as client:
        page = client.get("/approvals").text
    assert "--checkpoints PATH" in page and 'data-row="approval"' not in page


def test_a_call_denied_from_the_page_shows_as_denied_with_a_reason(tmp_path: Path) -> None:
    trace, store = made.waiting_approval(tmp_path)
    with client_for([trace], checkpoints=str(store)) as client:
        page = client.get("/approvals").text
        assert client.post(
            "/approvals", data=_answer(client, page, "deny", reason="no")
        ).is_redirect
        assert made.resume_approvals(tmp_path) == 0
        resumed = run_trees(read_trace(trace))[-1].run_id
        html = client.get(f"/runs/{quote(resumed, safe='')}").text
    denied = [c for c in html.split('data-row="call"')[1:] if 'data-status="denied"' in c[:40]]
    assert len(denied) == 1 and "publish" in denied[0] and "with a reason" in denied[0]


def test_arguments_holding_markup_are_shown_escaped(tmp_path: Path) -> None:
    trace, store = tmp_path / "a.ndjson", tmp_path / "c.sqlite"
    title = "<script>alert(1)</script>"
    project = made.PROJECTS / "approvals.yaml"
    args = ("run", project, "--title", title, "--checkpoints", store, "-q", "--trace", trace)
    assert made.cli(*args) == 8
    with client_for([trace], checkpoints=str(store)) as client:
        page = client.get("/approvals").text
    assert "<script>alert(1)" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
