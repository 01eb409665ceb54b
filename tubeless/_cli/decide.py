"""``tubeless approve|deny PATH KEY CALL_ID``: decide a call a checkpointed run waits for.

The decision is written into the key's checkpoint document under the key's lease (a run holding
the key refuses it: ``TUBELESS_CHECKPOINT_LOCKED``); it binds to the pending request's exact
digest. ``tubeless run ... --checkpoints PATH --key KEY`` then resumes the run.
"""

from __future__ import annotations

import click

from tubeless._cli._exit import CliLoadError
from tubeless._cli.checkpoints import _echo, _open, _unknown

__all__ = ["approve", "deny"]

_ROUTE_HELP = "The agent route of the call, when calls of several agents share its id."


def _decide(
    path: str, key: str, call_id: str, *, approved: bool, reason: str | None, route: str | None
) -> None:
    from tubeless.durable._spi import record_decision

    store = _open(path)
    try:
        with store.acquire(key) as lease:  # fails fast while a run holds the key
            text = lease.read()
            if text is None:
                raise _unknown(key, path, [stored.key for stored in store.list()])
            try:
                updated = record_decision(
                    text, key, call_id, approved=approved, reason=reason, route=route
                )
            except LookupError as exc:
                raise CliLoadError(str(exc.args[0])) from None
            lease.write(updated)
    finally:
        store.close()
    verb = "approved" if approved else "denied"
    _echo(f"{verb} call {call_id!r} of checkpoint {key!r}; rerun the key to resume it")


@click.command("approve", short_help="Approve a call a checkpointed run waits for.")
@click.argument("path", type=click.Path(dir_okay=False))
@click.argument("key")
@click.argument("call_id")
@click.option("--route", default=None, help=_ROUTE_HELP)
def approve(path: str, key: str, call_id: str, route: str | None) -> None:
    """Approve call CALL_ID of checkpoint KEY in PATH (it runs when the key is run again)."""
    _decide(path, key, call_id, approved=True, reason=None, route=route)


@click.command("deny", short_help="Deny a call a checkpointed run waits for.")
@click.argument("path", type=click.Path(dir_okay=False))
@click.argument("key")
@click.argument("call_id")
@click.option(
    "--reason",
    default=None,
    metavar="TEXT",
    help="Why; the model sees it in the TUBELESS_TOOL_DENIED outcome.",
)
@click.option("--route", default=None, help=_ROUTE_HELP)
def deny(path: str, key: str, call_id: str, reason: str | None, route: str | None) -> None:
    """Deny call CALL_ID of checkpoint KEY in PATH (the run's reducer gets a denied outcome)."""
    _decide(path, key, call_id, approved=False, reason=reason, route=route)
