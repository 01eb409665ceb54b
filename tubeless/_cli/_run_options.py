"""The options every ``tubeless run`` entry command has, beside the flags derived from its input.

The project path and the entry id are found among the arguments before the entry's own command
exists (``run`` and completion), so the names of these options, and which of them take a value,
are read here from the options themselves (:data:`OPTION_NAMES`, :data:`VALUE_OPTIONS`): a list
kept by hand drifted from them once (``run p.yaml --otel nosuch`` was "No such option").
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from tubeless._cli._cassette import cassette_params

if TYPE_CHECKING:
    from tubeless import Pipeline

__all__ = ["OPTION_NAMES", "VALUE_OPTIONS", "builtin_params", "nonblank"]


def nonblank(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    if value is not None and not value.strip():
        raise click.BadParameter("must not be blank")
    return value


def builtin_params(entry: Pipeline | None, *, is_agent: bool | None) -> list[click.Parameter]:
    """The options every entry has; ``entry=None`` when the entry is not known (``--help``)."""
    targets = click.Choice(list(entry.target_ids)) if entry is not None else None
    steps = click.Choice(list(entry.step_ids)) if entry is not None else None
    params: list[click.Parameter] = [
        click.Option(
            ["--input", "input_json"],
            default=None,
            metavar="JSON",
            help="The whole input as JSON; flags override its top-level keys.",
        ),
        click.Option(
            ["--input-file"],
            default=None,
            metavar="FILE",
            help="Read the input from FILE (JSON, or YAML for .yaml/.yml; - for stdin).",
        ),
        click.Option(
            ["--dry-run"],
            is_flag=True,
            help="A preview run: a step with a dry_run preview runs it instead of its "
            "handler, dry_run: skip skips it, and a step without dry_run runs as usual; "
            "an agent decides with its dry_run source (skipped without one) and each "
            "tool runs its preview or is skipped.",
        ),
        click.Option(
            ["--target"],
            multiple=True,
            type=targets,
            metavar=None if targets else "T",
            help="A declared target to reach (repeatable).",
        ),
        click.Option(
            ["--step"],
            multiple=True,
            type=steps,
            metavar=None if steps else "S",
            help="An exact step to run (repeatable).",
        ),
        click.Option(
            ["--continue-on-error"],
            is_flag=True,
            help="Keep running independent steps after a failure.",
        ),
        click.Option(
            ["--trace"],
            multiple=True,
            metavar="PATH|-",
            help="Record the run: .ndjson/.jsonl, .sqlite/.sqlite3/.db, a "
            "postgresql:// URL (tubeless[postgres]), or - for NDJSON on stdout (repeatable).",
        ),
        click.Option(
            ["--otel"],
            is_flag=True,
            help="Also send the run's spans over OTLP/HTTP, configured by the "
            "OTEL_EXPORTER_OTLP_* and OTEL_SERVICE_NAME variables (tubeless[otel]).",
        ),
        click.Option(["--quiet", "-q"], is_flag=True, help="Print no run report."),
        click.Option(
            ["--run-id"],
            default=None,
            metavar="ID",
            callback=nonblank,
            help="The root run's id (default: <entry id>:<uuid>).",
        ),
        click.Option(
            ["--correlation-id"],
            default=None,
            metavar="ID",
            callback=nonblank,
            help="An id recorded on every run of the tree, to tie runs together.",
        ),
        *cassette_params(),
        click.Option(
            ["--approve-all"],
            is_flag=True,
            help="Approve every tool call that needs approval (for scripts).",
        ),
        click.Option(
            ["--deny-all"],
            is_flag=True,
            help="Deny every tool call that needs approval (they become "
            "TUBELESS_TOOL_DENIED outcomes). Without either flag a terminal asks.",
        ),
        click.Option(
            ["--checkpoints"],
            default=None,
            metavar="PATH|URL",
            help="Commit the run's progress to this SQLite checkpoint file (or the "
            "PostgreSQL database of a postgresql:// URL); the same command again resumes it "
            "(or prints its saved result).",
        ),
        click.Option(
            ["--key"],
            default=None,
            metavar="KEY",
            help="The checkpoint key (default: <entry id>:<input digest>).",
        ),
        click.Option(
            ["--restart"],
            is_flag=True,
            help="Start the checkpoint key over instead of resuming it.",
        ),
    ]
    if not is_agent:
        where = "" if is_agent is False else " (pipelines only)"
        params.append(
            click.Option(
                ["--max-concurrency"],
                type=click.IntRange(min=1),
                default=1,
                show_default=True,
                help=f"Steps of this pipeline running at once{where}.",
            )
        )
    return params


def _names() -> tuple[frozenset[str], frozenset[str]]:
    """Every spelling of the built-in options (``--help``/``-h`` included), and those taking a
    value; from the options of an entry not yet known, which has every one of them."""
    names: set[str] = {"--help", "-h"}
    valued: set[str] = set()
    for param in builtin_params(None, is_agent=None):
        if not isinstance(param, click.Option):
            continue
        spellings = (*param.opts, *param.secondary_opts)
        names.update(spellings)
        if not (param.is_flag or param.count):
            valued.update(spellings)
    return frozenset(names), frozenset(valued)


#: Every spelling of every built-in option of an entry command (``--quiet``, ``-q``, ``--help``).
#: VALUE_OPTIONS: those of them that take a value (the next argument is theirs).
OPTION_NAMES, VALUE_OPTIONS = _names()
