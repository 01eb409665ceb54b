"""The ``tubeless`` command line: click commands, and the only place errors become exit codes."""

from __future__ import annotations

from tubeless._cli._app import cli, main
from tubeless._cli._exit import CliLoadError, exit_code_for, report_error

__all__ = ["CliLoadError", "cli", "exit_code_for", "main", "report_error"]
