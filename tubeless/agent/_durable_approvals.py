"""Approvals in a checkpointed run (DESIGN.md §12): the checkpoint keeps requests and answers.

The run's document holds ``approvals: {pending: [request...], decisions: [decision...]}``, where
a request is ``{key, route, turn, call_id, tool, input, digest}`` and a decision is
``{route, turn, call_id, digest, approved, reason?}`` (what ``tubeless approve|deny`` or an
approver's answer recorded). For a batch with gated calls, :func:`checkpoint_approver`:

1. answers every request that has a saved decision for its exact digest;
2. commits the others as ``pending`` (replacing any older request of the same call, so a call
   re-requested with other arguments waits again) before any call of the batch starts;
3. with no approver, raises :class:`ApprovalWaiting` (the document's status is ``waiting``);
   otherwise asks it, and commits each answer before the call it allows can start.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from tubeless.agent._approvals import ApprovalWaiting, RecordedApprovals
from tubeless.frozen import FrozenDict, thaw

if TYPE_CHECKING:
    from tubeless.agent._durable import Book

__all__ = ["checkpoint_approver"]


def _slot(request: Mapping[str, Any]) -> tuple[str, int, str]:
    return str(request["route"]), int(request["turn"]), str(request["call_id"])


class CheckpointApprover(RecordedApprovals):
    """Saved decisions first; then the run's approver, each answer committed as it comes."""

    __slots__ = ("_ask", "_book")

    def __init__(self, book: Book, decisions: list[Any], ask: Callable[[Any], Any] | None) -> None:
        super().__init__(decisions)
        self._book = book
        self._ask = ask

    def __call__(self, request: Mapping[str, Any]) -> Any:
        decided = self.decision(request)
        if decided is not None:
            return decided
        assert self._ask is not None, "checkpoint_approver raises when nobody can answer"
        return self._ask(request)

    def _answered(self, request: Mapping[str, Any], answer: bool) -> None:
        if self.decision(request) is not None:
            return  # a saved decision: already in the document
        self._record(request, answer, None)
        approvals = self._book.document["approvals"]
        approvals["decisions"] = [thaw(d) for d in self.to_data()]
        slot = _slot(request)
        approvals["pending"] = [p for p in approvals["pending"] if _slot(p) != slot]
        self._book.commit()  # before the approved call's running intent


def checkpoint_approver(
    book: Book, key: str, requests: tuple[FrozenDict, ...], ask: Callable[[Any], Any] | None
) -> CheckpointApprover:
    """The approver of a gated batch of a checkpointed run (see the module docstring)."""
    approvals = book.document.setdefault("approvals", {"pending": [], "decisions": []})
    approver = CheckpointApprover(book, approvals["decisions"], ask)
    waiting = tuple(r for r in requests if approver.decision(r) is None)
    slots = {_slot(r) for r in requests}
    kept = [p for p in approvals["pending"] if _slot(p) not in slots]
    approvals["pending"] = kept + [thaw(r) for r in waiting]
    book.commit()  # the admitted batch and what it waits for, before any of it starts
    if waiting and ask is None:
        raise ApprovalWaiting(key, waiting)
    return approver
