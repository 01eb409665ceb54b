"""Shell completion completes project files, entry ids and run options (bash protocol)."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from tubeless._cli import cli

ROOT = Path(__file__).resolve().parents[2]


def _complete(line: str, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """What bash would offer for ``line`` (a trailing space completes a new word)."""
    monkeypatch.chdir(ROOT)
    words = line.split()
    cword = len(words) if line.endswith(" ") else len(words) - 1
    env = {"COMP_WORDS": line, "COMP_CWORD": str(cword), "_TUBELESS_COMPLETE": "bash_complete"}
    result = CliRunner().invoke(cli, env=env, prog_name="tubeless")
    assert result.exit_code == 0, result.output
    return result.output.splitlines()


@pytest.mark.parametrize("command", ["run", "plan", "inspect", "graph", "list"])
def test_project_argument_completes_files(command: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The PROJECT argument asks the shell for file names."""
    assert _complete(f"tubeless {command} proj", monkeypatch) == ["file,proj"]


@pytest.mark.parametrize("command", ["run", "plan"])
def test_entry_ids_complete(command: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """After the project, its agent and pipeline ids are offered."""
    offered = _complete(f"tubeless {command} projects/delegation.yaml ", monkeypatch)
    assert offered == ["plain,delegating-agent", "plain,scripted-agent", "plain,agent-summary"]


def test_entry_ids_complete_without_importing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Completing an id reads the YAML only: a reference to a missing module is not imported."""
    project = tmp_path / "p.yaml"
    project.write_text(
        "version: 1\nproject: {id: p}\nagents:\n  only: {decide: nowhere.at_all:decide}\n"
    )
    offered = _complete(f"tubeless plan {project} o", monkeypatch)
    assert offered == ["plain,only"]


def test_run_options_include_derived_flags(monkeypatch: pytest.MonkeyPatch) -> None:
    """`run PROJECT --q<TAB>` offers the entry's --question and the built-in --quiet."""
    offered = _complete("tubeless run projects/scripted-agent.yaml --q", monkeypatch)
    assert offered == ["plain,--question", "plain,--quiet"]


def test_run_option_values_complete(monkeypatch: pytest.MonkeyPatch) -> None:
    """--target offers the declared targets; --trace and --input-file offer files."""
    offered = _complete("tubeless run projects/text-pipeline.yaml --target ", monkeypatch)
    assert offered == ["plain,count", "plain,report"]
    offered = _complete("tubeless run projects/text-pipeline.yaml --trace ru", monkeypatch)
    assert offered == ["file,ru"]
