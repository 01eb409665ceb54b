"""The CLI's output stays valid on hostile input (issue 14 items 10, 11, 13): lone surrogates are
escaped, a result JSON cannot hold fails with a code, a named pipe never blocks ``validate``.

Time limits are hang guards only (DESIGN.md §9).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.guards import cli, hang_guard, restored_imports, template_project
from tubeless.project import load_project
from tubeless.testing import finish, scripted

ROOT = Path(__file__).resolve().parents[2]


def strict_cli(*args: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``tubeless ARGS`` in a child whose stdout and stderr encode UTF-8 strictly."""
    return subprocess.run(
        [sys.executable, "-m", "tubeless", *map(str, args)],
        capture_output=True,
        text=True,
        encoding="utf-8",
        errors="backslashreplace",
        cwd=cwd,
        timeout=60,
        check=False,
        env={**os.environ, "PYTHONPATH": str(ROOT), "PYTHONIOENCODING": "utf-8:strict"},
    )


def echo_state() -> dict[str, Any]:
    return {"helper": {"decide": scripted(lambda state, ctx: finish(state))}}


@pytest.fixture(scope="module")
def warm(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Import and compile what the checks use lazily, so that it is not counted below."""
    path = template_project(tmp_path_factory.mktemp("warm"), "{{ input.question | upper }}")
    cli("validate", path)
    load_project(path, overrides=echo_state()).get("helper").run_sync({})


# -- item 10: lone surrogates never crash an output ---------------------------------------------
@pytest.mark.slow
def test_a_lone_surrogate_in_a_key_is_escaped_in_every_validate_format(tmp_path: Path) -> None:
    """Issue 14 item 10: a ``"\\udcff"`` key crashed ``validate --format github`` (no
    annotation at all) on a strictly encoded stdout; it is printed escaped."""
    path = tmp_path / "project.yaml"
    path.write_text('version: 1\nproject: {id: s}\n"\\udcff": x\n', encoding="utf-8")

    outcomes = {
        fmt: strict_cli("validate", "--format", fmt, path, cwd=tmp_path)
        for fmt in ("text", "json", "github")
    }

    assert {fmt: done.returncode for fmt, done in outcomes.items()} == dict.fromkeys(outcomes, 4)
    github = outcomes["github"]
    assert github.stderr == ""
    assert github.stdout == (
        # Run from tmp_path, the annotation names the file relative to it (issue 15).
        "::error file=project.yaml,line=3,col=1,title=TUBELESS_DOCUMENT_INVALID::/\\udcff: unknown "
        "key '\\udcff'; valid keys: $schema, agents, allow_modules, mcp_servers, pipelines, "
        "pricing, project, python_path, version\n"
    )
    assert outcomes["text"].stderr.startswith(f"error: {path}:3:1 /\\udcff: unknown key")
    assert json.loads(outcomes["json"].stdout)["files"][0]["errors"][0]["line"] == 3


@pytest.mark.skipif(sys.platform == "darwin", reason="macOS refuses file names not in UTF-8")
def test_a_file_name_that_is_not_utf8_is_escaped_when_a_folder_is_validated(
    tmp_path: Path,
) -> None:
    """Issue 14 item 10: ``ok: <name>`` on stdout for a name os.walk gives with surrogates."""
    (tmp_path / os.fsdecode(b"\xff.yaml")).write_text(
        "version: 1\nproject: {id: ok}\npipelines:\n  p: {steps: [{id: a, run: m:f}]}\n",
        encoding="utf-8",
    )
    done = strict_cli("validate", tmp_path, cwd=tmp_path)
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout == f"ok: {tmp_path}/\\udcff.yaml\n"


def test_trace_show_prints_a_run_id_holding_a_lone_surrogate(tmp_path: Path) -> None:
    """Issue 14 item 10: ``trace show`` text output replaces a lone surrogate by a space."""
    project = ROOT / "projects" / "text-pipeline.yaml"
    trace = tmp_path / "run.ndjson"
    assert strict_cli("run", project, "--trace", trace, "--quiet", cwd=ROOT).returncode == 0
    text = trace.read_text(encoding="utf-8")
    run_id = json.loads(text.splitlines()[0])["runId"]
    trace.write_text(text.replace(run_id, "text-pipeline:\\udcff"), encoding="utf-8")

    done = strict_cli("trace", "show", trace, cwd=tmp_path)

    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout.startswith("text-pipeline:  ")


# -- item 11: results print as strict JSON or fail with a code ---------------------------------
STEPS = """\
def nan(inputs, ctx):
    return {"score": float("nan")}


def infinity(inputs, ctx):
    return [1.0, float("-inf")]


def huge(inputs, ctx):
    return 10 ** 5000


def fine(inputs, ctx):
    return {"score": 0.5, "n": 10 ** 30}
"""


@pytest.mark.parametrize(
    ("step", "reason"),
    [
        ("nan", "it holds NaN or an infinity, which JSON cannot express"),
        ("infinity", "it holds NaN or an infinity, which JSON cannot express"),
        ("huge", "it holds an integer of more than 4,300 digits"),
    ],
)
def test_a_result_json_cannot_hold_fails_with_a_code_instead_of_printing_non_json(
    tmp_path: Path, step: str, reason: str
) -> None:
    """Issue 14 item 11: NaN and infinities were printed as ``NaN``/``Infinity`` (not JSON);
    a 5,000-digit integer crashed the output. Both are a one-line error with a code, exit 6."""
    (tmp_path / "steps.py").write_text(STEPS, encoding="utf-8")
    path = tmp_path / "project.yaml"
    path.write_text(
        "version: 1\nproject: {id: results}\npython_path: [.]\npipelines:\n  p:\n    steps:\n"
        f"      - {{id: s, run: 'steps:{step}'}}\n",
        encoding="utf-8",
    )
    with restored_imports():
        code, out, err = cli("run", path, "--quiet")

    assert (code, out) == (6, "")
    assert err == (
        f"error: TUBELESS_FINAL_RESULT_VALIDATION_FAILED: the result cannot be printed: {reason}\n"
    )


def test_a_finite_result_still_prints_as_json(tmp_path: Path) -> None:
    """Issue 14 item 11: strict JSON changes nothing for representable results."""
    (tmp_path / "steps.py").write_text(STEPS, encoding="utf-8")
    path = tmp_path / "project.yaml"
    path.write_text(
        "version: 1\nproject: {id: results}\npython_path: [.]\npipelines:\n  p:\n    steps:\n"
        "      - {id: s, run: 'steps:fine'}\n",
        encoding="utf-8",
    )
    with restored_imports():
        code, out, err = cli("run", path, "--quiet")
    assert (code, err) == (0, "")
    assert json.loads(out) == {"score": 0.5, "n": 10**30}


# -- item 13: named pipes never block validate --------------------------------------------------
@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs named pipes")
def test_a_named_pipe_is_refused_when_named_and_skipped_in_a_folder(tmp_path: Path) -> None:
    """Issue 14 item 13: ``validate`` on a FIFO blocked for ever; a named one is refused
    (exit 2), one found in a folder is skipped."""
    fifo = tmp_path / "pipe.yaml"
    os.mkfifo(fifo)
    (tmp_path / "real.yaml").write_text(
        "version: 1\nproject: {id: real}\npipelines:\n  p: {steps: [{id: a, run: m:f}]}\n",
        encoding="utf-8",
    )

    with hang_guard():
        named = cli("validate", fifo)
        folder = cli("validate", tmp_path)
        ran = cli("run", fifo)

    assert named == (2, "", f"error: {fifo}: not a regular file (a named pipe)\n")
    assert folder == (0, f"ok: {tmp_path / 'real.yaml'}\n", "")
    assert ran == (2, "", f"error: {fifo}: not a regular file (a named pipe)\n")
