"""The live view: a rich ``Live`` display of the run tree, for interactive terminals.

:class:`LiveView` is a trace sink. ``export`` only feeds the bounded :class:`LiveModel` (under a
lock, since handlers report progress from worker threads); drawing happens on rich's refresh
thread at a fixed rate (at most 10 frames a second), so the cost per record does not depend on
how often the screen changes. ``close`` stops the display, leaving the final frame on screen
(printed once on a console that is not a terminal).

A frame is a header line and one line per :class:`Row` (label, call id, time, detail)::

    Pipeline scripted-agent  running  1.2s  run scripted-agent:5f0e…
    → agent                5ms Turn 2 of at most 3
      → turn 2             1ms
      ✓ turn 1             3ms 3 calls, 1 failed
        ✗ uppercase word-0 0ms NOT_FOUND: Word unavailable
        ✓ count     length 0ms
        ✓ uppercase word-1 0ms

The console bound to ``stream`` follows rich's own rules (``NO_COLOR``, ``FORCE_COLOR``,
``TERM=dumb``). Standard output and standard error are not redirected: print through
:attr:`LiveView.console` to write above the display while it runs.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, Final, TextIO

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.table import Table
from rich.text import Text

from tubeless.reporting._live_model import LiveModel, Row
from tubeless.tracing.projection import format_duration, terminal_safe

__all__ = ["LiveView"]

_MAX_REFRESH: Final = 10.0
_UNICODE: Final = {
    "planned": "○",
    "pending": "○",
    "running": "→",
    "completed": "✓",
    "failed": "✗",
    "skipped": "\u2013",
    "cancelled": "\u2013",
    "waiting": "…",
    "denied": "\u2013",
    "interrupted": "✗",
    "more": "…",
}
_ASCII: Final = {
    "planned": ".",
    "pending": ".",
    "running": "->",
    "completed": "ok",
    "failed": "fail",
    "skipped": "-",
    "cancelled": "-",
    "waiting": "...",
    "denied": "-",
    "interrupted": "fail",
    "more": "...",
}
_STYLES: Final = {
    "running": "cyan",
    "completed": "green",
    "failed": "red",
    "skipped": "yellow",
    "cancelled": "yellow",
    "waiting": "yellow",
    "denied": "yellow",
    "interrupted": "red",
    "more": "dim",
    "planned": "dim",
    "pending": "dim",
}
_RUN_STYLES: Final = {
    "completed": "green",
    "failed": "red",
    "cancelled": "yellow",
    "waiting": "yellow",
}


class LiveView:
    """A live tree of the run on a terminal; a trace sink that never raises.

    The display starts with the first record and must be closed (``close``) when the run ends.

    Args:
        stream: The terminal stream (the CLI passes ``sys.stderr``).
        refresh_per_second: Frames per second, above 0 and at most 10.
        console: A rich console to draw on instead of one bound to ``stream``.
        clock: Wall-clock seconds, for the elapsed time of running rows.
    """

    def __init__(
        self,
        stream: TextIO | None = None,
        *,
        refresh_per_second: float = 8,
        console: Console | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if not 0 < refresh_per_second <= _MAX_REFRESH:
            raise ValueError(
                f"refresh_per_second must be above 0 and at most {_MAX_REFRESH:g}, "
                f"got {refresh_per_second!r}"
            )
        if console is None and stream is None:
            raise ValueError("LiveView needs a stream or a console")
        self.console = console if console is not None else Console(file=stream)
        self.model = LiveModel()
        self._clock = clock
        self._lock = threading.Lock()
        encoding = (self.console.encoding or "").lower()
        self._symbols = _UNICODE if encoding.startswith("utf") else _ASCII
        # stdout stays untouched: it may carry the result or an NDJSON trace.
        self._live = Live(
            console=self.console,
            get_renderable=self._frame,
            refresh_per_second=refresh_per_second,
            transient=False,
            redirect_stdout=False,
            redirect_stderr=False,
        )
        self._started = False
        self._closed = False

    # -- the sink protocol ----------------------------------------------------------------------
    def export(self, record: Mapping[str, Any]) -> None:
        """Feed ``record`` to the model (starting the display on the first one)."""
        try:
            with self._lock:
                self.model.feed(record)
            # Started outside the lock: rich's refresh thread holds its own lock while it takes
            # ours in _frame, so taking them in the other order here could deadlock.
            if not self._started and not self._closed:
                self._started = True
                self._live.start()
        except Exception:  # a broken terminal must not fail the run
            pass

    def flush(self) -> None:
        """Flush the console's file (frames are drawn by the refresh thread)."""
        with contextlib.suppress(Exception):  # a closed stream is not the run's problem
            self.console.file.flush()

    def close(self) -> None:
        """Stop the display; the final frame stays (or is printed once, off a terminal)."""
        if self._closed:
            return
        self._closed = True
        try:
            if self._started:
                # rich only signals its refresh thread to end; wait for it, so that nothing is
                # drawn after close returns (the wait is a hang guard, not a delay).
                thread = getattr(self._live, "_refresh_thread", None)
                self._live.stop()
                if isinstance(thread, threading.Thread):
                    thread.join(timeout=5.0)
        except Exception:  # closing must not raise either
            pass
        self.flush()

    def use_denial_reasons(self, reasons: Mapping[tuple[int, str], str]) -> None:
        """The reasons people gave for denying calls of the root agent, by (turn, call id):
        shown in the denied calls' rows (the trace only says that a reason was given)."""
        with self._lock:
            self.model.use_denial_reasons(reasons)

    def cancelling(self, reason: str) -> None:
        """Show ``cancelling…`` in the frame until the run ends (the CLI calls this on a signal).

        Nothing is printed: a line written beside the display would be drawn over.
        """
        with self._lock:
            self.model.cancelling = True

    # -- drawing --------------------------------------------------------------------------------
    def _frame(self) -> RenderableType:
        try:
            return self._draw()
        except Exception:  # drawing runs on rich's thread: a bug must not kill the display
            return Text(f"Pipeline {self.model.pipeline_id or '?'}  {self.model.status}")

    def _draw(self) -> RenderableType:
        with self._lock:
            rows = self.model.rows()
            header = self._header()
        now_ms = self._clock() * 1000.0
        table = Table.grid(padding=(0, 1))
        for column in ("label", "call", "time", "detail"):
            table.add_column(column, no_wrap=column != "detail", overflow="ellipsis")
        for row in rows:
            table.add_row(*self._cells(row, now_ms))
        return Group(header, table)

    def _header(self) -> Text:
        model = self.model
        text = Text(f"Pipeline {model.pipeline_id or '?'}", style="bold")
        status = model.status
        style = _RUN_STYLES.get(status, "cyan")
        if model.cancelling and status not in _RUN_STYLES:  # asked to stop, not ended yet
            status, style = "cancelling" + self._symbols["more"], "yellow"
        text.append(f"  {status}", style=style)
        if model.duration_ms is not None:
            text.append(f"  {format_duration(model.duration_ms)}")
        elif model.started_ms is not None:
            text.append(f"  {format_duration(self._clock() * 1000.0 - model.started_ms)}")
        if model.dry_run:
            text.append("  dry run", style="yellow")
        meters = model.meters
        if meters:
            text.append(f"  {meters}")
        if model.error_count:
            text.append(f"  errors={model.error_count}", style="red")
        if model.root_run_id is not None:  # last: the id to copy for `tubeless trace show`
            text.append(f"  run {terminal_safe(model.root_run_id)}", style="dim")
        return text

    def _cells(self, row: Row, now_ms: float) -> tuple[Text, Text, Text, Text]:
        style = _STYLES.get(row.status, "")
        label = Text("  " * row.depth)
        label.append(self._symbols.get(row.status, "?"), style=style)
        label.append(" " + row.label, style="dim" if row.kind == "more" else "")
        if row.duration_ms is not None:
            timing = format_duration(row.duration_ms)
        elif row.status == "running" and row.started_ms is not None:
            timing = format_duration(now_ms - row.started_ms)
        else:
            timing = ""
        detail_style = "red" if row.status in ("failed", "interrupted") else "dim"
        return (
            label,
            Text(row.call_id or "", style="dim"),
            Text(timing),
            Text(row.detail or "", style=detail_style),
        )
