"""The sink protocol and the fan-out that feeds records to every attached sink.

A sink that raises is reported once (a ``warning`` on the ``tubeless.trace`` logger, and the
``on_error`` callback) and retired; the run and the other sinks carry on. Runs flush the sinks
they were given but never close them: whoever opened a sink closes it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol, runtime_checkable

__all__ = ["SinkErrorHandler", "TraceFanout", "TraceSink"]

_log = logging.getLogger("tubeless.trace")

#: Called once per failing sink with the sink and the exception it raised.
SinkErrorHandler = Callable[["TraceSink", BaseException], None]


@runtime_checkable
class TraceSink(Protocol):
    """Where trace records go. ``export`` receives each wire dict, in order."""

    def export(self, record: Mapping[str, Any]) -> None:
        """Take one record. It must not keep a reference it later mutates."""

    def flush(self) -> None:
        """Make everything exported so far durable or visible."""

    def close(self) -> None:
        """Flush and release resources; called by whoever opened the sink."""


def _default_error_handler(sink: TraceSink, exc: BaseException) -> None:
    _log.warning("trace sink %r failed and was retired: %s", sink, exc)


class TraceFanout:
    """Delivers records to several sinks, retiring each one that fails.

    Thread-safe: handlers report progress and logs from worker threads.

    Args:
        sinks: The destinations, in order.
        on_error: Called once per failing sink (default: one log warning).
    """

    __slots__ = ("_lock", "_on_error", "_sinks")

    def __init__(
        self, sinks: Iterable[TraceSink], *, on_error: SinkErrorHandler | None = None
    ) -> None:
        self._sinks = list(sinks)
        self._on_error = on_error or _default_error_handler
        self._lock = threading.Lock()

    @property
    def sinks(self) -> tuple[TraceSink, ...]:
        """The sinks still receiving records."""
        return tuple(self._sinks)

    def export(self, record: Mapping[str, Any]) -> None:
        """Send ``record`` to every healthy sink."""
        with self._lock:
            failed: list[tuple[TraceSink, BaseException]] | None = None
            for sink in self._sinks:
                try:
                    sink.export(record)
                except Exception as exc:
                    if failed is None:
                        failed = []
                    failed.append((sink, exc))
            if failed:
                self._retire(failed)

    def flush(self) -> None:
        """Flush every healthy sink."""
        with self._lock:
            failed: list[tuple[TraceSink, BaseException]] = []
            for sink in self._sinks:
                try:
                    sink.flush()
                except Exception as exc:
                    failed.append((sink, exc))
            if failed:
                self._retire(failed)

    def _retire(self, failed: list[tuple[TraceSink, BaseException]]) -> None:
        for sink, exc in failed:
            self._sinks.remove(sink)
            try:
                self._on_error(sink, exc)
            except Exception:  # a broken error handler must not break the run either
                _log.exception("trace sink error handler failed")
