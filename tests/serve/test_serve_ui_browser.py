"""The pages a real ``tubeless serve`` process mounts at ``/ui``, in Debian's Chromium (headless,
Playwright): log in, start a run from the form generated from the entry's input schema and see
it complete, approve a waiting call and see the run page finish live over the event stream, and
markup in a run's input never runs. One server and one browser serve the whole module.

Screenshots (``ui-serve-*``) go where ``tests/fixtures/browser.py`` says.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures import ui as made
from tests.fixtures.browser import Page, browser, shots
from tests.serve.conftest import Served, Server, wait_status

__all__ = ["browser", "shots"]  # fixtures

#: Waits in the browser (ms): hang guards only.
GUARD_MS = 30_000


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """One ``tubeless serve`` process of the serve tests' project, token ``made.TOKEN``."""
    served = Served(tmp_path_factory.mktemp("served-browser"))
    try:
        yield served.start(token=made.TOKEN)
    finally:
        for one in served.servers:
            with contextlib.suppress(Exception):
                one.kill()


@pytest.fixture
def page(server: Server, browser: Any) -> Iterator[Page]:
    """A page logged in at ``/ui/login`` (through the redirect from ``/ui/``), 1280 px wide."""
    one = Page(browser, f"{server.url}/ui", 1280)
    try:
        yield one
    finally:
        one.close()


def _no_markup_ran(page: Any) -> None:
    assert page.evaluate("document.scripts.length") == 1  # ui.js only
    assert page.locator("img").count() == 0


@pytest.mark.slow
def test_a_run_started_from_the_generated_form_completes(page: Page, shots: Path) -> None:
    form = page.go("/new?entry=worker")
    choices = form.locator("form.start select[name=mode] option").all_inner_texts()
    assert choices == ["(default)", "work", "safe", "publish"]
    # An input the schema refuses comes back on the form, the posted markup as text.
    form.fill("input[name=text]", made.XSS)
    form.fill("input[name=steps]", "99")
    form.click("form.start button[type=submit]")
    form.wait_for_selector("p.problem:has-text('TUBELESS_OPTIONS_VALIDATION_FAILED')")
    assert form.input_value("input[name=text]") == made.XSS
    _no_markup_ran(form)
    # Chromium logs the 422 answer of the form itself; nothing else may be logged.
    assert [e for e in page.errors if "status of 422" not in e] == []
    page.errors.clear()
    form = page.go("/new?entry=worker")
    form.fill("input[name=text]", "browser")
    form.fill("input[name=steps]", "2")
    form.select_option("form.start select[name=mode]", "safe")
    page.shot(shots, "serve-new")
    form.click("form.start button[type=submit]")
    form.wait_for_url("**/ui/runs/run_*")
    form.wait_for_selector("h1 .status-completed", timeout=GUARD_MS)
    assert form.locator("li[data-row=call]").count() == 2
    page.shot(shots, "serve-run")
    runs = page.go("/")
    assert runs.locator("tr[data-row=run]").count() >= 1


@pytest.mark.slow
def test_an_approval_on_the_page_resumes_the_run_and_its_page_finishes_live(
    server: Server, browser: Any, page: Page, shots: Path
) -> None:
    form = page.go("/new?entry=worker")
    form.fill("input[name=text]", "release notes")
    form.fill("input[name=steps]", "1")
    form.select_option("form.start select[name=mode]", "publish")
    form.click("form.start button[type=submit]")
    form.wait_for_url("**/ui/runs/run_*")
    run_id = form.url.rsplit("/", 1)[1]
    with server.client(made.TOKEN) as api:
        wait_status(api, run_id, {"waiting"})
    watched = page.go(f"/runs/{run_id}")
    watched.wait_for_selector("h1 .status-waiting", timeout=GUARD_MS)
    assert "Live" in watched.locator("#live").inner_text()
    other = Page(browser, f"{server.url}/ui", 1280)
    try:
        approvals = other.go("/approvals")
        row = approvals.locator("li[data-row=approval]").filter(has_text=run_id)
        assert row.count() == 1 and "release notes-1" in row.locator("pre").inner_text()
        other.shot(shots, "serve-approvals")
        # Another run's input holds markup: its call's arguments show as text.
        with server.client(made.TOKEN) as api:
            started = api.post(
                "/v1/entries/worker/runs",
                json={"input": {"text": made.XSS, "steps": 1, "mode": "publish"}},
            )
            marked = started.json()["run_id"]
            wait_status(api, marked, {"waiting"})
        approvals = other.go("/approvals")
        shown = approvals.locator("li[data-row=approval]").filter(has_text=marked)
        text = shown.locator("pre").inner_text()  # the arguments as JSON text
        assert "<script>alert(" in text and "<img src=x onerror=alert(1)>-1" in text
        _no_markup_ran(approvals)
        row.locator("button.approve").click()
        approvals.wait_for_selector("p.notice:has-text('approved')")
    finally:
        other.close()
    # The page that watched the waiting run follows its event stream (the session cookie is
    # its only credential) and shows the resumed attempt finishing.
    watched.wait_for_selector("h1 .status-completed", timeout=GUARD_MS)
    watched.wait_for_selector("#live:has-text('The run ended.')", timeout=GUARD_MS)
    assert watched.locator("ol.attempts li").count() == 2
    page.shot(shots, "serve-live")
