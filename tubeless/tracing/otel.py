"""OpenTelemetry export: trace records as spans with the GenAI semantic conventions (DESIGN §16).

:class:`OtelSink` is a trace sink. It folds the records with a
:class:`~tubeless.tracing.fold.TraceFold` (``keep=False``: a run is let go once it ends) and
turns each run into one span: started at the run's ``pipeline.started``, named and ended at its
``pipeline.completed`` (start plus ``durationMs``), when the fold knows what the run was. Step
lifecycle and progress records become span events; a ``step.attempted`` record that describes a
model request (``gen_ai.operation.name: chat``, written by the model adapters) becomes a
``chat <model>`` child span. A stored trace replayed through the sink gives the same spans as the
live run did, because spans are made from records alone: nothing from the run itself (no input,
output, state or prompt) ever reaches a span. Span names and attributes are in
:mod:`tubeless.tracing._otel_spans`.

``opentelemetry`` is imported when a sink is made, never on import of this module.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from tubeless.tracing._otel_export import (
    Delivery,
    OtelConfigError,
    exporting_provider,
    shut_down,
)
from tubeless.tracing._otel_spans import (
    add_turn_usage,
    agent_attributes,
    agent_name,
    budget_attributes,
    chat_span,
    event_of,
    run_attributes,
    run_error,
    run_name,
    start_attributes,
)
from tubeless.tracing.fold import TraceFold
from tubeless.tracing.runs import Run

if TYPE_CHECKING:
    from opentelemetry.trace import Span, Tracer

__all__ = [
    "INSTALL_HINT",
    "Delivery",
    "OtelConfigError",
    "OtelSink",
    "export_records",
    "feed",
    "otlp_http_sink",
]

#: What the error says when the OpenTelemetry SDK is missing.
INSTALL_HINT: Final = "pip install 'tubeless[otel]'"
#: The instrumentation scope of every span.
SCOPE: Final = "tubeless"

_NS_PER_MS: Final = 1_000_000


def _require_otel(what: str) -> None:
    try:
        import opentelemetry.sdk.trace  # noqa: F401
    except ImportError as exc:
        raise ImportError(
            f"{what} needs the OpenTelemetry SDK, which is not installed: {INSTALL_HINT}"
        ) from exc


@dataclass(eq=False, slots=True)
class _Open:
    """A run whose span is open.

    Times are integer nanoseconds. A span starts at its run's whole-millisecond ``timestampMs``
    and lasts the run's ``durationMs``, so flooring alone could end a child after its parent:
    a child starts no earlier than its parent, and a parent ends no earlier than the latest end
    among its children (``children_end_ns``), so every tree nests.
    """

    span: Span
    start_ns: int
    last_ms: int
    parent: _Open | None = None
    turns: int = 0
    calls_admitted: int | None = None
    usage: list[Any] | None = None
    """``[input_tokens, output_tokens, cost_usd | None]`` of an agent's turns so far."""
    children_end_ns: int = 0
    agent: Span | None = None
    """The ``invoke_agent`` child span of an agent used as a tool (its call's ``execute_tool``
    span is :attr:`span`); the agent's turns and events hang below it."""

    @property
    def inner(self) -> Span:
        """The span the run's children and events belong to."""
        return self.agent if self.agent is not None else self.span

    def child_ended(self, end_ns: int) -> None:
        self.children_end_ns = max(self.children_end_ns, end_ns)


class OtelSink:
    """A trace sink that sends each run of the records as an OpenTelemetry span.

    Args:
        tracer_provider: Where spans go; ``None`` uses the global provider
            (``opentelemetry.trace.get_tracer_provider()``).

    ``flush`` hands nothing extra to the provider (its span processor exports on its own, so a
    collector that is slow or down never holds a run); ``close`` ends the spans of runs that
    never completed (a trace cut short) at their last record, and shuts the provider down when
    this sink made it (:func:`otlp_http_sink`).

    Raises:
        ImportError: When the OpenTelemetry SDK is not installed (``tubeless[otel]``).
    """

    def __init__(self, tracer_provider: Any = None) -> None:
        _require_otel("tubeless.tracing.OtelSink")
        from opentelemetry import trace

        from tubeless._version import __version__

        provider = tracer_provider if tracer_provider is not None else trace.get_tracer_provider()
        self._tracer: Tracer = provider.get_tracer(SCOPE, __version__)
        #: Shuts down the provider this sink made, on close (:func:`otlp_http_sink`).
        self._owned: Callable[[], None] | None = None
        #: Delivery counts of an OTLP exporter this sink set up (:func:`otlp_http_sink`).
        self.delivery: Delivery | None = None
        self._fold = TraceFold(keep=False)
        self._open: dict[Run, _Open] = {}
        self._lock = threading.Lock()
        self._closed = False

    def export(self, record: Mapping[str, Any]) -> None:
        """Fold ``record`` and start, add to or end its run's span."""
        with self._lock:
            if self._closed:
                return
            run = self._fold.add(record)
            if run is None:
                return
            name = record.get("name")
            ts = record.get("timestampMs")
            ts_ms = ts if type(ts) is int else None
            if name == "pipeline.started":
                self._start(run, record, ts_ms)
                return
            opened = self._open.get(run)
            if opened is None:  # a run whose start was not seen
                return
            if ts_ms is not None:
                opened.last_ms = max(opened.last_ms, ts_ms)
            if name == "pipeline.completed":
                self._end(run, opened, ts_ms)
            elif name == "step.attempted":
                self._attempted(run, opened, record, ts_ms)
            else:
                event = event_of(run, record)
                if event is not None:
                    opened.inner.add_event(event[0], event[1], timestamp=_ns(ts_ms, opened))

    def flush(self) -> None:
        """Nothing to do: the provider's span processor sends spans on its own schedule."""

    def close(self) -> None:
        """End every span still open; shut the provider down if this sink made it."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            # Children first (opened later), so that no child outlives its parent.
            for run, opened in reversed(list(self._open.items())):
                self._finish(run, opened, opened.last_ms * _NS_PER_MS)
                if opened.parent is not None:
                    opened.parent.child_ended(max(opened.last_ms * _NS_PER_MS, opened.start_ns))
            self._open.clear()
        if self._owned is not None:
            self._owned()

    def __enter__(self) -> OtelSink:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the mapping ----------------------------------------------------------------------------
    def _start(self, run: Run, record: Mapping[str, Any], ts_ms: int | None) -> None:
        from opentelemetry import trace

        parent = None if run.parent is None else self._open.get(run.parent)
        if parent is not None:
            if run.kind == "turn":
                self._agent_of(run.parent, parent)  # a call found to be an agent by its turns
            context = trace.set_span_in_context(parent.inner)
        elif run.parent_run_id is not None:
            # A parent the records never started: the span is a root of its own.
            context = trace.set_span_in_context(trace.INVALID_SPAN)
        else:
            context = None  # a root run: under the caller's current span, if any
        start_ms = ts_ms if ts_ms is not None else (parent.last_ms if parent else 0)
        start_ns = start_ms * _NS_PER_MS
        if parent is not None:
            start_ns = max(start_ns, parent.start_ns)
        span = self._tracer.start_span(
            run_name(run),
            context=context,
            start_time=start_ns,
            attributes=start_attributes(run, record),
        )
        opened = self._open[run] = _Open(span, start_ns, start_ms, parent)
        if run.kind == "call" and run.agents:
            self._agent_of(run, opened)

    def _agent_of(self, run: Run | None, opened: _Open) -> None:
        """Give a call run that runs an agent its ``invoke_agent`` child span, once."""
        if run is None or opened.agent is not None or run.kind != "call":
            return
        from opentelemetry import trace

        opened.agent = self._tracer.start_span(
            agent_name(run),
            context=trace.set_span_in_context(opened.span),
            start_time=opened.start_ns,
            attributes=start_attributes(run, {}),
        )

    def _attempted(
        self, run: Run, opened: _Open, record: Mapping[str, Any], ts_ms: int | None
    ) -> None:
        chat = chat_span(run, record)
        if chat is None:
            return
        from opentelemetry import trace
        from opentelemetry.trace import SpanKind, Status, StatusCode

        name, attributes, duration_ms, error = chat
        end_ns = max(_ns(ts_ms, opened), opened.start_ns)
        start_ns = max(opened.start_ns, end_ns - round(duration_ms * _NS_PER_MS))
        span = self._tracer.start_span(
            name,
            context=trace.set_span_in_context(opened.inner),
            kind=SpanKind.CLIENT,
            start_time=start_ns,
            attributes=attributes,
        )
        if error is not None:
            span.set_status(Status(StatusCode.ERROR, error))
        span.end(end_time=end_ns)
        opened.child_ended(end_ns)

    def _end(self, run: Run, opened: _Open, ts_ms: int | None) -> None:
        del self._open[run]
        duration = run.duration_ms
        if duration is not None:
            end_ns = opened.start_ns + round(duration * _NS_PER_MS)
        else:
            end_ns = _ns(ts_ms, opened)
        parent = opened.parent
        if parent is not None and run.kind == "turn":
            parent.turns += 1
            admitted = run.calls_admitted
            if admitted is not None:
                parent.calls_admitted = admitted
            parent.usage = add_turn_usage(parent.usage, run)
        end_ns = self._finish(run, opened, end_ns)
        if parent is not None:
            parent.child_ended(end_ns)

    def _finish(self, run: Run, opened: _Open, end_ns: int) -> int:
        """End the run's span(s) no earlier than its start and its children's ends; the end."""
        from opentelemetry.trace import Status, StatusCode

        end_ns = max(end_ns, opened.start_ns, opened.children_end_ns)
        error = run_error(run)
        spans = [opened.span]
        if opened.agent is not None:
            opened.agent.set_attributes(agent_attributes(run, opened.turns, opened.calls_admitted))
            spans.insert(0, opened.agent)  # the child ends first
        opened.span.update_name(run_name(run))
        opened.span.set_attributes(run_attributes(run, opened.turns, opened.calls_admitted))
        budget = budget_attributes(run, opened.usage)
        if budget:
            (opened.agent or opened.span).set_attributes(budget)
        for span in spans:
            if error is not None:
                span.set_attribute("error.type", error[0])
                span.set_status(Status(StatusCode.ERROR, error[1]))
            span.end(end_time=end_ns)
        return end_ns


def _ns(ts_ms: int | None, opened: _Open) -> int:
    return (ts_ms if ts_ms is not None else opened.last_ms) * _NS_PER_MS


# -- from the environment ------------------------------------------------------------------------
def otlp_http_sink(*, notice: Callable[[], None] | None = None) -> OtelSink:
    """An :class:`OtelSink` with its own provider, exporting as the standard variables say.

    ``OTEL_TRACES_EXPORTER``: ``otlp`` (the default; OTLP/HTTP with protobuf), ``console``
    (each span as JSON on stderr), ``none``, or a comma list of them. OTLP is configured by
    ``OTEL_EXPORTER_OTLP_ENDPOINT`` / ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` (default
    ``http://localhost:4318/v1/traces``), ``..._HEADERS``, ``..._TIMEOUT`` (10 s),
    ``..._COMPRESSION``, ``..._CERTIFICATE``; ``..._PROTOCOL`` may only be ``http/protobuf``.
    ``OTEL_SERVICE_NAME`` (default ``tubeless``), ``OTEL_RESOURCE_ATTRIBUTES`` and the
    ``OTEL_BSP_*`` batch settings apply. OTLP spans leave through a batch processor on its own
    thread; ``close()`` waits for what is left at most ``EXPORT_WAIT_S`` (3 s) in all and calls
    ``notice`` once if that takes longer than half a second. ``sink.delivery`` counts the spans
    sent and failed (those still unsent when the wait ends count as failed).

    Raises:
        ImportError: Without the OpenTelemetry SDK.
        OtelConfigError: For an exporter or protocol that is not supported (one line).
    """
    _require_otel("OpenTelemetry export")
    provider, delivery, abort = exporting_provider()
    sink = OtelSink(provider)
    sink._owned = lambda: shut_down(provider, delivery, abort, notice=notice)
    sink.delivery = delivery
    return sink


def export_records(records: Iterable[Mapping[str, Any]], tracer_provider: Any = None) -> int:
    """Send stored records as spans (the sink, fed after the fact); returns the runs seen.

    The sink is closed at the end, so spans of runs the records never completed end too.
    """
    return feed(OtelSink(tracer_provider), records)


def feed(sink: OtelSink, records: Iterable[Mapping[str, Any]]) -> int:
    """Export ``records`` through ``sink`` and close it; returns the runs that started."""
    runs = 0
    try:
        for record in records:
            if isinstance(record, Mapping) and record.get("name") == "pipeline.started":
                runs += 1
            sink.export(record)
    finally:
        sink.close()
    return runs
