"""Approvals: which calls of an admitted batch need a person's yes, asking for it, and binding it.

A call needs approval when its tool says ``approval="always"``, or its predicate
``approval(input, ctx)`` returns true for the validated input. Every predicate of the batch runs
before any call of the batch starts. A request is plain data (so a durable run can keep it)::

    {key, route, turn, call_id, tool, input, digest}

``digest`` is :func:`call_digest` of the tool name and the model's argument: a decision applies
to that call id with that digest only, so a call re-requested with other arguments, or the same
arguments under another call id, needs a new approval.

How a gated batch runs (:func:`dispatch_gated`): the approver is asked in decision order; the
calls that need no approval start as soon as an answer has to be awaited (at once, when every
answer is immediate they start after the last one); approved calls start once those siblings
have settled and only if none of them failed the run, so no error or cancellation path ever runs
a call that needed approval. Denied calls become ``TUBELESS_TOOL_DENIED`` outcomes; ``reduce``
sees every outcome in decision order.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from tubeless._callables import is_awaitable
from tubeless.agent import _outcomes as outcomes
from tubeless.agent._decisions import DecisionError, shown
from tubeless.agent._tools import Tool, ToolContext
from tubeless.errors import (
    APPROVAL_PREDICATE_FAILED,
    APPROVAL_REQUIRED,
    TOOL_DENIED,
    TubelessError,
)
from tubeless.frozen import FreezeError, FrozenDict, digest, freeze
from tubeless.pipeline._spi import RunCancelledError

if TYPE_CHECKING:
    from tubeless.agent._prepare import PreparedCall
    from tubeless.agent._turn_types import ApprovalPolicy, TurnInput
    from tubeless.pipeline import CancelToken, StepContext

__all__ = [
    "ApprovalError",
    "ApprovalWaiting",
    "RecordedApprovals",
    "call_digest",
    "dispatch_gated",
    "gated_requests",
]


class ApprovalError(TubelessError):
    """A batch could not be approved; none of its gated calls ran.

    ``TUBELESS_APPROVAL_REQUIRED``: a call needs approval and there is no approver, no recorded
    decision for its exact request, or the approver's answer was not a bool.
    ``TUBELESS_APPROVAL_PREDICATE_FAILED``: an approval predicate raised (its exception is the
    cause); no call of the batch started.

    Attributes:
        pending: The requests still waiting for a decision (plain data, in decision order).
    """

    def __init__(self, code: str, message: str, pending: tuple[FrozenDict, ...] = ()) -> None:
        super().__init__(code, message)
        self.pending = pending


class ApprovalWaiting(ApprovalError):
    """A checkpointed run stopped, ``waiting``, for decisions nobody could give it now.

    ``TUBELESS_APPROVAL_REQUIRED``. The admitted batch and its pending requests were committed
    to checkpoint ``key`` before any call of the batch started; record a decision for each
    (``tubeless approve|deny PATH KEY CALL_ID``) and run the key again to resume.

    Attributes:
        key: The checkpoint key the run saved its place under.
        pending: The requests waiting for a decision (plain data, in decision order).
    """

    code = APPROVAL_REQUIRED

    def __init__(self, key: str, pending: tuple[FrozenDict, ...]) -> None:
        count = len(pending)
        super().__init__(
            APPROVAL_REQUIRED,
            f"checkpoint {key!r} is waiting for approval of {count} "
            f"call{'' if count == 1 else 's'}; nothing of its batch ran",
            pending,
        )
        self.key = key


def call_digest(tool: str, raw_input: Any) -> str:
    """``sha256:<hex>`` of the canonical JSON of ``[tool, input]``, non-ASCII escaped
    (DESIGN.md §24: any input has one).

    Raises:
        FreezeError: When ``raw_input`` is not plain JSON data.
    """
    return digest([tool, freeze(raw_input)])


def _binds(entry: Mapping[str, Any], request: Mapping[str, Any]) -> bool:
    """Whether a recorded decision is for exactly ``request``'s arguments. Before round 3 the
    digest hashed non-ASCII as UTF-8: a decision recorded then (a checkpoint approved before an
    upgrade) still binds the same arguments."""
    if entry["digest"] == request["digest"]:
        return True
    if "input" not in request or "tool" not in request:
        return False
    try:
        earlier = digest([request["tool"], freeze(request["input"])], ensure_ascii=False)
    except (FreezeError, TypeError, ValueError):
        return False
    return bool(entry["digest"] == earlier)


class RecordedApprovals:
    """Decisions recorded ahead of a run, used as its approver.

    It answers only for the exact request a decision was recorded for (same route, turn, call
    id and digest); for any other request it raises ``TUBELESS_APPROVAL_REQUIRED`` with the
    request pending. A durable run keeps these decisions with its checkpoint.
    """

    __slots__ = ("_decisions",)

    def __init__(self, decisions: Iterable[Mapping[str, Any]] = ()) -> None:
        self._decisions: dict[tuple[str, int, str], FrozenDict] = {}
        for decision in decisions:
            self._record(decision, bool(decision["approved"]), decision.get("reason"))

    def _record(self, request: Mapping[str, Any], approved: bool, reason: Any) -> None:
        route, turn, call_id = str(request["route"]), int(request["turn"]), str(request["call_id"])
        entry: dict[str, Any] = {
            "route": route,
            "turn": turn,
            "call_id": call_id,
            "digest": str(request["digest"]),
            "approved": approved,
        }
        if reason is not None:
            entry["reason"] = str(reason)
        self._decisions[(route, turn, call_id)] = FrozenDict(entry)

    def approve(self, request: Mapping[str, Any]) -> None:
        """Approve exactly ``request`` (its route, turn, call id and digest)."""
        self._record(request, True, None)

    def deny(self, request: Mapping[str, Any], reason: str | None = None) -> None:
        """Deny exactly ``request``."""
        self._record(request, False, reason)

    def reason(self, request: Mapping[str, Any]) -> str | None:
        """The reason recorded with the decision for exactly ``request``, if any."""
        entry = self._decisions.get((request["route"], request["turn"], request["call_id"]))
        if entry is None or not _binds(entry, request):
            return None
        reason = entry.get("reason")
        return None if reason is None else str(reason)

    def to_data(self) -> list[FrozenDict]:
        """Every recorded decision, as plain data (``RecordedApprovals(data)`` reads it back)."""
        return list(self._decisions.values())

    def decision(self, request: Mapping[str, Any]) -> bool | None:
        """The decision recorded for exactly ``request``, or ``None`` (none, or another digest)."""
        entry = self._decisions.get((request["route"], request["turn"], request["call_id"]))
        if entry is None or not _binds(entry, request):
            return None
        return bool(entry["approved"])

    def _answered(self, request: Mapping[str, Any], answer: bool) -> None:
        """Called with each answer this approver gave (a checkpointed run commits it here)."""

    def __call__(self, request: Mapping[str, Any]) -> bool:
        decided = self.decision(request)
        if decided is None:
            raise ApprovalError(
                APPROVAL_REQUIRED,
                f"Call {shown(request['call_id'])} to tool {shown(request['tool'])} needs "
                "approval: no decision was recorded for this exact call",
                (FrozenDict(request),),
            )
        return decided


def _needs_approval(
    policy: ApprovalPolicy, call: PreparedCall, ctx: StepContext, execution: FrozenDict
) -> bool:
    if policy == "never":
        return False
    if policy == "always":
        return True
    assert callable(policy)
    try:
        verdict = policy(call.value, ToolContext(ctx, execution))
        if is_awaitable(verdict):
            raise TypeError("an approval predicate must answer at once (it is not awaited)")
    except Exception as exc:
        raise ApprovalError(
            APPROVAL_PREDICATE_FAILED,
            f"The approval predicate of tool {shown(call.tool)} raised for call "
            f"{shown(call.id)} ({type(exc).__name__}); no call of the batch ran",
        ) from exc
    return verdict is not False  # fail closed: only False lets a call run unasked


_MAX_REASON = 1024


def _denied(call: PreparedCall, reason: str | None) -> FrozenDict:
    message = f"Call {shown(call.id)} to tool {shown(call.tool)} was denied"
    message += "." if not reason else f": {reason[:_MAX_REASON]}"
    return outcomes.denied(call, message)


def gated_requests(
    calls: tuple[PreparedCall, ...],
    registry: Mapping[str, Any],
    ctx: StepContext,
    *,
    key: str,
    route: str,
    agent_run_id: str,
    turn: int,
) -> dict[int, FrozenDict]:
    """The request of every call that needs approval, by position; predicates run here."""
    requests: dict[int, FrozenDict] = {}
    for index, call in enumerate(calls):
        tool: Tool = registry[call.tool].tool
        if tool.approval == "never":
            continue
        execution = FrozenDict._trusted(
            {"agent_run_id": agent_run_id, "turn": turn, "call_id": call.id, "tool": call.tool}
        )
        if not _needs_approval(tool.approval, call, ctx, execution):
            continue
        try:
            frozen_input = freeze(call.raw)
            digest = call_digest(call.tool, frozen_input)
        except (FreezeError, TypeError, ValueError):
            raise DecisionError(
                f"Arguments of call {shown(call.id)} to tool {shown(call.tool)} must be plain "
                "JSON data: the call needs approval"
            ) from None
        requests[index] = FrozenDict._trusted(
            {
                "key": key,
                "route": route,
                "turn": turn,
                "call_id": call.id,
                "tool": call.tool,
                "input": frozen_input,
                "digest": digest,
            }
        )
    return requests


async def _answer(
    approver: Callable[[Any], Any],
    request: FrozenDict,
    signal: CancelToken,
    start_free: Callable[[], asyncio.Future[Any] | None],
) -> bool | None:
    """The approver's answer for ``request``, or ``None`` once a sibling call failed the run.

    ``start_free()`` starts the calls that need no approval (once) before anything is awaited.
    """
    signal.raise_if_cancelled()
    answer = approver(request)
    if is_awaitable(answer):
        siblings = start_free()
        waiting = asyncio.ensure_future(answer)
        stop = asyncio.ensure_future(signal.wait())
        try:
            watched: set[asyncio.Future[Any]] = {waiting, stop}
            if siblings is not None and not siblings.done():
                watched.add(siblings)
            while not waiting.done() and not stop.done():
                done, _ = await asyncio.wait(watched, return_when=asyncio.FIRST_COMPLETED)
                if siblings in done:
                    if siblings.exception() is not None:
                        return None
                    watched.discard(siblings)
        finally:
            stop.cancel()
            if not waiting.done():
                waiting.cancel()
                with contextlib.suppress(BaseException):
                    await waiting
        if not waiting.done() or waiting.cancelled():
            raise RunCancelledError(signal.reason)
        answer = waiting.result()
    if type(answer) is not bool:
        raise ApprovalError(
            APPROVAL_REQUIRED,
            f"The approver must answer True or False, not {type(answer).__name__}; call "
            f"{shown(request['call_id'])} to tool {shown(request['tool'])} did not run",
            (request,),
        )
    return answer


async def dispatch_gated(
    calls: tuple[PreparedCall, ...],
    requests: dict[int, FrozenDict],
    ctx: StepContext,
    t: TurnInput,
) -> tuple[Mapping[str, Any], ...]:
    """Run a batch of turn ``t`` some of whose calls need approval (``requests``, by
    position)."""
    from tubeless.agent._dispatch import dispatch, outcomes_of

    # A checkpointed run answers from its saved decisions first, commits what is still pending
    # before asking, and stops waiting (ApprovalWaiting) when nobody can answer now.
    invocation = t.invocation
    trace = invocation.trace
    try:
        approver = invocation.hooks.gated(t, tuple(requests.values()), invocation.approver)
    except ApprovalWaiting as exc:
        for request in exc.pending:  # the trace says which calls wait (none of the batch ran)
            trace.call_status(
                ctx, invocation.run_id, t.turn, request["call_id"], request["tool"], "waiting"
            )
        raise
    if approver is None:
        first = next(iter(requests.values()))
        raise ApprovalError(
            APPROVAL_REQUIRED,
            f"Call {shown(first['call_id'])} to tool {shown(first['tool'])} needs approval "
            "and the run has no approver; no call of the batch ran",
            tuple(requests.values()),
        )

    def run(batch: tuple[PreparedCall, ...]) -> Any:
        return dispatch(batch, ctx, t)

    free = tuple(call for index, call in enumerate(calls) if index not in requests)
    running: list[asyncio.Future[tuple[Mapping[str, Any], ...]]] = []

    def start_free() -> asyncio.Future[Any] | None:
        if free and not running:
            running.append(asyncio.ensure_future(run(free)))
        return running[0] if running else None

    answers: dict[int, bool] = {}
    try:
        for index, request in requests.items():
            answer = await _answer(approver, request, ctx.signal, start_free)
            if answer is None:
                break  # a sibling failed the run: ask no more, run nothing gated
            answers[index] = answer
            if isinstance(approver, RecordedApprovals):
                approver._answered(request, answer)
        start_free()
        free_outcomes = await running[0] if running else ()
    except BaseException as exc:
        if running and not running[0].done():
            if isinstance(exc, asyncio.CancelledError):
                running[0].cancel()
            # Siblings already running are drained, as dispatch drains its own calls.
            with contextlib.suppress(BaseException):
                await running[0]
        elif running and not running[0].cancelled():
            running[0].exception()  # retrieved: the error raised here is the one that counts
        raise
    ctx.signal.raise_if_cancelled()
    approved = tuple(calls[index] for index, yes in answers.items() if yes)
    trace.approvals(ctx, invocation.run_id, t.turn, len(answers), len(answers) - len(approved))
    reasons = approver.reason if isinstance(approver, RecordedApprovals) else lambda r: None
    for index, yes in answers.items():
        if not yes:
            call = calls[index]
            given = bool(reasons(requests[index]))
            trace.call_status(
                ctx,
                invocation.run_id,
                t.turn,
                call.id,
                call.tool,
                "denied",
                ok=False,
                code=TOOL_DENIED,
                reason_given=given,
            )
    approved_outcomes = await run(approved) if approved else ()
    by_id = {o["id"]: o for o in (*free_outcomes, *approved_outcomes)}
    return outcomes_of(
        [
            by_id[call.id]
            if index not in requests or answers[index]
            else _denied(call, reasons(requests[index]))
            for index, call in enumerate(calls)
        ]
    )
