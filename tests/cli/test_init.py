"""``tubeless init`` writes a first project that runs, validates and passes its own tests."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from tubeless._cli import cli, main


def _init(tmp_path: Path, *args: str) -> Path:
    target = tmp_path / "hello-app"
    assert main(["init", str(target), *args]) == 0
    return target


def test_init_writes_the_project_files(tmp_path: Path) -> None:
    """The project, its module, its test and the editor schema are written."""
    target = _init(tmp_path)
    names = sorted(str(p.relative_to(target)) for p in target.rglob("*") if p.is_file())
    assert names == [
        ".gitignore",
        "hello_app_agent.py",
        "project.yaml",
        "schemas/project.schema.json",
        "test_hello_app_agent.py",
    ]
    first = (target / "project.yaml").read_text().splitlines()[0]
    assert first == "# yaml-language-server: $schema=schemas/project.schema.json"
    schema = json.loads((target / "schemas/project.schema.json").read_text())
    assert schema["$schema"].startswith("https://json-schema.org/")


def test_init_project_runs_and_validates(tmp_path: Path) -> None:
    """`tubeless run` prints the answer and `validate --resolve` passes, from the new folder."""
    target = _init(tmp_path)
    project = str(target / "project.yaml")
    result = CliRunner().invoke(cli, ["run", project, "--text", "one two\nthree", "--quiet"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == {"answer": "3 words"}
    assert main(["validate", project, "--resolve"]) == 0


def test_init_project_tests_pass(tmp_path: Path) -> None:
    """The generated test file passes with plain pytest."""
    target = _init(tmp_path)
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-W", "ignore"],
        cwd=target,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "2 passed" in out.stdout


def test_init_refuses_to_overwrite(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A second init names the files that exist and exits 1; --force overwrites them."""
    target = _init(tmp_path)
    capsys.readouterr()
    assert main(["init", str(target)]) == 1
    err = capsys.readouterr().err
    assert "project.yaml" in err and "--force" in err
    assert main(["init", str(target), "--force"]) == 0


def test_init_module_name_is_an_identifier(tmp_path: Path) -> None:
    """Folder names that are not identifiers still give an importable module."""
    target = tmp_path / "2nd try!"
    assert main(["init", str(target)]) == 0
    assert (target / "project_2nd_try_agent.py").is_file()
    assert main(["validate", str(target / "project.yaml"), "--resolve"]) == 0


#: What the generated .gitignore must keep out of a commit: checkpoint files and SQLite traces
#: with their write-ahead logs and lease folders, NDJSON traces, cassettes, `serve`'s folder.
_IGNORED = [
    "*.sqlite",
    "*.sqlite-wal",
    "*.sqlite-shm",
    "*.sqlite.leases/",
    "*.ndjson",
    "traces/",
    "*.cassette.jsonl",
    "cassettes/",
    ".tubeless/",
]


def _patterns(path: Path) -> list[str]:
    lines = path.read_text(encoding="utf-8").splitlines()
    return [line for line in lines if line and not line.startswith("#")]


def test_init_in_a_real_process_writes_a_gitignore_and_says_how_to_get_pytest(
    tmp_path: Path,
) -> None:
    """`tubeless init hello` as a user types it: the files, a .gitignore for run artifacts, and a
    `next:` line that installs pytest (the page's last step needs it) before running it."""
    out = subprocess.run(
        [sys.executable, "-m", "tubeless", "init", "hello"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    target = tmp_path / "hello"
    assert sorted(p.name for p in target.iterdir()) == [
        ".gitignore",
        "hello_agent.py",
        "project.yaml",
        "schemas",
        "test_hello_agent.py",
    ]
    assert set(_IGNORED) <= set(_patterns(target / ".gitignore"))
    assert out.stderr.splitlines()[-1] == (
        "next: cd hello && pip install 'tubeless[test]' && "
        'tubeless run project.yaml --text "hello tubeless" && pytest'
    )


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_init_gitignore_ignores_what_runs_write(tmp_path: Path) -> None:
    """git itself ignores a checkpoint file, its lease folder, traces and cassettes, and keeps
    the project's own files."""
    target = _init(tmp_path)
    written = [
        "runs.sqlite",
        "runs.sqlite-wal",
        "runs.sqlite-shm",
        "runs.sqlite.leases/approvals_1.lock",
        "runs.ndjson",
        "traces/today.sqlite",
        "live.cassette.jsonl",
        "cassettes/0.cassette.jsonl",
        ".tubeless/serve-token",
    ]
    for name in written:
        (target / name).parent.mkdir(parents=True, exist_ok=True)
        (target / name).write_text("x")
    kept = ["project.yaml", "hello_app_agent.py", "test_hello_app_agent.py"]
    # Its own repository, and no user-wide excludes: only the generated file decides.
    subprocess.run(["git", "init", "-q"], cwd=target, check=True, capture_output=True, timeout=60)
    check = subprocess.run(
        ["git", "-c", "core.excludesFile=", "check-ignore", "--no-index", *written, *kept],
        cwd=target,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert check.stdout.splitlines() == written


def test_init_keeps_an_existing_gitignore(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A .gitignore already there is never overwritten (not even with --force) nor a reason to
    refuse; init says it left it alone and what to add."""
    target = tmp_path / "hello-app"
    target.mkdir()
    (target / ".gitignore").write_text("node_modules/\n")
    assert main(["init", str(target)]) == 0
    assert (target / ".gitignore").read_text() == "node_modules/\n"
    err = capsys.readouterr().err
    assert f"note: kept {target / '.gitignore'} as it is; the one init writes ignores " in err
    assert "*.sqlite.leases/" in err
    assert main(["init", str(target), "--force"]) == 0
    assert (target / ".gitignore").read_text() == "node_modules/\n"
