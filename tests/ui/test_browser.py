"""The pages in a real browser: Debian's Chromium driven by Playwright, headless, against a
real ``tubeless ui`` process on 127.0.0.1.

Each test writes screenshots of the pages it visits, at 1280 and 390 px wide, into a temporary
folder, or into ``$TUBELESS_UI_SCREENSHOTS`` when set (docs/images is made that way). Without
``/usr/bin/chromium`` the tests skip, except in CI, where they fail.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from tests.fixtures import ui as made
from tests.fixtures.browser import WIDTHS, Page, browser, shots
from tubeless.tracing import read_trace, run_trees

__all__ = ["browser", "shots"]  # fixtures


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """A ``tubeless ui`` process over delegation, scripted, drift and waiting-approval runs
    (every run made here, before the browser starts: its event loop holds the test's thread)."""
    folder = tmp_path_factory.mktemp("site")
    approvals, checkpoints = made.waiting_approval(folder)
    traces = {
        "delegation": made.delegation_trace(folder),
        "scripted": made.scripted_trace(folder),
        "approvals": approvals,
        "drift": made.drift_traces(folder),
    }
    xss = made.xss_trace(folder)  # its own ui process, in the test
    args = [*traces.values(), "--checkpoints", checkpoints]
    args += ["--project", made.PROJECTS / "delegation.yaml"]
    with made.UiProcess(folder, *args, token=made.TOKEN) as process:
        yield {"url": process.url, "folder": folder, "xss": xss, **traces}


@pytest.fixture
def pages(site: dict[str, Any], browser: Any) -> Iterator[list[Page]]:
    opened = [Page(browser, site["url"], width) for width in WIDTHS]
    try:
        yield opened
    finally:
        for one in opened:
            one.context.close()
    for one in opened:
        assert one.dialogs == [] and one.errors == []


def _root(trace: Path, entry: str) -> str:
    return next(t.run_id for t in run_trees(read_trace(trace)) if t.pipeline_id == entry)


@pytest.mark.slow
def test_runs_filter_and_a_delegation_run_with_its_nested_child_calls(
    pages: list[Page], site: dict[str, Any], shots: Path
) -> None:
    for one in pages:
        page = one.go("/")
        assert page.locator("tr[data-row=run]").count() == 5
        one.shot(shots, "runs")
        page.select_option("select[name=entry]", "delegating-agent")
        page.click("form.filters button[type=submit]")
        page.wait_for_url("**/?entry=delegating-agent**")
        assert page.locator("tr[data-row=run]").count() == 1
        page.click("tr[data-row=run] a.id")
        page.wait_for_selector("h2#turns-h")
        nested = page.locator(".child-agent li[data-row=call]")
        assert nested.count() == 4  # count and uppercase, in each of the two child agents
        assert nested.filter(has_text="uppercase").count() == 2
        one.shot(shots, "run")
        page.keyboard.press("Tab")
        assert page.evaluate("document.activeElement.textContent") == "Skip to content"


@pytest.mark.slow
def test_a_waiting_call_is_approved_from_the_approvals_page(
    pages: list[Page], site: dict[str, Any], shots: Path
) -> None:
    run_id = _root(site["approvals"], "approvals")
    narrow, wide = pages[1], pages[0]
    narrow.go("/approvals")
    narrow.shot(shots, "approvals")
    page = wide.go("/approvals")
    approval = page.locator("li[data-row=approval]")
    assert approval.count() == 1 and "Release notes" in approval.locator("pre").inner_text()
    wide.shot(shots, "approvals")
    for _ in range(40):  # the keyboard alone reaches the button (a bounded walk)
        page.keyboard.press("Tab")
        if page.evaluate("document.activeElement.className") == "approve":
            break
    assert page.evaluate("document.activeElement.textContent") == "Approve"
    page.keyboard.press("Enter")
    page.wait_for_selector("p.notice:has-text('Call publish approved')")
    assert page.locator("li[data-row=approval]").count() == 0
    assert made.resume_approvals(site["folder"], process=True) == 0
    page = wide.go(f"/runs/{quote(run_id, safe='')}")
    assert page.locator("h1 .status").inner_text() == "waiting"
    page = wide.go("/?entry=approvals")
    statuses = page.locator("tr[data-row=run] .status").all_inner_texts()
    assert statuses == ["completed", "waiting"]


@pytest.mark.slow
def test_compare_finds_where_a_drifted_replay_differs(
    pages: list[Page], site: dict[str, Any], shots: Path
) -> None:
    recorded, replayed = (t.run_id for t in run_trees(read_trace(site["drift"])))
    for one in pages:
        page = one.go("/compare")
        page.fill("input[name=a]", recorded)
        page.fill("input[name=b]", replayed)
        page.click("form.filters button[type=submit]")
        marked = page.locator("#first-difference")
        marked.wait_for()
        assert "turn 2" in marked.inner_text() and "TUBELESS_REPLAY_DIVERGED" in marked.inner_text()
        page.click("p.notice a[href='#first-difference']")
        one.shot(shots, "compare")


@pytest.mark.slow
def test_graph_and_login_pages(pages: list[Page], site: dict[str, Any], shots: Path) -> None:
    for one in pages:
        page = one.go("/graph")
        assert page.locator("svg.graph g.node").count() >= 5
        one.shot(shots, "graph")
    fresh = pages[0].context.browser.new_context(viewport={"width": 1280, "height": 700})
    try:
        login = fresh.new_page()
        login.goto(site["url"] + "/approvals")
        login.wait_for_selector("form.login")
        login.screenshot(path=str(shots / "ui-login-1280.png"))
        login.fill("input[name=token]", made.TOKEN)
        login.click("form.login button[type=submit]")
        login.wait_for_selector("h1:has-text('Approvals')")
    finally:
        fresh.close()


@pytest.mark.slow
def test_markup_in_a_trace_never_runs(site: dict[str, Any], browser: Any, shots: Path) -> None:
    trace = site["xss"]
    trees = run_trees(read_trace(trace))
    with made.UiProcess(site["folder"], trace, token=made.TOKEN) as process:
        one = Page(browser, process.url, 1280)
        try:
            paths = ["/", f"/compare?a={quote(trees[0].run_id)}&b={quote(trees[0].run_id)}"]
            paths += [f"/runs/{quote(run.run_id, safe='')}" for run in trees[0].walk()][:8]
            for path in paths:
                page = one.go(path)
                assert page.evaluate("document.scripts.length") == 1  # ui.js only
                assert page.locator("img").count() == 0
            page = one.go(f"/runs/{quote(trees[0].run_id, safe='')}")
            assert 'alert("x")' in page.locator("h1").inner_text()  # shown as text
            one.shot(shots, "xss")
        finally:
            one.close()


class _LiveHost:
    """A host that streams one run's events: nothing until ``finished`` is set, then a
    ``record`` and the ``end`` event (the way serve's ``/v1/runs/{id}/events`` ends)."""

    def __init__(self) -> None:
        import threading

        self.finished = threading.Event()

    def entries(self) -> list[Any]:
        return []

    async def start_run(self, entry: str, raw_input: Any) -> str:
        raise AssertionError("not used")

    async def pending_approvals(self) -> list[Any]:
        return []

    async def answer_approval(self, *args: Any, **kwargs: Any) -> None:
        raise AssertionError("not used")

    def events_url(self, run_id: str) -> str | None:
        return f"/v1/runs/{quote(run_id, safe='')}/events"

    async def events(self, request: Any) -> Any:
        import asyncio

        from starlette.responses import StreamingResponse

        async def stream() -> Any:
            for _ in range(600):  # a hang guard of 30 s, never a timing
                if self.finished.is_set():
                    break
                await asyncio.sleep(0.05)
            yield "event: record\nid: 1\ndata: {}\n\n"
            yield "event: end\ndata: {}\n\n"

        return StreamingResponse(stream(), media_type="text/event-stream")


@pytest.mark.slow
def test_a_running_run_page_updates_live_from_the_hosts_event_stream(
    site: dict[str, Any], browser: Any, shots: Path
) -> None:
    import socket
    import threading

    import uvicorn
    from starlette.applications import Starlette
    from starlette.routing import Mount, Route

    from tubeless.ui import create_ui_app

    records = site["delegation"].read_text(encoding="utf-8").splitlines(keepends=True)
    live = site["folder"] / "live.ndjson"
    live.write_text("".join(records[:-1]), encoding="utf-8")  # no pipeline.completed yet
    run_id = run_trees(read_trace(site["delegation"]))[0].run_id
    host = _LiveHost()
    ui = create_ui_app([str(live)], checkpoints=None, token=made.TOKEN, actions=host)
    app = Starlette(
        routes=[Route("/v1/runs/{run_id:path}/events", host.events), Mount("/ui", app=ui)]
    )
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        for _ in range(600):  # hang guard
            if server.started:
                break
            threading.Event().wait(0.05)
        url = f"http://127.0.0.1:{sock.getsockname()[1]}/ui"
        one = Page(browser, url, 1280)
        try:
            page = one.go(f"/runs/{quote(run_id, safe='')}")
            assert page.locator("h1 .status").inner_text() == "running"
            assert "Live" in page.locator("#live").inner_text()
            with live.open("a", encoding="utf-8") as handle:
                handle.write(records[-1])
            host.finished.set()
            page.wait_for_selector("h1 .status-completed", timeout=30_000)
            page.wait_for_selector("#live:has-text('The run ended.')", timeout=30_000)
            one.shot(shots, "live")
        finally:
            one.close()
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        sock.close()


@pytest.mark.slow
def test_every_page_works_with_javascript_off(site: dict[str, Any], browser: Any) -> None:
    context = browser.new_context(java_script_enabled=False)
    try:
        page = context.new_page()
        page.goto(site["url"] + "/")
        page.fill("input[name=token]", made.TOKEN)
        page.click("form.login button[type=submit]")
        page.wait_for_selector("h1:has-text('Runs')")
        page.select_option("select[name=status]", "completed")
        page.click("form.filters button[type=submit]")
        page.wait_for_url("**status=completed**")
        statuses = page.locator("tr[data-row=run] .status").all_inner_texts()
        assert len(statuses) >= 3 and set(statuses) == {"completed"}
        page.click("tr[data-row=run] a.id >> nth=0")
        page.wait_for_selector("h2#turns-h")
        for path in ("/approvals", "/graph", "/compare"):
            page.goto(site["url"] + path)
            assert page.locator("main h1").count() == 1
    finally:
        context.close()
