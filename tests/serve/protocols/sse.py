"""Reading AG-UI event streams in the tests: SSE ``data:`` lines, each validated against the
package's own event models, and the order rules the protocol sets."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from ag_ui.core import Event
from pydantic import TypeAdapter

EVENT = TypeAdapter(Event)


def parse_sse(lines: Iterable[str]) -> list[Any]:
    """Every ``data:`` payload of an SSE stream, as a validated AG-UI event model."""
    events = []
    for line in lines:
        if line.startswith("data: "):
            events.append(EVENT.validate_python(json.loads(line[len("data: ") :])))
    return events


def check_order(events: list[Any]) -> None:
    """The order AG-UI allows: one RUN_STARTED first, one terminal event last (RUN_FINISHED or
    RUN_ERROR); steps close what they open, by name; a tool call's start, args, end and result
    come in that order, once each."""
    kinds = [event.type.value for event in events]
    assert kinds[0] == "RUN_STARTED" and kinds.count("RUN_STARTED") == 1, kinds
    assert kinds[-1] in ("RUN_FINISHED", "RUN_ERROR"), kinds
    assert kinds.count("RUN_FINISHED") + kinds.count("RUN_ERROR") == 1, kinds
    open_step: str | None = None
    calls: dict[str, list[str]] = {}
    for event in events[1:-1]:
        kind = event.type.value
        if kind == "STEP_STARTED":
            assert open_step is None, f"step {event.step_name} opened inside {open_step}"
            open_step = event.step_name
        elif kind == "STEP_FINISHED":
            assert open_step == event.step_name, (open_step, event.step_name)
            open_step = None
        elif kind.startswith("TOOL_CALL_"):
            seen = calls.setdefault(event.tool_call_id, [])
            expected = ["TOOL_CALL_START", "TOOL_CALL_ARGS", "TOOL_CALL_END", "TOOL_CALL_RESULT"]
            assert kind == expected[len(seen)], (event.tool_call_id, seen, kind)
            seen.append(kind)
    assert open_step is None, f"step {open_step} never finished"
    for call_id, seen in calls.items():
        assert len(seen) >= 3, (call_id, seen)  # a call waiting for approval has no result
