"""Each call of a run tree carries its run's last progress report (issue 36).

The progress project's one turn runs three calls: ``fetch`` reports 1 of 3 then 3 of 3,
``scan`` reports 2.5 with no total, ``quiet`` reports nothing. A trace cut off after fetch's
first report shows the call running at its latest report.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.fixtures.ui import progress_trace
from tubeless.tracing import read_trace
from tubeless.tracing.projection import CallNode, RunTree, run_trees


@pytest.fixture(scope="module")
def records(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    trace = progress_trace(tmp_path_factory.mktemp("progress"))
    return [dict(r) for r in read_trace(trace)]


def _calls(trees: list[RunTree]) -> dict[str, CallNode]:
    agent = trees[0].agent
    assert agent is not None
    return {call.call_id: call for call in agent.turns[0].calls}


def _fetch_reports(records: list[dict[str, Any]]) -> list[int]:
    """Indices of the progress records of the ``fetch`` call's run."""
    return [
        i
        for i, r in enumerate(records)
        if r["name"] == "step.running"
        and r["pipelineId"].endswith("/tool/fetch")
        and "progress" in r.get("payload", {})
    ]


def test_a_finished_call_shows_its_last_progress_report(records: list[dict[str, Any]]) -> None:
    calls = _calls(run_trees(records))

    assert calls["get"].status == "completed"
    fetch = calls["get"].progress
    assert fetch is not None
    assert fetch.to_dict() == {
        "completed": 3,
        "total": 3,
        "message": "fetched all parts",
        "fraction": 1.0,
    }
    scan = calls["look"].progress
    assert scan is not None
    assert (scan.completed, scan.total, scan.message, scan.fraction) == (
        2.5,
        None,
        "scanned 2.5 MB",
        None,
    )
    assert calls["hush"].progress is None


def test_a_running_call_shows_its_latest_progress_report(records: list[dict[str, Any]]) -> None:
    first = _fetch_reports(records)[0]
    calls = _calls(run_trees(records[: first + 1]))

    assert calls["get"].status == "running"
    progress = calls["get"].progress
    assert progress is not None
    assert (progress.completed, progress.total, progress.message) == (1, 3, "fetched part 1")
    assert progress.fraction == pytest.approx(1 / 3)


def test_the_call_dict_and_json_carry_the_progress(records: list[dict[str, Any]]) -> None:
    tree = run_trees(records)[0].to_dict()
    calls = {c["call_id"]: c for c in tree["agent"]["turns"][0]["calls"]}

    assert calls["get"]["progress"]["message"] == "fetched all parts"
    assert calls["hush"]["progress"] is None
    json.dumps(tree)  # JSON-ready as it is


def test_progress_holds_no_details_rows(records: list[dict[str, Any]]) -> None:
    """Only numbers and the message reach the node, even when a report carries rows."""
    last = _fetch_reports(records)[-1]
    changed = [dict(r) for r in records]
    changed[last] = {
        **records[last],
        "payload": {
            "progress": {"completed": 3, "total": 3, "message": "m", "details": [{"id": "x"}]}
        },
    }
    progress = _calls(run_trees(changed))["get"].progress
    assert progress is not None
    assert set(progress.to_dict()) == {"completed", "total", "message", "fraction"}


_VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**6), 10**6),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=8),
    st.lists(st.integers(), max_size=2),
)


@settings(max_examples=150, deadline=None)
@given(
    report=st.one_of(
        _VALUES,
        st.fixed_dictionaries(
            {},
            optional={"completed": _VALUES, "total": _VALUES, "message": _VALUES},
        ),
    )
)
def test_any_recorded_report_projects_to_finite_numbers_text_and_a_bounded_fraction(
    records: list[dict[str, Any]], report: Any
) -> None:
    """Whatever a (foreign or damaged) file holds as the report, the node keeps only finite
    numbers and text, and a fraction within [0, 1] only when a positive total is known."""
    last = _fetch_reports(records)[-1]
    changed = list(records)
    changed[last] = {**records[last], "payload": {"progress": report}}
    progress = _calls(run_trees(changed))["get"].progress
    if report is None:  # an attempt start, not a report: the earlier report stays
        assert progress is not None and progress.message == "fetched part 1"
        return
    assert progress is not None
    for number in (progress.completed, progress.total):
        assert number is None or (
            isinstance(number, int | float)
            and not isinstance(number, bool)
            and abs(number) != float("inf")
            and number == number
        )
    assert progress.message is None or isinstance(progress.message, str)
    if progress.fraction is not None:
        assert 0.0 <= progress.fraction <= 1.0
        assert progress.total is not None and progress.total > 0
