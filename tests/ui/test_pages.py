"""The pages' content, driven through Starlette's TestClient over traces of real runs."""

from __future__ import annotations

import itertools
import re
from html import unescape
from pathlib import Path
from urllib.parse import quote

from starlette.testclient import TestClient

from tests.fixtures import ui as made
from tests.ui.conftest import client_for
from tubeless.tracing import read_trace, run_trees


def _root(trace: Path, entry: str) -> str:
    return next(t.run_id for t in run_trees(read_trace(trace)) if t.pipeline_id == entry)


def _rows(html: str, kind: str) -> int:
    return html.count(f'data-row="{kind}"')


def _text(html: str) -> str:
    return unescape(re.sub(r"<[^>]+>", " ", html))


def test_runs_page_lists_root_runs_newest_first_with_their_counts(client: TestClient) -> None:
    page = client.get("/")
    assert page.status_code == 200
    assert _rows(page.text, "run") == 5  # delegation, scripted, approvals, drift x2
    entries = re.findall(r'<td class="entry">([^<]+)</td>', page.text)
    assert entries == ["drift", "drift", "scripted-agent", "delegating-agent", "approvals"]
    text = _text(page.text)
    assert "waiting" in text and "failed" in text and "completed" in text


def test_runs_page_filters_by_entry_status_prefix_and_time(
    client: TestClient, stores: dict[str, Path]
) -> None:
    assert _rows(client.get("/?entry=drift").text, "run") == 2
    assert _rows(client.get("/?entry=drift&status=failed").text, "run") == 1
    assert _rows(client.get("/?status=waiting").text, "run") == 1
    run_id = _root(stores["delegation"], "delegating-agent")
    found = client.get("/", params={"q": run_id[:24]})
    assert _rows(found.text, "run") == 1 and quote(run_id, safe="") in found.text
    assert _rows(client.get("/?since=2999-01-01T00:00").text, "run") == 0
    assert _rows(client.get("/?until=2000-01-01T00:00").text, "run") == 0
    assert _rows(client.get("/?since=2000-01-01T00:00&status=bogus&page=x").text, "run") == 5


def test_a_delegation_run_nests_child_agents_under_the_calls_that_ran_them(
    client: TestClient, stores: dict[str, Path]
) -> None:
    run_id = _root(stores["delegation"], "delegating-agent")
    page = client.get(f"/runs/{quote(run_id, safe='')}")
    assert page.status_code == 200
    html = page.text
    assert html.count('class="child-agent"') == 2  # process_word ran scripted-agent twice
    child = html.split('class="child-agent"')[1]
    assert "scripted-agent" in child and "uppercase" in child and "count" in child
    text = _text(html)
    assert run_id in text and "sha256:" in text  # the run id and the definition id
    assert "turns: 3 of 3" in text and "calls: 3 of 100" in text
    assert _rows(html, "turn") == 3 + 2 * 2  # its turns and each child's two turns


def test_a_failed_call_shows_its_deepest_code_and_the_wrapping_one(
    client: TestClient, stores: dict[str, Path]
) -> None:
    run_id = _root(stores["scripted"], "scripted-agent")
    html = client.get(f"/runs/{quote(run_id, safe='')}").text
    failed = [c for c in html.split('data-row="call"')[1:] if 'data-status="failed"' in c[:40]]
    assert len(failed) == 1
    assert "NOT_FOUND" in failed[0] and "TUBELESS_STEP_FAILED" in failed[0]


def test_a_waiting_run_shows_its_waiting_call_and_links_to_approvals(
    client: TestClient, stores: dict[str, Path]
) -> None:
    run_id = _root(stores["approvals"], "approvals")
    html = client.get(f"/runs/{quote(run_id, safe='')}").text
    waiting = [c for c in html.split('data-row="call"')[1:] if 'data-status="waiting"' in c[:40]]
    assert len(waiting) == 1 and "publish" in waiting[0] and "/approvals" in waiting[0]
    assert "TUBELESS_APPROVAL_REQUIRED" in html  # the cause chain


def test_compare_marks_the_first_difference_of_a_drifted_replay(
    client: TestClient, stores: dict[str, Path]
) -> None:
    trees = run_trees(read_trace(stores["drift"]))
    recorded, replayed = (t.run_id for t in trees)
    page = client.get("/compare", params={"a": recorded, "b": replayed})
    assert page.status_code == 200
    marked = re.findall(r'<tr class="([^"]*)" id="first-difference"', page.text)
    assert marked == ["line-turn differs first-difference"]
    row = _text(page.text.split('id="first-difference"')[1].split("</tr>")[0])
    assert "turn 2" in row and "TUBELESS_REPLAY_DIVERGED" in row and "call 'read'" in row
    assert "First difference" in _text(page.text)
    same = client.get("/compare", params={"a": recorded, "b": recorded})
    assert 'id="first-difference"' not in same.text and "No difference" in same.text
    missing = client.get("/compare", params={"a": recorded, "b": "nope"})
    assert "Not in these traces" in _text(missing.text)


def test_a_missing_run_is_a_404_page(client: TestClient) -> None:
    page = client.get("/runs/nope:1")
    assert page.status_code == 404 and "Run not found" in page.text


def test_graph_page_draws_a_project_or_says_how_to_get_one(stores: dict[str, Path]) -> None:
    with client_for([stores["delegation"]]) as plain:
        page = plain.get("/graph")
        assert page.status_code == 200 and "--project" in page.text and "<svg" not in page.text
    project = str(made.PROJECTS / "delegation.yaml")
    with client_for([stores["delegation"]], project=project) as drawn:
        page = drawn.get("/graph")
        assert page.text.count("<svg") == 1
        assert "agent: scripted-agent" in page.text and "pipeline: agent-summary" in page.text
        other = drawn.get("/graph?entry=scripted-agent")
        assert ">uppercase<" in other.text and ">count<" in other.text


def test_batch_output_files_list_their_rows_linked_to_runs(tmp_path: Path) -> None:
    inputs = tmp_path / "inputs.jsonl"
    inputs.write_text('{"question": "a b"}\n{"question": "missing c"}\n', encoding="utf-8")
    trace, output = tmp_path / "batch.ndjson", tmp_path / "rows.jsonl"
    project = made.PROJECTS / "scripted-agent.yaml"
    assert made.cli("batch", project, inputs, "--output", output, "--trace", trace) == 0
    with client_for([trace, output]) as one:
        runs = one.get("/")
        assert _rows(runs.text, "run") == 2 and runs.text.count(">batch 1</a>") == 2
        batch = one.get("/batches/1")
        assert batch.status_code == 200 and _rows(batch.text, "batch-row") == 2
        assert batch.text.count('href="/runs/') == 2
        assert one.get("/batches/2").status_code == 404


def test_eval_reports_show_failed_cases_with_expected_and_actual(tmp_path: Path) -> None:
    cases = tmp_path / "cases.yaml"
    cases.write_text(
        "version: 1\nentry: scripted-agent\ncases:\n"
        "  - {id: right, input: {question: hi}, expect: {result: {answer: '2 characters; HI'}}}\n"
        "  - {id: wrong, input: {question: ray}, expect: {result: {answer: '<b>RAY</b>'}}}\n",
        encoding="utf-8",
    )
    report, trace = tmp_path / "report.xml", tmp_path / "eval.ndjson"
    project = made.PROJECTS / "scripted-agent.yaml"
    assert made.cli("eval", project, cases, "--junit", report, "--trace", trace) == 6
    with client_for([trace, report]) as one:
        runs = one.get("/").text
        assert 'href="/evals/1"' in runs and "1 failed" in runs
        page = one.get("/evals/1")
    assert page.status_code == 200 and _rows(page.text, "case") == 2
    wrong = _text(page.text.split('data-row="case"')[2])
    assert 'expected "<b>RAY</b>", got "3 characters; RAY"' in wrong
    assert "&lt;b&gt;RAY" in page.text  # escaped, as every value


def test_the_timeline_draws_every_turn_to_one_scale(stores: dict[str, Path]) -> None:
    """Segments are laid end to end; the longest turn spans the whole bar, the others their
    share of it."""
    from tubeless.ui._run_view import run_page
    from tubeless.ui._traces import TraceLibrary

    snapshot = TraceLibrary([str(stores["delegation"])]).snapshot()
    page = run_page(snapshot, _root(stores["delegation"], "delegating-agent"))
    assert page is not None
    rows = page["timeline"]["turns"]
    longest = page["timeline"]["longest_ms"]
    for row in rows:
        segments = row["segments"]
        assert [s["id"] for s in segments] == ["decide", "calls", "reduce"]
        for before, after in itertools.pairwise(segments):
            assert after["x"] >= before["x"]
        drawn = sum(100.0 * s["duration_ms"] / longest for s in segments)
        assert abs(drawn - 100.0 * row["total_ms"] / longest) < 1e-6
    assert max(row["total_ms"] for row in rows) == longest


def test_a_trace_cut_anywhere_still_renders_every_page(stores: dict[str, Path]) -> None:
    """A crash may cut a trace after any record: every run the prefix holds has a page."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    lines = stores["delegation"].read_text(encoding="utf-8").splitlines(keepends=True)
    folder = stores["folder"]

    @settings(max_examples=10, deadline=None)
    @given(st.integers(min_value=1, max_value=len(lines)))
    def check(cut: int) -> None:
        trace = folder / f"cut-{cut}.ndjson"
        trace.write_text("".join(lines[:cut]), encoding="utf-8")
        with client_for([trace]) as client:
            assert client.get("/").status_code == 200
            for tree in run_trees(read_trace(trace)):
                for run in tree.walk():
                    assert client.get(f"/runs/{quote(run.run_id, safe='')}").status_code == 200

    check()


def test_the_runs_page_and_a_run_page_also_answer_json(
    client: TestClient, stores: dict[str, Path]
) -> None:
    runs = client.get("/?format=json&entry=delegating-agent").json()
    assert runs["total"] == 1 and runs["page"] == 1
    (row,) = runs["runs"]
    assert (row["entry"], row["status"], row["turns"], row["calls"]) == (
        "delegating-agent",
        "completed",
        7,
        7,
    )
    run = client.get(f"/runs/{quote(row['run_id'], safe='')}?format=json").json()
    assert run["run"]["run_id"] == row["run_id"] and run["definition_id"].startswith("sha256:")
    assert [t["decision"] for t in run["turns"]] == ["continue", "continue", "finish"]
    assert run["turns"][0]["calls"][0]["child_agent_run_ids"]
    assert client.get("/runs/nope:1?format=json").status_code == 404
