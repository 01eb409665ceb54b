"""The ``error:`` line of a failed run, said in the user's terms (DESIGN.md §6).

A run error is followed down its failed child runs (``error.exception.run``, or the first
failed run of a fan-out's ``.runs``) to the error that started it, and the path is said the way
the user wrote the project (lines wrapped here)::

    TUBELESS_CHILD_FAILED (TUBELESS_STEP_FAILED): agent a, turn 1, tool lookup, call c1:
        KeyError: 'b'
    TUBELESS_CHILD_FAILED (TUBELESS_AGENT_LIMIT_REACHED): agent a: turn 3 asked to continue
        with 4 calls but max_turns=3
    TUBELESS_CHILD_FAILED (TUBELESS_STEP_FAILED): agent a, turn 2: decide raised KeyError: 'x'
    TUBELESS_OPTIONS_VALIDATION_FAILED: input rejected: text: Field required (pass --text or
        --input)
    TUBELESS_FINALIZATION_FAILED: finalize: KeyError: 'x'

A delegated agent or pipeline adds `` > agent <id>, ...`` (or `` > pipeline <id>[, item <key>
| iteration <i>], ...`` for a child pipeline, of a fan-out or an iteration). The
codes stay those of the run's error; the library's messages are not changed, only not shown
where a location says the same. Turns are numbered as the agent counts them: a resumed agent's
first turn is the one it resumed at. Cancellations and planning errors keep their plain form.

Runs are read by duck typing (``pipeline_id``, ``run_id``, ``item_key``, ``steps``, ``errors``)
so that this module never imports the pipeline package; the one import it makes (the shared
wording of recorded errors, :func:`~tubeless.tracing.projection.describe_error`) happens only
when a run has failed.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tubeless.errors import (
    FINAL_RESULT_VALIDATION_FAILED,
    FINALIZATION_FAILED,
    OPTIONS_VALIDATION_FAILED,
    UNKNOWN_ERROR,
    TubelessError,
    without_period,
)

__all__ = ["original_exceptions", "run_error_line"]

#: Child runs followed at most (deeper delegation is cut, never looped).
_MAX_FRAMES = 64
_FINALIZE_STEP = "__finalize__"
_ITERATION = re.compile(r"iteration-(\d+)")
_REQUIRED = re.compile(r"required propert(?:y|ies) (.+) (?:is|are) missing")
_QUOTED = re.compile(r"'((?:[^'\\]|\\.)*)'")


@dataclass(frozen=True, slots=True)
class _Frame:
    """One run on the way down, and its error that the path follows."""

    run: Any
    error: Any


def run_error_line(run: Any, error: Any, flags: Mapping[str, str] | None = None) -> str:
    """``<CODE>[ (<source code>)]: [<where>: ]<what>`` for one error of a failed run.

    Args:
        run: The failed run (``PipelineRun``).
        error: One of its ``errors``.
        flags: The command line's derived flags, input property → option name (without
            ``--``), used to say which flag supplies a missing input.
    """
    code = str(getattr(error, "code", UNKNOWN_ERROR))
    source = getattr(error, "source_code", None)
    prefix = code if not source or source == code else f"{code} ({source})"
    if getattr(error, "kind", None) == "cancellation" or getattr(error, "phase", None) in (
        "planning",
        "definition",
    ):
        return f"{prefix}: {_plain(error)}"
    frames = _frames(run, error)
    where, what = _story(frames, flags if len(frames) == 1 else None)
    return f"{prefix}: {where}: {what}" if where else f"{prefix}: {what}"


def original_exceptions(errors: Sequence[Any]) -> list[BaseException]:
    """The exceptions that started ``errors`` (a handler's own), each once, in order."""
    found: list[BaseException] = []
    for error in errors:
        exc = getattr(_frames(None, error)[-1].error, "exception", None)
        if isinstance(exc, BaseException) and all(exc is not seen for seen in found):
            found.append(exc)
    return found


def _plain(error: Any) -> str:
    """The library's own wording: ``[step <id>: ]<message>[; caused by: <deepest cause>]``."""
    step_id = getattr(error, "step_id", None)
    message = str(getattr(error, "message", error))
    line = f"step {step_id}: {message}" if step_id else message
    cause = getattr(error, "cause", None)
    deepest = cause.deepest() if cause is not None and hasattr(cause, "deepest") else None
    if deepest is not None and deepest.message not in message:
        line = f"{without_period(line)}; caused by: {deepest.message}"
    return line


def _frames(run: Any, error: Any) -> list[_Frame]:
    frames = [_Frame(run, error)]
    while len(frames) < _MAX_FRAMES:
        child = _failed_child(frames[-1].error)
        if child is None:
            break
        frames.append(_Frame(child, _errors(child)[0]))
    return frames


def _errors(run: Any) -> tuple[Any, ...]:
    errors = getattr(run, "errors", None)
    return tuple(errors) if isinstance(errors, Sequence) else ()


def _failed_child(error: Any) -> Any:
    """The child run whose failure ``error`` reports (``None`` when it started here)."""
    exc = getattr(error, "exception", None)
    run = getattr(exc, "run", None)
    if _errors(run):
        return run
    runs = getattr(exc, "runs", None)
    if isinstance(runs, Sequence):
        return next((child for child in runs if _errors(child)), None)
    return None


def _pipeline_id(frame: _Frame) -> str:
    return str(getattr(frame.run, "pipeline_id", None) or "?")


def _step_ids(frame: _Frame) -> tuple[str, ...]:
    steps = getattr(frame.run, "steps", None) or ()
    return tuple(str(getattr(step, "id", "")) for step in steps)


def _is_agent(frame: _Frame, below: _Frame | None) -> bool:
    """An agent's own run: its one step ``agent``, iterating the turn pipeline ``<id>/turn``."""
    if getattr(frame.error, "step_id", None) != "agent":
        return False
    if below is not None and _pipeline_id(below) == f"{_pipeline_id(frame)}/turn":
        return True
    return _step_ids(frame) == ("agent",)


class _Path:
    """The location being said: groups of parts, one group per agent or pipeline."""

    def __init__(self) -> None:
        self.groups: list[list[str]] = []

    def start(self, part: str) -> None:
        self.groups.append([part])

    def add(self, part: str) -> None:
        if not self.groups:
            self.groups.append([])
        self.groups[-1].append(part)

    def drop_last(self, part: str) -> None:
        if self.groups and self.groups[-1] and self.groups[-1][-1] == part:
            self.groups[-1].pop()

    def text(self) -> str:
        return " > ".join(", ".join(group) for group in self.groups if group)


@dataclass(slots=True)
class _Agent:
    """The innermost agent on the path so far."""

    id: str
    run_id: str | None
    turn: int | None = None
    first_turn: int = 1
    """The turn a resumed agent went on from: its first iteration is that turn."""


def _story(frames: list[_Frame], flags: Mapping[str, str] | None) -> tuple[str, str]:
    """``(where, what)`` for the path ``frames`` (root first)."""
    path = _Path()
    agent: _Agent | None = None
    agents: dict[str, str] = {}
    for index, frame in enumerate(frames):
        pipeline_id = _pipeline_id(frame)
        step = getattr(frame.error, "step_id", None)
        below = frames[index + 1] if index + 1 < len(frames) else None
        parent = frames[index - 1] if index else None
        caller = agent if parent is not None and _is_call_of(parent, agent) else None
        is_call = caller is not None
        if caller is not None and parent is not None:
            alias = getattr(parent.error.exception, "alias", None) or pipeline_id
            path.add(f"tool {alias}, call {getattr(frame.run, 'item_key', None) or '?'}")
            if pipeline_id.startswith(f"{caller.id}/tool/"):
                continue  # a handler tool's run: its one step is the handler
        if _is_agent(frame, below):
            run_id = getattr(frame.run, "run_id", None)
            first = getattr(getattr(frame.error, "exception", None), "first_turn", None)
            agent = _Agent(id=pipeline_id, run_id=run_id)
            if isinstance(first, int) and not isinstance(first, bool):
                agent.first_turn = first
            if isinstance(run_id, str):
                agents[run_id] = pipeline_id
            path.start(f"agent {pipeline_id}")
        elif agent is not None and pipeline_id == f"{agent.id}/turn":
            number = _turn_number(frame)
            agent.turn = None if number is None else number + agent.first_turn - 1
            path.add(f"turn {'?' if agent.turn is None else agent.turn}")
            if step == "reduce":
                path.add("reduce")
        else:
            agent = None
            if index:
                path.start(f"pipeline {pipeline_id}")
                item = None if is_call else _item(frame)
                if item:
                    path.add(item)
            if step == _FINALIZE_STEP:
                path.add("finalize")
            elif step:
                path.add(f"step {step}")
    leaf = frames[-1].error
    exc = getattr(leaf, "exception", None)
    if _is_limit(exc) and agent is not None:
        path.drop_last(f"turn {agent.turn}")
        return path.text(), _limit(exc, agent, agents)
    if getattr(leaf, "code", None) == OPTIONS_VALIDATION_FAILED:
        return path.text(), _input_rejected(leaf, flags)
    if getattr(leaf, "code", None) in (FINALIZATION_FAILED, FINAL_RESULT_VALIDATION_FAILED):
        return path.text(), _described(leaf) + _unpublished(frames[-1])
    if agent is not None and _raised_by_decide(frames[-1], agent):
        # The turn's decide step calls user code: say whose exception it is.
        source = "dry_run" if getattr(frames[-1].run, "dry_run", False) is True else "decide"
        return path.text(), f"{source} raised {_described(leaf)}"
    return path.text(), _described(leaf)


def _raised_by_decide(frame: _Frame, agent: _Agent) -> bool:
    """Whether ``frame`` is a turn whose decide step failed with an exception of user code
    (``decide``, or ``dry_run`` in a dry run), not one tubeless raised about the decision."""
    exc = getattr(frame.error, "exception", None)
    return (
        _pipeline_id(frame) == f"{agent.id}/turn"
        and getattr(frame.error, "step_id", None) == "decide"
        and isinstance(exc, BaseException)
        and not isinstance(exc, TubelessError)
    )


def _unpublished(frame: _Frame) -> str:
    """Why finalization lacked outputs: the steps a dry run or a selection skipped."""
    steps = [
        step
        for step in getattr(frame.run, "steps", None) or ()
        if getattr(step, "status", None) == "skipped"
    ]
    previews = [s.id for s in steps if getattr(s, "reason", None) == "dry-run"]
    filtered = [s.id for s in steps if getattr(s, "reason", None) == "filtered"]
    notes: list[str] = []
    if previews and getattr(frame.run, "dry_run", False):
        agent = _pipeline_id(frame) if _step_ids(frame) == ("agent",) else None
        if agent is not None:
            notes.append(
                f"agent {agent} has no dry_run decision source, so the dry run skipped "
                "it and there is no result"
            )
        else:
            notes.append(
                f"the dry run skipped {', '.join(previews)} (dry_run: skip), so "
                "finalization had no output from them"
            )
    if filtered:
        notes.append(
            f"the selection skipped {', '.join(filtered)}, so finalization saw only the "
            "selected steps' outputs"
        )
    return "".join(f" ({note})" for note in notes)


def _is_call_of(frame: _Frame, agent: _Agent | None) -> bool:
    """Whether ``frame`` is a turn of ``agent`` that failed dispatching its calls."""
    if agent is None:
        return False
    return _pipeline_id(frame) == f"{agent.id}/turn" and frame.error.step_id == "calls"


def _item(frame: _Frame) -> str | None:
    """``iteration <i>`` or ``item <key>`` for a child of an iteration or a fan-out."""
    key = getattr(frame.run, "item_key", None)
    if not isinstance(key, str) or not key:
        return None
    number = _turn_number(frame)
    return f"iteration {number}" if number is not None else f"item {key}"


def _turn_number(frame: _Frame) -> int | None:
    match = _ITERATION.fullmatch(str(getattr(frame.run, "item_key", None) or ""))
    return int(match.group(1)) if match else None


def _described(error: Any) -> str:
    to_wire = getattr(error, "to_wire", None)
    if not callable(to_wire):
        return str(getattr(error, "message", error))
    from tubeless.tracing.projection import describe_error

    return describe_error(to_wire())


def _is_limit(exc: Any) -> bool:
    return all(hasattr(exc, name) for name in ("limit", "bound", "consumed", "requested", "scope"))


def _calls(count: Any) -> str:
    return "1 call" if count == 1 else f"{count} calls"


def _limit(exc: Any, agent: _Agent, agents: Mapping[str, str]) -> str:
    """Which decision asked for what, and the limit that refused it."""
    limit, bound, scope = exc.limit, exc.bound, exc.scope
    asker = "a decision" if agent.turn is None else f"turn {agent.turn}"
    owner = "" if scope == agent.run_id else f" of agent {agents.get(scope, scope)}"
    left = bound - exc.consumed if isinstance(bound, int) and isinstance(exc.consumed, int) else 0
    left_text = "none" if left <= 0 else str(left)
    if limit == "max_turns":
        calls = getattr(exc, "calls", None)
        asked = "to continue" if calls is None else f"to continue with {_calls(calls)}"
        return f"{asker} asked {asked} but max_turns={bound}"
    if limit == "max_calls":
        asked = _calls(exc.requested)
        return f"{asker} asked for {asked} but max_calls={bound}{owner} has {left_text} left"
    if limit == "max_decisions":
        return f"{asker} needed a decision but max_decisions={bound}{owner} has {left_text} left"
    if limit == "max_depth":
        return f"{asker} asked to delegate but max_depth={bound}{owner} allows no deeper call"
    return str(getattr(exc, "message", exc))


def _input_rejected(error: Any, flags: Mapping[str, str] | None) -> str:
    """``input rejected: <issue>[ (pass --<flag> or --input)]; ...``."""
    issues = tuple(getattr(error, "issues", None) or ())
    if not issues:
        return f"input rejected: {getattr(error, 'message', error)}"
    return "input rejected: " + "; ".join(_issue(issue, flags) for issue in issues)


def _issue(issue: Any, flags: Mapping[str, str] | None) -> str:
    formatted = getattr(issue, "format", None)
    text = str(formatted()) if callable(formatted) else str(issue)
    missing = _missing(issue)
    if flags is None or not missing:
        return text
    options = [f"--{flags[name]}" for name in missing if name in flags]
    if not options:
        return f"{text} (give it in --input)"
    return f"{text} (pass {', '.join(options)} or --input)"


def _missing(issue: Any) -> list[str]:
    """The top-level properties a missing-required issue names (pydantic or jsonschema)."""
    message = str(getattr(issue, "message", ""))
    path = tuple(getattr(issue, "path", ()) or ())
    if message == "Field required" and len(path) == 1:
        return [str(path[0])]
    match = _REQUIRED.fullmatch(message)
    if match is not None and not path:
        return _QUOTED.findall(match.group(1))
    return []
