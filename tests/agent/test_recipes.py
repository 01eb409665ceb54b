"""The agent recipes, through the Python API and as ``python -m`` commands (UPSTREAM §5.1)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from examples.scripted_agent import scripted_agent
from tubeless.testing import capture_trace

REPO = Path(__file__).resolve().parents[2]

SCRIPTED_CASES = [
    pytest.param({}, False, "14 characters; HELLO; TUBELESS", id="default-question"),
    pytest.param(
        {"question": "hello tubeless"}, False, "14 characters; HELLO; TUBELESS", id="hello-tubeless"
    ),
    pytest.param(
        {"question": "missing word"},
        False,
        "12 characters; Observed NOT_FOUND: Word unavailable; WORD",
        id="recovered-tool-error",
    ),
    pytest.param({"question": "preview"}, True, "7 characters; PREVIEW", id="dry-run-preview"),
]


def _tool_calls(records: list[dict[str, Any]]) -> Counter[str]:
    """``step.running`` records (attempt starts, not progress) of tool runs, by tool pipeline."""
    return Counter(
        r["pipelineId"]
        for r in records
        if r["name"] == "step.running"
        and r["pipelineId"].startswith("scripted-agent/tool/")
        and "progress" not in r["payload"]
    )


def _decisions(records: list[dict[str, Any]]) -> list[str]:
    return [
        r["payload"]["attributes"]["agent.decision"]
        for r in records
        if r["name"] == "step.attempted" and r["stepId"] == "decide"
    ]


@pytest.mark.parametrize(("raw_input", "dry_run", "answer"), SCRIPTED_CASES)
async def test_the_scripted_recipe_answers_in_two_decisions_and_one_call_per_word_plus_one(
    raw_input: dict[str, str], dry_run: bool, answer: str
) -> None:
    words = raw_input.get("question", "hello tubeless").split()

    with capture_trace() as trace:
        run = await scripted_agent.run(raw_input, dry_run=dry_run, trace=trace)

    assert (run.status, run.dry_run, run.value) == ("completed", dry_run, {"answer": answer})
    assert _decisions(trace.records) == ["continue", "finish"]
    assert _tool_calls(trace.records) == Counter(
        {"scripted-agent/tool/count": 1, "scripted-agent/tool/uppercase": len(words)}
    )


def _python_m(module: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize(
    ("args", "answer"),
    [
        pytest.param((), "14 characters; HELLO; TUBELESS", id="default-question"),
        pytest.param(
            ("--question", "hello tubeless"), "14 characters; HELLO; TUBELESS", id="hello-tubeless"
        ),
        pytest.param(
            ("--question", "missing word"),
            "12 characters; Observed NOT_FOUND: Word unavailable; WORD",
            id="recovered-tool-error",
        ),
        pytest.param(("--dry-run", "--question", "preview"), "7 characters; PREVIEW", id="dry-run"),
    ],
)
def test_the_scripted_recipe_command_prints_exactly_the_answer_as_one_json_line(
    args: tuple[str, ...], answer: str
) -> None:
    result = _python_m("examples.scripted_agent", *args)

    assert (result.returncode, result.stderr) == (0, "")
    assert result.stdout == json.dumps({"answer": answer}) + "\n"


def test_the_scripted_recipe_plan_command_prints_the_bounded_turn_pipeline() -> None:
    """The plan shows the turn pipeline, then (beyond UPSTREAM's two lines, as issue 3 asks)
    the agent's limits and capability inventory."""
    result = _python_m("examples.scripted_agent", "--plan")

    assert (result.returncode, result.stderr) == (0, "")
    assert result.stdout == (
        "Pipeline scripted-agent: plan (ok=true, dryRun=false, steps=1)\n"
        "  - agent: run -> iteration (at most 3) pipeline scripted-agent/turn (3 declared steps)\n"
        "      limits: max_turns=3 max_calls=100 max_decisions=3 max_depth=4 max_concurrency=2\n"
        "      tool count (replay unsafe): Count the characters of a piece of text.\n"
        "      tool uppercase (replay unsafe): Uppercase a piece of text.\n"
    )


def test_the_delegation_recipe_command_prints_the_summary() -> None:
    result = _python_m("examples.agent_delegation", "--question", "red blue")

    assert (result.returncode, result.stderr) == (0, "")
    assert result.stdout == (
        json.dumps({"answer": "Summary: 3 characters; RED | 4 characters; BLUE"}) + "\n"
    )
