"""The run interface every protocol adapter speaks: :class:`ProjectRunner` and its plain data.

A protocol (AG-UI, A2A, MCP) needs the same few things of a served project: its entries, to
start a run of one with an input and a checkpoint key, to follow what the run does as it
happens, to read and answer the approvals it waits for, to cancel it, and to read its status
and result. This module names exactly that, as a :class:`typing.Protocol`, so the adapters work
over :class:`~tubeless.serve.protocols.LocalRunner` (this process) or over ``tubeless serve``'s
run manager alike.

Events (:class:`RunEvent`) are what the run's agent did, in order, numbered from 1 per run::

    step_started / step_finished    step "decide" or "reduce" of turn N
    call                            a call accepted for the turn: call_id, tool, data = input
    outcome                         its outcome: data = {id, tool, ok, value | error}
    state                           the state the reducer committed: data = state
    status                          the run's status changed: status (+ the view's fields)

Arguments, outcomes and state are data the client sent or asked the run to make; they go to
the caller only, never into a trace. Runs are owned by a *caller* (an identity the transport
took from the request, e.g. a hash of its bearer token): a run is invisible to other callers.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from tubeless.errors import TubelessError

__all__ = [
    "Caller",
    "EntryInfo",
    "PendingApproval",
    "ProjectInfo",
    "ProjectRunner",
    "RunEvent",
    "RunStatus",
    "RunView",
    "RunnerError",
]

#: Who asks: an opaque identity taken from the request (``None``: an unauthenticated local
#: transport such as stdio, which sees only its own runs too).
Caller = str | None

RunStatus = Literal["running", "waiting", "completed", "failed", "cancelled"]

EventKind = Literal["step_started", "step_finished", "call", "outcome", "state", "status"]


class RunnerError(TubelessError):
    """A request the runner refuses: ``TUBELESS_SERVE_NOT_FOUND`` (no such entry or run, or
    another caller's), ``TUBELESS_SERVE_CONFLICT`` (a live run holds the key; a digest that is
    not the pending call's), ``TUBELESS_OPTIONS_VALIDATION_FAILED`` (the input; ``issues``)."""

    def __init__(self, code: str, message: str, issues: tuple[str, ...] = ()) -> None:
        super().__init__(code, message)
        self.issues = issues


@dataclass(frozen=True, kw_only=True, slots=True)
class EntryInfo:
    """One entry of the project (an agent or a pipeline) as the protocols describe it."""

    id: str
    kind: Literal["agent", "pipeline"]
    name: str | None
    description: str | None
    input_json_schema: Mapping[str, Any]
    result_json_schema: Mapping[str, Any] | None
    implementation_version: str | None


@dataclass(frozen=True, kw_only=True, slots=True)
class ProjectInfo:
    """The project: what an agent card or an MCP server's info says about it."""

    id: str
    name: str | None
    description: str | None
    default: str | None
    version: str
    """The default entry's ``implementation_version``, else the first entry's, else ``"0"``."""
    entries: Mapping[str, EntryInfo]


@dataclass(frozen=True, kw_only=True, slots=True)
class PendingApproval:
    """A call a waiting run needs a decision for; a decision binds to ``digest``."""

    call_id: str
    tool: str
    input: Any
    digest: str
    route: str
    turn: int


@dataclass(frozen=True, kw_only=True, slots=True)
class RunEvent:
    """Something the run did (see the module docstring); ``seq`` counts from 1 per run."""

    seq: int
    kind: EventKind
    turn: int | None = None
    step: Literal["decide", "reduce"] | None = None
    call_id: str | None = None
    tool: str | None = None
    data: Any = None
    status: RunStatus | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class RunView:
    """A run as the caller sees it now."""

    run_id: str
    entry: str
    key: str
    status: RunStatus
    result: Any = None
    """The result as JSON data (completed runs)."""
    error: Mapping[str, str] | None = None
    """``{code, message}`` of a failed or cancelled run (the deepest code when one exists)."""
    pending: tuple[PendingApproval, ...] = ()
    created_at_ms: int = 0
    updated_at_ms: int = 0
    input: Any = field(default=None, repr=False)
    """The raw input the run was started with."""
    events: int = 0
    """How many events the run has had so far (``events(since=...)`` goes on from here)."""

    @property
    def live(self) -> bool:
        """Whether the run may still do something by itself (it is running)."""
        return self.status == "running"


class ProjectRunner(Protocol):
    """What the protocol adapters need of a served project (see the module docstring)."""

    @property
    def info(self) -> ProjectInfo:
        """The project and its entries."""
        ...

    def validate(self, entry: str, raw_input: Any) -> None:
        """Refuse an unknown entry or an input its schema rejects (``RunnerError``), running
        nothing."""
        ...

    async def start(
        self,
        entry: str,
        raw_input: Any,
        *,
        key: str | None = None,
        caller: Caller = None,
        restart: bool = False,
    ) -> RunView:
        """Start (or resume, for a key whose run stopped) a run in the background.

        ``key`` defaults to a new unique key. A key whose run is live, or that another caller
        started → ``SERVE_CONFLICT``. ``restart`` starts the key over instead of resuming it
        (or returning its saved end).
        """
        ...

    def get(self, run_id: str, *, caller: Caller = None) -> RunView:
        """The run now (``SERVE_NOT_FOUND`` when unknown or another caller's)."""
        ...

    def find(self, key: str, *, caller: Caller = None) -> RunView | None:
        """The latest run of ``key`` this caller may see, if any."""
        ...

    def list(self, *, caller: Caller = None) -> list[RunView]:
        """The caller's runs, oldest first."""
        ...

    def events(self, run_id: str, *, since: int = 0) -> AsyncIterator[RunEvent]:
        """The run's events after ``since``, as they happen, until the run stops (its last
        event is the ``status`` event of that stop: waiting, completed, failed, cancelled)."""
        ...

    async def wait(self, run_id: str) -> RunView:
        """The run once it has stopped (waiting, completed, failed or cancelled)."""
        ...

    async def answer(
        self,
        run_id: str,
        call_id: str,
        *,
        digest: str,
        approve: bool,
        reason: str | None = None,
        caller: Caller = None,
    ) -> RunView:
        """Decide a pending call (``digest`` must be its digest, else ``SERVE_CONFLICT``); once
        every pending call is decided the run resumes from its checkpoint by itself."""
        ...

    async def cancel(self, run_id: str, *, caller: Caller = None) -> RunView:
        """Cancel the run (a waiting one ends ``cancelled`` at once); its checkpoint stays."""
        ...
