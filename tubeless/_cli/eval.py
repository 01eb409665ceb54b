"""``tubeless eval PROJECT CASES``: run a cases file and check every expectation (DESIGN.md §13).

Prints a results table on stdout, writes JUnit XML with ``--junit``, exits 0 when every case
passed, 6 otherwise (a failure or an error), 7 when a signal cancelled the run. ``--hide-values``
keeps expected and actual values out of both, for public CI logs.
"""

from __future__ import annotations

from pathlib import Path

import click

from tubeless._cli._engine_options import engine_options
from tubeless._cli._exit import EXIT_CANCELLED, EXIT_EXECUTION, EXIT_OK
from tubeless._cli.batch import load_entry, run_cli_batch

__all__ = ["eval_"]


@click.command("eval")
@click.argument("project", metavar="PROJECT")
@click.argument("cases", metavar="CASES")
@click.option("--junit", default=None, metavar="FILE", help="Write JUnit XML to FILE.")
@click.option(
    "--hide-values",
    is_flag=True,
    help="Show where a result differs, not the expected and actual values (public CI logs).",
)
@engine_options("case", "run")
@click.option(
    "--replay",
    default=None,
    metavar="DIR",
    help="Replay each case without a cassette: of its own from DIR/<case id>"
    ".cassette.jsonl (no model); a case that diverges fails.",
)
@click.option(
    "--record",
    default=None,
    metavar="DIR",
    help="Record each case's cassette into DIR/<case id>.cassette.jsonl (mode 0600).",
)
@click.pass_context
def eval_(
    ctx: click.Context,
    project: str,
    cases: str,
    junit: str | None,
    hide_values: bool,
    engine: str,
    concurrency: int,
    ray_address: str | None,
    row_retries: int,
    trace: tuple[str, ...],
    replay: str | None,
    record: str | None,
) -> None:
    """Run the cases of CASES (YAML) on PROJECT and check each case's expectations."""
    from tubeless.batch._spi import (
        RowOutcome,
        case_cassettes,
        case_rows,
        check_case,
        format_table,
        junit_xml,
    )
    from tubeless.project.cases import load_cases

    if not Path(cases).is_file():
        raise FileNotFoundError(2, "No such file or directory", cases)
    if replay is not None and record is not None:
        raise click.UsageError("Give --replay or --record, not both.", ctx=ctx)
    if replay is not None and not Path(replay).is_dir():
        raise FileNotFoundError(2, "No such directory", replay)
    loaded = load_cases(cases)
    if record is not None:
        Path(record).mkdir(mode=0o700, parents=True, exist_ok=True)
        records = {
            i: str(Path(record).resolve() / f"{case.spec.id}.cassette.jsonl")
            for i, case in enumerate(loaded.cases)
        }
        replays = None
    else:
        records, replays = None, case_cassettes(loaded.cases, replay)
    entry, entry_id = load_entry(project, loaded.entry)
    outcomes: list[RowOutcome] = []
    code = run_cli_batch(
        project,
        entry,
        entry_id,
        case_rows(loaded.cases),
        output=None,
        concurrency=concurrency,
        engine=engine,
        ray_address=ray_address,
        trace=trace,
        retry_failed=False,
        fail_fast=False,
        collect=outcomes,
        label="eval",
        replays=replays,
        records=records,
        row_retries=row_retries,
    )
    by_index = {outcome.row["index"]: outcome for outcome in outcomes}
    results = [
        check_case(case, by_index[i]) for i, case in enumerate(loaded.cases) if i in by_index
    ]
    for line in format_table(results, values=not hide_values):
        click.echo(line)
    if junit is not None:
        junit_xml(
            results, suite=Path(cases).stem, entry=entry.id, path=junit, values=not hide_values
        )
    if code == EXIT_CANCELLED:
        ctx.exit(EXIT_CANCELLED)
    passed = len(results) == len(loaded.cases) and all(r.passed for r in results)
    ctx.exit(EXIT_OK if passed else EXIT_EXECUTION)
