"""Trace v3: the record model, sinks, storage (NDJSON, SQLite, Postgres), the fold readers
share, readers, and :func:`read_since` for followers of a live run.

The storage names are imported lazily: a run that records nothing never loads ``sqlite3``,
``OtelSink`` imports ``opentelemetry`` only when one is made, and ``PostgresSink`` ``psycopg``.
The package names what users need; the rest (the record envelope, the fan-out, the tree
nodes, ``open_sink`` and ``write_trace``) stays in the public modules ``records``, ``sinks``,
``projection`` and ``reader``.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from tubeless.tracing.sinks import TraceSink

if TYPE_CHECKING:
    from tubeless.tracing.fold import TraceFold
    from tubeless.tracing.follow import read_since
    from tubeless.tracing.ndjson import NdjsonSink
    from tubeless.tracing.otel import OtelSink
    from tubeless.tracing.postgres import PostgresSink
    from tubeless.tracing.projection import RunTree, find_run, format_tree, run_trees
    from tubeless.tracing.reader import TraceReadError, read_trace
    from tubeless.tracing.sqlite import SqliteSink

__all__ = [
    "NdjsonSink",
    "OtelSink",
    "PostgresSink",
    "RunTree",
    "SqliteSink",
    "TraceFold",
    "TraceReadError",
    "TraceSink",
    "find_run",
    "format_tree",
    "read_since",
    "read_trace",
    "run_trees",
]

_HOMES = {
    "tubeless.tracing.fold": ("TraceFold",),
    "tubeless.tracing.follow": ("read_since",),
    "tubeless.tracing.postgres": ("PostgresSink",),
    "tubeless.tracing.ndjson": ("NdjsonSink",),
    "tubeless.tracing.otel": ("OtelSink",),
    "tubeless.tracing.reader": ("TraceReadError", "read_trace"),
    "tubeless.tracing.sqlite": ("SqliteSink",),
    "tubeless.tracing.projection": ("RunTree", "find_run", "format_tree", "run_trees"),
}
_MODULE_OF = {name: module for module, names in _HOMES.items() for name in names}


def __getattr__(name: str) -> Any:
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module 'tubeless.tracing' has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
