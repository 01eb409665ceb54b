"""Who approves tool calls in ``tubeless run``: ``--approve-all``, ``--deny-all``, or a person.

On a terminal (stdin and stderr both TTYs) each request is shown on stderr — tool, call id and
arguments (control characters made safe, long arguments cut) — and answered with click's
``[y/N]`` prompt; requests are asked one at a time, in the order they come. The prompt blocks in a
daemon thread, so the run's other calls, signals and the trace go on while a person reads; a
cancelled run stops waiting at once and never runs the call. The report's lines that fall due
while a prompt is open are held and printed once it is answered (or abandoned), so none is
written into the prompt's line. Without a terminal or a flag there
is no approver, and a call that needs approval fails the run with
``TUBELESS_APPROVAL_REQUIRED`` before any call of its batch starts.
"""

from __future__ import annotations

import asyncio
import json
import sys
import threading
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

import click

if TYPE_CHECKING:
    from tubeless import Pipeline

__all__ = [
    "HeldReport",
    "TerminalApprover",
    "choose_approver",
    "needs_approvals",
    "prompt_abandoned",
]

#: Arguments longer than this are cut on the prompt (the digest still covers all of them).
SHOWN_ARGUMENTS = 2000


class HeldReport(Protocol):
    """A report that can keep its lines while a prompt is open (the plain reporter)."""

    def hold(self) -> None: ...

    def release(self) -> None: ...


def needs_approvals(pipeline: Pipeline, seen: set[int] | None = None) -> bool:
    """Whether any agent in ``pipeline``'s tree has a tool that may need approval."""
    seen = set() if seen is None else seen
    if id(pipeline) in seen:
        return False
    seen.add(id(pipeline))
    for s in pipeline.steps:
        if s.agent is not None and any("approval" in c for c in s.agent.get("capabilities", ())):
            return True
        children = [*s.capabilities]
        if s.nested is not None:
            children.append(s.nested.pipeline)
        if any(needs_approvals(child, seen) for child in children):
            return True
    return False


def choose_approver(
    *, approve_all: bool, deny_all: bool, interactive: bool, report: HeldReport | None = None
) -> Callable[[Mapping[str, Any]], Any] | None:
    """The approver for the given flags (``None``: no approver); ``report`` is held while a
    terminal prompt is open."""
    if approve_all and deny_all:
        raise click.UsageError("Give --approve-all or --deny-all, not both.")
    if approve_all:
        return lambda request: True
    if deny_all:
        return lambda request: False
    if interactive:
        return TerminalApprover(report)
    return None


def _shown(request: Mapping[str, Any]) -> str:
    from tubeless.frozen import thaw
    from tubeless.tracing.projection import terminal_safe

    text = json.dumps(thaw(request["input"]), ensure_ascii=False, indent=2, sort_keys=True)
    if len(text) > SHOWN_ARGUMENTS:
        text = text[:SHOWN_ARGUMENTS] + f"\n… ({len(text) - SHOWN_ARGUMENTS} more characters)"
    lines = text.splitlines()
    return "\n".join("    " + terminal_safe(line) for line in lines)


def prompt_abandoned(approver: Any) -> bool:
    """Whether a prompt still waits for a line of stdin that the run no longer wants.

    Its daemon thread holds stdin's lock, which the interpreter's shutdown would wait for (and
    abort on), so the command leaves with ``os._exit`` once everything is flushed and closed.
    """
    return isinstance(approver, TerminalApprover) and approver.asking.is_set()


class TerminalApprover:
    """Asks a person on the terminal, one request at a time.

    Args:
        report: The run's report on the same terminal, held while a prompt is open.
    """

    def __init__(self, report: HeldReport | None = None) -> None:
        self._report = report
        self._turn = asyncio.Lock()
        self.asking = threading.Event()
        """Set while a prompt's thread waits for an answer."""

    async def __call__(self, request: Mapping[str, Any]) -> bool:
        from tubeless.tracing.projection import terminal_safe

        async with self._turn:
            text = (
                f"\napproval needed: tool {terminal_safe(str(request['tool']))!r}, "
                f"call {terminal_safe(str(request['call_id']))!r} "
                f"(turn {request['turn']}, {terminal_safe(str(request['route']))})\n"
                f"  arguments:\n{_shown(request)}\n"
            )
            return await _ask_in_thread(text, self.asking, self._report)


async def _ask_in_thread(
    text: str, asking: threading.Event, report: HeldReport | None = None
) -> bool:
    """``click.confirm`` in a daemon thread: a cancelled run never waits for the answer.

    ``report`` is held from before the prompt is drawn until it is answered, or until the run
    stops waiting for it.
    """
    loop = asyncio.get_running_loop()
    answer: asyncio.Future[bool] = loop.create_future()

    def settle(value: bool | BaseException) -> None:
        if answer.done():
            return
        if isinstance(value, BaseException):
            answer.set_exception(value)
        else:
            answer.set_result(value)

    def ask() -> None:
        try:
            click.echo(text, err=True, nl=False)
            value: bool | BaseException = click.confirm("Run this call?", default=False, err=True)
        except (click.Abort, EOFError, KeyboardInterrupt):
            value = False  # no answer is no
        except BaseException as exc:  # handed to the waiting run, which raises it
            value = exc
        finally:
            asking.clear()
            if report is not None:
                report.release()  # after the answer's newline, before the run goes on
        loop.call_soon_threadsafe(settle, value)

    if report is not None:
        report.hold()
    asking.set()
    threading.Thread(target=ask, name="tubeless-approval", daemon=True).start()
    try:
        return await answer
    finally:
        if report is not None:
            report.release()  # also when the run stopped waiting (a signal)
        sys.stderr.flush()
