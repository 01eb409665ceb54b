"""Batch runs and evaluations: one entry over many inputs, on one machine or a Ray cluster.

``run_batch(entry, inputs, concurrency=, engine=)`` yields one row per input in input order
(DESIGN.md §13); the engines are ``local`` (asyncio tasks, the default), ``process`` (worker
processes) and ``ray`` (Ray actors, the ``tubeless[ray]`` extra). ``run_eval`` checks rows
against the expectations of a cases file. What the CLI uses besides (summaries, rows, JUnit
output) is named in ``tubeless.batch._spi``.
"""

from __future__ import annotations

from tubeless.batch._engine import EngineName, EntrySource
from tubeless.batch._eval import CaseResult, Finding, run_eval
from tubeless.batch._runner import run_batch

__all__ = ["CaseResult", "EngineName", "EntrySource", "Finding", "run_batch", "run_eval"]
