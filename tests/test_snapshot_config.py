"""``snapshot(...)`` assertions are checked, never written, by a plain ``pytest`` run."""

from __future__ import annotations

import shlex
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_a_plain_run_disables_inline_snapshot_so_a_wrong_snapshot_fails() -> None:
    """In a terminal inline-snapshot would create and offer to fix snapshots; ``disable`` makes
    ``snapshot(x)`` plain ``x`` everywhere. ``pytest --inline-snapshot=fix`` comes later on the
    command line and wins, so updating stays one command."""
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    addopts = shlex.split(pyproject["tool"]["pytest"]["ini_options"]["addopts"])

    assert [a for a in addopts if a.startswith("--inline-snapshot")] == [
        "--inline-snapshot=disable"
    ]
