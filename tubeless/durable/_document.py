"""The checkpoint document (DESIGN.md §11, §12): its one typed owner.

A checkpointed run keeps one JSON document per key::

    {version, key, entry, status, updated_at_ms,
     agents: {<route>: {agent, definition, input, budget: {depth, calls, decisions}, phase, turn,
                        state_version, calls, state,
                        decision?: {admitted, calls: [{id, tool, input, replay, status,
                                                       outcome?}]},
                        result?, failure?: {code, message}}},
     approvals?: {pending: [request...], decisions: [decision...]}}

An entry's phase is ``decide`` (the decision of ``turn`` was reserved), ``calls`` (its
``decision`` is saved), ``completed`` (``result``) or ``failed`` (``failure``). A request is
``{key, route, turn, call_id, tool, input, digest}``; a decision ``{route, turn, call_id,
digest, approved, reason?}``. The agent harness (``agent/_durable``) and ``tubeless
approve|deny`` (``_decide``) edit it only through these classes; :func:`parse` reads one
(``_document_parse``) and :meth:`CheckpointDocument.to_json` writes it: sorted keys, compact,
exactly ``json.dumps(..., sort_keys=True, separators=(",", ":"))`` of what was read, so a
document read and written again is the same bytes. Keys this release does not know are kept
(``extra``). The classes are plain data: values (state, inputs, outcomes, results, the
definition) are JSON data, never agent types.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from tubeless.durable._encode import Fragments, plain
from tubeless.durable._encode import string as _string

__all__ = [
    "ABSENT",
    "AgentEntry",
    "Approvals",
    "CheckpointDocument",
    "Failure",
    "SavedBudget",
    "SavedCall",
    "SavedDecision",
    "slot_of",
]


class _Absent:
    __slots__ = ()

    def __repr__(self) -> str:
        return "ABSENT"


#: A field the stored document does not hold (as opposed to one holding ``null``).
ABSENT: Final[Any] = _Absent()

_Text = Callable[[Any], str]
_Pairs = list[tuple[str, str]]


def _object(pairs: _Pairs, extra: dict[str, Any] | None, text: _Text) -> str:
    """``{"key":text,...}`` from ``pairs`` given in sorted key order, with ``extra`` merged."""
    if extra:
        pairs = sorted(pairs + [(key, text(value)) for key, value in extra.items()])
    return "{" + ",".join(f"{plain(key)}:{value}" for key, value in pairs) + "}"


@dataclass(slots=True)
class SavedCall:
    """One call of a saved decision: ``pending``, ``running`` (its intent committed) or
    ``completed`` (its ``outcome`` saved, see ``agent/_outcomes.to_saved``)."""

    id: str
    tool: str
    status: str
    input: Any = ABSENT
    replay: Any = ABSENT
    outcome: Mapping[str, Any] | None = None
    extra: dict[str, Any] | None = None

    def to_json(self, text: _Text) -> str:
        if self.extra:
            return self._merged(text)
        parts = [f'{{"id":{_string(self.id)}']
        if self.input is not ABSENT:
            parts.append(f',"input":{text(self.input)}')
        if self.outcome is not None:
            parts.append(f',"outcome":{text(self.outcome)}')
        if self.replay is not ABSENT:
            parts.append(f',"replay":{plain(self.replay)}')
        parts.append(f',"status":{_string(self.status)},"tool":{_string(self.tool)}}}')
        return "".join(parts)

    def _merged(self, text: _Text) -> str:
        pairs = [("id", plain(self.id))]
        if self.input is not ABSENT:
            pairs.append(("input", text(self.input)))
        if self.outcome is not None:
            pairs.append(("outcome", text(self.outcome)))
        if self.replay is not ABSENT:
            pairs.append(("replay", plain(self.replay)))
        pairs += (("status", plain(self.status)), ("tool", plain(self.tool)))
        return _object(pairs, self.extra, text)


@dataclass(slots=True)
class SavedDecision:
    """A continue decision's calls; ``admitted`` once the batch's call budget was charged."""

    admitted: bool
    calls: list[SavedCall]
    extra: dict[str, Any] | None = None

    def to_json(self, text: _Text) -> str:
        calls = "[" + ",".join([call.to_json(text) for call in self.calls]) + "]"
        if self.extra:
            return _object([("admitted", plain(self.admitted)), ("calls", calls)], self.extra, text)
        return f'{{"admitted":{"true" if self.admitted else "false"},"calls":{calls}}}'


@dataclass(slots=True)
class SavedBudget:
    """What an agent consumed: its delegation depth, calls and decisions."""

    depth: int
    calls: int
    decisions: int
    extra: dict[str, Any] | None = None

    def to_json(self, text: _Text) -> str:
        if not self.extra:
            return (
                f'{{"calls":{int.__repr__(self.calls)},'
                f'"decisions":{int.__repr__(self.decisions)},"depth":{int.__repr__(self.depth)}}}'
            )
        pairs = [
            ("calls", int.__repr__(self.calls)),
            ("decisions", int.__repr__(self.decisions)),
            ("depth", int.__repr__(self.depth)),
        ]
        return _object(pairs, self.extra, text)


@dataclass(slots=True)
class Failure:
    """How an agent failed: the error's code and message."""

    code: str
    message: str
    extra: dict[str, Any] | None = None

    def to_json(self, text: _Text) -> str:
        pairs = [("code", plain(self.code)), ("message", plain(self.message))]
        return _object(pairs, self.extra, text)


@dataclass(slots=True)
class AgentEntry:
    """One agent of the run tree, by route (see the module docstring)."""

    definition: dict[str, Any]
    budget: SavedBudget
    phase: str
    turn: int
    state_version: int
    calls: int
    agent: Any = ABSENT
    input: Any = ABSENT
    state: Any = ABSENT
    decision: SavedDecision | None = None
    result: Any = ABSENT
    failure: Failure | None = None
    extra: dict[str, Any] | None = None

    def at(self, phase: str, turn: int, state_version: int, calls: int, state: Any) -> None:
        """The entry moved to ``phase`` of ``turn`` (a saved decision is dropped)."""
        self.phase = phase
        self.turn = turn
        self.state_version = state_version
        self.calls = calls
        self.state = state
        self.drop_decision()

    def drop_decision(self) -> None:
        self.decision = None
        if self.extra:
            self.extra.pop("decision", None)  # one an older phase held, never checked

    def to_json(self, text: _Text) -> str:
        out: list[str] = []
        self.write(out, text)
        return "".join(out)

    def write(self, out: list[str], text: _Text) -> None:
        """Append the entry's text to ``out`` in parts: the large values' texts are appended as
        they are, so the document copies each of them once, when it joins its parts."""
        if self.extra:
            out.append(self._merged(text))
            return
        # The pairs in sorted key order, keys written as literals (the hot path of a commit).
        budget = self.budget.to_json(text)
        head = "{" if self.agent is ABSENT else f'{{"agent":{plain(self.agent)},'
        out.append(f'{head}"budget":{budget},"calls":{int.__repr__(self.calls)}')
        if self.decision is not None:
            out += (',"decision":', self.decision.to_json(text))
        out += (',"definition":', text(self.definition))
        if self.failure is not None:
            out += (',"failure":', self.failure.to_json(text))
        if self.input is not ABSENT:
            out += (',"input":', text(self.input))
        out.append(f',"phase":{plain(self.phase)}')
        if self.result is not ABSENT:
            out += (',"result":', text(self.result))
        if self.state is not ABSENT:
            out += (',"state":', text(self.state))
        out.append(
            f',"state_version":{int.__repr__(self.state_version)},'
            f'"turn":{int.__repr__(self.turn)}}}'
        )

    def _merged(self, text: _Text) -> str:
        pairs: _Pairs = []
        if self.agent is not ABSENT:
            pairs.append(("agent", plain(self.agent)))
        pairs += (("budget", self.budget.to_json(text)), ("calls", int.__repr__(self.calls)))
        if self.decision is not None:
            pairs.append(("decision", self.decision.to_json(text)))
        pairs.append(("definition", text(self.definition)))
        if self.failure is not None:
            pairs.append(("failure", self.failure.to_json(text)))
        if self.input is not ABSENT:
            pairs.append(("input", text(self.input)))
        pairs.append(("phase", plain(self.phase)))
        if self.result is not ABSENT:
            pairs.append(("result", text(self.result)))
        if self.state is not ABSENT:
            pairs.append(("state", text(self.state)))
        pairs += (
            ("state_version", int.__repr__(self.state_version)),
            ("turn", int.__repr__(self.turn)),
        )
        return _object(pairs, self.extra, text)


def slot_of(item: Mapping[str, Any]) -> tuple[str, int, str]:
    """The call a request or decision is for: its route, turn and call id."""
    return str(item["route"]), int(item["turn"]), str(item["call_id"])


@dataclass(slots=True)
class Approvals:
    """Requests waiting for a decision, and the decisions recorded (plain JSON objects).

    ``None``: the document holds no such list.
    """

    pending: list[dict[str, Any]] | None = None
    decisions: list[dict[str, Any]] | None = None
    extra: dict[str, Any] | None = None

    def waiting(
        self, slots: Iterable[tuple[str, int, str]], requests: list[dict[str, Any]]
    ) -> None:
        """A gated batch's ``requests`` wait, replacing any older request of its calls
        (``slots``), so a call re-requested with other arguments waits again."""
        cut = set(slots)
        self.pending = [p for p in self.pending or () if slot_of(p) not in cut] + requests

    def answered(self, decisions: list[dict[str, Any]], slot: tuple[str, int, str]) -> None:
        """The call ``slot`` was decided; ``decisions`` is every decision now recorded."""
        self.decisions = decisions
        self.pending = [p for p in self.pending or () if slot_of(p) != slot]

    def decide(self, decision: dict[str, Any]) -> None:
        """Record ``decision`` for its call, replacing an older one; its request is answered."""
        slot = slot_of(decision)
        kept = [d for d in self.decisions or () if slot_of(d) != slot]
        self.answered([*kept, decision], slot)

    def to_json(self, text: _Text) -> str:
        pairs: _Pairs = []
        if self.decisions is not None:
            pairs.append(("decisions", plain(self.decisions)))
        if self.pending is not None:
            pairs.append(("pending", plain(self.pending)))
        return _object(pairs, self.extra, text)


@dataclass(slots=True)
class CheckpointDocument:
    """One checkpoint key's document (see the module docstring)."""

    agents: dict[str, AgentEntry] = field(default_factory=dict)
    version: Any = ABSENT
    key: Any = ABSENT
    entry: Any = ABSENT
    status: Any = ABSENT
    approvals: Approvals | None = None
    updated_at_ms: Any = ABSENT
    extra: dict[str, Any] | None = None

    @staticmethod
    def new(version: int, key: str, entry: str) -> CheckpointDocument:
        """The document of a key no run has written yet."""
        return CheckpointDocument(version=version, key=key, entry=entry, status="running")

    def pending(self) -> list[dict[str, Any]]:
        """The requests waiting for a decision (none when the document holds no approvals)."""
        approvals = self.approvals
        return [] if approvals is None or approvals.pending is None else approvals.pending

    def current_status(self) -> str:
        """The status the document's entries say: ``failed`` once a top agent failed,
        ``completed`` once all did, ``waiting`` while requests are pending or an agent waits
        for a raised budget (``_budget``), else ``running``."""
        phases = {entry.phase for route, entry in self.agents.items() if "/" not in route}
        if "failed" in phases:
            return "failed"
        if phases == {"completed"}:
            return "completed"
        return "waiting" if self.pending() or self._budget_waits() else "running"

    def _budget_waits(self) -> bool:
        for entry in self.agents.values():
            usage = (entry.budget.extra or {}).get("usage")
            if isinstance(usage, dict) and usage.get("waiting"):
                return True
        return False

    def touched(self) -> None:
        """Stamp the time of this change (``updated_at_ms``)."""
        self.updated_at_ms = time.time_ns() // 1_000_000

    def to_json(self, fragments: Fragments | None = None) -> str:
        """The stored text (sorted compact JSON; ``fragments`` reuses the text of values that
        did not change since the last commit)."""
        text = (fragments or Fragments()).text
        agents = self.agents
        out = ['{"agents":{']
        for route in sorted(agents):
            out.append(f"{_string(route)}:" if len(out) == 1 else f",{_string(route)}:")
            agents[route].write(out, text)
        if self.extra:
            return self._merged("".join(out)[len('{"agents":{') :], text)
        out.append("}")
        if self.approvals is not None:
            out += (',"approvals":', self.approvals.to_json(text))
        for name, value in (
            ("entry", self.entry),
            ("key", self.key),
            ("status", self.status),
            ("updated_at_ms", self.updated_at_ms),
            ("version", self.version),
        ):
            if value is not ABSENT:
                out.append(f',"{name}":{plain(value)}')
        out.append("}")
        return "".join(out)

    def _merged(self, listed: str, text: _Text) -> str:
        pairs = [("agents", "{" + listed + "}")]
        if self.approvals is not None:
            pairs.append(("approvals", self.approvals.to_json(text)))
        for name in ("entry", "key", "status", "updated_at_ms", "version"):
            value = getattr(self, name)
            if value is not ABSENT:
                pairs.append((name, plain(value)))
        return _object(pairs, self.extra, text)

    @staticmethod
    def from_json(text: str, key: str) -> CheckpointDocument:
        """A stored document, once it is one a run could have written.

        Raises:
            CheckpointError: ``TUBELESS_CHECKPOINT_INVALID`` naming what is wrong and where.
        """
        from tubeless.durable._document_parse import parse
        from tubeless.durable._session import decode

        return parse(decode(text, f"checkpoint {key!r}"), key)
