"""``run --record`` / ``run --replay`` on the OpenAI recipe: recorded against a local scripted
Responses server, replayed with the server stopped and no key."""

from __future__ import annotations

import json
import os
import stat
import uuid
from pathlib import Path

import pytest

from tests.fixtures.cli import tubeless
from tests.fixtures.openai_cassette import PROJECT, QUESTION, RESULT, RUN, SHIPPED, record_recipe
from tests.providers.fixtures.openai_responses import SECRET_KEY


@pytest.fixture(autouse=True)
def no_openai_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Replays run with no key and a base URL nothing listens on (127.0.0.1:9)."""
    for name in ("OPENAI_API_KEY", "OPENAI_MODEL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")


@pytest.fixture
def recorded(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    cassette = tmp_path / "recipe.cassette.jsonl"
    code, server = record_recipe(cassette)
    out = capsys.readouterr().out
    assert (code, out, len(server.requests)) == (0, RESULT, 3)
    return cassette


def _drifted_project(
    tmp_path: Path,
    *,
    implementation_version: str | None = None,
    description: str = "Count the characters of a piece of text.",
) -> Path:
    """The recipe whose ``count`` tool (same description and schemas unless told) counts one
    too many."""
    # One module name per test: a module already imported from another file is refused.
    name = f"drifted_count_{uuid.uuid4().hex}"
    module = tmp_path / f"{name}.py"
    module.write_text(
        "from tubeless.agent import define_tool\n"
        "async def _count(text, ctx):\n"
        "    return len(text) + 1\n"
        f"count = define_tool(description={description!r},\n"
        "    input_schema=str, output_schema=int, run=_count, preview=_count)\n"
    )
    text = PROJECT.read_text()
    text = text.replace("python_path: [..]", f"python_path: [{PROJECT.parent.parent}, .]")
    text = text.replace("count: examples.text:count", f"count: {name}:count")
    if implementation_version is not None:
        text = text.replace("openai-text-v2", implementation_version)
    path = tmp_path / "openai-agent.yaml"
    path.write_text(text)
    return path


def _run_args(project: Path) -> list[str]:
    return ["run", str(project), "--question", QUESTION, "--quiet"]


def test_record_then_replay_with_the_server_stopped_and_no_key_gives_the_same_result(
    recorded: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert "OPENAI_API_KEY" not in os.environ

    done = tubeless(capsys, *RUN, "--replay", recorded)

    assert (done.code, done.out, done.err) == (0, RESULT, "")


def test_the_cassette_is_0600_and_holds_no_key_and_no_header(recorded: Path) -> None:
    assert stat.S_IMODE(os.stat(recorded).st_mode) == 0o600
    text = recorded.read_text()
    for secret in (SECRET_KEY, "Bearer", "Authorization", "authorization", "sk-"):
        assert secret not in text
    kinds = [json.loads(line)["kind"] for line in text.splitlines()]
    assert kinds[0] == "header" and kinds[-1] == "result"


def test_the_shipped_cassette_replays_with_no_model_and_no_key(
    capsys: pytest.CaptureFixture[str],
) -> None:
    done = tubeless(capsys, *RUN, "--replay", SHIPPED)

    assert (done.code, done.out, done.err) == (0, RESULT, "")


def test_the_shipped_cassette_is_what_recording_the_recipe_writes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """If this fails, the recipe changed: rerun ``python -m tests.fixtures.openai_cassette``."""
    fresh = tmp_path / "fresh.cassette.jsonl"
    assert record_recipe(fresh)[0] == 0

    def lines(path: Path) -> list[dict[str, object]]:
        found = [json.loads(line) for line in path.read_text().splitlines()]
        found[0].pop("tubeless_version")
        return found

    assert lines(fresh) == lines(SHIPPED)


def test_replay_outcomes_runs_no_tool(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = tmp_path / "run.ndjson"
    done = tubeless(
        capsys,
        *_run_args(_drifted_project(tmp_path)),
        "--replay",
        SHIPPED,
        "--replay-outcomes",
        "--trace",
        trace,
    )

    assert (done.code, done.out, done.err) == (0, RESULT, "")
    started = [json.loads(line) for line in trace.read_text().splitlines()]
    pipelines = {r["pipelineId"] for r in started if r["name"] == "pipeline.started"}
    assert pipelines == {"openai-agent", "openai-agent/turn"}


def test_a_changed_tool_output_fails_with_replay_diverged_and_the_pointer(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    done = tubeless(capsys, *_run_args(_drifted_project(tmp_path)), "--replay", SHIPPED)

    assert (done.code, done.out) == (6, "")
    assert "TUBELESS_REPLAY_DIVERGED" in done.err
    assert (
        "replay diverged at route 'openai-agent' turn 2 call 'count': the outcome differs at /value"
    ) in done.err
    assert "recorded 8" not in done.err and "9" not in done.err.split("/value")[1]


def test_show_values_says_what_the_recorded_and_the_live_outcome_were(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    done = tubeless(
        capsys, *_run_args(_drifted_project(tmp_path)), "--replay", SHIPPED, "--show-values"
    )

    assert done.code == 6
    assert "at /value: recorded 8, got 9" in done.err


def test_a_changed_definition_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    project = _drifted_project(tmp_path, implementation_version="openai-text-v3")

    done = tubeless(capsys, *_run_args(project), "--replay", SHIPPED)

    assert (done.code, done.out) == (6, "")
    assert "TUBELESS_CASSETTE_MISMATCH" in done.err
    assert done.err.endswith(
        f"{SHIPPED}: agent 'openai-agent' was recorded for another definition: "
        "implementation_version: 'openai-text-v2' -> 'openai-text-v3'; record it again, or "
        "replay with --allow-changed-definition\n"
    )


def test_a_changed_tool_description_is_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    project = _drifted_project(tmp_path, description="Count every character of a text.")

    done = tubeless(capsys, *_run_args(project), "--replay", SHIPPED)

    assert (done.code, done.out) == (6, "")
    assert done.err.endswith(
        "agent 'openai-agent' was recorded for another definition: tool 'count': description "
        "changed; record it again, or replay with --allow-changed-definition\n"
    )


def test_allow_changed_definition_replays_and_warns_what_changed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    project = _drifted_project(tmp_path, implementation_version="openai-text-v3")

    done = tubeless(
        capsys,
        *_run_args(project),
        "--replay",
        SHIPPED,
        "--replay-outcomes",
        "--allow-changed-definition",
    )

    assert (done.code, done.out) == (0, RESULT)
    assert done.err == (
        "warning: agent 'openai-agent' was recorded for another definition: "
        "implementation_version: 'openai-text-v2' -> 'openai-text-v3'; replayed anyway\n"
    )


def test_another_question_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    done = tubeless(
        capsys, "run", PROJECT, "--question", "something else", "-q", "--replay", SHIPPED
    )

    assert done.code == 6
    assert "TUBELESS_CASSETTE_MISMATCH" in done.err
    assert "agent 'openai-agent' was recorded for another input" in done.err


def test_a_truncated_cassette_is_a_clear_error_naming_file_and_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cut = tmp_path / "cut.cassette.jsonl"
    text = SHIPPED.read_text()
    cut.write_text(text[: len(text) - 20])
    lines = text.count("\n")

    done = tubeless(capsys, *RUN, "--replay", cut)

    assert (done.code, done.out) == (2, "")
    assert done.err == (
        f"error: TUBELESS_CASSETTE_INVALID: {cut}:{lines}: the last line is cut short "
        "(the cassette is truncated)\n"
    )


def test_a_cassette_that_is_also_the_trace_file_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    same = tmp_path / "run.jsonl"

    done = tubeless(capsys, *RUN, "--record", same, "--trace", same)

    assert done.code == 1
    assert f"error: The cassette and the --trace file must differ: {same} is both" in done.err
    assert not same.exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param(
            ("--record", "a", "--replay", "b"), "Give --record or --replay, not both.", id="both"
        ),
        pytest.param(
            ("--replay-outcomes",), "--replay-outcomes needs --replay FILE.", id="outcomes"
        ),
        pytest.param(("--show-values",), "--show-values needs --replay FILE.", id="values"),
    ],
)
def test_cassette_options_that_make_no_sense_are_usage_errors(
    capsys: pytest.CaptureFixture[str], args: tuple[str, ...], message: str
) -> None:
    done = tubeless(capsys, *RUN, *args)

    assert done.code == 1
    assert f"error: {message}" in done.err


def test_the_cassette_never_appears_in_traces(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = tmp_path / "run.ndjson"
    cassette = tmp_path / "recipe.cassette.jsonl"

    code, _ = record_recipe(cassette, "--trace", str(trace))

    assert code == 0
    text = trace.read_text()
    for leaked in ("cassette", str(tmp_path), "RED", "BLUE", QUESTION, SECRET_KEY, "Bearer"):
        assert leaked not in text
