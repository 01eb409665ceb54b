"""Opening the trace a CLI value names, the one way every command does it.

A value is a path (NDJSON or SQLite by its extension, ``-`` for NDJSON on stdout) or a Postgres
URL (``postgresql://`` or ``postgres://``); :mod:`tubeless.tracing.reader` decides which. Here a
missing optional driver becomes a usage error (exit 1) that names the extra to install, as
``--otel`` does for the OpenTelemetry SDK, instead of an execution failure.

The tracing modules are imported inside the functions: ``tubeless --help`` imports the commands.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

if TYPE_CHECKING:
    from tubeless.tracing.sinks import TraceSink

__all__ = ["missing_driver", "open_trace_sink", "read_trace_value"]

_EXTRA = "tubeless[postgres]"


def open_trace_sink(target: str, option: str = "--trace") -> TraceSink:
    """A new sink for ``target``, which the caller closes."""
    from tubeless.tracing.reader import open_sink

    try:
        return open_sink(target)
    except ImportError as exc:
        raise missing_driver(option, exc) from None


def read_trace_value(value: str, option: str = "TRACE", **bounds: Any) -> list[dict[str, Any]]:
    """Every record of the trace ``value`` names (``bounds`` as ``read_trace`` takes them)."""
    from tubeless.tracing import read_trace

    try:
        return read_trace(value, **bounds)
    except ImportError as exc:
        raise missing_driver(option, exc) from None


def missing_driver(option: str, exc: ImportError) -> Exception:
    """What to raise for ``exc``: a usage error naming the extra when the Postgres driver is
    missing, else ``exc`` itself."""
    if _EXTRA not in str(exc):
        return exc  # not the optional driver: a failure like any other
    return click.UsageError(f"{option}: {exc}")
