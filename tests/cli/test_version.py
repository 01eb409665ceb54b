"""The top-level ``tubeless`` command: version, help, and usage errors exiting 1."""

from __future__ import annotations

import subprocess
import sys

import pytest
from click.testing import CliRunner

from tubeless._cli import cli, main
from tubeless._version import __version__


def test_version_option_prints_name_and_version() -> None:
    result = CliRunner().invoke(cli, ["--version"])

    assert result.exit_code == 0
    assert result.output == f"tubeless {__version__}\n"
    assert __version__ == "0.1.0"


def test_help_exits_zero_and_lists_the_global_options() -> None:
    result = CliRunner().invoke(cli, ["--help"])

    assert result.exit_code == 0
    assert result.output.startswith("Usage: tubeless [OPTIONS] COMMAND [ARGS]...")
    for option in ("--version", "-v, --verbose", "--debug", "--help"):
        assert option in result.output


@pytest.mark.parametrize(
    ("args", "stdout_start"),
    [
        pytest.param(["--version"], f"tubeless {__version__}\n", id="version"),
        pytest.param(["--help"], "Usage: tubeless", id="help"),
    ],
)
def test_main_returns_zero_for_version_and_help(
    args: list[str], stdout_start: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """``main()`` runs click without standalone mode; --version and --help still exit 0."""
    assert main(args) == 0

    captured = capsys.readouterr()
    assert captured.out.startswith(stdout_start)
    assert captured.err == ""


@pytest.mark.parametrize(
    ("args", "mentioned"),
    [
        pytest.param(["--bogus"], "--bogus", id="unknown-option"),
        pytest.param(["frobnicate"], "frobnicate", id="unknown-command"),
    ],
)
def test_usage_errors_exit_1_with_one_error_line_and_the_usage_hint(
    args: list[str], mentioned: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(args) == 1

    captured = capsys.readouterr()
    assert captured.out == ""
    first, *rest = captured.err.splitlines()
    assert first.startswith("error: ")
    assert mentioned in first
    assert rest == [
        "Usage: tubeless [OPTIONS] COMMAND [ARGS]...",
        "Try 'tubeless --help' for help.",
    ]


def test_python_dash_m_tubeless_prints_the_version() -> None:
    """The real interpreter, through ``tubeless/__main__.py``."""
    completed = subprocess.run(
        [sys.executable, "-m", "tubeless", "--version"],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )

    assert (completed.returncode, completed.stdout, completed.stderr) == (
        0,
        f"tubeless {__version__}\n",
        "",
    )


def test_python_dash_m_tubeless_remaps_a_usage_error_to_1_without_a_traceback() -> None:
    completed = subprocess.run(
        [sys.executable, "-m", "tubeless", "--bogus"],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )

    assert completed.returncode == 1
    assert completed.stdout == ""
    assert completed.stderr.startswith("error: ")
    assert "--bogus" in completed.stderr.splitlines()[0]
    assert "Traceback" not in completed.stderr
