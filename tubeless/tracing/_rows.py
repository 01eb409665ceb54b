"""The columns of a trace store row, shared by the SQLite and Postgres stores.

A row is the record's envelope in columns and ``payload``/``error``/``iteration`` as compact
JSON text (text, not a JSON type: reading a row back gives the record's keys in the order they
were written). :func:`row_of` encodes a wire record; :func:`record_of` decodes a row read back
with its leading sequence number.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Final

from tubeless.tracing._json import compact_json
from tubeless.tracing._read_checks import TraceReadError, json_problem
from tubeless.tracing._tails import (
    STATUS_JSON,
    attempted,
    attributes_json,
    progress_payload,
    running_progress,
    terminal,
)
from tubeless.tracing.records import ConstantPayload, TraceRecord

__all__ = ["COLUMNS", "WIDTH", "Row", "payload_json", "record_of", "row_of"]

#: The columns a row binds, in order (the store adds its sequence column ``id`` before them).
COLUMNS: Final = (
    "version",
    "run_id",
    "correlation_id",
    "parent_run_id",
    "pipeline_id",
    "step_id",
    "attempt_id",
    "item_key",
    "event_name",
    "timestamp_ms",
    "duration_ms",
    "payload_json",
    "error_json",
    "iteration_json",
)
WIDTH: Final = len(COLUMNS)

Row = tuple[Any, ...]


def payload_json(record: TraceRecord) -> str:
    """The ``payload_json`` column of a record the record constructors built, reusing the JSON
    they already made (a shared payload's, a progress record's bounded details)."""
    # ``get``: a dict subclass's ``[]`` goes through a slot wrapper; ``get`` is dict's own.
    payload: Any = record.get("payload")
    if type(payload) is ConstantPayload:
        return payload.json()
    tail = record.tail
    if tail is running_progress:  # details already encoded when bounded
        return progress_payload(record) or compact_json(payload)
    if tail is terminal and len(payload) == 1:  # a step's end: {"status": ...}, made once
        known = STATUS_JSON.get(payload.get("status"))
        if known is not None:
            return known
    elif tail is attempted and len(payload) == 2:  # {"attempt": n, "attributes": {...}}
        attempt = payload.get("attempt")
        attributes = payload.get("attributes")
        if type(attempt) is int and attributes is not None:
            return f'{{"attempt":{attempt},"attributes":{attributes_json(record, payload)}}}'
    return compact_json(payload) if payload else "{}"


def row_of(record: Mapping[str, Any]) -> Row:
    """The columns of one wire record (:data:`COLUMNS` order)."""
    get = record.get
    error = get("error")
    if type(record) is TraceRecord:
        # The run's own columns come from its envelope, read once per run.
        head, item_key, iteration_json = record.envelope.row_columns()
        return (
            *head,
            get("stepId"),
            get("attemptId"),
            item_key,
            record["name"],
            record["timestampMs"],
            get("durationMs"),
            payload_json(record),
            None if error is None else compact_json(error),
            iteration_json,
        )
    payload = record["payload"]
    iteration = get("iteration")
    iteration_json = None if iteration is None else compact_json(iteration)
    return (
        record["version"],
        record["runId"],
        get("correlationId"),
        get("parentRunId"),
        record["pipelineId"],
        get("stepId"),
        get("attemptId"),
        get("itemKey"),
        record["name"],
        record["timestampMs"],
        get("durationMs"),
        compact_json(payload) if payload else "{}",
        None if error is None else compact_json(error),
        iteration_json,
    )


def record_of(row: Row, file: Any) -> dict[str, Any]:
    """The wire dict of one row, keys in the order the record constructors write them."""
    (
        row_id,
        version,
        run_id,
        correlation_id,
        parent_run_id,
        pipeline_id,
        step_id,
        attempt_id,
        item_key,
        name,
        timestamp_ms,
        duration_ms,
        payload_json,
        error_json,
        iteration_json,
    ) = row
    record: dict[str, Any] = {"version": version, "name": name, "runId": run_id}
    record["pipelineId"] = pipeline_id
    if parent_run_id is not None:
        record["parentRunId"] = parent_run_id
    if correlation_id is not None:
        record["correlationId"] = correlation_id
    if item_key is not None:
        record["itemKey"] = item_key
    try:
        if iteration_json is not None:
            record["iteration"] = json.loads(iteration_json)
        record["timestampMs"] = timestamp_ms
        if step_id is not None:
            record["stepId"] = step_id
        if attempt_id is not None:
            record["attemptId"] = attempt_id
        if duration_ms is not None:
            record["durationMs"] = float(duration_ms)
        if error_json is not None:
            record["error"] = json.loads(error_json)
        record["payload"] = json.loads(payload_json)
    except RecursionError as exc:
        raise TraceReadError(f"row {row_id}: {json_problem(exc)}", path=file) from exc
    except (TypeError, ValueError) as exc:
        raise TraceReadError(f"row {row_id}: invalid JSON column: {exc}", path=file) from exc
    return record
