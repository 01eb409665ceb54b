"""benchmarks/serve_peers: the peers do the scripted agent's work, and missing peers are skipped.

No peer is installed in the project's environment and nothing here starts a server: the peer
rows are measured by hand (docs/performance.md), these tests keep the harness honest.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from benchmarks.peers.scripted import decide, expected_answer, observe, run_calls
from benchmarks.serve_peers import Server, Skipped, main, servers, table
from examples.scripted_agent import scripted_agent

WORD = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789", min_size=1, max_size=8).filter(
    lambda word: "missing" not in word  # such a word fails its call (tested apart)
)
QUESTIONS = st.lists(WORD, min_size=1, max_size=5).map(" ".join)


async def _peer_answer(question: str) -> str:
    decision = decide(question, [])
    assert decision["kind"] == "continue"
    outcomes = await run_calls(decision["calls"])
    final = decide(question, [observe(o) for o in outcomes])
    assert final["kind"] == "finish"
    return str(final["result"])


@settings(max_examples=25, deadline=None)
@given(QUESTIONS)
async def test_the_peers_scripted_work_answers_as_the_tubeless_agent(question: str) -> None:
    run = await scripted_agent.run({"question": question})
    assert run.value == {"answer": expected_answer(question)}
    assert await _peer_answer(question) == expected_answer(question)


async def test_a_missing_word_is_observed_as_the_tubeless_agent_observes_it() -> None:
    run = await scripted_agent.run({"question": "find missing"})
    assert run.value == {"answer": await _peer_answer("find missing")}


def test_peers_not_found_are_skipped_with_how_to_install_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # neither `langgraph` nor `adk` on it
    rows = servers(None, None, clients=8)
    assert [r.name for r in rows if isinstance(r, Server)] == [
        "tubeless serve, 1 worker, disk",
        "tubeless serve, 8 workers, disk",
        "tubeless serve, 1 worker, tmpfs",
        "tubeless serve, 8 workers, tmpfs",
    ]
    skipped = {r.name: r.reason for r in rows if isinstance(r, Skipped)}
    assert skipped == {
        "langgraph dev": "`langgraph` not found (pip install 'langgraph-cli[inmem]';"
        " --langgraph-bin PATH)",
        "adk api_server": "`adk` not found (pip install google-adk; --adk-bin PATH)",
    }


def test_a_given_command_that_is_not_there_is_skipped_too(tmp_path: Path) -> None:
    rows = servers(str(tmp_path / "langgraph"), str(tmp_path / "adk"), clients=8)
    assert {r.name for r in rows if isinstance(r, Skipped)} == {"langgraph dev", "adk api_server"}


def test_the_peers_found_get_two_rows_each(tmp_path: Path) -> None:
    fake = tmp_path / "peer"
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    rows = servers(str(fake), str(fake), clients=8)
    assert [r.name for r in rows if isinstance(r, Server)][4:] == [
        "langgraph dev, 1 job (its default)",
        "langgraph dev, 8 jobs",
        "adk api_server, memory sessions",
        "adk api_server, SQLite sessions (its default)",
    ]


def test_a_run_of_only_missing_peers_prints_their_skip_lines_and_starts_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = str(tmp_path / "missing")
    main(["--only", "langgraph", "--langgraph-bin", missing, "--adk-bin", missing])
    out = capsys.readouterr().out.splitlines()
    assert json.loads(out[0]) == {
        "server": "langgraph dev",
        "skipped": "`langgraph` not found (pip install 'langgraph-cli[inmem]';"
        " --langgraph-bin PATH)",
    }
    assert out[1:] == [
        "| server | runs are kept in | runs/s | p50 | p99 | failed | load |",
        "|---|---|---|---|---|---|---|",
        "| langgraph dev | skipped: `langgraph` not found (pip install 'langgraph-cli[inmem]';"
        " --langgraph-bin PATH) | | | | | |",
    ]


def test_a_measured_row_in_the_table() -> None:
    row = {
        "server": "s",
        "persists": "memory",
        "runs_per_s": 9.5,
        "p50_ms": 1.0,
        "p99_ms": 2.0,
        "failed": 0,
        "load": "1.0 to 2.0",
    }
    assert (
        table([row]).splitlines()[-1] == "| s | memory | 9.5 | 1.0 ms | 2.0 ms | 0 | 1.0 to 2.0 |"
    )
