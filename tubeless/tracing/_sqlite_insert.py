"""The SQLite sink's INSERT of one commit, binding each run's columns once and no ``NULL``.

A turn's records repeat their run's columns (``version``, ``run_id``, ``correlation_id``,
``parent_run_id``, ``pipeline_id``, ``item_key``, ``iteration_json``: half of a row), and about
a third of their columns are ``NULL``. Binding a parameter from Python costs more than SQLite's
work to store it (a ``NULL`` goes through the adapter table, a text is copied), so a commit
binds each run's columns once, as numbered parameters every row of that run names again, writes
``NULL``, an empty payload and the record's name as literals, and binds only what varies per
row: step and attempt ids, the timestamp, the duration, the payload and the error. The rows
stored are the same. (Binding step and attempt ids once per commit too was tried: the look-ups
in Python cost what the binding saved.)

A commit's statement follows from its *shape*: per row, its run's slot (the slot's number in
the commit and which of the run's optional columns it has), its name and which of its own
optional columns it has. A turn's records have the same shape from one turn to the next, so
the statement text, and SQLite's prepared statement, are made once and reused.
"""

from __future__ import annotations

import functools
from typing import Any, Final

from tubeless.tracing.records import Envelope

__all__ = [
    "ATTEMPT",
    "CORRELATION",
    "DURATION",
    "EMPTY_PAYLOAD",
    "ERROR",
    "ITEM_KEY",
    "ITERATION",
    "PARENT",
    "STEP",
    "TABLE",
    "WIDTH",
    "RowShape",
    "Slot",
    "run_slot",
    "statement",
]

#: The table a trace store appends to.
TABLE: Final = "pipeline_run_events"
#: Columns a row names, in the table's order (after ``id``).
WIDTH: Final = 14
_INSERT_INTO: Final = (
    f"INSERT INTO {TABLE} (version, run_id, correlation_id, parent_run_id, pipeline_id, step_id,"
    " attempt_id, item_key, event_name, timestamp_ms, duration_ms, payload_json, error_json,"
    " iteration_json) VALUES "
)

# Which of a run's optional columns a slot binds.
CORRELATION: Final = 1
PARENT: Final = 2
ITEM_KEY: Final = 4
ITERATION: Final = 8
# Which of a row's optional columns it binds, and whether its payload is ``{}`` (a literal).
STEP: Final = 1
ATTEMPT: Final = 2
DURATION: Final = 4
ERROR: Final = 8
EMPTY_PAYLOAD: Final = 16

#: A run's place in one commit: its number there and the :data:`CORRELATION` ... bits it has.
Slot = tuple[int, int]
#: One row of a commit: its run's slot, its name and its :data:`STEP` ... bits; ``None`` for a
#: row binding all :data:`WIDTH` columns (a record that did not come from the constructors).
RowShape = tuple[Slot, str, int] | None


def run_slot(params: list[Any], envelope: Envelope, number: int) -> Slot:
    """Append a run's columns to a commit's parameters; its slot, for the rows that name them.

    Appends ``version``, ``run_id``, then ``correlation_id`` and ``parent_run_id`` when set,
    ``pipeline_id``, then ``item_key`` and ``iteration_json`` when set: the order in which
    :func:`statement` numbers them.
    """
    (version, run_id, correlation_id, parent_run_id, pipeline_id), item_key, iteration_json = (
        envelope.row_columns()
    )
    params.append(version)
    params.append(run_id)
    bits = 0
    if correlation_id is not None:
        params.append(correlation_id)
        bits = CORRELATION
    if parent_run_id is not None:
        params.append(parent_run_id)
        bits |= PARENT
    params.append(pipeline_id)
    if item_key is not None:
        params.append(item_key)
        bits |= ITEM_KEY
    if iteration_json is not None:
        params.append(iteration_json)
        bits |= ITERATION
    return number, bits


def _literal(text: str) -> str:
    """``text`` as an SQL string literal."""
    if "\x00" in text:  # SQLite's parser would end the literal there
        raise ValueError(f"a record name holds a NUL character: {text!r}")
    return "'" + text.replace("'", "''") + "'"


@functools.lru_cache(maxsize=256)
def statement(shape: tuple[RowShape, ...]) -> str:
    """The multi-row INSERT of a commit of this shape.

    Parameters are numbered in the order the sink appended them: a run's columns (see
    :func:`run_slot`) before the first of its rows' own columns, then each row's step id,
    attempt id, timestamp, duration, payload and error, as its bits say.
    """
    count = 0

    def param() -> str:
        nonlocal count
        count += 1
        return f"?{count}"

    def optional(present: int) -> str:
        return param() if present else "NULL"

    runs: dict[int, tuple[str, ...]] = {}
    values: list[str] = []
    for row in shape:
        if row is None:
            values.append("(" + ", ".join(param() for _ in range(WIDTH)) + ")")
            continue
        (number, bits), name, own = row
        run = runs.get(number)
        if run is None:
            version, run_id = param(), param()
            correlation, parent = optional(bits & CORRELATION), optional(bits & PARENT)
            pipeline = param()
            item_key, iteration = optional(bits & ITEM_KEY), optional(bits & ITERATION)
            run = (version, run_id, correlation, parent, pipeline, item_key, iteration)
            runs[number] = run
        version, run_id, correlation, parent, pipeline, item_key, iteration = run
        step, attempt = optional(own & STEP), optional(own & ATTEMPT)
        timestamp = param()
        duration = optional(own & DURATION)
        payload = "'{}'" if own & EMPTY_PAYLOAD else param()
        error = optional(own & ERROR)
        columns = (
            version,
            run_id,
            correlation,
            parent,
            pipeline,
            step,
            attempt,
            item_key,
            _literal(name),
            timestamp,
            duration,
            payload,
            error,
            iteration,
        )
        values.append("(" + ", ".join(columns) + ")")
    return _INSERT_INTO + ", ".join(values)
