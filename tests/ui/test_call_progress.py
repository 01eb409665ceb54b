"""The run page shows each call's progress (issue 36): a running call its latest report, a
finished one its last; a call that reported nothing shows none."""

from __future__ import annotations

import json
import re
from pathlib import Path
from urllib.parse import quote

import pytest

from tests.fixtures import ui as made
from tests.ui.conftest import client_for
from tubeless.tracing import read_trace, run_trees


@pytest.fixture(scope="module")
def traces(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The finished progress trace, and a copy cut after fetch's first progress report."""
    folder = tmp_path_factory.mktemp("progress")
    finished = made.progress_trace(folder)
    lines = finished.read_text(encoding="utf-8").splitlines(keepends=True)
    first = next(
        i
        for i, line in enumerate(lines)
        if (r := json.loads(line))["name"] == "step.running"
        and r["pipelineId"].endswith("/tool/fetch")
        and "progress" in r.get("payload", {})
    )
    running = folder / "running.ndjson"
    running.write_text("".join(lines[: first + 1]), encoding="utf-8")
    return {"finished": finished, "running": running}


def _calls(trace: Path) -> dict[str, str]:
    """The run page's call rows by call id (each row's HTML up to the next row)."""
    run_id = run_trees(read_trace(trace))[0].run_id
    with client_for([trace]) as client:
        page = client.get(f"/runs/{quote(run_id, safe='')}")
    assert page.status_code == 200
    rows = page.text.split('<li class="call"')[1:]
    found = {}
    for row in rows:
        match = re.search(r'<span class="call-id">([^<]*)</span>', row)
        assert match is not None
        found[match.group(1)] = row
    return found


def test_finished_calls_show_their_last_progress(traces: dict[str, Path]) -> None:
    calls = _calls(traces["finished"])

    fetch = calls["get"]
    assert 'data-status="completed"' in fetch
    assert '<progress max="1" value="1.0">' in fetch
    assert '<span class="count">3 of 3</span>' in fetch
    assert "fetched all parts" in fetch and "fetched part 1" not in fetch
    scan = calls["look"]  # no total: the count alone, no bar
    assert '<span class="count">2.5</span>' in scan and "scanned 2.5 MB" in scan
    assert "<progress" not in scan
    assert 'data-row="progress"' not in calls["hush"]


def test_a_running_call_shows_its_latest_progress(traces: dict[str, Path]) -> None:
    calls = _calls(traces["running"])

    fetch = calls["get"]
    assert 'data-status="running"' in fetch
    assert '<span class="count">1 of 3</span>' in fetch and "fetched part 1" in fetch
    assert re.search(r'<progress max="1" value="0\.333', fetch)
    assert set(calls) == {"get"}  # the other calls had not started


def test_the_run_json_carries_each_calls_progress(traces: dict[str, Path]) -> None:
    trace = traces["finished"]
    run_id = run_trees(read_trace(trace))[0].run_id
    with client_for([trace]) as client:
        data = client.get(f"/runs/{quote(run_id, safe='')}?format=json").json()
    calls = {c["call_id"]: c for c in data["turns"][0]["calls"]}
    assert calls["get"]["progress"] == {
        "completed": 3,
        "total": 3,
        "message": "fetched all parts",
        "fraction": 1.0,
    }
    assert calls["hush"]["progress"] is None
