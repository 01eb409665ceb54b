"""The repository's own files keep README's promises: every `make` command README shows is one
the Makefile takes (a variable it does not know is refused, not silently ignored), and the
repository's .gitignore covers what runs write."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: `make run ...` in backticks in README (its ARGS='...' may hold double quotes).
_MAKE = re.compile(r"`(make (?:run|plan)\b[^`]*)`")

needs_make = pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")


def _make_dry_run(command: str) -> subprocess.CompletedProcess[str]:
    """`make -n ...` (print the recipes, run none: no venv is created) in the repository."""
    # Under `make test` this runs inside make: its MAKEFLAGS and MAKELEVEL would make the inner
    # make print "Entering directory" lines (and pass the outer make's flags on).
    env = {k: v for k, v in os.environ.items() if k not in {"MAKEFLAGS", "MFLAGS", "MAKELEVEL"}}
    return subprocess.run(
        ["bash", "-c", command.replace("make ", "make -n ", 1)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )


@needs_make
def test_make_refuses_a_variable_it_does_not_know() -> None:
    """`make run EXAMPLE=text_pipeline` used to run the default agent; now it stops before any
    recipe, naming the variable and the forms that work."""
    done = _make_dry_run("make run EXAMPLE=text_pipeline")
    assert done.returncode == 2
    assert done.stdout == ""
    assert (
        "EXAMPLE= is not a variable of this Makefile: run a project with "
        "PROJECT=projects/<name>.yaml (make run PROJECT=projects/text-pipeline.yaml), or a "
        "Python example with .venv/bin/python -m examples.<name>.  Stop." in done.stderr
    )


@needs_make
def test_every_make_command_of_the_readme_runs_what_it_says() -> None:
    """Each `make run|plan ...` of README is accepted, and its PROJECT= is what `tubeless run`
    gets."""
    commands = [
        command
        for command in _MAKE.findall((ROOT / "README.md").read_text(encoding="utf-8"))
        if "<" not in command  # `make run PROJECT=<file> ARGS='...'` is the pattern, not a command
    ]
    assert len(commands) >= 3, commands
    for command in commands:
        done = _make_dry_run(command)
        assert done.returncode == 0, f"{command}: {done.stderr}"
        project = re.search(r"PROJECT=(\S+)", command)
        expected = project.group(1) if project else "projects/scripted-agent.yaml"
        verb = command.split()[1]
        assert f".venv/bin/tubeless {verb} {expected}" in done.stdout, (command, done.stdout)
        assert (ROOT / expected).is_file()


def test_the_repository_gitignore_covers_run_files() -> None:
    """Checkpoint files, their write-ahead logs and lease folders, and local traces."""
    lines = (ROOT / ".gitignore").read_text(encoding="utf-8").splitlines()
    for pattern in ("*.sqlite", "*.sqlite-wal", "*.sqlite-shm", "*.sqlite.leases/", "/.tubeless/"):
        assert pattern in lines
