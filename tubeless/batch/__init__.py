"""Batch runs and evaluations: one entry over many inputs, on one machine or a Ray cluster.

``run_batch(entry, inputs, concurrency=, engine=)`` yields one row per input in input order
(DESIGN.md §13); the engines are ``local`` (asyncio tasks, the default), ``process`` (worker
processes) and ``ray`` (Ray actors, the ``tubeless[ray]`` extra). ``run_eval`` checks rows
against the expectations of a cases file.
"""

from __future__ import annotations

from tubeless.batch._engine import ENGINES, Engine, EngineName, EntrySource
from tubeless.batch._eval import CaseResult, Finding, check_case, format_table, run_eval
from tubeless.batch._inputs import InputRow, read_inputs, row_key
from tubeless.batch._junit import junit_xml
from tubeless.batch._row import RowOutcome
from tubeless.batch._runner import BatchSummary, run_batch, run_outcomes, summarize

__all__ = [
    "ENGINES",
    "BatchSummary",
    "CaseResult",
    "Engine",
    "EngineName",
    "EntrySource",
    "Finding",
    "InputRow",
    "RowOutcome",
    "check_case",
    "format_table",
    "junit_xml",
    "read_inputs",
    "row_key",
    "run_batch",
    "run_eval",
    "run_outcomes",
    "summarize",
]
