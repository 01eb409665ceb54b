"""``tubeless checkpoints list|show|delete``, and the checkpoint side of ``tubeless run``.

A checkpoint file holds each run's state and inputs; ``show`` prints them only with
``--state``. The file is never a trace file (``run`` refuses the same path for both).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from tubeless._cli._exit import CliLoadError

if TYPE_CHECKING:
    from tubeless.durable import CheckpointStore
    from tubeless.pipeline import Pipeline

__all__ = ["checkpoints", "open_for_run", "report_waiting"]


def _open(path: str) -> CheckpointStore:
    """An existing checkpoint file (a missing one is not created: exit 2), or the database a
    ``postgresql://`` URL names."""
    from tubeless.durable import is_database_url, open_checkpoints

    if not is_database_url(path) and not Path(path).exists():
        raise FileNotFoundError(2, "No such file or directory", path)
    return open_checkpoints(path)


def _shown(path: str) -> str:
    """A checkpoint file or URL as it may be printed (a URL without its password)."""
    from tubeless.durable import redact_dsn

    return redact_dsn(path) if "://" in path else path


def _echo(text: str, *, err: bool = False) -> None:
    """One line, with control and bidi characters replaced (keys and ids are user data)."""
    from tubeless.tracing.projection import terminal_safe

    click.echo(terminal_safe(text), err=err)


def _same_file(a: str, b: str) -> bool:
    if a == "-" or b == "-" or "://" in a or "://" in b:
        return False  # one database may hold checkpoints and traces (tables of their own)
    if os.path.exists(a) and os.path.exists(b):
        return os.path.samefile(a, b)
    return os.path.abspath(a) == os.path.abspath(b)


def open_for_run(
    path: str, traces: tuple[str, ...], entry: Pipeline, raw: Any, key: str | None, restart: bool
) -> tuple[CheckpointStore, str]:
    """The store and key of ``run --checkpoints``; says on stderr what the run will do."""
    from tubeless.durable import open_checkpoints
    from tubeless.durable._spi import find_key
    from tubeless.pipeline._spi import checkpoint_keys, validated_or_unvalidated
    from tubeless.tracing.projection import terminal_safe

    for trace in traces:
        if _same_file(path, trace):
            raise click.UsageError(
                f"--checkpoints and --trace name the same file ({path}): a checkpoint file "
                "holds state and inputs, a trace never does; use two files"
            )
    earlier = None
    if key is None:
        key, earlier = checkpoint_keys(entry.id, raw, validated_or_unvalidated(entry, raw))
    store = open_checkpoints(path)
    try:
        resolved = find_key(store, key, earlier)
        with store.acquire(resolved) as lease:  # fails fast while another run holds the key
            text = _read_for_run(lease, restart)
        line = f"checkpoint: {resolved}{_what(text, resolved, entry.id, restart)}"
        click.echo(terminal_safe(line), err=True)
        if text is None:
            _note_unfinished(store, path, entry.id, resolved)
    except BaseException:
        store.close()
        raise
    return store, resolved


def _note_unfinished(store: CheckpointStore, path: str, entry_id: str, key: str) -> None:
    """One ``note:`` line naming an unfinished key of the same entry, when a run starts a new
    one: the same task spelled another way (or keyed by hand) would otherwise be run twice."""
    import shlex

    from tubeless.durable._spi import unfinished_of

    found = unfinished_of(store.list(), entry_id, but=key)
    if not found:
        return
    stored, turn = found[0]
    at = f" (turn {turn})" if turn is not None else ""
    more = f" and {len(found) - 1} more (tubeless checkpoints list)" if len(found) > 1 else ""
    _echo(
        f"note: {_shown(path)} also holds unfinished checkpoint {stored.key} of {entry_id}"
        f"{at}{more}; "
        f"to resume it, run with --key {shlex.quote(stored.key)}",
        err=True,
    )


def _read_for_run(lease: Any, restart: bool) -> str | None:
    """The key's document; under ``--restart`` a file that lost commits is started over."""
    from tubeless.errors import CHECKPOINT_CORRUPT, CheckpointError

    try:
        text: str | None = lease.read()
    except CheckpointError as exc:
        if not restart or exc.code != CHECKPOINT_CORRUPT:
            raise
        return ""  # something was there: "(restarting)"
    return text


def _what(text: str | None, key: str, entry_id: str, restart: bool) -> str:
    if restart:
        return " (restarting)" if text is not None else " (new)"
    if text is None:
        return " (new)"
    from tubeless.durable._spi import CheckpointDocument

    # Refused before the run: an unreadable file, exit 2.
    document = CheckpointDocument.from_json(text, key)
    status = document.status
    if status == "completed":
        return " (completed: its saved result follows, nothing runs)"
    if status == "failed":
        return " (failed: its saved failure follows; --restart runs it again)"
    root = document.agents.get(entry_id)
    where = "resuming" if root is None else f"resuming at turn {root.turn}"
    if status == "waiting":
        count = len(document.pending())
        if count == 0:  # an on_limit: wait budget, not raised yet
            return f" ({where}; waiting for a raised budget: tubeless checkpoints raise)"
        return f" ({where}; {count} call{'' if count == 1 else 's'} still waiting for approval)"
    return f" ({where})"


def report_waiting(run_record: Any, path: str) -> int | None:
    """Exit 8 (DESIGN.md §17) for a run that stopped waiting for approval, with one line per
    pending call and the commands that decide it; ``None`` for any other failure."""
    import shlex

    from tubeless._cli._exit import EXIT_WAITING
    from tubeless.agent import ApprovalWaiting
    from tubeless.pipeline._spi import original_exception

    waits = [original_exception(error.exception) for error in run_record.errors]
    if waits and _budget_waiting(waits[0], path):
        return EXIT_WAITING
    found = [w for w in waits if isinstance(w, ApprovalWaiting)]
    if not found or not isinstance(waits[0], ApprovalWaiting):
        return None
    first = found[0]
    click.echo(f"waiting: {first.code}: {first.message}", err=True)  # not an error: exit 8
    pending = [request for waiting in found for request in waiting.pending]
    ids = [str(request["call_id"]) for request in pending]
    for request in pending:
        call_id = str(request["call_id"])
        words = [shlex.quote(_shown(path)), shlex.quote(first.key), shlex.quote(call_id)]
        if ids.count(call_id) > 1:
            words += ["--route", shlex.quote(str(request["route"]))]
        command = " ".join(words)
        _echo(
            f"waiting: call {call_id!r} to tool {str(request['tool'])!r} "
            f"(agent {request['route']}, turn {request['turn']})",
            err=True,
        )
        _echo(f"  approve: tubeless approve {command}", err=True)
        _echo(f"  deny:    tubeless deny {command} [--reason TEXT]", err=True)
    return EXIT_WAITING


def _budget_waiting(error: Any, path: str) -> bool:
    """For a run stopped by ``on_limit: wait``: the budget, and the command that raises it."""
    import shlex

    from tubeless.agent import BudgetWaiting
    from tubeless.durable._spi import BUDGET_FLAGS

    if not isinstance(error, BudgetWaiting):
        return False
    click.echo(f"waiting: {error.code}: {error.message}", err=True)  # not an error: exit 8
    flag = BUDGET_FLAGS.get(error.limit, "--max-cost-usd")
    words = ["tubeless checkpoints raise", shlex.quote(path), shlex.quote(error.key), flag, "N"]
    if error.route is not None and "/" in error.route:  # a child agent's own budget
        words += ["--route", shlex.quote(error.route)]
    _echo(f"  raise:  {' '.join(words)}   (then run the same command again)", err=True)
    return True


@click.group("checkpoints", short_help="List, show, delete or raise the checkpoints of a file.")
def checkpoints() -> None:
    """List, show, delete or raise the checkpoints of a checkpoint file or a postgresql://
    URL (run --checkpoints PATH|URL)."""


#: How many keys an "unknown key" error lists.
_MAX_LISTED_KEYS = 10


def _status(row: dict[str, Any]) -> str:
    """The status a person reads: who holds a live key, and whether a dead run's key resumes."""
    held = row.get("held_by")
    if held is not None:
        from tubeless.durable._spi import LeaseHolder

        return f"{row['status']} ({LeaseHolder(pid=held['pid'], host=held['host'])})"
    if row.get("interrupted"):
        return "interrupted: the same command resumes it"
    return str(row["status"])


def _local_time(updated_at_ms: int) -> str:
    """Epoch milliseconds as this machine's local date and time."""
    from datetime import datetime

    return datetime.fromtimestamp(updated_at_ms / 1000).strftime("%Y-%m-%d %H:%M:%S")


def _line(row: dict[str, Any]) -> str:
    waiting = f"pending={','.join(row['pending'])}  " if row.get("pending") else ""
    return (
        f"{row['key']}  {row['entry']}  {_status(row)}  turn={row['turn']}  "
        f"calls={row['calls']}  {waiting}updated {_local_time(row['updated_at_ms'])}"
    )


def _unknown(key: str, path: str, keys: list[str]) -> CliLoadError:
    """``no checkpoint KEY``, listing the keys the file holds."""
    path = _shown(path)
    if not keys:
        return CliLoadError(f"no checkpoint {key!r} in {path}; it holds none")
    listed = ", ".join(keys[:_MAX_LISTED_KEYS])
    more = len(keys) - _MAX_LISTED_KEYS
    suffix = f" (and {more} more)" if more > 0 else ""
    return CliLoadError(f"no checkpoint {key!r} in {path}; it holds: {listed}{suffix}")


@checkpoints.command("list")
@click.argument("path", type=click.Path(dir_okay=False))
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def list_(path: str, as_json: bool) -> None:
    """One line per key: status (a live run's holder, or a dead run's key that resumes),
    turn, calls, last update."""
    from tubeless.durable._spi import summary

    store = _open(path)
    try:
        rows = [summary(stored, store) for stored in store.list()]
    finally:
        store.close()
    if as_json:
        click.echo(json.dumps({"checkpoints": rows}, ensure_ascii=False))
        return
    if not rows:
        click.echo("no checkpoints")
    for row in rows:
        _echo(_line(row))


@checkpoints.command("show")
@click.argument("path", type=click.Path(dir_okay=False))
@click.argument("key")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.option(
    "--state",
    "values",
    is_flag=True,
    help="Also print state, call inputs, outcomes and results (private data).",
)
def show(path: str, key: str, as_json: bool, values: bool) -> None:
    """One key: every agent's phase, turn, budgets and calls.

    KEY may be the start of a key that begins no other key of PATH.
    """
    from tubeless.durable._spi import describe

    store = _open(path)
    try:
        stored = store.list()
        found = [s for s in stored if s.key == key] or [s for s in stored if s.key.startswith(key)]
        if not found:
            raise _unknown(key, path, [s.key for s in stored])
        if len(found) > 1:
            listed = ", ".join(s.key for s in found[:_MAX_LISTED_KEYS])
            more = len(found) - _MAX_LISTED_KEYS
            suffix = f" (and {more} more)" if more > 0 else ""
            raise CliLoadError(
                f"checkpoint {key!r} is ambiguous: {len(found)} keys in {_shown(path)} begin "
                "with it: "
                f"{listed}{suffix}"
            )
        shown = describe(found[0], values=values, store=store)
    finally:
        store.close()
    if as_json:
        click.echo(json.dumps(shown, ensure_ascii=False))
        return
    _echo(_line({**shown, "pending": ()}))  # the waiting calls have lines of their own
    for agent in shown["agents"]:
        budget = agent["budget"]
        _echo(
            f"  agent {agent['route']}: {agent['phase']}, turn {agent['turn']}, "
            f"calls={budget['calls']} decisions={budget['decisions']} depth={budget['depth']}"
        )
        usage = budget.get("usage")
        if usage:
            _echo(f"    budgets: {_meters(usage)}")
        for call in (agent.get("decision") or {}).get("calls", ()):
            _echo(f"    call {call['id']} ({call['tool']}, {call['replay']}): {call['status']}")
        if "failure" in agent:
            _echo(f"    failure: {agent['failure'].get('code')}")
        if values:
            _echo(f"    state: {json.dumps(agent.get('state'), ensure_ascii=False)}")
    for request in shown["pending"]:
        _echo(
            f"  waiting: call {request['call_id']} ({request['tool']}, agent "
            f"{request['route']}, turn {request['turn']})"
        )


def _meters(usage: dict[str, Any]) -> str:
    """``max_cost_usd $0.42 of $2.00, max_total_tokens 31k of 100k`` (waiting: named)."""
    from tubeless.tracing.meters import meter

    parts = []
    tokens_in, tokens_out = int(usage.get("input_tokens", 0)), int(usage.get("output_tokens", 0))
    consumed = {
        "max_input_tokens": tokens_in,
        "max_output_tokens": tokens_out,
        "max_total_tokens": tokens_in + tokens_out,
        "max_cost_usd": usage.get("cost_usd", "0"),
    }
    for name, bound in sorted((usage.get("bounds") or {}).items()):
        parts.append(f"{name} {meter(name, consumed.get(name, 0), bound)}")
    waiting = usage.get("waiting")
    return ", ".join(parts) + (f" (waiting for a higher {waiting})" if waiting else "")


@checkpoints.command("delete")
@click.argument("path", type=click.Path(dir_okay=False))
@click.argument("key")
def delete(path: str, key: str) -> None:
    """Remove one key (waits for no one: a key in use is refused)."""
    store = _open(path)
    try:
        removed = store.delete(key)
        if not removed:  # never a prefix: deleting is not undone
            raise _unknown(key, path, [stored.key for stored in store.list()])
    finally:
        store.close()
    _echo(f"deleted {key}")


@checkpoints.command("raise")
@click.argument("path", type=click.Path(dir_okay=False))
@click.argument("key")
@click.option("--max-input-tokens", default=None, metavar="N", help="A higher input-token bound.")
@click.option("--max-output-tokens", default=None, metavar="N", help="A higher output-token bound.")
@click.option("--max-total-tokens", default=None, metavar="N", help="A higher total-token bound.")
@click.option("--max-cost-usd", default=None, metavar="X", help="A higher bound in US dollars.")
@click.option(
    "--route",
    default=None,
    metavar="ROUTE",
    help="The agent whose budget to raise, by its route (as show and the waiting message "
    "name it); default: the top-level agents.",
)
def raise_(
    path: str,
    key: str,
    max_input_tokens: str | None,
    max_output_tokens: str | None,
    max_total_tokens: str | None,
    max_cost_usd: str | None,
    route: str | None,
) -> None:
    """Raise token or cost budgets of checkpoint KEY in PATH (for that key only, never below
    what it consumed); the same run command then resumes it. A child agent's budget is
    raised with --route ROUTE."""
    from tubeless.durable._spi import parse_amount, raise_budgets

    given = {
        "max_input_tokens": max_input_tokens,
        "max_output_tokens": max_output_tokens,
        "max_total_tokens": max_total_tokens,
        "max_cost_usd": max_cost_usd,
    }
    try:
        raised = {name: parse_amount(name, v) for name, v in given.items() if v is not None}
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    if not raised:
        raise click.UsageError(
            "give a budget to raise: --max-input-tokens, --max-output-tokens, "
            "--max-total-tokens or --max-cost-usd"
        )
    store = _open(path)
    try:
        with store.acquire(key) as lease:  # fails fast while a run holds the key
            text = lease.read()
            if text is None:
                raise _unknown(key, path, [stored.key for stored in store.list()])
            try:
                updated, changes = raise_budgets(text, key, raised, route)
            except LookupError as exc:
                raise CliLoadError(str(exc.args[0])) from None
            lease.write(updated)
    finally:
        store.close()
    for change in changes:
        _echo(f"raised {change}")
    _echo(f"checkpoint {key!r}: run the same command again to resume it")
