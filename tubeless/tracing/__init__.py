"""Trace v3: the record model, sinks, storage (NDJSON, SQLite, Postgres), the fold readers
share, readers, and :func:`read_since` for followers of a live run.

The storage names are imported lazily: a run that records nothing never loads ``sqlite3``,
``OtelSink`` imports ``opentelemetry`` only when one is made, and ``PostgresSink`` ``psycopg``.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from tubeless.tracing.records import TRACE_VERSION, Envelope
from tubeless.tracing.sinks import TraceFanout, TraceSink

if TYPE_CHECKING:
    from tubeless.tracing.fold import TraceFold
    from tubeless.tracing.follow import read_since
    from tubeless.tracing.ndjson import NdjsonSink, read_ndjson
    from tubeless.tracing.otel import OtelSink
    from tubeless.tracing.postgres import PostgresSink
    from tubeless.tracing.projection import (
        AgentHistory,
        CallNode,
        RunTree,
        StepNode,
        TurnNode,
        find_run,
        format_run_list,
        format_tree,
        run_trees,
        terminal_safe,
    )
    from tubeless.tracing.reader import TraceReadError, open_sink, read_trace, write_trace
    from tubeless.tracing.sqlite import SqliteSink, read_sqlite

__all__ = [
    "TRACE_VERSION",
    "AgentHistory",
    "CallNode",
    "Envelope",
    "NdjsonSink",
    "OtelSink",
    "PostgresSink",
    "RunTree",
    "SqliteSink",
    "StepNode",
    "TraceFanout",
    "TraceFold",
    "TraceReadError",
    "TraceSink",
    "TurnNode",
    "find_run",
    "format_run_list",
    "format_tree",
    "open_sink",
    "read_ndjson",
    "read_since",
    "read_sqlite",
    "read_trace",
    "run_trees",
    "terminal_safe",
    "write_trace",
]

_HOMES = {
    "tubeless.tracing.fold": ("TraceFold",),
    "tubeless.tracing.follow": ("read_since",),
    "tubeless.tracing.postgres": ("PostgresSink",),
    "tubeless.tracing.ndjson": ("NdjsonSink", "read_ndjson"),
    "tubeless.tracing.otel": ("OtelSink",),
    "tubeless.tracing.reader": ("TraceReadError", "open_sink", "read_trace", "write_trace"),
    "tubeless.tracing.sqlite": ("SqliteSink", "read_sqlite"),
    "tubeless.tracing.projection": (
        "AgentHistory",
        "CallNode",
        "RunTree",
        "StepNode",
        "TurnNode",
        "find_run",
        "format_run_list",
        "format_tree",
        "run_trees",
        "terminal_safe",
    ),
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
