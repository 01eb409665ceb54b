"""A 100,000-record trace: the runs page and a run page send a bounded number of rows."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fixtures import ui as made
from tests.ui.conftest import client_for
from tubeless.ui._run_view import CALLS_PER_TURN, TURNS_PER_PAGE
from tubeless.ui._runs import RUNS_PER_PAGE

LONG_TURNS = 2_000


def _rows(page: str) -> list[tuple[str, int]]:
    """``(run link, turns)`` of each row of a runs page."""
    rows = []
    for row in page.split('data-row="run"')[1:]:
        link = row.split('href="')[1].split('"')[0]
        rows.append((link, int(row.split('data-label="Turns">')[1].split("<")[0])))
    return rows


@pytest.mark.slow
def test_a_100000_record_trace_pages_its_runs_and_windows_a_long_run(tmp_path: Path) -> None:
    trace = made.big_trace(tmp_path, records=100_000, long_turns=LONG_TURNS)
    with client_for([trace]) as client:
        first = client.get("/")
        assert first.status_code == 200
        total = int(first.text.split('id="count">')[1].split(" run")[0])
        pages = -(-total // RUNS_PER_PAGE)
        assert pages > 1
        rows = [row for n in range(1, pages + 1) for row in _rows(client.get(f"/?page={n}").text)]
        assert len(rows) == total and len(_rows(first.text)) == RUNS_PER_PAGE
        link, turns = max(rows, key=lambda row: row[1])
        assert turns > LONG_TURNS  # its cloned turns, plus the original run's own

        run = client.get(link)
        assert run.text.count('data-row="turn"') == TURNS_PER_PAGE
        assert run.text.count('data-row="call"') <= TURNS_PER_PAGE * CALLS_PER_TURN
        assert f"of {turns}." in run.text
        last_page = -(-turns // TURNS_PER_PAGE)
        last = client.get(f"{link}?turns={last_page}")
        assert last.text.count('data-row="turn"') == turns - (last_page - 1) * TURNS_PER_PAGE
        assert max(len(run.content), len(first.content)) < 400_000
