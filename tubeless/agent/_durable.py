"""Checkpointed agents (DESIGN.md §11): the journal that commits each step, and resume.

Every agent of a checkpointed run keeps one entry in the run's document, by route: the root
agent (or an agent step of a pipeline) by its id, a child agent that runs as a tool by
``<parent route>/<turn>/<call id>/<child id>``, a repeated one with ``#n``
(``_scope.invocation_route``, computed once per invocation). An entry holds the definition it
was saved by, the budgets consumed, the turn, the state and the phase::

    decide     the decision of ``turn`` was reserved (asked again on resume)
    calls      ``decision``: {admitted, calls: [{id, tool, input, replay, status, outcome?}]}
    completed  ``result``: the finish decision's result (validated again when returned)
    failed     ``failure``: {code, message}

The whole document is written at each commit, with every live agent's budget counters, so
what is saved never says less was consumed than was. Writes happen on the event loop, one at
a time, and a failed write stops the run (``CheckpointSession.commit``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any

from tubeless._callables import maybe_await
from tubeless.agent import _outcomes as outcomes
from tubeless.agent._approvals import ApprovalWaiting, RecordedApprovals
from tubeless.agent._decisions import Call, Continue, Finish
from tubeless.agent._durable_checks import (
    DurableAgent,
    check_saved,
    checked_servers,
    input_digest,
)
from tubeless.agent._durable_usage import attach_usage
from tubeless.agent._hooks import TurnHooks
from tubeless.agent._invocation import Invocation, turn_hooks
from tubeless.agent._limits import BudgetWaiting
from tubeless.agent._scope import SCOPE_SLOT, Budget
from tubeless.agent._tools import ToolContext, ToolError
from tubeless.agent._trace import CallStatus, agent_trace
from tubeless.agent._turn_types import TurnInput
from tubeless.durable._spi import (
    DOCUMENT_VERSION,
    AgentEntry,
    Approvals,
    CheckpointDocument,
    CheckpointSession,
    Failure,
    Fragments,
    SavedBudget,
    SavedCall,
    SavedDecision,
    parse,
    slot_of,
)
from tubeless.errors import (
    AGENT_EXECUTION_FAILED,
    CHECKPOINT_LEASE_LOST,
    CHECKPOINT_MISMATCH,
    CheckpointError,
    TubelessError,
)
from tubeless.frozen import FrozenDict, freeze, thaw
from tubeless.pipeline import StepContext
from tubeless.pipeline._spi import (
    ITERATION_START_SLOT,
    ChildRunFailedError,
    is_cancellation,
    original_exception,
)
from tubeless.schema import Schema

if TYPE_CHECKING:
    from tubeless.agent._hooks import CallSite, Proceed
    from tubeless.agent._prepare import PreparedCall
    from tubeless.agent._turn_types import TurnSpec

__all__ = ["CheckpointJournal", "run_durable"]


def _traced(
    ctx: StepContext,
    execution: Mapping[str, Any],
    call: PreparedCall,
    status: CallStatus,
    outcome: Mapping[str, Any] | None,
) -> None:
    """The trace's word on a call a resumed turn settles without running it, or runs again."""
    error = None if outcome is None or outcome["ok"] else outcome["error"]
    agent_trace(ctx).call_status(
        ctx,
        execution["agent_run_id"],
        execution["turn"],
        call.id,
        call.tool,
        status,
        ok=None if outcome is None else bool(outcome["ok"]),
        code=None if error is None else str(error["code"]),
    )


def _schema_of(call: PreparedCall) -> Callable[[], Schema | None]:
    """The schema a restored value of ``call`` is validated by (asked only when one is)."""
    if call.delegates:
        return lambda: call.pipeline.result_schema
    return lambda: call.pipeline.get_step("tool").output_schema


class Book:
    """The document of one checkpointed run, shared by every agent of its run tree."""

    __slots__ = ("document", "fragments", "journals", "session")

    def __init__(self, session: CheckpointSession) -> None:
        self.session = session
        saved = session.open()
        if saved is not None and saved.get("entry") != session.entry:
            raise CheckpointError(
                CHECKPOINT_MISMATCH,
                f"Checkpoint {session.key!r} belongs to {saved.get('entry')!r}, not "
                f"{session.entry!r}; use another key",
            )
        self.document = (
            CheckpointDocument.new(DOCUMENT_VERSION, session.key, session.entry)
            if saved is None
            else parse(saved, session.key)  # what no writer produces is refused
        )
        self.journals: dict[str, CheckpointJournal] = {}
        self.fragments = Fragments()

    @staticmethod
    def of(session: CheckpointSession) -> Book:
        if session.data is None:
            session.data = Book(session)
        book: Book = session.data
        return book

    def _text(self, document: CheckpointDocument) -> str:
        return document.to_json(self.fragments)

    def commit(self) -> None:
        for journal in self.journals.values():
            journal.sync()
        document = self.document
        document.status = document.current_status()
        document.touched()
        self.session.commit(document, self._text)
        for journal in self.journals.values():
            journal.dirty = False


class CheckpointApprover(RecordedApprovals):
    """The approver of a gated batch of a checkpointed run (DESIGN.md §12): saved decisions
    first, then the run's approver, each answer committed before the call it allows starts.

    For a batch with gated calls, :meth:`for_batch` answers every request that has a saved
    decision for its exact digest; commits the others as pending (a call re-requested with
    other arguments waits again) before any call of the batch starts; then, with no approver,
    raises :class:`ApprovalWaiting` (the document's status is ``waiting``).
    """

    __slots__ = ("_ask", "_book")

    def __init__(self, book: Book, decisions: list[Any], ask: Callable[[Any], Any] | None) -> None:
        super().__init__(decisions)
        self._book = book
        self._ask = ask

    @staticmethod
    def for_batch(
        book: Book, requests: tuple[FrozenDict, ...], ask: Callable[[Any], Any] | None
    ) -> CheckpointApprover:
        document = book.document
        if document.approvals is None:
            document.approvals = Approvals([], [])
        approver = CheckpointApprover(book, document.approvals.decisions or [], ask)
        waiting = tuple(r for r in requests if approver.decision(r) is None)
        document.approvals.waiting(map(slot_of, requests), [thaw(r) for r in waiting])
        book.commit()  # the admitted batch and what it waits for, before any of it starts
        if waiting and ask is None:
            raise ApprovalWaiting(book.session.key, waiting)
        return approver

    def __call__(self, request: Mapping[str, Any]) -> Any:
        decided = self.decision(request)
        if decided is not None:
            return decided
        assert self._ask is not None, "for_batch raises when nobody can answer"
        return self._ask(request)

    def _answered(self, request: Mapping[str, Any], answer: bool) -> None:
        if self.decision(request) is not None:
            return  # a saved decision: already in the document
        self._record(request, answer, None)
        approvals = self._book.document.approvals
        assert approvals is not None  # for_batch made them
        approvals.answered([thaw(d) for d in self.to_data()], slot_of(request))
        self._book.commit()  # before the approved call's running intent


class CheckpointJournal(TurnHooks):
    """The journal of one checkpointed agent invocation: its hooks commit each point before the
    work it guards (DESIGN.md §11), and no more often than that::

        reserved         the decision's reservation, with the last turn's last outcome
                         and the state reduced from it                                  commit
        resume_decision  a saved accepted decision instead of asking again
        decided          a finish's result (commit), or a continue decision and its inputs
        admitted         the batch's call budget charged
        gated            saved approval decisions first, then pending requests          commit
        around_call      the running intent, with the decision and the admission when
                         it is the batch's first (commit), or the saved outcome without
                         running the call; then the validated outcome (commit; a lone
                         call's is written with the next commit)
        reduced          the reduced state (written with the next commit)

    So a turn of one call commits twice: the reservation (with the outcome and the state the
    turn before reduced), then the decision, admission and intent. Between a lone call's
    outcome and the next commit only the reducer runs, which has no side effects; the next
    commit comes before the next decision is asked (the final one of ``on_limit: finish``
    included), and a failure, cancellation or wait commits what is pending.
    """

    __slots__ = (
        "base",
        "book",
        "budget",
        "dirty",
        "entry",
        "registry",
        "resumed",
        "resuming",
        "route",
    )

    def __init__(
        self,
        book: Book,
        route: str,
        entry: AgentEntry,
        budget: Budget,
        spec: TurnSpec,
        resumed: bool,
    ) -> None:
        self.book = book
        self.route = route
        self.entry = entry
        self.budget = budget
        self.registry = spec.registry
        self.base = f"{book.session.key}/{route}"
        self.resumed = resumed
        self.resuming: int | None = entry.turn if resumed else None
        """The turn resumed from, until it is done."""
        self.dirty = False

    def connected(self, descriptors: Mapping[str, Mapping[str, Any]]) -> None:
        # Called once the checkpoint said there are turns to run (a completed or failed key
        # never contacts its servers); a changed server refuses the resume, saving nothing.
        self.entry.definition = checked_servers(
            self.entry.definition, descriptors, self.book.session.key, self.route, self.resumed
        )

    def sync(self) -> None:
        budget = self.entry.budget
        budget.calls = self.budget.calls
        budget.decisions = self.budget.decisions

    def _commit(self) -> None:
        self.book.commit()

    def _at(self, t: TurnInput, phase: str) -> None:
        self.entry.at(phase, t.turn, t.state_version, t.calls, t.state)

    # -- the hooks ---------------------------------------------------------------------------
    def gated(
        self, t: TurnInput, requests: tuple[FrozenDict, ...], approver: Callable[[Any], Any] | None
    ) -> Callable[[Any], Any] | None:
        return CheckpointApprover.for_batch(self.book, requests, approver)

    def _decision(self) -> SavedDecision:
        decision = self.entry.decision
        assert decision is not None, "a call runs in the calls phase"
        return decision

    def _saved(self, index: int, call: PreparedCall) -> SavedCall:
        """``call``'s saved entry (``index`` is its place in a gated batch's part, if one)."""
        saved = self._decision().calls
        if index < len(saved) and saved[index].id == call.id:
            return saved[index]
        return next(c for c in saved if c.id == call.id)

    def resumed_turn(self, invocation: Invocation) -> TurnInput | None:
        """The turn input the loop resumes from, if it resumes."""
        if self.resuming is None:
            return None
        e = self.entry
        return TurnInput(freeze(e.state), e.turn, e.state_version, e.calls, invocation)

    def reserved(self, t: TurnInput) -> None:
        self.resuming = None
        self._at(t, "decide")
        self._commit()

    def resume_decision(self, t: TurnInput) -> Continue | None:
        if self.resuming != t.turn or self.entry.phase != "calls":
            return None
        saved = self._decision().calls
        return Continue(tuple(Call(c.id, c.tool, freeze(c.input)) for c in saved))

    def decided(
        self, t: TurnInput, decision: Finish | Continue, prepared: tuple[PreparedCall, ...] | None
    ) -> None:
        if isinstance(decision, Finish):
            self._at(t, "completed")
            self.entry.result = decision.result  # as decided (validated again when read)
            self._commit()
            return
        if self.resuming == t.turn:
            return  # the saved decision itself
        self._at(t, "calls")
        self.entry.decision = SavedDecision(
            False,
            [
                SavedCall(
                    call.id, call.tool, "pending", call.input, self.registry[call.tool].tool.replay
                )
                for call in decision.calls
            ],
        )
        self.dirty = True  # written with the first running intent (nothing runs before it)

    def readmitted(self, t: TurnInput) -> bool:
        return self.resuming == t.turn and self._decision().admitted

    def admitted(self, ctx: StepContext, t: TurnInput, count: int) -> None:
        decision = self._decision()
        if not decision.admitted:  # a resumed batch was charged before the stop
            decision.admitted = True
            self.dirty = True

    async def around_call(self, site: CallSite, proceed: Proceed) -> Mapping[str, Any]:
        # DBOS's step wrapper: a saved outcome is returned, otherwise the call runs.
        index, call = site.index, site.call
        known = self._start_call(index, call, site.execution, site.ctx)
        if known is None:
            outcome = await proceed(site)
        else:
            outcome = await known if isinstance(known, Awaitable) else known
        self._settled(index, call, outcome)
        return outcome

    def _start_call(
        self, index: int, call: PreparedCall, execution: Mapping[str, Any], ctx: StepContext
    ) -> Mapping[str, Any] | Awaitable[Mapping[str, Any]] | None:
        """The running intent (committed; ``None``: run the call now), or the call's outcome
        known without running it (or an awaitable of it)."""
        saved = self._saved(index, call)
        status = saved.status
        if status == "completed":
            assert saved.outcome is not None  # the parser's word
            restored = outcomes.from_saved(saved.outcome, call, _schema_of(call))
            _traced(ctx, execution, call, "restored", restored)
            return restored
        if status == "running":
            tool = self.registry[call.tool].tool
            if tool.replay == "safe":
                _traced(ctx, execution, call, "rerun", None)
                return None  # runs again, with the same idempotency key
            if tool._reconcile is not None:
                return self._reconcile(tool._reconcile, call, execution, ctx)
            interrupted = outcomes.interrupted(call)
            _traced(ctx, execution, call, "interrupted", interrupted)
            return interrupted
        saved.status = "running"
        self._commit()
        return None

    async def _reconcile(
        self,
        reconcile: Callable[..., Any],
        call: PreparedCall,
        execution: Mapping[str, Any],
        ctx: StepContext,
    ) -> Mapping[str, Any]:
        try:
            value = await maybe_await(reconcile(call.value, ToolContext(ctx, execution)))
        except ToolError as exc:
            failed = outcomes.failed(call, exc.code, exc.message)
            _traced(ctx, execution, call, "reconciled", failed)
            return failed
        schema = call.pipeline.get_step("tool").output_schema
        if schema is not None:
            value = schema.validate(value)
        outcome = outcomes.ok(call, value)
        _traced(ctx, execution, call, "reconciled", outcome)
        return outcome

    def _settled(self, index: int, call: PreparedCall, outcome: Mapping[str, Any]) -> None:
        saved = self._saved(index, call)
        if saved.status == "completed":
            return
        saved.outcome = outcomes.to_saved(call, outcome)
        saved.status = "completed"
        if len(self._decision().calls) == 1:
            # A lone call's outcome guards nothing but the reducer, which has no side effects:
            # it is written with the reduced state and the next decision's reservation, before
            # the next decision is asked (or with a failure, cancellation or wait). A crash in
            # between finds the call running, as a crash just before its outcome would.
            self.dirty = True
        else:
            # In a batch, calls run side by side: each outcome is kept as soon as it is known,
            # so a crash in another call, or in the reducer, never loses it.
            self._commit()

    def reduced(self, ctx: StepContext, t: TurnInput, following: TurnInput) -> None:
        self.resuming = None
        self._at(following, "decide")
        self.dirty = True  # written with the next decision's reservation

    # -- the end of the invocation -----------------------------------------------------------
    def failed(self, exc: BaseException) -> None:
        original = original_exception(exc) or exc
        code = getattr(original, "code", None)
        message = getattr(original, "message", None)
        self.entry.phase = "failed"
        self.entry.drop_decision()
        self.entry.failure = Failure(
            code if isinstance(code, str) else AGENT_EXECUTION_FAILED,
            message if isinstance(message, str) else f"{type(original).__name__}: {original}",
        )
        self._commit()


async def run_durable(
    durable: DurableAgent,
    session: CheckpointSession,
    invocation: Invocation,
    ctx: StepContext,
    iterate: Callable[[dict[str, Any], StepContext], Awaitable[Any]],
    step_inputs: dict[str, Any],
) -> Any:
    """Run one checkpointed agent invocation: return or raise what it saved, or resume it."""
    spec = durable.spec
    scope = invocation.scope
    book = Book.of(session)
    route = scope.route  # unique in the run tree (``invocation_route``)
    definition = durable.definition()
    digest = input_digest(ctx.options)
    saved = book.document.agents.get(route)
    resumed = saved is not None
    if saved is not None:
        entry = check_saved(saved, session.key, route, definition, digest, scope.depth)
        if entry.phase == "completed":
            _report_resume(ctx, session, entry)
            return spec.result_schema.validate(entry.result)
        if entry.failure is not None:  # failed
            raise TubelessError(
                entry.failure.code,
                f"{entry.failure.message} (saved by an earlier run of checkpoint "
                f"{session.key!r}; --restart runs it again, restart=True in Python)",
            )
        scope.budget.calls = entry.budget.calls
        scope.budget.decisions = entry.budget.decisions
    else:
        entry = AgentEntry(
            definition,
            SavedBudget(scope.depth, 0, 0),
            "decide",
            1,
            0,
            0,
            agent=spec.id,
            input=digest,
            state=None,
        )
        book.document.agents[route] = entry
    journal = CheckpointJournal(book, route, entry, scope.budget, spec, resumed)
    invocation.hooks = turn_hooks(invocation.tape, journal, ctx.tracing)
    invocation.idempotency_base = journal.base
    invocation.approval_key = session.key
    invocation.checkpoint_key = session.key
    invocation.resumed = journal.resumed_turn(invocation)
    detach = attach_usage(scope.ledger, entry, resumed, book.commit)
    slots: dict[str, Any] = {SCOPE_SLOT: scope}
    first_turn = entry.turn if resumed else None
    if first_turn is not None:
        _report_resume(ctx, session, entry)
        # The turns' progress counts from the agent's own turn number, not from 1.
        slots[ITERATION_START_SLOT] = (ctx.run_id, ctx.step_id, first_turn)
    book.journals[route] = journal
    try:
        return await iterate(step_inputs, ctx.derive(gate=scope, **slots))
    except BaseException as exc:
        if first_turn is not None and isinstance(exc, ChildRunFailedError):
            # Read by the CLI's error line, which says turns as the agent numbers them.
            exc.first_turn = first_turn  # type: ignore[attr-defined]
        if session.lost is not None and getattr(exc, "code", None) != CHECKPOINT_LEASE_LOST:
            # The lease was lost (the run was cancelled for it): the run ends with that code.
            raise session.lost_error() from exc
        if session.poisoned:
            raise  # a write failed: nothing more can be written
        if is_cancellation(exc) or isinstance(
            original_exception(exc), ApprovalWaiting | BudgetWaiting
        ):
            if journal.dirty:
                book.commit()  # cancelled or waiting: keep what is known, resumable
        elif getattr(exc, "code", None) != CHECKPOINT_MISMATCH:  # a changed server: untouched
            journal.failed(exc)
        raise
    finally:
        detach()
        journal.sync()
        del book.journals[route]


def _report_resume(ctx: StepContext, session: CheckpointSession, entry: AgentEntry) -> None:
    ctx.report_attempt(
        1,
        {
            "agent.runId": ctx.run_id,
            "agent.checkpointKey": session.key,
            "agent.resumedTurn": entry.turn,
        },
    )
