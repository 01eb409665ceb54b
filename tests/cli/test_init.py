"""``tubeless init`` writes a first project that runs, validates and passes its own tests."""

from __future__ import annotations

import json
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
