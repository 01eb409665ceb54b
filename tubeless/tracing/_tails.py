"""The JSON of a record after its timestamp, for the shapes a traced turn makes most.

A record constructor that builds one of these shapes names its tail function on the record;
the NDJSON line then formats the few fields after the cached prefix directly instead of
copying them into a dict and running the general encoder over it. Each function checks the
record still has the shape it was built with (its field count, the types of the values it
formats) and returns ``None`` otherwise, so the general encoder decides; the bytes are
``json.dumps(record, separators=(",", ":"), ensure_ascii=False)``'s either way.
"""

from __future__ import annotations

from collections.abc import Callable
from json.encoder import encode_basestring
from typing import Any, Final

from tubeless.tracing._json import compact_json

__all__ = [
    "STATUS_JSON",
    "Tail",
    "attempted",
    "finalize_completed",
    "finalize_started",
    "pipeline_completed",
    "planned",
    "progress_payload",
    "quote",
    "running",
    "running_progress",
    "terminal",
]

#: ``tail(record, head)``: the JSON text from the timestamp's value to the closing brace.
Tail = Callable[[Any, int], "str | None"]

#: A JSON string literal, as the compact UTF-8 encoder writes it.
quote: Final[Callable[[str], str]] = encode_basestring

#: The payload JSON of a step's end, by its status.
STATUS_JSON: Final = {
    status: f'{{"status":{quote(status)}}}'
    for status in ("completed", "skipped", "failed", "cancelled")
}


def _finite(value: Any) -> bool:
    """A plain, finite float: its ``repr`` is its JSON."""
    return type(value) is float and value - value == 0.0


def planned(record: Any, head: int) -> str | None:
    """``step.planned``: ``stepId`` and a shared payload."""
    if len(record) != head + 2:
        return None
    step_id = record["stepId"]
    payload = record["payload"]
    if type(step_id) is not str or not hasattr(payload, "json"):
        return None
    return f'{record["timestampMs"]},"stepId":{quote(step_id)},"payload":{payload.json()}}}'


def running(record: Any, head: int) -> str | None:
    """``step.running`` as an attempt starts: ``stepId``, ``attemptId``, an empty payload."""
    if len(record) != head + 3 or record["payload"]:
        return None
    step = record.envelope.step_json(record["stepId"], record["attemptId"])
    return f'{record["timestampMs"]},{step},"payload":{{}}}}'


def running_progress(record: Any, head: int) -> str | None:
    """``step.running`` with a progress report; its details list is not encoded again."""
    if len(record) != head + 3:
        return None
    step = record.envelope.step_json(record["stepId"], record["attemptId"])
    payload = progress_payload(record) or compact_json(record["payload"])
    return f'{record["timestampMs"]},{step},"payload":{payload}}}'


def progress_payload(record: Any) -> str | None:
    """The payload JSON of a :func:`running_progress` record, reusing the JSON its details
    got when they were bounded; ``None`` when there is none to reuse."""
    payload = record.get("payload")
    if len(payload) != 1:
        return None
    progress = payload["progress"]
    encoded = record.details
    if encoded is None or progress.get("details") is not encoded[0]:
        return None
    rows, text = encoded
    members = ",".join(
        f"{quote(key)}:{text if value is rows else _value_json(value)}"
        for key, value in progress.items()
    )
    return f'{{"progress":{{{members}}}}}'


def _value_json(value: Any) -> str:
    """A progress member's JSON: a string or an int (the counts, the message) directly, as the
    encoder writes them, without a call into it; anything else through it."""
    kind = type(value)
    if kind is str:
        return quote(value)
    if kind is int:
        return int.__repr__(value)
    return compact_json(value)


def attempted(record: Any, head: int) -> str | None:
    """``step.attempted`` within an attempt, without a duration."""
    if len(record) != head + 3:
        return None
    payload = record["payload"]
    attempt = payload["attempt"]
    if len(payload) != 2 or type(attempt) is not int:
        return None
    step = record.envelope.step_json(record["stepId"], record["attemptId"])
    attributes = compact_json(payload["attributes"])
    return (
        f"{record['timestampMs']},{step},"
        f'"payload":{{"attempt":{attempt},"attributes":{attributes}}}}}'
    )


def terminal(record: Any, head: int) -> str | None:
    """``step.complete`` (or another step end) of an attempt, without error or reason."""
    if len(record) != head + 4:
        return None
    duration = record["durationMs"]
    payload = record["payload"]
    status = STATUS_JSON.get(payload.get("status")) if len(payload) == 1 else None
    if status is None or not _finite(duration):
        return None
    step = record.envelope.step_json(record["stepId"], record["attemptId"])
    return f'{record["timestampMs"]},{step},"durationMs":{duration!r},"payload":{status}}}'


def finalize_started(record: Any, head: int) -> str | None:
    """``pipeline.finalize.started``."""
    if len(record) != head + 1 or record["payload"]:
        return None
    return f'{record["timestampMs"]},"payload":{{}}}}'


def finalize_completed(record: Any, head: int) -> str | None:
    """``pipeline.finalize.completed``."""
    duration = record["durationMs"]
    if len(record) != head + 2 or record["payload"] or not _finite(duration):
        return None
    return f'{record["timestampMs"]},"durationMs":{duration!r},"payload":{{}}}}'


def pipeline_completed(record: Any, head: int) -> str | None:
    """``pipeline.completed`` without a run error."""
    duration = record["durationMs"]
    if len(record) != head + 2 or not _finite(duration):
        return None
    payload = record["payload"]
    shared = getattr(payload, "json", None)  # a payload many runs share, encoded once
    text = shared() if shared is not None else compact_json(payload)
    return f'{record["timestampMs"]},"durationMs":{duration!r},"payload":{text}}}'
