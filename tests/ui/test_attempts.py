"""A run that resumed is several root runs in the trace (its attempts); when the first one's
correlation id is its own run id (as ``tubeless serve`` starts runs), its page shows the latest
attempt and lists them all. Other runs are never regrouped."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import quote

from tests.fixtures import ui as made
from tests.ui.conftest import client_for
from tubeless.tracing import read_trace, run_trees
from tubeless.ui._approvals import CheckpointApprovals

PROJECT = made.PROJECTS / "approvals.yaml"


def _approve_and_resume(
    folder: Path, first: tuple[str, ...] = (), again: tuple[str, ...] = ()
) -> tuple[Path, list[str]]:
    """The approvals project: a waiting run (options ``first``), its call approved, the key run
    again (options ``again``)."""
    trace, store = folder / "t.ndjson", folder / "c.sqlite"
    base = ("run", PROJECT, "--checkpoints", store, "-q", "--trace", trace)
    assert made.cli(*base, *first) == 8
    approvals = CheckpointApprovals(str(store))
    for item in approvals.pending():
        approvals.answer(
            key=item["key"],
            call_id=item["call_id"],
            route=item.get("route"),
            digest=item["digest"],
            approve=True,
            reason=None,
        )
    assert made.cli(*base, *again) == 0
    roots = [tree.run_id for tree in run_trees(read_trace(trace))]
    return trace, roots


def test_a_run_correlated_with_itself_shows_its_latest_attempt(tmp_path: Path) -> None:
    trace, roots = _approve_and_resume(
        tmp_path,
        first=("--run-id", "first", "--correlation-id", "first"),
        again=("--correlation-id", "first"),  # the resumed attempt: an id of its own
    )
    assert roots[0] == "first" and len(roots) == 2
    with client_for([trace]) as client:
        page = client.get("/runs/first").text
        assert "status-completed" in page and 'class="attempts"' in page
        assert f"/runs/{quote(roots[1], safe='')}?attempt=this" in page
        exact = client.get("/runs/first?attempt=this").text
        assert "status-waiting" in exact
        latest = client.get(f"/runs/{quote(roots[1], safe='')}").text
        assert 'class="attempts"' not in latest  # only the first attempt names the chain


def test_runs_without_that_correlation_are_never_regrouped(tmp_path: Path) -> None:
    trace, roots = _approve_and_resume(tmp_path)
    assert len(roots) == 2
    with client_for([trace]) as client:
        page = client.get(f"/runs/{roots[0]}").text
        assert "status-waiting" in page and 'class="attempts"' not in page
