"""Login, cookies, CSRF, headers and escaping: what keeps the pages safe."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import quote

from hypothesis import given
from hypothesis import strategies as st
from starlette.testclient import TestClient

from tests.fixtures import ui as made
from tests.ui.conftest import client_for
from tubeless.tracing import read_trace, run_trees
from tubeless.ui._runs import RunFilter
from tubeless.ui._security import safe_next, session_value


def test_every_page_redirects_to_the_login_page_until_logged_in(stores: dict[str, Path]) -> None:
    with client_for([stores["delegation"]], login=False) as client:
        for path in ("/", "/runs/x", "/approvals", "/compare", "/graph", "/batches/1"):
            answer = client.get(path)
            assert answer.status_code == 303, path
            assert answer.headers["location"].startswith("/login?next=")
        posted = client.post("/approvals", data={"call_id": "x"})
        assert posted.status_code == 401
        assert client.get("/login").status_code == 200
        assert client.get("/static/ui.css").status_code == 200


def test_the_token_is_exchanged_once_for_an_httponly_strict_session_cookie(
    stores: dict[str, Path],
) -> None:
    with client_for([stores["delegation"]], login=False) as client:
        client.get("/login")
        csrf = client.cookies["tubeless_csrf"]
        wrong = client.post("/login", data={"token": "nope", "csrf": csrf, "next": "/"})
        assert wrong.status_code == 401 and "That is not the token" in wrong.text
        right = client.post("/login", data={"token": made.TOKEN, "csrf": csrf, "next": "/graph"})
        assert right.status_code == 303 and right.headers["location"] == "/graph"
        cookie = right.headers["set-cookie"]
        assert "HttpOnly" in cookie and "SameSite=strict" in cookie.replace("Strict", "strict")
        assert made.TOKEN not in cookie and session_value(made.TOKEN) in cookie
        assert client.get("/").status_code == 200


def test_login_needs_its_csrf_field_and_never_redirects_off_site(stores: dict[str, Path]) -> None:
    with client_for([stores["delegation"]], login=False) as client:
        client.get("/login")
        refused = client.post("/login", data={"token": made.TOKEN, "next": "/"})
        assert refused.status_code == 403
        csrf = client.cookies["tubeless_csrf"]
        away = client.post("/login", data={"token": made.TOKEN, "csrf": csrf, "next": "//evil"})
        assert away.headers["location"] == "/"


def test_a_bearer_token_opens_the_pages_too(stores: dict[str, Path]) -> None:
    with client_for([stores["delegation"]], login=False) as client:
        answer = client.get("/", headers={"Authorization": f"Bearer {made.TOKEN}"})
        assert answer.status_code == 200
        wrong = client.get("/", headers={"Authorization": "Bearer wrong-token-wrong-token"})
        assert wrong.status_code == 303


def test_posts_without_the_csrf_cookie_value_are_refused(client: TestClient) -> None:
    answer = client.post("/approvals", data={"csrf": "forged", "call_id": "x", "key": "k"})
    assert answer.status_code == 403 and "expired" in answer.text
    assert client.post("/approvals", data={"call_id": "x"}).status_code == 403


def test_every_form_carries_the_csrf_value_of_the_cookie(client: TestClient) -> None:
    page = client.get("/approvals")
    forms = re.findall(r'<form method="post".*?</form>', page.text, flags=re.S)
    assert forms, "the waiting approval has a form"
    value = client.cookies["tubeless_csrf"]
    assert all(f'name="csrf" value="{value}"' in form for form in forms)


def test_responses_carry_a_strict_content_security_policy(client: TestClient) -> None:
    headers = client.get("/").headers
    policy = headers["content-security-policy"]
    assert "script-src 'self'" in policy and "unsafe-inline" not in policy
    assert "frame-ancestors 'none'" in policy
    assert headers["x-content-type-options"] == "nosniff"


def test_nothing_from_a_trace_is_rendered_unescaped(tmp_path: Path) -> None:
    trace = made.xss_trace(tmp_path)
    trees = run_trees(read_trace(trace))
    with client_for([trace]) as client:
        pages = [client.get("/").text]
        for tree in trees:
            for run in tree.walk():
                pages.append(client.get(f"/runs/{quote(run.run_id, safe='')}").text)
        pages.append(client.get("/compare", params={"a": trees[0].run_id, "b": "x"}).text)
        pages.append(client.get("/", params={"q": made.XSS, "entry": made.XSS}).text)
    assert len(pages) > 5
    for html in pages:
        assert "<script>alert" not in html and "<img src=x" not in html
    joined = "".join(pages)
    assert "&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;" in joined
    assert "NOT_FOUND&lt;script&gt;" in joined  # the failing call's code, escaped


@given(st.text(max_size=40))
def test_a_login_redirect_stays_on_this_site(target: str) -> None:
    shown = safe_next(target)
    assert shown.startswith("/") and not shown.startswith("//") and "\\" not in shown


@given(st.dictionaries(st.sampled_from(["entry", "status", "page", "q", "since"]), st.text()))
def test_any_query_string_makes_a_runs_filter(query: dict[str, str]) -> None:
    wanted = RunFilter.from_query(query)
    assert wanted.page >= 1 and wanted.status in (
        "",
        *(["running", "waiting", "completed", "failed", "cancelled"]),
    )
