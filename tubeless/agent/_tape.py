"""Record and replay at the decision level: the tape an agent invocation plays against.

Every agent invocation has one :class:`Tape`: ``source`` says where its decisions come from
(once per invocation), and the tape is one of its ``TurnHooks`` (``_hooks``): ``decided`` (an
accepted decision), ``around_call`` (each call's validated outcome; replaying outcomes, the
recorded one instead of running the call), ``reduced`` (the reduced state) and ``ended`` (how
the invocation ended). Without a cassette it is :data:`NO_TAPE`, which is left out of the
hooks, so such runs do the same work as before.

A cassette is active while :func:`recording` or :func:`replaying` is (``tubeless.testing.record``
and ``replay``, ``run --record`` and ``--replay``): a context variable the outermost agent
invocation reads; agents below a call (child agents run as tools) get their tape through the
run tree's :data:`TAPE_SLOT`. A tape is named by its invocation's route
(``_scope.invocation_route``: the agent's id, ``<parent route>/<turn>/<call id>/<agent id>``
below a call, ``#n`` for a repeat in the run), so checkpoints, approvals and cassettes name one
invocation alike. One cassette may record several runs: a top-level route it holds already (a
second run) gets the agent's next free ``#n``, and the routes below it follow.
"""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Awaitable, Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from tubeless._version import __version__
from tubeless.agent._cassette import (
    FORMAT,
    CassetteFile,
    CassetteWriter,
    digest,
    first_difference,
    jsonable,
    read_cassette,
    shown_value,
)
from tubeless.agent._changes import changed_parts, said
from tubeless.agent._decisions import Continue, Finish
from tubeless.agent._hooks import TurnHooks
from tubeless.errors import (
    CASSETTE_INVALID,
    CASSETTE_MISMATCH,
    CassetteError,
    ReplayDivergedError,
    TubelessError,
)
from tubeless.frozen import freeze

if TYPE_CHECKING:
    import os

    from tubeless.agent._hooks import CallSite, Proceed
    from tubeless.agent._prepare import PreparedCall
    from tubeless.agent._turn_types import TurnInput
    from tubeless.pipeline import DefinitionIdentity, StepContext

__all__ = ["NO_TAPE", "TAPE_SLOT", "Recording", "Replaying", "Tape", "open_tape"]

#: The run-environment slot carrying the tape position of agents started below a call.
TAPE_SLOT = "tubeless.agent.tape"

_active: contextvars.ContextVar[_Session | None] = contextvars.ContextVar(
    "tubeless.cassette", default=None
)


class Tape(TurnHooks):
    """The null tape: decisions from ``decide``, nothing recorded or compared."""

    __slots__ = ()

    def source(self, decide: Callable[..., Any]) -> Callable[..., Any]:
        """Where the invocation's decisions come from."""
        return decide

    def below(self, turn: int, call_id: str) -> Tape | _Position:
        """What an agent started by call ``call_id`` of ``turn`` opens its tape from."""
        return self


NO_TAPE = Tape()


class _Position:
    """Where a child agent's route starts: below one call of its parent."""

    __slots__ = ("prefix", "session")

    def __init__(self, session: _Session, prefix: str) -> None:
        self.session = session
        self.prefix = prefix


def open_tape(
    slot: Tape | _Position | None,
    agent_id: str,
    route: str,
    leaf: str,
    definition: Callable[[], tuple[DefinitionIdentity, dict[str, Any]]],
    agent_input: Any,
) -> Tape:
    """The tape of the invocation ``route`` of agent ``agent_id`` (``leaf``: the route's last
    segment, the agent id with its ``#n``); ``slot`` is :data:`TAPE_SLOT` of its run;
    ``definition()`` gives the agent's identity and parts (``_changes``)."""
    if slot is None:
        session = _active.get()
        if session is None:
            return NO_TAPE
        identity, parts = definition()
        return session.open(route, agent_id, identity, parts, agent_input)
    if isinstance(slot, _Position):
        return slot.session.tape(f"{slot.prefix}/{leaf}")
    return slot  # the null tape (no cassette), or an agent nested without a call between


class _Session:
    """One active cassette: routes handed out so far, and the tapes' common machinery."""

    def __init__(self) -> None:
        self._routes: set[str] = set()
        self._lock = threading.Lock()  # runs on other threads' loops may share a cassette

    def route(self, route: str, agent_id: str | None = None) -> str:
        """``route`` when the cassette holds no tape of it yet; else (a later run recorded in
        the same cassette) ``agent_id#n`` for the first free ``n``."""
        with self._lock:
            if route in self._routes and agent_id is not None:
                route, n = agent_id, 1
                while route in self._routes:
                    n += 1
                    route = f"{agent_id}#{n}"
            self._routes.add(route)
        return route

    def open(
        self,
        route: str,
        agent_id: str,
        identity: DefinitionIdentity,
        parts: dict[str, Any],
        agent_input: Any,
    ) -> Tape:
        raise NotImplementedError

    def tape(self, base: str) -> Tape:
        raise NotImplementedError


# -- recording --------------------------------------------------------------------------------
class Recording(_Session):
    """An active recording: every agent invocation writes its lines to one cassette file.

    Attributes:
        path: The cassette file.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        super().__init__()
        self._writer = CassetteWriter(path)
        self.path = self._writer.path

    def open(
        self,
        route: str,
        agent_id: str,
        identity: DefinitionIdentity,
        parts: dict[str, Any],
        agent_input: Any,
    ) -> Tape:
        route = self.route(route, agent_id)
        self.write(
            {
                "kind": "header",
                "format": FORMAT,
                "route": route,
                "definition": identity.to_wire(),
                "parts": parts,
                "implementation_version": identity.implementation_version,
                "input_digest": self.data(lambda: digest(agent_input), route, "the input"),
                "tubeless_version": __version__,
            }
        )
        return _RecordingTape(self, route)

    def tape(self, base: str) -> Tape:
        return _RecordingTape(self, self.route(base))

    def write(self, line: dict[str, Any]) -> None:
        self._writer.write(line)

    def data(self, make: Callable[[], Any], route: str, what: str) -> Any:
        """``make()`` (JSON data), or ``TUBELESS_CASSETTE_INVALID`` saying what is not data."""
        try:
            return make()
        except ValueError as exc:
            raise CassetteError(
                CASSETTE_INVALID,
                f"cannot record {what} of {route!r} in {self.path}: {exc}",
                path=self.path,
            ) from None

    def close(self) -> None:
        self._writer.close()


def _decision_data(decision: Finish | Continue) -> dict[str, Any]:
    if isinstance(decision, Finish):
        return {"kind": "finish", "result": jsonable(decision.result)}
    calls = [{"id": c.id, "tool": c.tool, "input": jsonable(c.input)} for c in decision.calls]
    return {"kind": "continue", "calls": calls}


class _RecordingTape(Tape):
    __slots__ = ("_route", "_session")

    def __init__(self, session: Recording, route: str) -> None:
        self._session = session
        self._route = route

    def decided(
        self, t: TurnInput, decision: Finish | Continue, prepared: tuple[PreparedCall, ...] | None
    ) -> None:
        s, route, turn = self._session, self._route, t.turn
        data = s.data(lambda: _decision_data(decision), route, f"the decision of turn {turn}")
        s.write({"kind": "decision", "route": route, "turn": turn, "decision": data})

    async def around_call(self, site: CallSite, proceed: Proceed) -> Mapping[str, Any]:
        # Every outcome is recorded, one a resumed run's journal restored included.
        outcome = await proceed(site)
        s, route, call_id = self._session, self._route, site.call.id
        data = s.data(lambda: jsonable(outcome), route, f"the outcome of call {call_id!r}")
        s.write(
            {
                "kind": "outcome",
                "route": route,
                "turn": site.t.turn,
                "call_id": call_id,
                "outcome": data,
            }
        )
        return outcome

    def reduced(self, ctx: StepContext, t: TurnInput, following: TurnInput) -> None:
        s, route, turn, state = self._session, self._route, t.turn, following.state
        data = s.data(lambda: jsonable(state), route, f"the state of turn {turn}")
        s.write({"kind": "state", "route": route, "turn": turn, "state": data})

    def ended(self, result: Any, error: BaseException | None) -> None:
        s, route = self._session, self._route
        if error is not None:
            code = error.code if isinstance(error, TubelessError) else type(error).__name__
            s.write({"kind": "result", "route": route, "ok": False, "error": {"code": code}})
            return
        data = s.data(lambda: jsonable(result), route, "the result")
        s.write({"kind": "result", "route": route, "ok": True, "result": data})

    def below(self, turn: int, call_id: str) -> _Position:
        return _Position(self._session, f"{self._route}/{turn}/{call_id}")


# -- replaying --------------------------------------------------------------------------------
class Replaying(_Session):
    """An active replay: decisions (and, with ``outcomes``, outcomes) come from a cassette.

    Attributes:
        path: The cassette file.
        outcomes: Whether outcomes are replayed too (no tool runs).
        show_values: Whether divergence messages quote the values that differ.
        allow_changed_definition: Whether a changed definition replays anyway.
        differences: What differed from the recorded definition (replayed anyway).
        divergence: The first divergence found, if any.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        outcomes: bool = False,
        show_values: bool = False,
        allow_changed_definition: bool = False,
    ) -> None:
        super().__init__()
        self.cassette: CassetteFile = read_cassette(path)
        self.path = self.cassette.path
        self.outcomes = outcomes
        self.show_values = show_values
        self.allow_changed_definition = allow_changed_definition
        self.differences: list[str] = []
        self.divergence: ReplayDivergedError | None = None

    def open(
        self,
        route: str,
        agent_id: str,
        identity: DefinitionIdentity,
        parts: dict[str, Any],
        agent_input: Any,
    ) -> Tape:
        route = self.route(route, agent_id)
        header = self.cassette.headers.get(route)
        if header is None:
            held = ", ".join(repr(r) for r in self.cassette.headers) or "none"
            raise self._mismatch(f"no recording of agent {route!r} (it holds {held})")
        changed = _changed(header.get("definition"), identity.to_wire())
        recorded_parts = header.get("parts")
        if changed and isinstance(recorded_parts, dict):  # a cassette that kept the parts
            changed = said(changed_parts(recorded_parts, parts)) or changed
        if changed:
            text = f"agent {route!r} was recorded for another definition: {changed}"
            if not self.allow_changed_definition:
                raise self._mismatch(
                    f"{text}; record it again, or replay with --allow-changed-definition"
                )
            self.differences.append(text)
        try:
            live_digest = digest(agent_input)
        except ValueError:
            live_digest = None
        if live_digest != header["input_digest"]:
            raise self._mismatch(f"agent {route!r} was recorded for another input")
        return _ReplayingTape(self, route)

    def tape(self, base: str) -> Tape:
        return _ReplayingTape(self, self.route(base))

    def _mismatch(self, message: str) -> CassetteError:
        return CassetteError(CASSETTE_MISMATCH, f"{self.path}: {message}", path=self.path)

    def diverged(
        self,
        route: str,
        turn: int | None,
        call_id: str | None,
        what: str,
        found: tuple[str, Any, Any] | None = None,
    ) -> ReplayDivergedError:
        """The divergence error (kept as :attr:`divergence` when it is the first)."""
        where = f"route {route!r}" + (f" turn {turn}" if turn is not None else "")
        if call_id is not None:
            where += f" call {call_id!r}"
        pointer = ""
        message = f"replay diverged at {where}: {what}"
        if found is not None:
            pointer, recorded, live = found
            message += f" at {pointer}" if pointer else " (the whole value)"
            if self.show_values:
                message += f": recorded {shown_value(recorded)}, got {shown_value(live)}"
        error = ReplayDivergedError(
            message, route=route, turn=turn, call_id=call_id, pointer=pointer
        )
        if self.divergence is None:
            self.divergence = error
        return error


def _changed(recorded: Any, live: dict[str, Any]) -> str:
    """What differs between two wire identities, named field by field (empty if nothing)."""
    if not isinstance(recorded, dict):
        return "the recorded identity is unreadable"
    names = ("definitionId", "structuralFingerprint", "implementationVersion", "version")
    parts = [
        f"{name} {recorded.get(name)!r} -> {live.get(name)!r}"
        for name in names
        if recorded.get(name) != live.get(name)
    ]
    return ", ".join(parts)


class _ReplayingTape(Tape):
    __slots__ = ("_route", "_session")

    def __init__(self, session: Replaying, route: str) -> None:
        self._session = session
        self._route = route

    def source(self, decide: Callable[..., Any]) -> Callable[..., Any]:
        return self._recorded_decision

    def _recorded_decision(self, state: Any, ctx: Any) -> Any:
        turn = ctx.turn
        try:
            return self._session.cassette.decisions[self._route, turn]
        except KeyError:
            raise self._session.diverged(
                self._route, turn, None, "the recording has no decision for this turn"
            ) from None

    def around_call(self, site: CallSite, proceed: Proceed) -> Awaitable[Mapping[str, Any]]:
        if self._session.outcomes:  # the recorded outcome, without running the call
            return _ready(freeze(self._recorded_outcome(site.t.turn, site.call.id)))
        return self._compared(site, proceed)

    async def _compared(self, site: CallSite, proceed: Proceed) -> Mapping[str, Any]:
        outcome = await proceed(site)
        turn, call_id = site.t.turn, site.call.id
        recorded = self._recorded_outcome(turn, call_id)
        self._compare(recorded, outcome, turn, call_id, "the outcome differs")
        return outcome

    def _recorded_outcome(self, turn: int, call_id: str) -> Any:
        try:
            return self._session.cassette.outcomes[self._route, turn, call_id]
        except KeyError:
            raise self._session.diverged(
                self._route, turn, call_id, "the recording has no outcome for this call"
            ) from None

    def reduced(self, ctx: StepContext, t: TurnInput, following: TurnInput) -> None:
        recorded = self._session.cassette.states.get((self._route, t.turn), _ABSENT)
        if recorded is not _ABSENT:
            self._compare(recorded, following.state, t.turn, None, "the reduced state differs")

    def ended(self, result: Any, error: BaseException | None) -> None:
        if error is not None:
            return
        recorded = self._session.cassette.results.get(self._route)
        if recorded is None:
            return
        if not recorded["ok"]:
            raise self._session.diverged(
                self._route, None, None, "the recorded run failed, this one completed"
            )
        self._compare(recorded.get("result"), result, None, None, "the result differs")

    def below(self, turn: int, call_id: str) -> _Position:
        return _Position(self._session, f"{self._route}/{turn}/{call_id}")

    def _compare(
        self, recorded: Any, live: Any, turn: int | None, call_id: str | None, what: str
    ) -> None:
        try:
            data = jsonable(live)
        except ValueError:
            raise self._session.diverged(
                self._route, turn, call_id, f"{what}: the live value is not JSON data"
            ) from None
        found = first_difference(recorded, data)
        if found is not None:
            raise self._session.diverged(self._route, turn, call_id, what, found)


_ABSENT = object()


async def _ready(outcome: Mapping[str, Any]) -> Mapping[str, Any]:
    return outcome


@contextmanager
def recording(path: str | os.PathLike[str]) -> Iterator[Recording]:
    """Record every agent run started inside the block into the cassette ``path``."""
    session = Recording(path)
    token = _active.set(session)
    try:
        yield session
    finally:
        _active.reset(token)
        session.close()


@contextmanager
def replaying(
    path: str | os.PathLike[str],
    *,
    outcomes: bool = False,
    show_values: bool = False,
    allow_changed_definition: bool = False,
) -> Iterator[Replaying]:
    """Replay the cassette ``path`` for every agent run started inside the block."""
    session = Replaying(
        path,
        outcomes=outcomes,
        show_values=show_values,
        allow_changed_definition=allow_changed_definition,
    )
    token = _active.set(session)
    try:
        yield session
    finally:
        _active.reset(token)
