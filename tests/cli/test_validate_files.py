"""``tubeless validate``: which files it checks (one rule for folders, named files and the
pre-commit hook), what it does when none is found, GitHub annotation paths, and a closed stdout
(``tubeless ... | head -1``) for every command."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.cli.test_validate_cli import INVALID, ROOT, VALID, Outcome, invoke, write
from tubeless._cli import main

RULE = (
    "(a project file is a .yaml/.yml file whose top level has a project key: version: 1, "
    "project:, agents:, pipelines:, python_path:, mcp_servers: or allow_modules:, or whose "
    "yaml-language-server header names the project schema; eval cases files are not)"
)
NOT_A_PROJECT = "not a project file (no top-level project key)"
CASES_FILE = "not a project file (an eval cases file: cases: or entry:, no project-only key)"

CASES = """\
# yaml-language-server: $schema=../schemas/cases.schema.json
version: 1
entry: helper
python_path: [..]
cases:
  - {id: hello, input: {question: hi}}
"""


def no_projects(*paths: str | Path) -> str:
    joined = ", ".join(map(str, paths))
    return f"error: {joined}: no project files found {RULE}; pass --allow-empty to accept this\n"


# -- no project file found ----------------------------------------------------------------------
def test_an_empty_directory_exits_2_and_says_what_a_project_file_is(tmp_path: Path) -> None:
    write(tmp_path / "ci.yml", "on: push\n")
    assert invoke(tmp_path) == Outcome(2, "", no_projects(tmp_path))


def test_allow_empty_accepts_an_empty_directory_with_a_warning(tmp_path: Path) -> None:
    assert invoke("--allow-empty", tmp_path) == Outcome(
        0, "", f"warning: {tmp_path}: no project files found\n"
    )


def test_several_paths_without_any_project_fail_once_naming_them_all(tmp_path: Path) -> None:
    first, second = tmp_path / "a", tmp_path / "b"
    first.mkdir()
    second.mkdir()
    assert invoke(first, second) == Outcome(2, "", no_projects(first, second))


def test_an_empty_directory_next_to_paths_with_projects_is_only_a_warning(
    tmp_path: Path,
) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    good = write(tmp_path / "projects" / "good.yaml", VALID)
    assert invoke(empty, tmp_path / "projects") == Outcome(
        0, f"ok: {good}\n", f"warning: {empty}: no project files found\n"
    )


def test_no_project_found_keeps_json_and_github_output_well_formed(tmp_path: Path) -> None:
    """json still prints one document (not ok); github adds an annotation without a file."""
    json_outcome = invoke("--json", tmp_path)
    assert (json_outcome.code, json_outcome.err) == (2, no_projects(tmp_path))
    assert json.loads(json_outcome.out) == {"ok": False, "files": []}

    github = invoke("--format", "github", tmp_path)
    message = no_projects(tmp_path).removeprefix("error: ").rstrip("\n")
    assert github == Outcome(2, f"::error::{message}\n", no_projects(tmp_path))

    assert invoke("--json", "--allow-empty", tmp_path) == Outcome(
        0, '{\n  "ok": true,\n  "files": []\n}\n', f"warning: {tmp_path}: no project files found\n"
    )


# -- one rule for what a project file is ------------------------------------------------------
def test_a_named_yaml_file_that_is_not_a_project_is_skipped_with_a_note(tmp_path: Path) -> None:
    good = write(tmp_path / "good.yaml", VALID)
    ci = write(tmp_path / "ci.yml", "on: push\n")
    assert invoke(ci, good) == Outcome(0, f"ok: {good}\n", f"skipped: {ci}: {NOT_A_PROJECT}\n")


def test_a_named_project_without_a_yaml_suffix_is_skipped_with_a_note(tmp_path: Path) -> None:
    good = write(tmp_path / "good.yaml", VALID)
    text = write(tmp_path / "project.txt", VALID)
    assert invoke(good, text) == Outcome(
        0, f"ok: {good}\n", f"skipped: {text}: not a project file (not a .yaml/.yml file)\n"
    )


def test_only_skipped_files_fail_unless_empty_is_allowed(tmp_path: Path) -> None:
    ci = write(tmp_path / "ci.yml", "on: push\n")
    skipped = f"skipped: {ci}: {NOT_A_PROJECT}\n"
    assert invoke(ci) == Outcome(2, "", skipped + no_projects(ci))
    assert invoke("--allow-empty", ci) == Outcome(0, "", skipped)


def test_a_named_file_with_project_keys_is_checked_like_a_found_one(tmp_path: Path) -> None:
    bad = write(tmp_path / "bad.yml", INVALID)
    outcome = invoke(bad)
    assert (outcome.code, outcome.out) == (4, "")
    assert outcome.err.startswith(f"error: {bad}:9:25 /agents/helper/limits/max_turns: ")


def test_a_missing_named_file_is_an_error_whatever_its_name(tmp_path: Path) -> None:
    for name in ("missing.yaml", "missing.txt"):
        missing = tmp_path / name
        assert invoke("--allow-empty", missing) == Outcome(
            2, "", f"error: {missing}: No such file or directory\n"
        )


def test_the_pre_commit_hook_passes_on_fixtures_and_cases_and_fails_on_a_broken_project(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The hook's entry, given the files its `files:` pattern selects, as pre-commit runs it."""
    (hook,) = yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text(encoding="utf-8"))
    program, *entry = shlex.split(hook["entry"])
    assert program == "tubeless"
    monkeypatch.chdir(tmp_path)
    write(tmp_path / "projects" / "good.yaml", VALID)
    write(tmp_path / "projects" / "inputs" / "q.yaml", "question: What is tubeless?\n")
    write(tmp_path / "projects" / "evals" / "good.cases.yaml", CASES)
    write(tmp_path / "projects" / "broken.yaml", INVALID)
    write(tmp_path / "projects" / "typo.yaml", VALID.replace("project:", "projet:"))
    selected = sorted(
        path.relative_to(tmp_path).as_posix()
        for path in tmp_path.rglob("*")
        if path.is_file() and re.search(hook["files"], path.relative_to(tmp_path).as_posix())
    )
    assert selected == [
        "projects/broken.yaml",
        "projects/evals/good.cases.yaml",
        "projects/good.yaml",
        "projects/inputs/q.yaml",
        "projects/typo.yaml",
    ]
    skipped = [
        f"skipped: projects/evals/good.cases.yaml: {CASES_FILE}",
        f"skipped: projects/inputs/q.yaml: {NOT_A_PROJECT}",
    ]

    assert main([*entry, "projects/good.yaml", *selected[1:2], *selected[3:4]]) == 0
    assert capsys.readouterr().err.splitlines() == skipped
    assert main([*entry, "projects/inputs/q.yaml"]) == 0  # a commit of fixtures only
    assert capsys.readouterr().err.splitlines() == skipped[1:]
    assert main([*entry, "projects/good.yaml", "projects/typo.yaml"]) == 4
    assert capsys.readouterr().err.splitlines()[-1] == (
        "error: projects/typo.yaml:2:1 /projet: unknown key 'projet'; did you mean 'project'?"
    )
    assert main([*entry, *selected]) == 4
    lines = capsys.readouterr().err.splitlines()
    assert lines[:2] == skipped
    assert lines[2].startswith("error: projects/broken.yaml:9:25 ")
    assert lines[-1].startswith("error: projects/typo.yaml:2:1 ")


# -- a broken project is never skipped (issue 28, item 13) -------------------------------------
def test_a_project_with_a_misspelt_project_key_is_checked_in_a_folder_and_by_name(
    tmp_path: Path,
) -> None:
    """`tubeless run` refuses it (exit 4), so validate must not pass it over."""
    good = write(tmp_path / "folder" / "good.yaml", VALID)
    typo = write(tmp_path / "folder" / "typo.yaml", VALID.replace("project:", "projet:"))
    errors = (
        f"error: {typo}:1:1 /: missing required property 'project' (Who the project is and "
        "what runs by default)\n"
        f"error: {typo}:2:1 /projet: unknown key 'projet'; did you mean 'project'?\n"
    )

    assert invoke(tmp_path / "folder") == Outcome(4, f"ok: {good}\n", errors)
    assert invoke(good, typo) == Outcome(4, f"ok: {good}\n", errors)


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("versoin: 1\nproject: {id: demo}\n", id="project"),
        pytest.param("version: 1\nprojects: {id: demo}\n", id="version-1"),
        pytest.param("version: '1'\n", id="version-quoted-1"),
        pytest.param("agents: {}\n", id="agents"),
        pytest.param("pipelines: {}\n", id="pipelines"),
        pytest.param("python_path: [.]\n", id="python_path"),
        pytest.param("mcp_servers: {}\n", id="mcp_servers"),
        pytest.param("allow_modules: []\n", id="allow_modules"),
        pytest.param('"agents": {}\n', id="quoted-key"),
        pytest.param(
            "# yaml-language-server: $schema=../schemas/project.schema.json\nverison: 1\n",
            id="schema-header",
        ),
        pytest.param(
            "$schema: https://tubeless.dev/schemas/project.schema.json\nverison: 1\n",
            id="schema-key",
        ),
        pytest.param("version: 1\nentry: x\nagents: {}\n", id="cases-keys-with-agents"),
    ],
)
def test_one_project_key_or_the_project_schema_header_makes_a_file_a_project(
    tmp_path: Path, text: str
) -> None:
    named = write(tmp_path / "named" / "p.yaml", text)
    found = write(tmp_path / "folder" / "p.yaml", text)
    for path, where in ((named, named), (found, found.parent)):
        outcome = invoke(where)
        assert (outcome.code, outcome.out) == (4, ""), outcome
        assert outcome.err.startswith(f"error: {path}:"), outcome


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        pytest.param(CASES, CASES_FILE, id="cases-file"),
        pytest.param("version: 1\ncases: []\n", CASES_FILE, id="cases-without-header"),
        pytest.param("python_path: [.]\nentry: x\n", CASES_FILE, id="entry"),
        pytest.param(
            "version: '3.8'\nservices: {web: {image: nginx}}\n",
            "not a project file (no top-level project key; version: '3.8' is not a project's 1)",
            id="docker-compose",
        ),
        pytest.param(
            "version: 2\nbuild: {os: ubuntu-22.04}\n",
            "not a project file (no top-level project key; version: 2 is not a project's 1)",
            id="readthedocs",
        ),
        pytest.param("question: What is tubeless?\n", NOT_A_PROJECT, id="input-fixture"),
        pytest.param("on: push\njobs: {}\n", NOT_A_PROJECT, id="ci-config"),
        pytest.param("steps:\n  agents: {}\n", NOT_A_PROJECT, id="nested-project-key"),
    ],
)
def test_eval_cases_and_other_yaml_are_not_projects(tmp_path: Path, text: str, reason: str) -> None:
    good = write(tmp_path / "good.yaml", VALID)
    other = write(tmp_path / "other.yaml", text)
    assert invoke(tmp_path) == Outcome(0, f"ok: {good}\n", "")
    assert invoke(good, other) == Outcome(0, f"ok: {good}\n", f"skipped: {other}: {reason}\n")


def test_the_repository_projects_folder_holds_eval_cases_that_are_skipped() -> None:
    """projects/evals/*.cases.yaml share version: and python_path: with projects."""
    cases = sorted((ROOT / "projects").rglob("*.cases.yaml"))
    assert cases
    outcome = invoke(*cases)
    assert outcome.code == 2
    assert outcome.err.splitlines()[: len(cases)] == [
        f"skipped: {path}: {CASES_FILE}" for path in cases
    ]


# -- GitHub annotation paths --------------------------------------------------------------------
def annotated_files(*args: str | Path) -> list[str]:
    """The distinct ``file=`` values of the annotations ``--format github ARGS`` prints."""
    outcome = invoke("--format", "github", *args)
    assert outcome.code == 4, outcome
    files = re.findall(r"^::error file=([^,]*),", outcome.out, flags=re.MULTILINE)
    return sorted(set(files))


def test_github_annotations_name_files_relative_to_the_repository_root(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path.resolve()
    write(root / "projects" / "x.yaml", INVALID)
    (root / "projects" / "sub").mkdir()
    monkeypatch.chdir(root)

    assert annotated_files("./projects/x.yaml") == ["projects/x.yaml"]
    assert annotated_files("projects//./sub/../x.yaml") == ["projects/x.yaml"]
    assert annotated_files(root / "projects" / "x.yaml") == ["projects/x.yaml"]
    assert annotated_files("./projects") == ["projects/x.yaml"]
    assert annotated_files(".") == ["projects/x.yaml"]


def test_github_annotations_keep_absolute_paths_outside_the_current_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path.resolve()
    outside = write(root / "elsewhere" / "x.yaml", INVALID)
    (root / "repo").mkdir()
    monkeypatch.chdir(root / "repo")

    assert annotated_files(outside) == [str(outside)]
    assert annotated_files(f"{root}//elsewhere/./x.yaml") == [str(outside)]
    assert annotated_files("../elsewhere/x.yaml") == ["../elsewhere/x.yaml"]


def test_github_annotations_are_relative_to_github_workspace_when_it_is_set(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 28, item 15: a step with `working-directory: sub` still annotates the file of the
    pull request (GitHub resolves `file=` against the workspace, not the step's folder)."""
    workspace = tmp_path.resolve() / "workspace"
    inside = write(workspace / "sub" / "projects" / "x.yaml", INVALID)
    outside = write(tmp_path.resolve() / "elsewhere" / "y.yaml", INVALID)
    monkeypatch.chdir(workspace / "sub")
    monkeypatch.setenv("GITHUB_WORKSPACE", str(workspace))

    assert annotated_files("projects/x.yaml") == ["sub/projects/x.yaml"]
    assert annotated_files("./projects") == ["sub/projects/x.yaml"]
    assert annotated_files(inside) == ["sub/projects/x.yaml"]
    assert annotated_files(outside) == [str(outside)]
    assert annotated_files("../../elsewhere/y.yaml") == ["../../elsewhere/y.yaml"]

    monkeypatch.setenv("GITHUB_WORKSPACE", str(workspace) + "/")
    assert annotated_files("projects/x.yaml") == ["sub/projects/x.yaml"]
    monkeypatch.setenv("GITHUB_WORKSPACE", "")  # unset in effect: the current directory
    assert annotated_files("projects/x.yaml") == ["projects/x.yaml"]


def test_github_workspace_through_a_symlink_still_finds_the_file_inside(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = tmp_path.resolve() / "real"
    write(real / "projects" / "x.yaml", INVALID)
    (tmp_path / "link").symlink_to(real)
    monkeypatch.chdir(real)
    monkeypatch.setenv("GITHUB_WORKSPACE", str(tmp_path / "link"))

    assert annotated_files("projects/x.yaml") == ["projects/x.yaml"]
    assert annotated_files(tmp_path / "link" / "projects" / "x.yaml") == ["projects/x.yaml"]


# -- a closed stdout ------------------------------------------------------------------------------
#: Buffered streams, as users have them: with PYTHONUNBUFFERED a failed write leaves nothing
#: behind for the interpreter's final flush, which would hide a second BrokenPipeError.
BUFFERED = {name: value for name, value in os.environ.items() if name != "PYTHONUNBUFFERED"}


def closed_pipe_run(*args: str | Path) -> subprocess.CompletedProcess[str]:
    """``python -m tubeless ARGS`` with a stdout pipe whose reader is already gone."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        return subprocess.run(
            [sys.executable, "-m", "tubeless", *map(str, args)],
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            cwd=ROOT,
            env=BUFFERED,
            timeout=60,
            check=False,
        )
    finally:
        os.close(write_end)


@pytest.mark.parametrize(
    "args",
    [
        pytest.param(["validate", "projects"], id="validate"),
        pytest.param(["validate", "--json", "projects"], id="validate-json"),
        pytest.param(["schema"], id="schema"),
        pytest.param(["list", "projects/delegation.yaml"], id="list"),
        pytest.param(["--help"], id="help"),
    ],
)
def test_a_closed_stdout_exits_141_quietly(args: list[str]) -> None:
    done = closed_pipe_run(*args)
    assert (done.returncode, done.stderr) == (141, "")


def test_a_reader_that_closes_after_one_line_stops_validate_quietly(tmp_path: Path) -> None:
    """Like `tubeless validate --format github big.yaml | head -1`: one line per problem, and
    about three times what a pipe holds, so the writes outlast the reader."""
    keys = "".join(f"    unknown_key_{index:04d}: 1\n" for index in range(600))
    big = write(tmp_path / "big.yaml", INVALID + keys)
    process = subprocess.Popen(
        [sys.executable, "-m", "tubeless", "validate", "--format", "github", str(big)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=ROOT,
        env=BUFFERED,
    )
    assert process.stdout is not None
    assert process.stdout.readline().startswith(f"::error file={big},line=9,".encode())
    process.stdout.close()
    _, err = process.communicate(timeout=60)
    assert (process.returncode, err) == (141, b"")


def test_a_closed_stdout_and_stderr_exit_141_and_the_final_flush_succeeds(
    tmp_path: Path,
) -> None:
    """`tubeless validate bad.yaml 2>&1 | head -0`: the errors go to the closed pipe too (a
    failed flush at interpreter exit would make the status 120)."""
    bad = write(tmp_path / "bad.yaml", INVALID)
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        done = subprocess.run(
            [sys.executable, "-m", "tubeless", "validate", str(bad)],
            stdout=write_end,
            stderr=write_end,
            cwd=ROOT,
            env=BUFFERED,
            timeout=60,
            check=False,
        )
    finally:
        os.close(write_end)
    assert done.returncode == 141
