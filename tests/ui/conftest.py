"""Fixtures of the ui tests: traces made once per module by real runs, and a logged-in client."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures import ui as made

pytest.importorskip("starlette")

from starlette.testclient import TestClient

from tubeless.ui import create_ui_app


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Traces of the delegation, scripted (a failing call), approvals (waiting) and drift
    (record, then a diverging replay) runs, and the approvals checkpoint store."""
    folder = tmp_path_factory.mktemp("stores")
    approvals, checkpoints = made.waiting_approval(folder)
    return {
        "delegation": made.delegation_trace(folder),
        "scripted": made.scripted_trace(folder),
        "approvals": approvals,
        "checkpoints": checkpoints,
        "drift": made.drift_traces(folder),
        "folder": folder,
    }


def client_for(
    traces: list[Path], *, login: bool = True, token: str | None = made.TOKEN, **options: Any
) -> TestClient:
    """A client of the pages over ``traces``, logged in through the form unless told not."""
    app = create_ui_app([str(t) for t in traces], token=token, **{"checkpoints": None, **options})
    client = TestClient(app, base_url="http://127.0.0.1", follow_redirects=False)
    if login and token is not None:
        page = client.get("/login")
        csrf = page.cookies.get("tubeless_csrf") or client.cookies.get("tubeless_csrf")
        answer = client.post("/login", data={"token": token, "csrf": csrf, "next": "/"})
        assert answer.status_code == 303
    return client


@pytest.fixture
def client(stores: dict[str, Path]) -> Iterator[TestClient]:
    """Logged in, over every trace of :func:`stores`, with its checkpoint store."""
    traces = [stores[name] for name in ("delegation", "scripted", "approvals", "drift")]
    with client_for(traces, checkpoints=str(stores["checkpoints"])) as one:
        yield one
