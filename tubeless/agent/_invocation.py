"""One agent invocation: what every turn of it shares, made once when the agent starts.

``AgentStep`` (``_agent_step``) makes the :class:`Invocation` with the invocation's route (computed
once, with the ``#n`` rule of ``_scope.invocation_route``), its budget scope and its hooks; a
checkpointed invocation's journal (``_durable.run_durable``) fills in the idempotency base and
approval key it keeps and the turn it resumes from, and joins the hooks; connecting the tools'
servers fills in :attr:`Invocation.live`. The turn reads it from :attr:`TurnInput.invocation
<tubeless.agent._turn.TurnInput>`, the one slot that carries it from turn to turn; the first
turn finds it in the run environment's :data:`INVOCATION_SLOT`.
"""

from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

from tubeless.agent._hooks import NO_HOOKS, TurnHooks, combine
from tubeless.agent._tape import NO_TAPE
from tubeless.agent._trace import TRACE_HOOKS

if TYPE_CHECKING:
    from tubeless.agent._scope import Scope
    from tubeless.agent._sources import LiveTools
    from tubeless.agent._tape import Tape
    from tubeless.agent._trace import AgentTrace
    from tubeless.agent._turn_types import TurnInput

__all__ = ["INVOCATION_SLOT", "OBSERVER", "Invocation", "turn_hooks"]

#: The run-environment slot that hands an invocation from ``AgentStep`` to its first turn.
INVOCATION_SLOT = "tubeless.agent.invocation"

#: Hooks that watch every invocation started in this context (a server turning a run into a
#: protocol's events: ``tubeless.serve.protocols``). A context variable rather than a ``run()``
#: argument, so no layer between the caller and the turn carries it. It is the first member:
#: its ``around_call`` sees every outcome, those a resumed journal restores included.
OBSERVER: ContextVar[TurnHooks | None] = ContextVar("tubeless.agent.observer", default=None)


class Invocation:
    """One run of an agent: its identity, budgets, approver, tools and the hooks it calls.

    Attributes:
        input: The agent's validated input.
        run_id: The agent run's id (``agent_run_id`` in executions and traces).
        route: Where the invocation stands in its run tree (checkpoint entries, approval
            requests and cassette tapes are named by it).
        scope: The budget chain and permit pool.
        idempotency_base: The prefix of every ``idempotency_key`` (the run id, or the
            checkpoint key and route of a checkpointed invocation: stable across resumes).
        approval_key: The ``key`` of approval requests (the checkpoint key, else the root
            invocation's run id).
        approver: The run's approver (``run(approver=...)``), if any.
        live: The tools as connected servers describe them (``None``: the definition's own).
        hooks: The features that hear the turn's commit points (``_hooks``).
        trace: The agent's recorder, for what it says besides the hook points (the null one
            when nothing traces the run).
        tape: The cassette tape: where decisions come from when it replays, and what agents
            started by a call open their tapes below.
        resumed: The first turn's input of a resumed invocation (the checkpoint's state, turn,
            state version and calls), set by its journal; ``None``: it starts from turn 1.
    """

    __slots__ = (
        "approval_key",
        "approver",
        "checkpoint_key",
        "hooks",
        "idempotency_base",
        "input",
        "live",
        "resumed",
        "route",
        "run_id",
        "scope",
        "tape",
        "trace",
    )

    def __init__(
        self,
        input: Any,
        run_id: str,
        scope: Scope,
        approver: Callable[[Any], Any] | None,
        hooks: TurnHooks,
        trace: AgentTrace,
        tape: Tape,
    ) -> None:
        self.input = input
        self.run_id = run_id
        self.scope = scope
        self.route = scope.route
        self.idempotency_base = run_id
        self.approval_key = scope.chain[0].id
        self.approver = approver
        self.live: LiveTools | None = None
        self.hooks = hooks
        self.trace = trace
        self.tape = tape
        self.resumed: TurnInput | None = None
        self.checkpoint_key: str | None = None
        """The key of a checkpointed invocation (``on_limit: wait`` needs one)."""


def turn_hooks(tape: Tape, journal: TurnHooks | None, tracing: bool) -> TurnHooks:
    """An invocation's hooks, in the order ``_hooks`` documents: the cassette tape, the
    checkpoint journal, the trace (each only when the run has it; none: the null hooks), after
    the context's :data:`OBSERVER` when one watches."""
    observer = OBSERVER.get()
    if journal is None and tape is NO_TAPE and observer is None:  # the common case
        return TRACE_HOOKS if tracing else NO_HOOKS
    return combine(
        observer,
        None if tape is NO_TAPE else tape,
        journal,
        TRACE_HOOKS if tracing else None,
    )
