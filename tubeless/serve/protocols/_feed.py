"""A run's events as it happens: a ``TurnHooks`` member that turns commit points into events.

The feed hears the root agent's turns through the agent layer's hook points (installed for one
run through ``tubeless.agent._invocation.OBSERVER``, a context variable), not from the trace:
the trace holds no arguments, outcomes or state, and a protocol client asked for exactly those.
What it reports, per turn of the root agent (child agents run as tools stay inside their call)::

    reserved / decided        step_started("decide") ... step_finished("decide")
    decided (continue)        one ``call`` per accepted call (its arguments as the model gave)
    around_call               the call's ``outcome`` (also one a resumed checkpoint restored)
    reduced                   ``outcome`` for each denied call (those never reach around_call),
                              step_started("reduce"), step_finished("reduce"), ``state``
    ended                     step_finished("decide") when a failure left it open

The reduce step is reported when its state has been committed: the hook points have no "reduce
is about to start", and the commit is what a client can rely on.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any

from tubeless.agent._spi import CallSite, Proceed, TurnHooks
from tubeless.errors import TOOL_DENIED
from tubeless.frozen import thaw

if TYPE_CHECKING:
    from tubeless.agent._decisions import Continue, Finish
    from tubeless.agent._prepare import PreparedCall
    from tubeless.agent._turn import TurnInput
    from tubeless.pipeline import StepContext

__all__ = ["Emit", "Feed"]

#: ``emit(kind, **fields)``: the runner numbers and stores the event.
Emit = Callable[..., None]

Outcome = Mapping[str, Any]


class Feed(TurnHooks):
    """Reports one run's root-agent turns through ``emit`` (see the module docstring)."""

    __slots__ = ("_announced", "_decide_open", "_root", "emit")

    def __init__(self, emit: Emit) -> None:
        self.emit = emit
        self._decide_open: int | None = None
        self._announced: dict[str, str] = {}  # call id -> tool, without an outcome yet
        self._root: object | None = None

    def _is_root(self, t: TurnInput) -> bool:
        """Whether ``t`` is a turn of the run's own agent: the first invocation without a
        parent this feed hears (not an agent called as a tool, nor a run a tool started)."""
        invocation = t.invocation
        if self._root is None and len(invocation.scope.chain) == 1:
            self._root = invocation
        return invocation is self._root

    def _start_decide(self, turn: int) -> None:
        if self._decide_open != turn:
            self._decide_open = turn
            self.emit("step_started", turn=turn, step="decide")

    def reserved(self, t: TurnInput) -> None:
        if self._is_root(t):
            self._start_decide(t.turn)

    def decided(
        self, t: TurnInput, decision: Finish | Continue, prepared: tuple[PreparedCall, ...] | None
    ) -> None:
        if not self._is_root(t):
            return
        self._start_decide(t.turn)  # a resumed decision was not reserved again
        self.emit("step_finished", turn=t.turn, step="decide")
        self._decide_open = None
        for call in prepared or ():
            self._announced[call.id] = call.tool
            self.emit("call", turn=t.turn, call_id=call.id, tool=call.tool, data=thaw(call.raw))

    def around_call(self, site: CallSite, proceed: Proceed) -> Awaitable[Outcome]:
        if not self._is_root(site.t):
            return proceed(site)
        return self._reported(site, proceed)

    async def _reported(self, site: CallSite, proceed: Proceed) -> Outcome:
        outcome = await proceed(site)
        call = site.call
        self._announced.pop(call.id, None)
        self.emit("outcome", turn=site.t.turn, call_id=call.id, tool=call.tool, data=thaw(outcome))
        return outcome

    def reduced(self, ctx: StepContext, t: TurnInput, following: TurnInput) -> None:
        if not self._is_root(t):
            return
        for call_id, tool in self._announced.items():
            # Only a denied call settles without passing around_call (the gate answers it).
            denied = {
                "id": call_id,
                "tool": tool,
                "ok": False,
                "error": {"code": TOOL_DENIED, "message": f"Call {call_id!r} was denied."},
            }
            self.emit("outcome", turn=t.turn, call_id=call_id, tool=tool, data=denied)
        self._announced.clear()
        self.emit("step_started", turn=t.turn, step="reduce")
        self.emit("step_finished", turn=t.turn, step="reduce")
        self.emit("state", turn=t.turn, data=thaw(following.state))

    def ended(self, result: Any, error: BaseException | None) -> None:
        # A decide step a failure interrupted (a limit reached, a refused decision) is closed,
        # so that every step a client saw open is finished before the run's end.
        if self._decide_open is not None:
            self.emit("step_finished", turn=self._decide_open, step="decide")
            self._decide_open = None
