"""The text of run trees, as the ``tubeless trace`` commands print it.

:func:`format_tree` draws one run tree (steps, agent turns and calls, child runs) and
:func:`format_run_list` one line per root; every piece of recorded text goes through
:func:`terminal_safe` first. :mod:`tubeless.tracing.projection` re-exports all four.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Final, TypeAlias

from tubeless.errors import CHILD_FAILED, without_period
from tubeless.tracing.meters import budget_meters

if TYPE_CHECKING:
    from tubeless.tracing._projection_agents import TurnNode
    from tubeless.tracing.projection import RunTree

__all__ = [
    "describe_error",
    "format_duration",
    "format_run_list",
    "format_tree",
    "terminal_safe",
]

# C0, DEL and C1 controls; bidi embeddings/overrides, isolates and marks (LRM, RLM, ALM);
# line separators and zero-width characters.
_UNSAFE: Final = (
    *range(0x00, 0x20),
    0x7F,
    *range(0x80, 0xA0),
    *range(0x202A, 0x202F),
    *range(0x2066, 0x206A),
    0x200E,
    0x200F,
    0x061C,
    # Line and paragraph separators, and zero-width characters that hide text.
    0x2028,
    0x2029,
    *range(0x200B, 0x200E),
    0x2060,
    0xFEFF,
    # Lone surrogates (from a trace's "\udcff" escapes): no terminal encoding can print them.
    *range(0xD800, 0xE000),
)
_SAFE_TABLE: Final = dict.fromkeys(_UNSAFE, " ")
_MAX_INDENT: Final = 32


def terminal_safe(text: str) -> str:
    """``text`` with control (C0, C1, DEL), bidi override and lone surrogate characters
    replaced by spaces.

    The result has the same length as ``text``, so columns computed on it stay put.
    """
    # Printable ASCII holds none of them; checking that is far cheaper than translating (the
    # reporters make every label of every line safe).
    if text.isascii() and text.isprintable():
        return text
    return text.translate(_SAFE_TABLE)


#: Codes (and the names of links standing for child runs) of tubeless's own errors.
_OWN_PREFIX: Final = "TUBELESS_"
#: Names and messages of the links that stand for omitted or circular parts of a chain.
_MARKERS: Final = ("Cause chain truncated", "Circular cause")
_MAX_LINKS: Final = 64


def describe_error(error: Mapping[str, Any]) -> str:
    """A recorded error (a trace record's ``error``, or ``PipelineError.to_wire()``) in a
    user's terms, looking through tubeless's own wrappers of child-run failures.

    The links that only report a failed child run are skipped; the first other link says what
    went wrong: a handler's exception as ``<Type>: <message>`` (just ``<message>`` when it
    carries a ``code``: whoever prints the codes shows that), or an error tubeless raised itself
    (a limit, a rejected decision) by its message. The innermost exception below it, if it is
    not tubeless's own, is added as ``; caused by: <Type>: <message>``. Nothing here is made
    terminal-safe.
    """
    message = error.get("message")
    links: list[Mapping[str, Any]] = []
    node = error.get("cause")
    while isinstance(node, Mapping) and len(links) < _MAX_LINKS:
        links.append(node)
        node = node.get("cause")
    fallback = message if isinstance(message, str) and message else "unknown error"
    real = [link for link in links if not _is_marker(link)]
    own = next((link for link in real if not _reports_a_child(link)), None)
    if own is None:
        return fallback
    text = _phrase(own)
    deepest = real[-1]
    inner = deepest.get("message")
    said = isinstance(inner, str) and inner in text  # e.g. validation issues quoted already
    if deepest is not own and not _is_tubeless(deepest) and not said:
        text = f"{without_period(text)}; caused by: {_phrase(deepest)}"
    return text


def _is_tubeless(link: Mapping[str, Any]) -> bool:
    code, name = link.get("sourceCode"), link.get("name")
    return (isinstance(code, str) and code.startswith(_OWN_PREFIX)) or (
        isinstance(name, str) and name.startswith(_OWN_PREFIX)
    )


def _reports_a_child(link: Mapping[str, Any]) -> bool:
    """A child-run failure, or the summary of a child's first error standing in for it."""
    name = link.get("name")
    return link.get("sourceCode") == CHILD_FAILED or (
        isinstance(name, str) and name.startswith(_OWN_PREFIX)
    )


def _is_marker(link: Mapping[str, Any]) -> bool:
    message = link.get("message")
    return link.get("name") == "Error" and isinstance(message, str) and message.startswith(_MARKERS)


def _phrase(link: Mapping[str, Any]) -> str:
    name, message = link.get("name"), link.get("message")
    text = message if isinstance(message, str) else ""
    if link.get("sourceCode") is not None or not isinstance(name, str) or not name:
        return text or "unknown error"
    return name if not text or text == name else f"{name}: {text}"


def format_duration(ms: float) -> str:
    """``<n>ms`` below a second, ``<x.y>s`` below a minute, else ``<m>m<s>s``."""
    ms = max(ms, 0.0)
    if round(ms) < 1000:
        return f"{round(ms)}ms"
    seconds = ms / 1000
    if round(seconds, 1) < 60:
        return f"{seconds:.1f}s"
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes}m{rest}s"


def format_run_list(trees: Iterable[RunTree]) -> str:
    """One line per root: ``<runId>  <pipelineId>  <status>  started <ISO-8601>[  <duration>]``.

    Empty input gives an empty string; otherwise every line ends with a newline.
    """
    lines = []
    for tree in trees:
        parts = [
            terminal_safe(tree.run_id),
            terminal_safe(tree.pipeline_id),
            tree.status,
            f"started {_iso(tree.started_at_ms)}",
        ]
        if tree.duration_ms is not None:
            parts.append(format_duration(tree.duration_ms))
        lines.append("  ".join(parts) + "\n")
    return "".join(lines)


def _iso(ms: int | None) -> str:
    if ms is None:
        return "unknown"
    try:
        moment = datetime.fromtimestamp(ms / 1000, tz=UTC)
    except (OverflowError, OSError, ValueError):
        return f"{ms}ms"
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


_Item: TypeAlias = "tuple[int, str] | tuple[int, RunTree]"


def format_tree(tree: RunTree) -> str:
    """The indented text of ``tree``: the run, its steps, agent turns and calls, child runs.

    Each run block starts ``Run <id>  <pipeline>  <status>[  <duration>][  dry run]``; failed
    runs add an ``error <code>  <summary>`` line (see :func:`describe_error`); agent runs add
    ``turn`` lines with their ``call`` lines (a failed call ends with its error's summary), and a
    call whose run started further runs (a subagent) shows that run's block below the call.
    """
    lines: list[str] = []
    stack: list[_Item] = [(0, tree)]
    while stack:
        depth, item = stack.pop()
        if isinstance(item, str):
            lines.append(_indent(depth) + item)
        else:
            stack.extend(reversed(_block(item, depth)))
    return "\n".join(lines) + "\n"


def _indent(depth: int) -> str:
    # Past a sane nesting depth, indenting further would make the text quadratic in the depth
    # of a (corrupt or hostile) trace; say how much deeper the line is instead.
    if depth <= _MAX_INDENT:
        return "  " * depth
    return "  " * _MAX_INDENT + f"[+{depth - _MAX_INDENT}] "


def _block(tree: RunTree, depth: int) -> list[_Item]:
    """The lines of one run and, as nested items, the run blocks below it."""
    header = ["Run " + terminal_safe(tree.run_id), terminal_safe(tree.pipeline_id), tree.status]
    if tree.duration_ms is not None:
        header.append(format_duration(tree.duration_ms))
    if tree.dry_run:
        header.append("dry run")
    items: list[_Item] = [(depth, "  ".join(header))]
    inner = depth + 1
    if tree.status == "waiting":  # stopped for approval: what it waits for, not an error
        items.append((inner, f"waiting  {terminal_safe(tree.error_summary or '')}"))
    elif tree.error_code is not None or tree.error_message is not None:
        message = terminal_safe(tree.error_summary or tree.error_message or "")
        items.append((inner, f"error {terminal_safe(tree.error_code or '?')}  {message}"))
    for step in tree.steps:
        parts = [f"step {terminal_safe(step.id)}", step.status]
        if step.reason is not None:
            parts.append(terminal_safe(step.reason))
        if step.duration_ms is not None:
            parts.append(format_duration(step.duration_ms))
        if step.error_code is not None and step.status != "waiting":
            parts.append(_code(step.error_code, step.source_code))
        items.append((inner, "  ".join(parts)))
    if tree.agent is None:
        items.extend((inner, child) for child in tree.children)
        return items
    agent = f"agent  {tree.agent.termination}"
    if tree.agent.resumed_turn is not None:
        bound = (tree.agent.limits or {}).get("max_turns")
        agent += f"  resumed at turn {tree.agent.resumed_turn}"
        agent += f" of at most {bound}" if bound is not None else ""
        if tree.agent.checkpoint_key is not None:
            agent += f" (checkpoint {terminal_safe(tree.agent.checkpoint_key)})"
    meters = budget_meters(tree.agent.limits or {}, tree.agent.usage)
    if meters:
        agent += f"  budget {meters}"
    items.append((inner, agent))
    by_id = {child.run_id: child for child in tree.children}
    shown: set[str] = set()
    for turn in tree.agent.turns:
        shown.add(turn.run_id)
        items.extend(_turn_items(turn, by_id.get(turn.run_id), inner))
    items.extend((inner, child) for child in tree.children if child.run_id not in shown)
    return items


def _turn_items(turn: TurnNode, run: RunTree | None, depth: int) -> list[_Item]:
    count = "?" if turn.call_count is None else str(turn.call_count)
    parts = [
        f"turn {'?' if turn.index is None else turn.index}",
        turn.decision or "?",
        f"{count} call" if count == "1" else f"{count} calls",
        turn.status,
    ]
    if run is not None and run.duration_ms is not None:
        parts.append(format_duration(run.duration_ms))
    if turn.error_code is not None and turn.status != "waiting":
        parts.append(terminal_safe(turn.error_code))
    items: list[_Item] = [(depth, "  ".join(parts))]
    children = {} if run is None else {child.run_id: child for child in run.children}
    for call in turn.calls:
        parts = [
            f"call {terminal_safe(call.call_id)}",
            terminal_safe(call.tool or "?"),
            call.status,
        ]
        if call.duration_ms is not None:
            parts.append(format_duration(call.duration_ms))
        call_run = children.pop(call.run_id, None) if call.run_id is not None else None
        if call.error_code is not None and call.status != "waiting":
            parts.append(_code(call.error_code, call.source_code))
            if call_run is not None and call_run.error_summary:
                parts.append(terminal_safe(call_run.error_summary))
        note = _MARKED.get(call.marked or "")
        if note:
            parts.append(note)
        if call.reason_given:
            parts.append("a reason was given (kept in the checkpoint, not the trace)")
        items.append((depth + 1, "  ".join(parts)))
        if call_run is not None and (call_run.agent is not None or call_run.children):
            items.append((depth + 2, call_run))
    # Whatever else the turn started (nothing, with today's harness) still shows.
    items.extend((depth + 1, child) for child in children.values())
    return items


#: What a call's ``agent.callStatus`` adds to its line (its status says the rest).
_MARKED: Final = {
    "interrupted": "running when the run stopped",
    "reconciled": "reconciled: running when the run stopped",
    "rerun": "run again: running when the run stopped",
    "restored": "done before the run stopped",
}


def _code(code: str, source: str | None) -> str:
    if source is None or source == code:
        return terminal_safe(code)
    return f"{terminal_safe(code)} ({terminal_safe(source)})"
