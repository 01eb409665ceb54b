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
  <i>: finish``, where ``<i>`` is the agent's own turn number (a resumed agent goes on from the
  turn it resumed at); a turn that fails or is cancelled adds ``    fail turn <i>: <failure>``
  or ``    - turn <i>: cancelled: <message>``. The agent step's own progress reports ("Turn 2 of
  at most 3") are not printed: the turn lines say the same. A resumed agent first says
  ``    resumed at turn <i> of at most <max_turns> (checkpoint <key>)``.
- waiting for approval (a checkpointed run that stops, exit 8) is not a failure: each call that
  waits ``      waiting <tool> [<call id>]: approval needed``, then ``    waiting turn <i>: <n>
  call(s) need(s) approval``, ``  waiting <step> (<duration>)`` and the end line ``Pipeline
  <id>: waiting after <duration> (status=waiting, steps=<n>, errors=0)``.
- tool progress (a tool's ``ctx.report_progress``, throttled per call like a step's): ``      ...
  <tool> [<call id>] <completed>/<total or ?>[ <message>]``.
- tool call (printed when the call's run ends): ``      ok <tool> [<call id>] (<duration>)``,
  ``      fail <tool> [<call id>]: <code>: <failure>`` (the tool's own code when it raised a
  ``ToolError``), ``      - <tool> [<call id>]: cancelled: <message>``, or ``      - <tool>
  [<call id>] (<reason>)`` when its step was skipped (a dry run without a preview). A call
  that ran again after a resume adds ``; run again after the run stopped`` to its duration.
- calls settled without running: ``      denied <tool> [<call id>][: <reason>]`` (the reason a
  person gave, when the reporter was handed it: the trace never holds it); after a resume,
  ``      interrupted <tool> [<call id>]: TUBELESS_AGENT_CALL_INTERRUPTED (running when the run
  stopped)``, ``      ok <tool> [<call id>] (reconciled: running when the run stopped)`` (or
  ``fail ... : <code> (reconciled: ...)``), and ``      ok <tool> [<call id>] (done before the
  run stopped)`` for an outcome saved before.

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
import os
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, Final, TextIO

from tubeless.tracing.fold import TraceFold
from tubeless.tracing.projection import describe_error, format_duration, terminal_safe
from tubeless.tracing.runs import Call, Run, Step, waiting_error

__all__ = ["PlainReporter", "color_enabled", "stream_is_terminal", "unicode_enabled"]

# start, ok, fail, skip, ellipsis
_ASCII: Final = ("->", "ok", "fail", "-", "...")
_UNICODE: Final = ("→", "✓", "✗", "\u2013", "…")
_UNICODE_SAMPLE: Final = "→✓✗\u2013○…"

_CYAN, _GREEN, _RED, _YELLOW, _DIM = "36", "32", "31", "33", "2"
_CODES: Final = (_CYAN, _GREEN, _RED, _YELLOW, _DIM)
_FINALIZE: Final = frozenset(
    {"pipeline.finalize.started", "pipeline.finalize.completed", "pipeline.finalize.failed"}
)
_STOPPED: Final = "running when the run stopped"
_BEFORE: Final = "done before the run stopped"
_STEP_LINES: Final = frozenset(
    {"step.running", "step.complete", "step.skipped", "step.failed", "step.cancelled"}
)


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


def _duration(ms: float | None) -> str:
    return "?" if ms is None else format_duration(ms)


def _message(error: Mapping[str, Any] | None) -> str:
    return _text(_mapping(error).get("message")) or "unknown error"


def _failure(error: Mapping[str, Any] | None) -> str:
    """A failure in the user's terms: a handler's exception reads ``<Type>: <message>``."""
    return "unknown error" if error is None else terminal_safe(describe_error(error))


class PlainReporter:
    """Prints a run's progress as plain lines; a trace sink that never raises.

    The lines are read from a :class:`~tubeless.tracing.fold.TraceFold` of the root run; each
    record only says when to print one.

    Args:
        stream: Where the lines go (the CLI passes ``sys.stderr``).
        unicode: Unicode symbols (default: :func:`unicode_enabled`).
        color: ANSI colour (default: :func:`color_enabled`).
        progress_interval_s: The least time between two progress lines of one step.
        clock: Monotonic seconds, for the progress throttle.
        denial_reasons: The reasons people gave for denying calls of the root agent, by (turn,
            call id): the trace says only that a reason was given.
    """

    def __init__(
        self,
        stream: TextIO,
        *,
        unicode: bool | None = None,
        color: bool | None = None,
        progress_interval_s: float = 0.75,
        clock: Callable[[], float] = time.monotonic,
        denial_reasons: Mapping[tuple[int, str], str] | None = None,
    ) -> None:
        self._stream = stream
        self._reasons = denial_reasons or {}
        sym = _UNICODE if (unicode_enabled(stream) if unicode is None else unicode) else _ASCII
        self._color = color_enabled(stream) if color is None else color
        self._start, self._ok, self._fail, self._skip, self._more = (
            self._paint(text, code) for text, code in zip(sym, _CODES, strict=True)
        )
        # Words, not symbols: what a person decided, or must decide, reads plainly either way.
        self._wait = self._paint("waiting", _YELLOW)
        self._denied = self._paint("denied", _YELLOW)
        self._interrupted = self._paint("interrupted", _RED)
        self._interval = progress_interval_s
        self._clock = clock
        self._fold = TraceFold(scope="root")
        # When the last progress line of a root step or a call run was printed.
        self._printed: dict[Step | Run, float] = {}
        self._errors = 0
        # Lines come from the loop and from worker threads (progress); a prompt holds them.
        self._lock = threading.Lock()
        self._held: list[str] | None = None

    @property
    def dropped(self) -> int:
        """Records that could not be reported (malformed ones); for tests and debugging."""
        return self._fold.dropped + self._errors

    # -- the sink protocol ----------------------------------------------------------------------
    def export(self, record: Mapping[str, Any]) -> None:
        """Print the lines ``record`` calls for; never raises."""
        try:
            run = self._fold.add(record)
            if run is None:
                return
            name = record["name"]
            if run is self._fold.root:
                self._root_record(name, run, record)
            elif name == "step.attempted":
                if run.call is None and record.get("stepId") == "decide":
                    self._decided(run)
                elif run.call is None and record.get("stepId") == "calls":
                    attributes = _mapping(_mapping(record.get("payload")).get("attributes"))
                    if "agent.callStatus" in attributes:
                        self._marked(run, attributes)
            elif name == "pipeline.completed":
                if run.call is None:
                    self._turn_ended(run)
                else:
                    self._call_ended(run, run.call)
            elif name == "step.running" and run.call is not None and run.progress is not None:
                # The fold hands over a call's step.running only when it is a progress report.
                label = f"      {self._more} {_call_label(run, run.call)}"
                self._progress(run, run.progress, label)
        except Exception:  # a reporter must never fail a run, whatever the record or stream
            self._errors += 1

    def flush(self) -> None:
        """Flush the stream (errors ignored)."""
        with contextlib.suppress(Exception):  # a closed stream is not the run's problem
            self._stream.flush()

    def close(self) -> None:
        """Flush; the stream belongs to the caller and stays open."""
        self.flush()

    def use_denial_reasons(self, reasons: Mapping[tuple[int, str], str]) -> None:
        """The reasons people gave for denying calls of the root agent, by (turn, call id),
        shown on the denied calls' lines (the CLI reads them from the checkpoint)."""
        self._reasons = reasons

    def hold(self) -> None:
        """Keep every line from now until :meth:`release` (a prompt is open on the stream)."""
        with self._lock:
            if self._held is None:
                self._held = []

    def release(self) -> None:
        """Print the lines kept since :meth:`hold`, in order, and print as lines come again."""
        with self._lock:
            held, self._held = self._held, None
            if held:
                with contextlib.suppress(Exception):  # a reporter must never fail a run
                    self._stream.write("".join(held))
        self.flush()

    def cancelling(self, reason: str) -> None:
        """Print the one notice of a run being cancelled (the CLI calls this on a signal)."""
        with contextlib.suppress(Exception):  # a reporter must never fail a run
            self._line(f"{terminal_safe(reason)}; cancelling the run (again to stop waiting)")
            self.flush()

    # -- the root run ---------------------------------------------------------------------------
    def _root_record(self, name: str, run: Run, record: Mapping[str, Any]) -> None:
        if name == "pipeline.started":
            count = "?" if run.step_count is None else str(run.step_count)
            dry = "true" if run.dry_run else "false"
            self._line(
                f"Pipeline {_pipeline(run)}: starting ({count} step{'' if count == '1' else 's'}, "
                f"dryRun={dry}), run {terminal_safe(run.run_id)}"
            )
        elif name == "pipeline.completed":
            self._root_completed(run, record)
        elif name in _FINALIZE and run.finalize is not None:
            step = run.finalize
            if step.status == "running":
                self._line(f"  {self._start} finalize")
            elif step.status == "completed":
                self._line(f"  {self._ok} finalize ({_duration(step.duration_ms)})")
            else:
                self._line(f"  {self._fail} finalize: {_failure(step.error)}")
        elif name in _STEP_LINES:
            self._step_record(name, run.steps[record["stepId"]], run)
        elif name == "step.attempted":
            attributes = _mapping(_mapping(record.get("payload")).get("attributes"))
            if "agent.resumedTurn" in attributes:
                self._resumed(run, record.get("stepId"), attributes)

    def _resumed(self, run: Run, step_id: Any, attributes: Mapping[str, Any]) -> None:
        turn = _number(attributes.get("agent.resumedTurn")) or "?"
        meta = _mapping((run.agents or {}).get(step_id)) if isinstance(step_id, str) else {}
        bound = _number(_mapping(meta.get("limits")).get("maxTurns"))
        key = _text(attributes.get("agent.checkpointKey"))
        text = f"    resumed at turn {turn}" + (f" of at most {bound}" if bound else "")
        self._line(text + (f" (checkpoint {key})" if key else ""))

    def _step_record(self, name: str, step: Step, run: Run) -> None:
        label = terminal_safe(step.name or step.id)
        if name == "step.running":
            if step.progress is None:  # an attempt starting, not a progress report
                self._printed.pop(step, None)
                suffix = f" - {terminal_safe(step.description)}" if step.description else ""
                self._line(f"  {self._start} {label}{suffix}")
            elif not step.agent:
                # An agent's progress ("Turn 2 of at most 3") is what its turn lines say.
                self._progress(step, step.progress, f"  {self._more} {label}")
        elif name == "step.complete":
            self._line(f"  {self._ok} {label} ({_duration(step.duration_ms)})")
        elif name == "step.skipped":
            self._line(f"  {self._skip} {label} ({_skip_text(step)})")
        elif name == "step.failed" and run.waits and waiting_error(step.error):
            self._line(f"  {self._wait} {label} ({_duration(step.duration_ms)})")
        elif name == "step.failed":
            self._line(f"  {self._fail} {label}: {_failure(step.error)}")
        else:
            self._line(f"  {self._skip} {label}: cancelled: {_message(step.error)}")

    def _progress(self, key: Step | Run, progress: Mapping[str, Any], label: str) -> None:
        """Print ``label`` and the progress unless throttled (a finished count always prints)."""
        raw_completed: Any = progress.get("completed")
        raw_total: Any = progress.get("total")
        completed, total = _number(raw_completed), _number(raw_total)
        done = completed is not None and total is not None and raw_completed >= raw_total
        now = self._clock()
        last = self._printed.get(key)
        if not done and last is not None and now - last < self._interval:
            return
        message = _text(progress.get("message"))
        text = f"{completed or '?'}/{total or '?'}" + (f" {message}" if message else "")
        self._line(f"{label} {text}")
        self._printed[key] = now

    def _root_completed(self, run: Run, record: Mapping[str, Any]) -> None:
        # The done line quotes the completion record as written (``?`` for what it lacks).
        payload = _mapping(record.get("payload"))
        status = _text(payload.get("status")) or "?"
        steps = _number(payload.get("stepCount")) or "?"
        errors = _number(payload.get("errorCount")) or "?"
        done = "done in"
        if run.waiting:  # recorded as failed (the wire has no waiting); nothing failed
            status, errors, done = "waiting", "0", "waiting after"
        text = (
            f"Pipeline {_pipeline(run)}: {done} {_duration(run.duration_ms)} "
            f"(status={status}, steps={steps}, errors={errors})"
        )
        color = {"completed": _GREEN, "cancelled": _YELLOW, "waiting": _YELLOW}.get(status, _RED)
        self._line(self._paint(text, color))
        self.flush()

    # -- agent turns and calls ------------------------------------------------------------------
    def _decided(self, turn: Run) -> None:
        # Agent attributes on decide: the decision of an agent turn (the fold marked it one).
        if "agent.turn" in turn.summary.get("decide", ()):
            self._line(f"    turn {_index(turn)}: {_decision_text(turn)}")

    def _turn_ended(self, turn: Run) -> None:
        if turn.kind != "turn":
            return
        if turn.waiting:
            count = turn.waiting_calls
            need = (
                "approval needed"
                if not count
                else f"{count} call needs approval"
                if count == 1
                else f"{count} calls need approval"
            )
            self._line(f"    {self._wait} turn {_index(turn)}: {need}")
        elif turn.status == "failed":
            self._line(f"    {self._fail} turn {_index(turn)}: {_failure(turn.error)}")
        elif turn.status == "cancelled":
            message = _message(turn.error)
            self._line(f"    {self._skip} turn {_index(turn)}: cancelled: {message}")

    def _marked(self, turn: Run, attributes: Mapping[str, Any]) -> None:
        """A call's ``agent.callStatus``: the line of a call settled without a run."""
        call_id = attributes.get("agent.callId")
        call = turn.calls.get(call_id) if isinstance(call_id, str) else None
        if call is None or call.marked != attributes.get("agent.callStatus"):
            return
        label = _call_label(None, call)
        code = terminal_safe(call.error_code or "ERROR")
        marked = call.marked
        if marked == "waiting":
            self._line(f"      {self._wait} {label}: approval needed")
        elif marked == "denied":
            reason = self._reasons.get((turn.turn or 0, call.call_id))
            if reason:
                self._line(f"      {self._denied} {label}: {terminal_safe(reason)}")
            elif call.reason_given:
                self._line(f"      {self._denied} {label} (a reason is in the checkpoint)")
            else:
                self._line(f"      {self._denied} {label}")
        elif marked == "interrupted":
            self._line(f"      {self._interrupted} {label}: {code} ({_STOPPED})")
        elif marked in ("reconciled", "restored"):
            why = f"reconciled: {_STOPPED}" if marked == "reconciled" else _BEFORE
            if call.ok:
                self._line(f"      {self._ok} {label} ({why})")
            else:
                self._line(f"      {self._fail} {label}: {code} ({why})")

    def _call_ended(self, run: Run, call: Call) -> None:
        self._printed.pop(run, None)
        label = _call_label(run, call)
        if run.waiting:  # a delegated agent stopped for approval
            self._line(f"      {self._wait} {label}: approval needed")
        elif run.status == "failed":
            error = _mapping(run.error)
            code = _text(error.get("sourceCode")) or _text(error.get("code")) or "ERROR"
            self._line(f"      {self._fail} {label}: {code}: {_failure(run.error)}")
        elif run.status == "cancelled":
            self._line(f"      {self._skip} {label}: cancelled: {_message(run.error)}")
        elif run.skipped is not None:
            self._line(f"      {self._skip} {label} ({_skip_text(run.skipped)})")
        else:
            again = "; run again after the run stopped" if call.marked == "rerun" else ""
            self._line(f"      {self._ok} {label} ({_duration(run.duration_ms)}{again})")

    # -- output ---------------------------------------------------------------------------------
    def _paint(self, text: str, code: str) -> str:
        return f"\x1b[{code}m{text}\x1b[0m" if self._color else text

    def _line(self, text: str) -> None:
        with self._lock:
            if self._held is not None:
                self._held.append(text + "\n")
            else:
                self._stream.write(text + "\n")


def _pipeline(run: Run) -> str:
    return terminal_safe(run.pipeline_id) if run.pipeline_id else "?"


def _call_label(run: Run | None, call: Call) -> str:
    tool = call.tool or (None if run is None else run.pipeline_id) or "?"
    return f"{terminal_safe(tool)} [{terminal_safe(call.call_id)}]"


def _index(turn: Run) -> str:
    number = turn.turn
    return "?" if number is None else str(number)


def _skip_text(step: Step) -> str:
    reason = _text(step.reason) or "skipped"
    if step.dependency_id:
        return f"{reason}: {terminal_safe(step.dependency_id)}"
    return _text(step.message) or reason


def _decision_text(turn: Run) -> str:
    if turn.decision == "finish":
        return "finish"
    count = turn.call_count
    if count is None:
        return "decided"
    return f"{count} call" if count == 1 else f"{count} calls"
