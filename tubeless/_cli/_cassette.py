"""``run --record FILE`` / ``run --replay FILE``: the cassette a run records or replays.

The options are checked before anything opens (a cassette that is also a ``--trace``,
``--checkpoints`` or ``--input-file`` file is refused, exit 1); :func:`cassette_for` gives the
context the run goes inside.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import click

from tubeless._cli._paths import refuse_shared_files, same_file

__all__ = ["cassette_for", "cassette_params"]

_REPLAY_ONLY = ("replay_outcomes", "show_values", "allow_changed_definition")


def cassette_params() -> list[click.Parameter]:
    """The record and replay options of ``run``."""
    return [
        click.Option(
            ["--record"],
            default=None,
            metavar="FILE",
            help="Record the agent's decisions, outcomes and result into the cassette "
            "FILE (JSONL, mode 0600; it holds inputs and outputs, never a key).",
        ),
        click.Option(
            ["--replay"],
            default=None,
            metavar="FILE",
            help="Take the decisions from the cassette FILE (no model, no key); tools "
            "run and each outcome must match the recording.",
        ),
        click.Option(
            ["--replay-outcomes"],
            is_flag=True,
            help="With --replay: take the outcomes from the cassette too (no tool runs).",
        ),
        click.Option(
            ["--show-values"],
            is_flag=True,
            help="With --replay: quote the recorded and live values of a divergence.",
        ),
        click.Option(
            ["--allow-changed-definition"],
            is_flag=True,
            help="With --replay: replay a cassette recorded for another definition, "
            "and say what changed.",
        ),
    ]


def check_cassette_options(options: dict[str, Any]) -> None:
    """Refuse combinations that make no sense (usage errors, exit 1)."""
    record, replay = options.get("record"), options.get("replay")
    if record is not None and replay is not None:
        raise click.UsageError("Give --record or --replay, not both.")
    for name in _REPLAY_ONLY:
        if options.get(name) and replay is None:
            raise click.UsageError(f"--{name.replace('_', '-')} needs --replay FILE.")
    cassette = record if record is not None else replay
    refuse_shared_files(
        [
            ("--record" if record is not None else "--replay", cassette),
            ("--checkpoints", options.get("checkpoints")),
            ("--input-file", options.get("input_file")),
        ]
    )
    if cassette is None:
        return
    if not cassette.strip():
        raise click.UsageError("The cassette FILE must not be blank.")
    for target in options.get("trace") or ():
        if target != "-" and same_file(cassette, target):
            raise click.UsageError(
                f"The cassette and the --trace file must differ: {cassette} is both "
                "(a cassette holds data that traces never record)."
            )


@contextlib.contextmanager
def cassette_for(options: dict[str, Any]) -> Iterator[None]:
    """The run's cassette context; replay differences are printed as ``warning:`` lines."""
    record, replay = options.get("record"), options.get("replay")
    if record is None and replay is None:
        yield
        return
    from tubeless.testing import record as recording
    from tubeless.testing import replay as replaying

    if record is not None:
        with recording(record):
            yield
        return
    assert replay is not None
    with replaying(
        replay,
        outcomes=bool(options.get("replay_outcomes")),
        show_values=bool(options.get("show_values")),
        allow_changed_definition=bool(options.get("allow_changed_definition")),
    ) as session:
        try:
            yield
        finally:
            for difference in session.differences:
                click.echo(f"warning: {difference}; replayed anyway", err=True)
