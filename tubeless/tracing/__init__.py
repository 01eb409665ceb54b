"""Trace v3: the record model, sinks, and (later) storage and readers."""

from __future__ import annotations

from tubeless.tracing.records import TRACE_VERSION, Envelope
from tubeless.tracing.sinks import TraceFanout, TraceSink

__all__ = ["TRACE_VERSION", "Envelope", "TraceFanout", "TraceSink"]
