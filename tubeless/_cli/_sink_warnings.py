"""The one ``warning:`` line of each trace sink a run retires (DESIGN.md §6).

The fan-out (:class:`tubeless.tracing.sinks.TraceFanout`) reports a failing sink once on the
``tubeless.trace`` logger and carries on; the commands that write traces (``run``, ``batch``,
``eval``) print that report as a ``warning:`` line and leave the exit code alone.
"""

from __future__ import annotations

import logging
from typing import Any

import click

__all__ = ["SinkWarnings"]


class SinkWarnings(logging.Handler):
    """Prints the one ``warning:`` line of each retired sink and remembers the sink.

    :meth:`install` takes over the ``tubeless.trace`` logger (its records would otherwise reach
    Python's last-resort handler, unprefixed) until :meth:`remove`.
    """

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.failed: list[Any] = []
        self._propagate = True

    def emit(self, record: logging.LogRecord) -> None:
        if isinstance(record.args, tuple) and record.args:
            self.failed.append(record.args[0])
        click.echo(f"warning: {record.getMessage()}", err=True)

    def install(self) -> SinkWarnings:
        log = logging.getLogger("tubeless.trace")
        log.addHandler(self)
        self._propagate, log.propagate = log.propagate, False
        return self

    def remove(self) -> None:
        log = logging.getLogger("tubeless.trace")
        log.removeHandler(self)
        log.propagate = self._propagate
