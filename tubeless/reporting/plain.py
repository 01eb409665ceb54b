"""The plain run reporter: one line per event that matters, for logs, pipes and CI.

:class:`PlainReporter` is a trace sink (``export``/``flush``/``close``), so it is attached to a
run like any other: ``await pipeline.run(input, trace=[reporter, ...])``. It prints the lines
of UPSTREAM §3.10 for the steps of the *root* run (the first ``pipeline.started`` without a
``parentRunId``), and, for an agent step, one line per turn and one per tool call::

    Pipeline scripted-agent: starting (1 step, dryRun=false), run scripted-agent:5f0e…
      -> agent
        turn 1: 3 calls
          ok count [length] (2ms)
          ok uppercase [word-0] (1ms)
          fail uppercase [word-1]: NOT_FOUND: Word unavailable
        turn 2: finish
      ok agent (12ms)
      -> finalize
      ok finalize (0ms)
    Pipeline scripted-agent: done in 14ms (status=completed, steps=1, errors=0)

Line formats (``<sym>`` is ASCII, or Unicode on a terminal):

- start ``Pipeline <id>: starting (<n> steps, dryRun=<bool>), run <run id>`` (UPSTREAM's line
  plus the run id that ``tubeless trace show`` takes); end ``Pipeline <id>: done in
  <duration> (status=<s>, steps=<n>, errors=<e>)``.
- step start ``  -> <name-or-id>[ - <description>]``; progress ``  ... <name>
  <completed>/<total or ?>[ <message>]``, at most one line per ``progress_interval_s`` per
  step (a report with ``completed >= total`` is always shown); complete ``  ok <name>
  (<duration>)``; skip ``  - <name> (<reason>: <dependencyId>)`` or ``  - <name> (<message or
  reason>)``; cancel ``  - <name>: cancelled: <message>``; fail ``  fail <name>: <failure>``,
  where ``<failure>`` is the handler's exception as ``<Type>: <message>`` (see
  :func:`~tubeless.tracing.projection.describe_error`: child-run wrappers are looked through).
- finalize ``  -> finalize``, ``  ok finalize (<duration>)``, ``  fail finalize: <failure>``.
- cancelling (when the CLI receives a first SIGINT or SIGTERM) ``<signal> received; cancelling
  the run (again to stop waiting)``.
- agent turn (printed when the turn has decided): ``    turn <i>: <n> call(s)`` or ``    turn
  <i>: finish``; a turn that fails or is cancelled adds ``    fail turn <i>: <failure>`` or
  ``    - turn <i>: cancelled: <message>``. The agent step's own progress reports ("Turn 2 of at
  most 3") are not printed: the turn lines say the same.
- tool progress (a tool's ``ctx.report_progress``, throttled per call like a step's): ``      ...
  <tool> [<call id>] <completed>/<total or ?>[ <message>]``.
- tool call (printed when the call's run ends): ``      ok <tool> [<call id>] (<duration>)``,
  ``      fail <tool> [<call id>]: <code>: <failure>`` (the tool's own code when it raised a
  ``ToolError``), ``      - <tool> [<call id>]: cancelled: <message>``, or ``      - <tool>
  [<call id>] (<reason>)`` when its step was skipped (a dry run without a preview).

Only the root agent's turns and calls are shown: a call that delegates to another agent or
pipeline is one call line. Handler logs (``pipeline.log``) are not printed here (the CLI shows
them with ``-v`` through the ``tubeless.run`` logger). Symbols: ASCII ``->``, ``ok``,
``fail``, ``-``, ``...``; Unicode ``→``, ``✓``, ``✗``, an en dash, ``…``. Every piece of recorded
text passes :func:`~tubeless.tracing.projection.terminal_safe`.

Colour (symbols only, plus the done line) is on when ``FORCE_COLOR`` is set (``0`` or
``false`` turn it off), else off when ``NO_COLOR`` is set and non-empty, else on when the
stream is a terminal and ``TERM`` is not ``dumb``.
"""

from __future__ import annotations

import contextlib
import math
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, TextIO

from tubeless.tracing.projection import describe_error, format_duration, terminal_safe

__all__ = ["PlainReporter", "color_enabled", "stream_is_terminal", "unicode_enabled"]

# start, ok, fail, skip, ellipsis
_ASCII: Final = ("->", "ok", "fail", "-", "...")
_UNICODE: Final = ("→", "✓", "✗", "\u2013", "…")
_UNICODE_SAMPLE: Final = "→✓✗\u2013○…"

_CYAN, _GREEN, _RED, _YELLOW, _DIM = "36", "32", "31", "33", "2"
_CODES: Final = (_CYAN, _GREEN, _RED, _YELLOW, _DIM)


def stream_is_terminal(stream: Any) -> bool:
    """Whether ``stream`` is an interactive terminal (``isatty()``) and ``TERM`` is not dumb."""
    try:
        tty = bool(stream.isatty())
    except Exception:  # closed or exotic streams are simply not terminals
        return False
    return tty and os.environ.get("TERM", "") != "dumb"


def unicode_enabled(stream: Any) -> bool:
    """The default for Unicode symbols: a terminal whose encoding can write them."""
    if not stream_is_terminal(stream):
        return False
    encoding = getattr(stream, "encoding", None) or "utf-8"
    try:
        _UNICODE_SAMPLE.encode(encoding)
    except (LookupError, UnicodeError):
        return False
    return True


def color_enabled(stream: Any) -> bool:
    """The default for colour: ``FORCE_COLOR``, then ``NO_COLOR``, then a terminal check."""
    force = os.environ.get("FORCE_COLOR")
    if force is not None:
        return force.strip().lower() not in ("0", "false")
    if os.environ.get("NO_COLOR"):
        return False
    return stream_is_terminal(stream)


def _text(value: Any) -> str | None:
    return terminal_safe(value) if isinstance(value, str) else None


def _number(value: Any) -> str | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _duration(record: Mapping[str, Any]) -> str:
    ms = record.get("durationMs")
    if isinstance(ms, bool) or not isinstance(ms, int | float):
        return "?"
    try:
        return format_duration(float(ms)) if math.isfinite(ms) else "?"
    except OverflowError:  # an int too large for a float
        return "?"


def _error_message(record: Mapping[str, Any]) -> str:
    return _text(_mapping(record.get("error")).get("message")) or "unknown error"


def _failure(record: Mapping[str, Any]) -> str:
    """A failure in the user's terms: a handler's exception reads ``<Type>: <message>``."""
    error = record.get("error")
    return terminal_safe(describe_error(error)) if isinstance(error, Mapping) else "unknown error"


@dataclass(slots=True)
class _Step:
    name: str
    description: str | None = None
    agent: bool = False
    last_progress: float | None = None


@dataclass(slots=True)
class _Turn:
    index: str
    step_id: str
    agent: bool
    # Tool aliases recorded by the turn's `calls` step, keyed by call id, until each call starts.
    tools: dict[str, str] = field(default_factory=dict)


@dataclass(slots=True)
class _Call:
    tool: str
    call_id: str
    skipped: str | None = None
    last_progress: float | None = None


class PlainReporter:
    """Prints a run's progress as plain lines; a trace sink that never raises.

    Args:
        stream: Where the lines go (the CLI passes ``sys.stderr``).
        unicode: Unicode symbols (default: :func:`unicode_enabled`).
        color: ANSI colour (default: :func:`color_enabled`).
        progress_interval_s: The least time between two progress lines of one step.
        clock: Monotonic seconds, for the progress throttle.
    """

    def __init__(
        self,
        stream: TextIO,
        *,
        unicode: bool | None = None,
        color: bool | None = None,
        progress_interval_s: float = 0.75,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._stream = stream
        sym = _UNICODE if (unicode_enabled(stream) if unicode is None else unicode) else _ASCII
        self._color = color_enabled(stream) if color is None else color
        self._start, self._ok, self._fail, self._skip, self._more = (
            self._paint(text, code) for text, code in zip(sym, _CODES, strict=True)
        )
        self._interval = progress_interval_s
        self._clock = clock
        self._root: str | None = None
        self._root_pipeline = "?"
        self._agent_steps: set[str] = set()
        self._steps: dict[str, _Step] = {}
        self._turns: dict[str, _Turn] = {}
        self._calls: dict[str, _Call] = {}
        #: Records that could not be reported (malformed ones); kept for tests and debugging.
        self.dropped = 0

    # -- the sink protocol ----------------------------------------------------------------------
    def export(self, record: Mapping[str, Any]) -> None:
        """Print the lines ``record`` calls for; never raises."""
        try:
            self._handle(record)
        except Exception:  # a reporter must never fail a run, whatever the record or stream
            self.dropped += 1

    def flush(self) -> None:
        """Flush the stream (errors ignored)."""
        with contextlib.suppress(Exception):  # a closed stream is not the run's problem
            self._stream.flush()

    def close(self) -> None:
        """Flush; the stream belongs to the caller and stays open."""
        self.flush()

    def cancelling(self, reason: str) -> None:
        """Print the one notice of a run being cancelled (the CLI calls this on a signal)."""
        with contextlib.suppress(Exception):  # a reporter must never fail a run
            self._line(f"{terminal_safe(reason)}; cancelling the run (again to stop waiting)")
            self.flush()

    # -- dispatch -------------------------------------------------------------------------------
    def _handle(self, record: Mapping[str, Any]) -> None:
        run_id = record.get("runId")
        name = record.get("name")
        if not isinstance(run_id, str) or not isinstance(name, str):
            self.dropped += 1
            return
        if run_id == self._root:
            self._root_record(name, record)
        elif run_id in self._calls:
            self._call_record(run_id, name, record)
        elif run_id in self._turns:
            self._turn_record(run_id, name, record)
        elif name == "pipeline.started":
            self._run_started(run_id, record)

    def _run_started(self, run_id: str, record: Mapping[str, Any]) -> None:
        parent = record.get("parentRunId")
        if parent is None:
            if self._root is None:
                self._root_started(run_id, record)
            return
        iteration = _mapping(record.get("iteration"))
        if parent == self._root and iteration.get("runId") == parent:
            step_id = str(iteration.get("stepId"))
            step = self._steps.get(step_id)
            agent = step.agent if step is not None else step_id in self._agent_steps
            index = _number(iteration.get("index")) or "?"
            self._turns[run_id] = _Turn(index=index, step_id=step_id, agent=agent)
            return
        turn = self._turns.get(parent) if isinstance(parent, str) else None
        item_key = _text(record.get("itemKey"))
        if turn is not None and turn.agent and item_key is not None:
            tool = turn.tools.pop(item_key, None) or _text(record.get("pipelineId")) or "?"
            self._calls[run_id] = _Call(tool=tool, call_id=item_key)

    # -- the root run ---------------------------------------------------------------------------
    def _root_started(self, run_id: str, record: Mapping[str, Any]) -> None:
        self._root = run_id
        self._root_pipeline = _text(record.get("pipelineId")) or "?"
        payload = _mapping(record.get("payload"))
        snapshot = _mapping(payload.get("definitionSnapshot"))
        steps = snapshot.get("steps")
        if isinstance(steps, list):
            self._agent_steps = {
                s["id"] for s in steps if isinstance(s, Mapping) and "agent" in s
                and isinstance(s.get("id"), str)
            }
        count = _number(payload.get("stepCount")) or "?"
        dry = "true" if payload.get("dryRun") is True else "false"
        self._line(
            f"Pipeline {self._root_pipeline}: starting ({count} step{'' if count == '1' else 's'}, "
            f"dryRun={dry}), "
            f"run {terminal_safe(run_id)}"
        )

    def _root_record(self, name: str, record: Mapping[str, Any]) -> None:
        payload = _mapping(record.get("payload"))
        if name == "pipeline.completed":
            self._root_completed(record, payload)
            return
        if name.startswith("pipeline.finalize."):
            self._finalize(name, record)
            return
        step_id = record.get("stepId")
        if not isinstance(step_id, str) or not name.startswith("step."):
            return
        if name == "step.planned":
            self._steps[step_id] = _Step(
                name=_text(payload.get("name")) or terminal_safe(step_id),
                description=_text(payload.get("description")),
                agent=step_id in self._agent_steps,
            )
            return
        step = self._steps.setdefault(step_id, _Step(name=terminal_safe(step_id)))
        label = step.name
        if name == "step.running":
            progress = payload.get("progress")
            if progress is None:
                step.last_progress = None
                suffix = f" - {step.description}" if step.description else ""
                self._line(f"  {self._start} {label}{suffix}")
            elif not step.agent:
                step.last_progress = self._progress(
                    _mapping(progress), step.last_progress, f"  {self._more} {step.name}"
                )
        elif name == "step.complete":
            self._line(f"  {self._ok} {label} ({_duration(record)})")
        elif name == "step.skipped":
            self._line(f"  {self._skip} {label} ({_skip_text(payload)})")
        elif name == "step.failed":
            self._line(f"  {self._fail} {label}: {_failure(record)}")
        elif name == "step.cancelled":
            self._line(f"  {self._skip} {label}: cancelled: {_error_message(record)}")

    def _progress(
        self, progress: Mapping[str, Any], last: float | None, label: str
    ) -> float | None:
        """Print ``label`` and the progress unless throttled; the new last-printed time."""
        raw_completed: Any = progress.get("completed")
        raw_total: Any = progress.get("total")
        completed, total = _number(raw_completed), _number(raw_total)
        done = completed is not None and total is not None and raw_completed >= raw_total
        now = self._clock()
        if not done and last is not None and now - last < self._interval:
            return last
        message = _text(progress.get("message"))
        text = f"{completed or '?'}/{total or '?'}" + (f" {message}" if message else "")
        self._line(f"{label} {text}")
        return now

    def _finalize(self, name: str, record: Mapping[str, Any]) -> None:
        if name == "pipeline.finalize.started":
            self._line(f"  {self._start} finalize")
        elif name == "pipeline.finalize.completed":
            self._line(f"  {self._ok} finalize ({_duration(record)})")
        elif name == "pipeline.finalize.failed":
            self._line(f"  {self._fail} finalize: {_failure(record)}")

    def _root_completed(self, record: Mapping[str, Any], payload: Mapping[str, Any]) -> None:
        status = _text(payload.get("status")) or "?"
        steps = _number(payload.get("stepCount")) or "?"
        errors = _number(payload.get("errorCount")) or "?"
        text = (
            f"Pipeline {self._root_pipeline}: done in {_duration(record)} "
            f"(status={status}, steps={steps}, errors={errors})"
        )
        color = {"completed": _GREEN, "cancelled": _YELLOW}.get(status, _RED)
        self._line(self._paint(text, color))
        self._turns.clear()
        self._calls.clear()
        self.flush()

    # -- agent turns and calls ------------------------------------------------------------------
    def _turn_record(self, run_id: str, name: str, record: Mapping[str, Any]) -> None:
        turn = self._turns[run_id]
        if name == "step.attempted":
            attributes = _mapping(_mapping(record.get("payload")).get("attributes"))
            if "agent.turn" not in attributes:
                return
            if not turn.agent:  # no snapshot named the agent step: the attributes do
                turn.agent = True
                self._steps.setdefault(turn.step_id, _Step(name=turn.step_id)).agent = True
            call_id = attributes.get("agent.callId")
            if record.get("stepId") == "calls" and isinstance(call_id, str):
                tool = _text(attributes.get("agent.tool"))
                if tool is not None:
                    turn.tools[terminal_safe(call_id)] = tool
            elif record.get("stepId") == "decide":
                self._line(f"    turn {turn.index}: {_decision_text(attributes)}")
        elif name == "pipeline.completed":
            del self._turns[run_id]
            status = _mapping(record.get("payload")).get("status")
            if not turn.agent:
                return
            if status == "failed":
                self._line(f"    {self._fail} turn {turn.index}: {_failure(record)}")
            elif status == "cancelled":
                message = _error_message(record)
                self._line(f"    {self._skip} turn {turn.index}: cancelled: {message}")

    def _call_record(self, run_id: str, name: str, record: Mapping[str, Any]) -> None:
        call = self._calls[run_id]
        payload = _mapping(record.get("payload"))
        if name == "step.skipped":
            call.skipped = _skip_text(payload)
        elif name == "step.running" and payload.get("progress") is not None:
            label = f"      {self._more} {call.tool} [{call.call_id}]"
            call.last_progress = self._progress(
                _mapping(payload["progress"]), call.last_progress, label
            )
        if name != "pipeline.completed":
            return
        del self._calls[run_id]
        label = f"{call.tool} [{call.call_id}]"
        status = payload.get("status")
        if status == "failed":
            error = _mapping(record.get("error"))
            code = _text(error.get("sourceCode")) or _text(error.get("code")) or "ERROR"
            self._line(f"      {self._fail} {label}: {code}: {_failure(record)}")
        elif status == "cancelled":
            self._line(f"      {self._skip} {label}: cancelled: {_error_message(record)}")
        elif call.skipped is not None:
            self._line(f"      {self._skip} {label} ({call.skipped})")
        else:
            self._line(f"      {self._ok} {label} ({_duration(record)})")

    # -- output ---------------------------------------------------------------------------------
    def _paint(self, text: str, code: str) -> str:
        return f"\x1b[{code}m{text}\x1b[0m" if self._color else text

    def _line(self, text: str) -> None:
        self._stream.write(text + "\n")


def _skip_text(payload: Mapping[str, Any]) -> str:
    reason = _text(payload.get("reason")) or "skipped"
    dependency = _text(payload.get("dependencyId"))
    if dependency:
        return f"{reason}: {dependency}"
    return _text(payload.get("message")) or reason


def _decision_text(attributes: Mapping[str, Any]) -> str:
    decision = attributes.get("agent.decision")
    if decision == "finish":
        return "finish"
    count = attributes.get("agent.callCount")
    if isinstance(count, int) and not isinstance(count, bool):
        return f"{count} call" if count == 1 else f"{count} calls"
    return _text(decision) or "decided"
