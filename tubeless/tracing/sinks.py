"""The sink protocol and the fan-out that feeds records to every attached sink.

A sink that raises is reported once (a ``warning`` on the ``tubeless.trace`` logger, and the
``on_error`` callback) and retired; the run and the other sinks carry on. Runs flush the sinks
they were given but never close them: whoever opened a sink closes it.

The file sinks (NDJSON, SQLite) buffer records, and write them through to the OS at the end of
every turn and of the root run (a ``pipeline.completed`` record, see :func:`writes_through`) and
at most :data:`FLUSH_INTERVAL_S` after a record was buffered, through a one-shot timer from
:func:`flush_later`. A killed process thus loses no record of a finished turn, and at most the
last quarter second of the turn that was running.
"""

from __future__ import annotations

import logging
import threading
import weakref
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final, Protocol, TypeVar, runtime_checkable

__all__ = [
    "FLUSH_INTERVAL_S",
    "FLUSH_THREAD_NAME",
    "RUN_END",
    "SinkErrorHandler",
    "TraceFanout",
    "TraceSink",
    "flush_later",
    "locks_its_exports",
    "writes_through",
]

_log = logging.getLogger("tubeless.trace")

#: The longest a file sink keeps a record in its buffer, in seconds.
FLUSH_INTERVAL_S: Final = 0.25
#: The record that ends a run; after a turn's or the root's, a file sink writes through at once.
RUN_END: Final = "pipeline.completed"
#: The name of the short-lived timer threads that :func:`flush_later` starts.
FLUSH_THREAD_NAME: Final = "tubeless-trace-flush"

_SinkClass = TypeVar("_SinkClass", bound=type)

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


def locks_its_exports(cls: _SinkClass) -> _SinkClass:
    """Mark a sink class whose ``export`` serializes itself (it takes its own lock).

    A fan-out whose only sink is such a sink hands it each record without taking its own lock
    as well: one lock per record instead of two. Sinks not marked get the fan-out's lock, so a
    sink written without threads in mind still sees one export at a time.
    """
    cls._tubeless_locks_exports = True  # type: ignore[attr-defined]
    return cls


def writes_through(record: Mapping[str, Any]) -> bool:
    """Whether a file sink writes through at once after ``record`` (a :data:`RUN_END` record).

    True at the end of a turn or of any iterated run (the record carries ``iteration``) and at
    the end of a root run (no ``parentRunId``). Other child runs, such as tool calls and fan-out
    items, end inside a turn or a step of their parent: the timer covers them, and committing
    after each would cost a SQLite transaction per tool call.
    """
    return "iteration" in record or "parentRunId" not in record


def flush_later(
    flush: Callable[[], object], delay: float = FLUSH_INTERVAL_S
) -> threading.Timer | None:
    """Call the bound method ``flush`` once, ``delay`` seconds from now, on a daemon thread.

    The thread ends when it has called ``flush`` (or when the timer is cancelled), so an idle
    sink holds no thread; a sink arms one timer only while none is pending, which is at most
    one thread start per ``delay`` however many records pass. The method is held weakly: a
    sink nobody references any more is not kept alive, nor flushed, by its timer. ``None``
    when no thread can start (at interpreter shutdown).
    """
    method = weakref.WeakMethod(flush)
    timer = threading.Timer(delay, _call_alive, args=(method,))
    timer.name = FLUSH_THREAD_NAME
    timer.daemon = True
    try:
        timer.start()
    except RuntimeError:  # the interpreter is shutting down: run ends and close() still flush
        return None
    return timer


def _call_alive(method: weakref.WeakMethod[Callable[[], object]]) -> None:
    bound = method()
    if bound is not None:
        bound()


def _default_error_handler(sink: TraceSink, exc: BaseException) -> None:
    _log.warning("trace sink %r failed and was retired: %s", sink, exc)


class TraceFanout:
    """Delivers records to several sinks, retiring each one that fails.

    Thread-safe: handlers report progress and logs from worker threads.

    Args:
        sinks: The destinations, in order.
        on_error: Called once per failing sink (default: one log warning).
    """

    __slots__ = ("_lock", "_on_error", "_single", "_sinks")

    def __init__(
        self, sinks: Iterable[TraceSink], *, on_error: SinkErrorHandler | None = None
    ) -> None:
        self._sinks = list(sinks)
        self._on_error = on_error or _default_error_handler
        self._lock = threading.Lock()
        #: The only sink, when it locks its own exports (see :func:`locks_its_exports`): it
        #: gets each record without the fan-out's lock, the one it takes itself being enough.
        self._single: TraceSink | None = None
        if len(self._sinks) == 1:
            only = self._sinks[0]
            if getattr(type(only), "_tubeless_locks_exports", False) is True:
                self._single = only

    @property
    def sinks(self) -> tuple[TraceSink, ...]:
        """The sinks still receiving records."""
        return tuple(self._sinks)

    def export(self, record: Mapping[str, Any]) -> None:
        """Send ``record`` to every healthy sink."""
        single = self._single
        if single is not None:
            try:
                single.export(record)
            except Exception as exc:
                with self._lock:
                    self._retire([(single, exc)])
            return
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
            if not any(kept is sink for kept in self._sinks):  # reported once
                continue
            self._sinks.remove(sink)
            if sink is self._single:
                self._single = None
            try:
                self._on_error(sink, exc)
            except Exception:  # a broken error handler must not break the run either
                _log.exception("trace sink error handler failed")
