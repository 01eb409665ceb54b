"""Where an :class:`~tubeless.tracing.otel.OtelSink` made from the environment sends its spans,
and how long closing it may wait.

:func:`exporting_provider` reads the standard variables: ``OTEL_TRACES_EXPORTER`` (a comma list
of ``otlp``, the default, ``console`` and ``none``) and ``OTEL_EXPORTER_OTLP_TRACES_PROTOCOL`` /
``OTEL_EXPORTER_OTLP_PROTOCOL`` (only ``http/protobuf``, the default: the gRPC exporter is not
a dependency, and the SDK's HTTP exporter speaks protobuf only). Anything else is an
:class:`OtelConfigError` whose one-line message names the variable and the fix, so spans are
never posted over HTTP to a gRPC port. ``console`` writes each span as JSON on stderr (stdout
holds a run's result).

:func:`shut_down` closes the provider within :data:`EXPORT_WAIT_S` seconds in all, calling
``notice`` once when it takes longer than :data:`NOTICE_AFTER_S`: a collector that is down or
never answers costs a bounded, announced wait at exit, never the SDK's retries (about 7 s) or
its request timeout (10 s) in silence. What was not delivered by then counts as failed.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
    from opentelemetry.sdk.trace.export import SpanExporter

__all__ = [
    "EXPORT_WAIT_S",
    "NOTICE_AFTER_S",
    "Delivery",
    "OtelConfigError",
    "exporting_provider",
    "shut_down",
]

#: The longest closing an exporting sink waits for its last spans, in seconds.
EXPORT_WAIT_S: Final = 3.0
#: After this many seconds of waiting, ``notice`` is called (the CLI prints ``exporting spans…``).
NOTICE_AFTER_S: Final = 0.5
#: ``service.name`` when neither ``OTEL_SERVICE_NAME`` nor ``OTEL_RESOURCE_ATTRIBUTES`` sets it.
DEFAULT_SERVICE_NAME: Final = "tubeless"

_EXPORTERS: Final = ("otlp", "console", "none")
_PROTOCOL: Final = "http/protobuf"


class OtelConfigError(ValueError):
    """A standard ``OTEL_*`` setting that tubeless cannot honour; the message is one line."""


@dataclass(eq=False)
class Delivery:
    """What the exporter of a sink made from the environment achieved."""

    endpoint: str
    """Where spans go: the OTLP traces URL, ``console (stderr)`` or ``nowhere``."""
    sent: int = 0
    """Spans the exporter delivered."""
    failed: int = 0
    """Spans that could not be sent (collector down, refused, timed out, given up at close)."""
    ended: int = 0
    """Spans handed to the exporter's processor."""
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def count(self, spans: int, ok: bool) -> None:
        with self._lock:
            if ok:
                self.sent += spans
            else:
                self.failed += spans

    def give_up(self) -> None:
        """Count every span handed over but neither sent nor failed yet as failed."""
        with self._lock:
            self.failed += max(0, self.ended - self.sent - self.failed)


def _otlp_endpoint() -> str:
    traces = os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "").strip()
    if traces:
        return traces
    base = os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").strip() or "http://localhost:4318"
    return base.rstrip("/") + "/v1/traces"


def _exporters() -> list[str]:
    value = os.environ.get("OTEL_TRACES_EXPORTER", "").strip()
    names = [part.strip().lower() for part in value.split(",") if part.strip()] or ["otlp"]
    for name in names:
        if name not in _EXPORTERS:
            raise OtelConfigError(
                f"OTEL_TRACES_EXPORTER={value} is not supported: use otlp, console or none"
            )
    return names


def _check_protocol() -> None:
    for variable in ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"):
        value = os.environ.get(variable, "").strip()
        if not value:
            continue  # the traces variable, when set, wins over the general one
        if value.lower() != _PROTOCOL:
            raise OtelConfigError(
                f"{variable}={value} is not supported: tubeless exports over OTLP/HTTP; set "
                f"{variable}={_PROTOCOL} and point OTEL_EXPORTER_OTLP_ENDPOINT at the "
                "collector's OTLP/HTTP port (usually 4318)"
            )
        return


def exporting_provider() -> tuple[TracerProvider, Delivery, Callable[[], None]]:
    """A provider exporting as the standard variables say, its delivery counts, and the abort
    that stops the exporter's retries (for :func:`shut_down`).

    Raises:
        OtelConfigError: For an exporter or protocol that is not supported.
    """
    names = _exporters()
    if "otlp" in names:
        _check_protocol()
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import (
        BatchSpanProcessor,
        ConsoleSpanExporter,
        SimpleSpanProcessor,
    )

    resource = Resource.create()
    if str(resource.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
        resource = resource.merge(Resource({SERVICE_NAME: DEFAULT_SERVICE_NAME}))
    # Closing is bounded by shut_down; the SDK's own exit hook would wait again, unbounded.
    provider = TracerProvider(resource=resource, shutdown_on_exit=False)
    aborts: list[Callable[[], None]] = []
    if "otlp" in names:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        delivery = Delivery(_otlp_endpoint())
        counting = _counting(OTLPSpanExporter(), delivery)
        provider.add_span_processor(_counted(BatchSpanProcessor, counting, delivery))
        aborts.append(counting.shutdown)
        if "console" in names:
            provider.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter(out=sys.stderr)))
    elif "console" in names:
        delivery = Delivery("console (stderr)")
        console = _counting(ConsoleSpanExporter(out=sys.stderr), delivery)
        provider.add_span_processor(_counted(SimpleSpanProcessor, console, delivery))
    else:
        delivery = Delivery("nowhere (OTEL_TRACES_EXPORTER=none)")

    def abort() -> None:
        for stop in aborts:
            stop()

    return provider, delivery, abort


def shut_down(
    provider: Any,
    delivery: Delivery | None,
    abort: Callable[[], None],
    *,
    notice: Callable[[], None] | None = None,
    wait_s: float = EXPORT_WAIT_S,
) -> None:
    """Shut ``provider`` down, waiting at most ``wait_s`` seconds; see the module docstring."""
    done = threading.Event()

    def work() -> None:
        try:
            provider.shutdown()
        finally:
            done.set()

    # A daemon thread: a request the collector never answers cannot hold the process's exit.
    threading.Thread(target=work, name="tubeless-otel-shutdown", daemon=True).start()
    if not done.wait(min(NOTICE_AFTER_S, wait_s)):
        if notice is not None:
            notice()
        if not done.wait(max(0.0, wait_s - NOTICE_AFTER_S)):
            abort()  # ends the exporter's back-off at once; a request in flight is left behind
            done.wait(0.1)
    if delivery is not None:
        delivery.give_up()


def _counted(processor: Any, exporter: SpanExporter, delivery: Delivery) -> Any:
    """``processor(exporter)`` that also counts the spans handed to it."""

    class Counted(processor):  # type: ignore[misc]
        def on_end(self, span: ReadableSpan) -> None:
            if span.context is not None and span.context.trace_flags.sampled:
                with delivery._lock:
                    delivery.ended += 1
            super().on_end(span)

    return Counted(exporter)


def _counting(exporter: SpanExporter, delivery: Delivery) -> Any:
    """Delegates to ``exporter``, counts what it achieved, and shuts it down once (the abort
    and the processor's own shutdown may both ask)."""
    from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

    class Counting(SpanExporter):
        def __init__(self) -> None:
            self._stopped = False
            self._lock = threading.Lock()

        def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
            result = exporter.export(spans)
            delivery.count(len(spans), result is SpanExportResult.SUCCESS)
            return result

        def shutdown(self) -> None:
            with self._lock:
                stopped, self._stopped = self._stopped, True
            if not stopped:
                exporter.shutdown()

        def force_flush(self, timeout_millis: int = 30000) -> bool:
            return exporter.force_flush(timeout_millis)

    return Counting()
