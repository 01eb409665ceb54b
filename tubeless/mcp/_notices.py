"""What a server says besides its results, and where it goes.

- ``notifications/progress`` for a call → that call's progress (``ctx.report_progress``: the
  live view and ``step.running`` trace records), at most :data:`MAX_PROGRESS_RECORDS` per call
  and one per :data:`PROGRESS_INTERVAL_S` (the last one, ``completed == total``, always gets
  through). Only the numbers are kept: the server's progress message is its own text, and
  server text stays out of traces.
- ``notifications/message`` (log messages) → the ``tubeless.run`` logger at the mapped level,
  never the trace; at most :data:`MAX_LOG_MESSAGES` per connection, each cut at
  :data:`MAX_LOG_LINE` characters, then one line saying how many more there were. They go only
  to handlers someone configured (the CLI's ``-v``), never to Python's last-resort handler, so
  a chatty server cannot fill a plain run's terminal.
- Lines on a stdio server's stdout that are not MCP messages: the SDK logs a full traceback for
  each; those records are dropped, the lines counted, the first :data:`MAX_JUNK_DETAILS` logged
  at INFO (``-v``), and one ``warning:`` line with the count is written when the connection
  closes (to the ``tubeless.mcp`` logger when it has handlers, else to stderr).
"""

from __future__ import annotations

import json
import logging
import math
import sys
import time
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from tubeless.agent import ToolContext
    from tubeless.mcp._server import McpServer

__all__ = [
    "LOG_LEVEL",
    "MAX_JUNK_DETAILS",
    "MAX_LOG_LINE",
    "MAX_LOG_MESSAGES",
    "MAX_PROGRESS_RECORDS",
    "PROGRESS_INTERVAL_S",
    "Progress",
    "ServerNotes",
]

MAX_PROGRESS_RECORDS = 100
PROGRESS_INTERVAL_S = 0.1
MAX_LOG_MESSAGES = 1000
MAX_LOG_LINE = 2000
MAX_JUNK_DETAILS = 20
#: The level tubeless opts in to on 2026-07-28 connections (where log messages are per request).
LOG_LEVEL: Final = "info"

_run_log = logging.getLogger("tubeless.run")
_warn_log = logging.getLogger("tubeless.mcp")
_LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "notice": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
    "critical": logging.CRITICAL,
    "alert": logging.CRITICAL,
    "emergency": logging.CRITICAL,
}
_SDK_PARSE_FAILURE = "Failed to parse JSONRPC message from server"


def _cut(text: str, limit: int = MAX_LOG_LINE) -> str:
    text = text.replace("\r", " ").replace("\n", " ")
    return text if len(text) <= limit else text[: limit - 1] + "…"


class _DropParseTracebacks(logging.Filter):
    """Drops the SDK's traceback for each stdout line that is not JSON-RPC (counted instead)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.msg != _SDK_PARSE_FAILURE


_FILTER = _DropParseTracebacks()


def _install_filter() -> None:
    sdk = logging.getLogger("mcp.client.stdio")
    if _FILTER not in sdk.filters:
        sdk.addFilter(_FILTER)


def warn(sentence: str) -> None:
    """One ``warning:`` line: to the ``tubeless.mcp`` logger when it has handlers, else stderr."""
    if _warn_log.hasHandlers():
        _warn_log.warning("%s", sentence)
    else:
        print(f"warning: {sentence}", file=sys.stderr, flush=True)


class ServerNotes:
    """Log messages and stdout junk of one connection (callbacks for the SDK's client)."""

    def __init__(self, server: McpServer) -> None:
        self._name = server.name
        self._stdio = server.command is not None
        self.logged = 0
        self.unshown = 0
        self.junk = 0
        if self._stdio:
            _install_filter()

    async def log_message(self, params: Any) -> None:
        """The SDK's ``logging_callback``: one ``notifications/message``."""
        if not _run_log.hasHandlers():
            return  # nobody asked to see them (never Python's last-resort handler)
        if self.logged >= MAX_LOG_MESSAGES:
            self.unshown += 1
            return
        self.logged += 1
        level = _LEVELS.get(str(getattr(params, "level", "")), logging.INFO)
        data = getattr(params, "data", None)
        text = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False)
        source = getattr(params, "logger", None)
        where = f"log, {_cut(source, 100)}" if isinstance(source, str) and source else "log"
        _run_log.log(level, "MCP server %r (%s): %s", self._name, where, _cut(text))

    async def message(self, message: Any) -> None:
        """The SDK's ``message_handler``: notifications, and transport faults as exceptions."""
        if not (self._stdio and isinstance(message, Exception)):
            return
        self.junk += 1
        if self.junk <= MAX_JUNK_DETAILS:
            _run_log.info("MCP server %r (stdout): %s", self._name, _cut(_junk_line(message)))

    def close(self) -> None:
        """Say what was not shown, and warn once about stdout junk."""
        if self.unshown:
            _run_log.info(
                "MCP server %r (log): %d more log messages not shown", self._name, self.unshown
            )
        if self.junk:
            if self.junk > MAX_JUNK_DETAILS:
                more = self.junk - MAX_JUNK_DETAILS
                _run_log.info("MCP server %r (stdout): %d more lines not shown", self._name, more)
            lines = "line" if self.junk == 1 else "lines"
            warn(
                f"MCP server {self._name!r} wrote {self.junk} {lines} to stdout that are not MCP "
                "messages (ignored; -v shows them)"
            )


def _junk_line(exc: Exception) -> str:
    """The offending line, as the SDK's parse error quotes it (else the error's first line)."""
    errors = getattr(exc, "errors", None)
    if callable(errors):
        try:
            first = errors(include_url=False)[0]
        except Exception:
            first = {}
        found = first.get("input") if isinstance(first, dict) else None
        if isinstance(found, str):
            return found
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


class Progress:
    """The SDK's ``progress_callback`` for one call: numbers to ``ctx.report_progress``."""

    def __init__(self, ctx: ToolContext) -> None:
        self._ctx = ctx
        self.sent = 0
        self._last = -math.inf

    async def __call__(self, progress: float, total: float | None, message: str | None) -> None:
        if not math.isfinite(progress) or (total is not None and not math.isfinite(total)):
            return
        final = total is not None and progress >= total
        now = time.monotonic()
        if not final and (
            self.sent >= MAX_PROGRESS_RECORDS - 1 or now - self._last < PROGRESS_INTERVAL_S
        ):
            return  # one record is kept for the last one
        if self.sent >= MAX_PROGRESS_RECORDS:
            return
        self._last = now
        self.sent += 1
        self._ctx.report_progress(_number(progress), None if total is None else _number(total))


def _number(value: float) -> float | int:
    return int(value) if float(value).is_integer() else value
