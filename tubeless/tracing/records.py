"""Trace v3 records: typed constructors that build the camelCase wire dicts.

Every record shares an envelope (``version``, ``name``, ``runId``, ``pipelineId``,
``timestampMs`` and the optional relation fields ``parentRunId``, ``correlationId``, ``itemKey``,
``iteration``). Absent optional fields are omitted, never null. Constructors apply the write
bounds (strings cut at 4096 characters, lists at 128 entries) so a sink never sees an oversized
record, and they are only ever called when a sink is attached: a run without sinks builds
nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from itertools import islice
from typing import Any, Final, Literal

from tubeless.tracing import _tails
from tubeless.tracing._bounds import (
    MAX_DETAILS_BYTES,
    MAX_LIST,
    MAX_SNAPSHOT_BYTES,
    MAX_STRING,
    ShownRows,
    bounded_attributes,
    bounded_attributes_json,
    bounded_details,
    bounded_error,
    bounded_list,
    bounded_progress,
    bounded_progress_json,
    bounded_snapshot,
    bounded_str,
    safe_text,
)
from tubeless.tracing._json import compact_json
from tubeless.tracing._tails import Tail, string_json

__all__ = [
    "MAX_DETAILS_BYTES",
    "MAX_LIST",
    "MAX_SNAPSHOT_BYTES",
    "MAX_STRING",
    "RECORD_NAMES",
    "TRACE_VERSION",
    "ConstantPayload",
    "Envelope",
    "ShownRows",
    "TraceRecord",
    "bounded_attributes",
    "bounded_details",
    "bounded_error",
    "bounded_list",
    "bounded_progress",
    "bounded_snapshot",
    "bounded_str",
    "record_json",
    "record_line",
    "safe_text",
    "started_payload",
]

#: How a run ends (``pipeline.completed``'s ``status``).
RunEnd = Literal["completed", "failed", "cancelled"]
#: How a step ends: the terminal record it gets (``step.complete``, ``step.skipped``, ...).
StepEnd = Literal["completed", "skipped", "failed", "cancelled"]

TRACE_VERSION: Final = 3
RECORD_NAMES: Final = (
    "pipeline.started",
    "step.planned",
    "step.running",
    "step.attempted",
    "step.complete",
    "step.skipped",
    "step.failed",
    "step.cancelled",
    "pipeline.log",
    "pipeline.finalize.started",
    "pipeline.finalize.completed",
    "pipeline.finalize.failed",
    "pipeline.completed",
)


class TraceRecord(dict[str, Any]):
    """A trace record: a plain dict to every sink, which also knows its :class:`Envelope`.

    Every record of a run repeats the run's relation fields; through the envelope an encoder
    can reuse their JSON (made once per run) instead of encoding them again for each record.
    Sinks must treat records as read-only: every sink of a run receives the same dict.
    """

    __slots__ = ("details", "envelope", "tail")

    envelope: Envelope
    tail: Tail | None
    """How its fields after the timestamp are encoded, when a constructor knows their shape."""
    details: tuple[Any, str] | None
    """A part of the payload and its JSON, when bounding it encoded it: a progress record's
    ``details`` list, an attempt record's ``attributes``."""


class ConstantPayload(dict[str, Any]):
    """A payload many records share unchanged (a plan step's, a run start's): encoded once.

    A plain dict to every sink; :func:`record_json` and the SQLite sink reuse :meth:`json`
    instead of encoding it again for each record. Nobody may change it once built.
    """

    __slots__ = ("_json",)

    _json: str

    def json(self) -> str:
        """The compact JSON text, encoded on first use."""
        try:
            return self._json
        except AttributeError:
            self._json = compact_json(self)
            return self._json


class Envelope:
    """The relation fields of one run, built once; each record copies them.

    Args:
        run_id: The run's id.
        pipeline_id: The pipeline's id.
        parent_run_id: The run that started this one (child runs).
        correlation_id: An id supplied by the caller that ties runs together.
        item_key: The fan-out item key or agent call id of a child run.
        iteration: ``{runId, stepId, attemptId, index}`` for iterated children.
    """

    __slots__ = (
        "_head_json",
        "_head_size",
        "_iteration_json",
        "_row_columns",
        "_steps",
        "_template",
        "pipeline_id",
        "run_id",
    )

    def __init__(
        self,
        *,
        run_id: str,
        pipeline_id: str,
        parent_run_id: str | None = None,
        correlation_id: str | None = None,
        item_key: str | None = None,
        iteration: Mapping[str, Any] | None = None,
    ) -> None:
        self.run_id = run_id
        self.pipeline_id = pipeline_id
        # Every record starts as a copy of this one (name and time replaced in place, so the
        # key order stays that of the wire format): one C-level copy instead of a field each.
        template: dict[str, Any] = {
            "version": TRACE_VERSION,
            "name": "",
            "runId": run_id,
            "pipelineId": pipeline_id,
        }
        if parent_run_id is not None:
            template["parentRunId"] = parent_run_id
        if correlation_id is not None:
            template["correlationId"] = correlation_id
        if item_key is not None:
            short = len(item_key) <= MAX_STRING and item_key.isascii()
            template["itemKey"] = item_key if short else bounded_str(item_key)
        if iteration is not None:
            template["iteration"] = dict(iteration)
        template["timestampMs"] = 0
        self._template = template
        self._head_size = len(self._template)
        self._head_json: str | None = None
        self._iteration_json: str | None = None
        self._row_columns: tuple[tuple[Any, ...], str | None, str | None] | None = None
        self._steps: dict[Any, tuple[Any, str]] = {}

    def _record(self, name: str, timestamp_ms: int, tail: Tail | None = None) -> TraceRecord:
        record = TraceRecord(self._template)
        record["name"] = name
        record["timestampMs"] = timestamp_ms
        record.envelope = self
        record.tail = tail
        return record

    def step_json(self, step_id: Any, attempt_id: Any) -> str:
        """The JSON members ``"stepId":…,"attemptId":…``, encoded once per attempt."""
        known = self._steps.get(attempt_id)
        if known is not None and known[0] == step_id:
            return known[1]
        text = f'"stepId":{string_json(step_id)},"attemptId":{string_json(attempt_id)}'
        self._steps[attempt_id] = (step_id, text)
        return text

    def head_json(self) -> str:
        """The JSON members of the relation fields (``"runId":…,…``), encoded once."""
        if self._head_json is None:
            # The relation fields' JSON, field by field: the ids in it are mostly those of the
            # parent run, quoted already for its other children.
            base = self._template
            text = f'"runId":{string_json(base["runId"])}'
            text += f',"pipelineId":{string_json(base["pipelineId"])}'
            for key, member in _OPTIONAL_RELATIONS:
                value = base.get(key)
                if value is not None:
                    text += f"{member}{string_json(value)}"
            iteration = self.iteration_json()
            if iteration is not None:
                text += f',"iteration":{iteration}'
            self._head_json = text
        return self._head_json

    def iteration_json(self) -> str | None:
        """The JSON of the ``iteration`` field (``None`` without one), encoded once."""
        iteration = self._template.get("iteration")
        if iteration is None:
            return None
        if self._iteration_json is None:
            index = iteration.get("index")
            if tuple(iteration) == _ITERATION_KEYS and type(index) is int:
                self._iteration_json = (
                    f'{{"runId":{string_json(iteration["runId"])},'
                    f'"stepId":{string_json(iteration["stepId"])},'
                    f'"attemptId":{string_json(iteration["attemptId"])},"index":{index}}}'
                )
            else:
                self._iteration_json = compact_json(iteration)
        return self._iteration_json

    def row_columns(self) -> tuple[tuple[Any, ...], str | None, str | None]:
        """The run's columns of a trace store row, read once: ``(version, runId,
        correlationId, parentRunId, pipelineId)``, ``itemKey`` and the iteration's JSON."""
        if self._row_columns is None:
            base = self._template
            self._row_columns = (
                (
                    TRACE_VERSION,
                    base["runId"],
                    base.get("correlationId"),
                    base.get("parentRunId"),
                    base["pipelineId"],
                ),
                base.get("itemKey"),
                self.iteration_json(),
            )
        return self._row_columns

    @property
    def field_count(self) -> int:
        """How many relation fields each record repeats."""
        return len(self._template) - 3  # not version, name and timestampMs

    # -- run level --------------------------------------------------------------------------
    def pipeline_started(
        self,
        timestamp_ms: int,
        *,
        dry_run: bool,
        plan_ok: bool,
        step_count: int,
        target_ids: Iterable[str],
        definition_identity: Mapping[str, Any] | None = None,
        definition_snapshot: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        """``pipeline.started``: the run's plan summary and definition identity."""
        return self.pipeline_started_with(
            timestamp_ms,
            started_payload(
                dry_run=dry_run,
                plan_ok=plan_ok,
                step_count=step_count,
                target_ids=target_ids,
                definition_identity=definition_identity,
                definition_snapshot=definition_snapshot,
            ),
        )

    def pipeline_started_with(
        self, timestamp_ms: int, payload: Mapping[str, Any]
    ) -> dict[str, Any]:
        """``pipeline.started`` with a payload from :func:`started_payload` (often shared)."""
        record = self._record("pipeline.started", timestamp_ms)
        record["payload"] = payload
        return record

    def pipeline_completed(
        self,
        timestamp_ms: int,
        *,
        status: RunEnd,
        dry_run: bool,
        error_count: int,
        finalized: bool,
        step_count: int,
        duration_ms: float,
        error: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        """``pipeline.completed``: the terminal status and the first run error, if any."""
        record = self._record(
            "pipeline.completed", timestamp_ms, _tails.pipeline_completed if error is None else None
        )
        record["durationMs"] = duration_ms
        if error is not None:
            record["error"] = bounded_error(error)
        record["payload"] = _completed_payload(status, dry_run, error_count, finalized, step_count)
        return record

    def finalize_started(self, timestamp_ms: int) -> dict[str, Any]:
        """``pipeline.finalize.started``."""
        record = self._record("pipeline.finalize.started", timestamp_ms, _tails.finalize_started)
        record["payload"] = {}
        return record

    def finalize_completed(self, timestamp_ms: int, *, duration_ms: float) -> dict[str, Any]:
        """``pipeline.finalize.completed``."""
        record = self._record(
            "pipeline.finalize.completed", timestamp_ms, _tails.finalize_completed
        )
        record["durationMs"] = duration_ms
        record["payload"] = {}
        return record

    def finalize_failed(
        self, timestamp_ms: int, *, duration_ms: float, error: Mapping[str, Any]
    ) -> dict[str, Any]:
        """``pipeline.finalize.failed``."""
        record = self._record("pipeline.finalize.failed", timestamp_ms)
        record["durationMs"] = duration_ms
        record["error"] = bounded_error(error)
        record["payload"] = {}
        return record

    def log(
        self,
        timestamp_ms: int,
        *,
        level: str,
        message: str,
        step_id: str | None = None,
        attempt_id: str | None = None,
    ) -> dict[str, Any]:
        """``pipeline.log``: a handler's log line (level ``log``, ``warn`` or ``error``)."""
        record = self._record("pipeline.log", timestamp_ms)
        if step_id is not None:
            record["stepId"] = step_id
        if attempt_id is not None:
            record["attemptId"] = attempt_id
        record["payload"] = {"level": level, "message": bounded_str(message)}
        return record

    # -- step level -------------------------------------------------------------------------
    def step_planned(
        self, timestamp_ms: int, *, step_id: str, payload: Mapping[str, Any]
    ) -> dict[str, Any]:
        """``step.planned``: the plan step's wire payload (built once per plan)."""
        record = self._record(
            "step.planned",
            timestamp_ms,
            _tails.planned if type(payload) is ConstantPayload else None,
        )
        record["stepId"] = step_id
        record["payload"] = payload
        return record

    def step_running(
        self,
        timestamp_ms: int,
        *,
        step_id: str,
        attempt_id: str,
        progress: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        """``step.running``: an attempt started, or reported progress.

        ``progress`` is ``{completed, total?, message?, details?, detailCount?}`` as reported by
        the handler; it is bounded here (see :func:`bounded_progress`), so ``details`` may be
        any iterable of rows and need not be cut beforehand.
        """
        if progress is None:
            record = self._record("step.running", timestamp_ms, _tails.running)
            payload: dict[str, Any] = {}
        else:
            record = self._record("step.running", timestamp_ms, _tails.running_progress)
            bounded, record.details = bounded_progress_json(progress, ConstantPayload)
            payload = {"progress": bounded}
        record["stepId"] = step_id
        record["attemptId"] = attempt_id
        record["payload"] = payload
        return record

    def step_attempted(
        self,
        timestamp_ms: int,
        *,
        step_id: str,
        attempt: int,
        attributes: Mapping[str, str | int | float | bool | None],
        attempt_id: str | None = None,
        duration_ms: float | None = None,
    ) -> dict[str, Any]:
        """``step.attempted``: attributes about work done within an attempt."""
        shaped = attempt_id is not None and duration_ms is None
        record = self._record("step.attempted", timestamp_ms, _tails.attempted if shaped else None)
        record["stepId"] = step_id
        if attempt_id is not None:
            record["attemptId"] = attempt_id
        if duration_ms is not None:
            record["durationMs"] = duration_ms
        bounded, text = bounded_attributes_json(attributes)
        record.details = None if text is None else (bounded, text)
        record["payload"] = {"attempt": attempt, "attributes": bounded}
        return record

    def step_terminal(
        self,
        timestamp_ms: int,
        *,
        status: StepEnd,
        step_id: str,
        attempt_id: str | None = None,
        duration_ms: float | None = None,
        error: Mapping[str, Any] | None = None,
        reason: str | None = None,
        message: str | None = None,
        dependency_id: str | None = None,
    ) -> dict[str, Any]:
        """``step.complete``, ``step.skipped``, ``step.failed`` or ``step.cancelled``."""
        name = _TERMINAL_NAMES[status]
        shaped = (
            attempt_id is not None
            and duration_ms is not None
            and error is None
            and reason is None
            and message is None
            and dependency_id is None
        )
        record = self._record(name, timestamp_ms, _tails.terminal if shaped else None)
        record["stepId"] = step_id
        if attempt_id is not None:
            record["attemptId"] = attempt_id
        if duration_ms is not None:
            record["durationMs"] = duration_ms
        if error is not None:
            record["error"] = bounded_error(error)
        if shaped:  # an attempt's plain end: one payload per status, made once
            record["payload"] = _STATUS_PAYLOADS.get(status) or {"status": status}
            return record
        payload: dict[str, Any] = {"status": status}
        if reason is not None:
            payload["reason"] = reason
        if message is not None:
            payload["message"] = bounded_str(message)
        if dependency_id is not None:
            payload["dependencyId"] = dependency_id
        record["payload"] = payload
        return record


def started_payload(
    *,
    dry_run: bool,
    plan_ok: bool,
    step_count: int,
    target_ids: Iterable[str],
    definition_identity: Mapping[str, Any] | None = None,
    definition_snapshot: Mapping[str, Any] | None = None,
) -> ConstantPayload:
    """The payload of a ``pipeline.started`` record: the same for every run of one plan, so
    an executor may build it once and share it."""
    payload = ConstantPayload(
        dryRun=dry_run, planOk=plan_ok, stepCount=step_count, targetIds=bounded_list(target_ids)
    )
    if definition_identity is not None:
        payload["definitionIdentity"] = definition_identity
    if definition_snapshot is not None:
        payload["definitionSnapshot"] = definition_snapshot
    return payload


_STATUS_PAYLOADS: Final = {
    status: ConstantPayload(status=status)
    for status in ("completed", "skipped", "failed", "cancelled")
}
_COMPLETED_PAYLOADS: Final[dict[tuple[str, bool, int, bool, int], ConstantPayload]] = {}
_COMPLETED_PAYLOADS_MAX: Final = 256


def _completed_payload(
    status: str, dry_run: bool, error_count: int, finalized: bool, step_count: int
) -> dict[str, Any]:
    """A ``pipeline.completed`` payload. Most runs of a process end alike (the same status
    and counts): such a payload is made and encoded once and shared by their records."""
    # Only values of exactly these types are shared: ``1 == True`` but they encode apart.
    plain = (
        type(dry_run) is bool
        and type(error_count) is int
        and type(finalized) is bool
        and type(step_count) is int
        and type(status) is str
    )
    if plain:
        key = (status, dry_run, error_count, finalized, step_count)
        shared = _COMPLETED_PAYLOADS.get(key)
        if shared is not None:
            return shared
    payload = {
        "status": status,
        "dryRun": dry_run,
        "errorCount": error_count,
        "finalized": finalized,
        "stepCount": step_count,
    }
    if plain:
        if len(_COMPLETED_PAYLOADS) >= _COMPLETED_PAYLOADS_MAX:
            _COMPLETED_PAYLOADS.clear()
        payload = _COMPLETED_PAYLOADS[key] = ConstantPayload(payload)
    return payload


_TERMINAL_NAMES: Final[dict[StepEnd, str]] = {
    "completed": "step.complete",
    "skipped": "step.skipped",
    "failed": "step.failed",
    "cancelled": "step.cancelled",
}


_NAME_JSON: Final = {name: compact_json(name) for name in RECORD_NAMES}
#: The relation fields after ``runId`` and ``pipelineId`` but ``iteration``, in wire order.
_OPTIONAL_RELATIONS: Final = (
    ("parentRunId", ',"parentRunId":'),
    ("correlationId", ',"correlationId":'),
    ("itemKey", ',"itemKey":'),
)
_ITERATION_KEYS: Final = ("runId", "stepId", "attemptId", "index")


def record_json(record: Any) -> str:
    """``compact_json(record)``, reusing the envelope's JSON for a :class:`TraceRecord`."""
    if type(record) is not TraceRecord:
        return compact_json(record)
    return record_line(record)[:-1]


def record_line(record: Any) -> str:
    """``record_json(record) + "\n"`` (an NDJSON line): for a record of the constructors, its
    name's constant start, its run's relation fields (encoded once per run), the timestamp
    and the fields after it (by the record's tail, when it has one)."""
    if type(record) is not TraceRecord:
        return compact_json(record) + "\n"
    envelope = record.envelope
    name = record["name"]
    # Put together per record rather than kept per run and name: a run makes few records
    # of each name, and joining the pieces costs less than building and keeping a prefix.
    start = _NAME_START.get(name) or _name_start(name)
    head = envelope._head_json or envelope.head_json()
    tail = record.tail
    if tail is not None:
        rest = tail(record, envelope._head_size)
        if rest is not None:
            return f'{start}{head},"timestampMs":{record["timestampMs"]}{rest}\n'
    rest = _rest_json(record, envelope._head_size)
    return f'{start}{head},"timestampMs":{record["timestampMs"]}{rest}\n'


def _rest_json(record: TraceRecord, head: int) -> str:
    """The fields after the timestamp, to the closing brace.

    Version, name, the relation fields and ``timestampMs`` are the first ``head`` fields (see
    ``Envelope._record``); a :class:`ConstantPayload`, always the last field, is not encoded
    again.
    """
    payload = record.get("payload")
    if type(payload) is ConstantPayload:
        size = len(record) - 1
        if size == head:
            return f',"payload":{payload.json()}}}'
        rest = compact_json(dict(islice(record.items(), head, size)))
        return f',{rest[1:-1]},"payload":{payload.json()}}}'
    rest = compact_json(dict(islice(record.items(), head, None)))
    if rest == "{}":
        return "}"
    return f",{rest[1:]}"


def _name_json(name: str) -> str:
    return _NAME_JSON.get(name) or compact_json(name)


#: ``{"version":3,"name":…,`` of each record name: how every record's JSON starts.
_NAME_START: Final = {
    name: f'{{"version":{TRACE_VERSION},"name":{_NAME_JSON[name]},' for name in RECORD_NAMES
}


def _name_start(name: str) -> str:
    return f'{{"version":{TRACE_VERSION},"name":{compact_json(name)},'
