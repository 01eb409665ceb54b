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
    "attributes_json",
    "finalize_completed",
    "finalize_started",
    "pipeline_completed",
    "planned",
    "progress_payload",
    "quote",
    "running",
    "running_progress",
    "string_json",
    "terminal",
]

#: ``tail(record, head)``: the JSON text after the timestamp's value, to the closing brace.
Tail = Callable[[Any, int], "str | None"]

#: A JSON string literal, as the compact UTF-8 encoder writes it.
quote: Final[Callable[[str], str]] = encode_basestring

_QUOTED: Final[dict[str, str]] = {}
_QUOTED_MAX: Final = 1024
_QUOTED_LONGEST: Final = 256


def string_json(value: Any) -> str:
    """``compact_json(value)``; a short string's from a small cache of the latest ones.

    The same ids recur across records and runs: a parent's run and attempt ids in the
    relation fields of each of its children, a plan's step ids in each attempt. Quoting one
    costs a pass over every character; finding it again costs a hash that the string keeps.
    """
    if type(value) is not str:
        return compact_json(value)
    text = _QUOTED.get(value)
    if text is None:
        text = quote(value)
        if len(value) <= _QUOTED_LONGEST:
            if len(_QUOTED) >= _QUOTED_MAX:
                _QUOTED.clear()
            _QUOTED[value] = text
    return text


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
    return f',"stepId":{quote(step_id)},"payload":{payload.json()}}}'


def running(record: Any, head: int) -> str | None:
    """``step.running`` as an attempt starts: ``stepId``, ``attemptId``, an empty payload."""
    if len(record) != head + 3 or record["payload"]:
        return None
    step = record.envelope.step_json(record["stepId"], record["attemptId"])
    return f',{step},"payload":{{}}}}'


def running_progress(record: Any, head: int) -> str | None:
    """``step.running`` with a progress report; its details list is not encoded again."""
    if len(record) != head + 3:
        return None
    step = record.envelope.step_json(record["stepId"], record["attemptId"])
    payload = progress_payload(record) or compact_json(record["payload"])
    return f',{step},"payload":{payload}}}'


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
    members = []
    for key, value in progress.items():
        name = _PROGRESS_KEYS.get(key) or quote(key)
        members.append(f"{name}:{text if value is rows else _value_json(value)}")
    return f'{{"progress":{{{",".join(members)}}}}}'


_PROGRESS_KEYS: Final = {
    key: quote(key) for key in ("completed", "total", "message", "details", "detailCount")
}


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
    attributes = attributes_json(record, payload)
    return f',{step},"payload":{{"attempt":{attempt},"attributes":{attributes}}}}}'


def attributes_json(record: Any, payload: Any) -> str:
    """The JSON of an attempt record's ``attributes``, reusing the text bounding them made."""
    attributes = payload["attributes"]
    encoded = record.details
    if encoded is not None and encoded[0] is attributes:
        text: str = encoded[1]
        return text
    return compact_json(attributes)


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
    return f',{step},"durationMs":{duration!r},"payload":{status}}}'


def finalize_started(record: Any, head: int) -> str | None:
    """``pipeline.finalize.started``."""
    if len(record) != head + 1 or record["payload"]:
        return None
    return ',"payload":{}}'


def finalize_completed(record: Any, head: int) -> str | None:
    """``pipeline.finalize.completed``."""
    duration = record["durationMs"]
    if len(record) != head + 2 or record["payload"] or not _finite(duration):
        return None
    return f',"durationMs":{duration!r},"payload":{{}}}}'


def pipeline_completed(record: Any, head: int) -> str | None:
    """``pipeline.completed`` without a run error."""
    duration = record["durationMs"]
    if len(record) != head + 2 or not _finite(duration):
        return None
    payload = record["payload"]
    shared = getattr(payload, "json", None)  # a payload many runs share, encoded once
    text = shared() if shared is not None else compact_json(payload)
    return f',"durationMs":{duration!r},"payload":{text}}}'
