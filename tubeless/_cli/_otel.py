"""What ``run --otel`` and ``trace export-otel`` share: the exporting sink, and its one line.

The sink is :func:`tubeless.tracing.otel.otlp_http_sink`, configured by the standard
``OTEL_TRACES_EXPORTER``, ``OTEL_EXPORTER_OTLP_*`` and ``OTEL_SERVICE_NAME`` variables; a
setting it cannot honour (``grpc``, ``zipkin``, ...) is a usage error in one line. Closing it
waits a bounded time for the last spans and prints ``exporting spans…`` when that takes more
than half a second. While it works, the SDK's own log
lines (a warning per failed batch, a retry notice, ...) are held back, so a collector that is
down costs one ``warning:`` line after the run (:func:`undelivered`) and never the exit code of
``run`` (``export-otel``, whose whole work it is, exits 2). The SDK is imported only when
the flag or the command is used.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:
    from tubeless.tracing.otel import OtelSink

__all__ = ["endpoint_of", "hold_sdk_logs", "open_otlp_sink", "undelivered"]

#: The logger every OpenTelemetry package logs under.
_SDK_LOGGER = "opentelemetry"


def _exporting() -> None:
    click.echo("exporting spans…", err=True)


def open_otlp_sink(what: str) -> OtelSink:
    """The exporting sink; a missing SDK (naming the extra) or an exporter setting that cannot
    be honoured is a usage error (exit 1)."""
    from tubeless.tracing.otel import INSTALL_HINT, OtelConfigError, otlp_http_sink

    try:
        return otlp_http_sink(notice=_exporting)
    except ImportError:
        raise click.UsageError(
            f"{what} needs the OpenTelemetry SDK, which is not installed: {INSTALL_HINT}"
        ) from None
    except OtelConfigError as exc:
        raise click.UsageError(str(exc)) from None


class _Hold(logging.Handler):
    def emit(self, record: logging.LogRecord) -> None:
        pass  # the delivery counts say what matters, in one line


def hold_sdk_logs() -> Callable[[], None]:
    """Keep the OpenTelemetry SDK's log lines off stderr until the returned callable is called."""
    logger = logging.getLogger(_SDK_LOGGER)
    handler = _Hold()
    propagate, logger.propagate = logger.propagate, False
    logger.addHandler(handler)

    def release() -> None:
        logger.removeHandler(handler)
        logger.propagate = propagate

    return release


def undelivered(sink: OtelSink) -> str | None:
    """``<n> of <m> spans were not sent``, or ``None`` when every span reached the collector."""
    delivery = sink.delivery
    if delivery is None or not delivery.failed:
        return None
    return f"{delivery.failed} of {delivery.failed + delivery.sent} spans were not sent"


def endpoint_of(sink: OtelSink) -> str:
    """The collector URL the sink sends to."""
    return "" if sink.delivery is None else sink.delivery.endpoint
