"""``tubeless batch PROJECT [ID] INPUTS``: run one entry over a dataset (DESIGN.md §13).

Rows go to ``--output`` (JSONL; appended as they finish, rewritten in input order at the end)
or, without it, to stdout in input order. Progress and the summary go to stderr: a rich bar on
a terminal, plain lines otherwise. Exit 0 when every row completed, 6 if any failed, 7 when a
signal cancelled the batch.
"""

from __future__ import annotations

import heapq
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

import click

from tubeless._cli._engine_options import engine_options
from tubeless._cli._exit import EXIT_CANCELLED, EXIT_EXECUTION, EXIT_OK, CliLoadError
from tubeless._cli._paths import refuse_shared_files
from tubeless._cli._sink_warnings import SinkWarnings

if TYPE_CHECKING:
    import asyncio

    from tubeless.batch._spi import InputRow, InputSource, RowOutcome
    from tubeless.pipeline import Pipeline

__all__ = ["BatchProgress", "batch", "load_entry"]

# Failed rows listed by name on a terminal at the end; the output file holds them all.
_LISTED = 50
# Plain progress lines of a stream of rows (their number unknown): one every this many rows.
_EVERY = 1000
# Seconds between two redraws of the bar (rich's own pace: ten a second).
_REDRAW_S = 0.1


def load_entry(path: str, entry_id: str | None) -> tuple[Pipeline, str | None]:
    """The project's entry (exit 2 for a missing file or unknown id), and the id asked for."""
    from tubeless._cli._entry import load

    project = load(path)
    try:
        return project.entry(entry_id), entry_id
    except KeyError as exc:
        raise CliLoadError(str(exc.args[0])) from None


def read_rows(inputs: str) -> InputSource:
    """The inputs, opened (exit 2 when the file is missing or not a list of inputs); rows are
    read as the batch needs them."""
    from tubeless.batch._spi import open_inputs
    from tubeless.errors import BatchError

    if inputs != "-" and not Path(inputs).exists():
        raise FileNotFoundError(2, "No such file or directory", inputs)
    try:
        return open_inputs(inputs)
    except BatchError as exc:
        raise CliLoadError(f"{exc.code}: {exc.message}") from None
    except UnicodeDecodeError:
        raise CliLoadError(f"{inputs}: not UTF-8 text") from None


class BatchProgress:
    """Progress on stderr: a rich bar (done, failed, rate, ETA) on a terminal, else plain lines.

    Plain lines: one per failed row, and one each time another tenth of the rows is done (when
    the number of rows is not known, a stream: every :data:`_EVERY` rows). The bar shows only
    how many rows failed, so on a terminal :meth:`failed_lines` lists them after the summary;
    only the first ``_LISTED`` failed rows (by index) are kept for that.

    The bar is redrawn from the batch's event loop (:meth:`attach`), not by rich's refresh
    thread: a driver with a second thread may not fork its ``process`` workers, and would spawn
    fresh interpreters instead (``tubeless.batch._fork``). Rows go to the real stdout: only
    stderr passes through the bar (what a handler prints there shows above it).
    """

    def __init__(
        self, stream: TextIO, total: int | None, *, live: bool | None = None, label: str = "batch"
    ) -> None:
        from tubeless.reporting.plain import stream_is_terminal

        self.stream = stream
        self.label = label
        self.total = total
        self.done = 0
        self.failed = 0
        self.reused = 0
        self._failures: list[tuple[int, int, dict[str, Any]]] = []  # a heap of the first ones
        self.live = False
        self._started = time.perf_counter()
        self._next_tenth = 1
        self._bar: Any = None
        self._task: Any = None
        self._redraw: asyncio.TimerHandle | None = None
        if stream_is_terminal(stream) if live is None else live:
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeRemainingColumn,
            )

            self._bar = Progress(
                TextColumn(label),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.fields[failed]} failed"),
                TextColumn("{task.fields[rate]}"),
                TimeRemainingColumn(),
                console=Console(file=stream),
                transient=False,
                auto_refresh=False,  # no thread: attach() redraws it from the event loop
                redirect_stdout=False,  # stdout holds the rows
            )
            self._task = self._bar.add_task("rows", total=total, failed=0, rate="")
            self._bar.start()
            self.live = True

    def attach(self) -> None:
        """Called in the batch's event loop: redraw the bar every ``_REDRAW_S`` from it (the
        rate and time left move while no row finishes) until :meth:`detach`."""
        import asyncio

        if self._bar is not None and self._redraw is None:
            self._redraw = asyncio.get_running_loop().call_later(_REDRAW_S, self._redrawn)

    def _redrawn(self) -> None:
        import asyncio

        if self._bar is None or self._redraw is None:
            return
        self._bar.refresh()
        self._redraw = asyncio.get_running_loop().call_later(_REDRAW_S, self._redrawn)

    def detach(self) -> None:
        """Called before the event loop ends: no more redraws from it (:meth:`close` draws the
        bar a last time)."""
        if self._redraw is not None:
            self._redraw.cancel()
            self._redraw = None

    def row(self, outcome: RowOutcome, reused: bool) -> None:
        self.done += 1
        self.reused += reused
        row = outcome.row
        if row["status"] == "failed":
            self.failed += 1
            self._keep_failure(row)
        ran = self.done - self.reused
        elapsed = time.perf_counter() - self._started
        rate = f"{ran / elapsed:.1f} rows/s" if ran and elapsed > 0 else ""
        if self._bar is not None:
            self._bar.update(self._task, completed=self.done, failed=self.failed, rate=rate)
            return
        if row["status"] == "failed" and self.label == "batch":  # eval's table says it
            error = row.get("error", {})
            self._line(f"row {row['index']} failed: {error.get('code')}: {error.get('message')}")
        if self.total is None:
            if self.done % _EVERY == 0 and self.label == "batch":
                self._line(f"batch: {self.done} rows done, {self.failed} failed")
            return
        if self.total and self.done * 10 >= self._next_tenth * self.total:
            while self.done * 10 >= self._next_tenth * self.total:
                self._next_tenth += 1
            if self.label == "batch":
                self._line(
                    f"batch: {self.done}/{self.total} rows done, {self.failed} failed"
                    + (f", {rate}" if rate else "")
                )
            else:
                self._line(f"{self.label}: {self.done}/{self.total} cases run")

    def failed_lines(self, limit: int = _LISTED) -> list[str]:
        """One line per failed row, in input order (index, key, code, message); the first
        ``limit`` rows, then how many more."""
        from tubeless.errors import one_line
        from tubeless.tracing.projection import terminal_safe

        lines = []
        ordered = [row for _, _, row in sorted(self._failures, key=lambda item: -item[0])]
        for row in ordered[:limit]:
            error = row.get("error") or {}
            text = (
                f"row {row['index']} failed ({row.get('key')}): {error.get('code')}: "
                f"{error.get('message')}"
            )
            lines.append(terminal_safe(one_line(text)))
        if self.failed > len(ordered[:limit]):
            lines.append(f"... and {self.failed - len(ordered[:limit])} more failed rows")
        return lines

    def _keep_failure(self, row: dict[str, Any]) -> None:
        """Keep the ``_LISTED`` failed rows of lowest index (a max-heap on the index)."""
        item = (-int(row["index"]), self.failed, row)
        if len(self._failures) < _LISTED:
            heapq.heappush(self._failures, item)
        elif item[0] > self._failures[0][0]:
            heapq.heapreplace(self._failures, item)

    def cancelling(self, reason: str) -> None:
        self._line(f"{self.label}: {reason}; cancelling the rows in flight")

    def _line(self, text: str) -> None:
        from tubeless.errors import one_line
        from tubeless.tracing.projection import terminal_safe

        line = terminal_safe(one_line(text))
        if self._bar is not None:
            self._bar.console.print(line, markup=False, highlight=False)
        else:
            click.echo(line, file=self.stream)

    def close(self) -> None:
        self.detach()
        if self._bar is not None:
            self._bar.stop()
            self._bar = None


@click.command("batch")
@click.argument("project", metavar="PROJECT")
@click.argument("args", nargs=-1, metavar="[ID] INPUTS")
@click.option(
    "--output",
    "-o",
    default=None,
    metavar="FILE",
    help="Write rows to FILE (JSONL); a rerun skips the rows it holds as completed.",
)
@engine_options("row", "batch")
@click.option(
    "--retry-failed",
    is_flag=True,
    help="Run a failed row once more (on another worker); the second outcome counts.",
)
@click.option(
    "--fail-fast",
    is_flag=True,
    help="After the first failed row, start no more and cancel those in flight.",
)
@click.option(
    "--checkpoints",
    default=None,
    metavar="PATH|URL",
    help="Run each row durably in the checkpoint file PATH (or the PostgreSQL database "
    "of a postgresql:// URL): a row interrupted mid-run resumes where it stopped on the "
    "next run.",
)
@click.option(
    "--record-dir",
    default=None,
    metavar="DIR",
    help="Record each row's cassette into DIR/<index>.cassette.jsonl (mode 0600).",
)
@click.option(
    "--max-cost-usd",
    default=None,
    metavar="X",
    help="A cost budget for the whole batch, in US dollars: rows not started once it is "
    "spent are skipped (TUBELESS_BUDGET_EXHAUSTED).",
)
@click.option(
    "--max-total-tokens",
    default=None,
    type=click.IntRange(min=0),
    metavar="N",
    help="A token budget (input plus output) for the whole batch, like --max-cost-usd.",
)
@click.option(
    "--replay-dir",
    default=None,
    metavar="DIR",
    help="Replay each row from DIR/<index>.cassette.jsonl (no model); a row that "
    "diverges fails with TUBELESS_REPLAY_DIVERGED.",
)
@click.pass_context
def batch(
    ctx: click.Context,
    project: str,
    args: tuple[str, ...],
    output: str | None,
    concurrency: int,
    engine: str,
    ray_address: str | None,
    row_retries: int,
    trace: tuple[str, ...],
    retry_failed: bool,
    fail_fast: bool,
    checkpoints: str | None,
    record_dir: str | None,
    replay_dir: str | None,
    max_cost_usd: str | None,
    max_total_tokens: int | None,
) -> None:
    """Run an entry of PROJECT once per input of INPUTS (JSONL, a JSON array or a YAML list;
    - for stdin) and write one JSON row per input, in input order."""
    entry_id, inputs = _split(ctx, args)
    _check_paths(ctx, output, trace, checkpoints)
    refuse_shared_files([("INPUTS", inputs), ("--output", output), ("--checkpoints", checkpoints)])
    if record_dir is not None and replay_dir is not None:
        raise click.UsageError("Give --record-dir or --replay-dir, not both.", ctx=ctx)
    if replay_dir is not None and not Path(replay_dir).is_dir():
        raise FileNotFoundError(2, "No such directory", replay_dir)
    if max_cost_usd is not None:
        _check_amount(ctx, max_cost_usd)
    entry, _ = load_entry(project, entry_id)
    rows = read_rows(inputs)
    code = run_cli_batch(
        project,
        entry,
        entry_id,
        rows,
        output=output,
        concurrency=concurrency,
        engine=engine,
        ray_address=ray_address,
        row_retries=row_retries,
        trace=trace,
        retry_failed=retry_failed,
        fail_fast=fail_fast,
        checkpoints=checkpoints,
        record_dir=record_dir,
        replay_dir=replay_dir,
        max_cost_usd=max_cost_usd,
        max_total_tokens=max_total_tokens,
    )
    ctx.exit(code)


def _check_amount(ctx: click.Context, value: str) -> None:
    from tubeless.agent import Limits
    from tubeless.errors import AgentDefinitionError

    try:
        Limits(max_cost_usd=value)  # type: ignore[arg-type]
    except AgentDefinitionError:
        raise click.UsageError(
            f"--max-cost-usd must be an amount in US dollars such as 2.50, not {value!r}",
            ctx=ctx,
        ) from None


def _split(ctx: click.Context, args: tuple[str, ...]) -> tuple[str | None, str]:
    if len(args) == 1:
        return None, args[0]
    if len(args) == 2:
        return args[0], args[1]
    if not args:
        raise click.UsageError(
            "Missing argument 'INPUTS' (a JSONL, JSON or YAML file, or -).", ctx=ctx
        )
    raise click.UsageError(f"Got unexpected extra arguments ({' '.join(args[2:])}).", ctx=ctx)


def _check_paths(
    ctx: click.Context, output: str | None, trace: tuple[str, ...], checkpoints: str | None = None
) -> None:
    if "-" in trace:
        raise click.UsageError(
            "--trace - is not available here: rows may go to stdout; give a file", ctx=ctx
        )
    if output is not None and any(Path(t).resolve() == Path(output).resolve() for t in trace):
        raise click.UsageError("--output and --trace must be different files", ctx=ctx)
    if checkpoints is None or "://" in checkpoints:  # a database URL is no file to compare
        return
    if any(Path(t).resolve() == Path(checkpoints).resolve() for t in trace):
        raise click.UsageError(
            f"--checkpoints and --trace name the same file ({checkpoints}): a checkpoint file "
            "holds state and inputs, a trace never does; use two files",
            ctx=ctx,
        )
    if output is not None and Path(output).resolve() == Path(checkpoints).resolve():
        raise click.UsageError("--output and --checkpoints must be different files", ctx=ctx)


def run_cli_batch(
    project: str,
    entry: Pipeline,
    entry_id: str | None,
    rows: InputSource | list[InputRow],
    *,
    output: str | None,
    concurrency: int,
    engine: str,
    ray_address: str | None,
    trace: tuple[str, ...],
    retry_failed: bool,
    fail_fast: bool,
    collect: list[RowOutcome] | None = None,
    label: str = "batch",
    checkpoints: str | None = None,
    record_dir: str | None = None,
    replay_dir: str | None = None,
    replays: dict[int, str] | None = None,
    records: dict[int, str] | None = None,
    row_retries: int = 2,
    max_cost_usd: str | None = None,
    max_total_tokens: int | None = None,
) -> int:
    """Run the batch with signal handling, progress and summary; the exit code."""
    import asyncio
    import contextlib

    from tubeless._cli._signals import RunSignals
    from tubeless._cli._trace_stores import open_trace_sink
    from tubeless.batch import EntrySource
    from tubeless.batch._spi import SummaryCounter
    from tubeless.pipeline import CancelToken

    total = len(rows) if isinstance(rows, list) else rows.total
    progress = BatchProgress(sys.stderr, total, label=label)
    token = CancelToken()
    signals = RunSignals(token, progress)
    signals.install()
    warnings = SinkWarnings().install()  # a failing trace sink: one ``warning:`` line
    sinks: list[Any] = []
    finished = SummaryCounter()
    try:
        for target in trace:
            sinks.append(open_trace_sink(target))
        source: Any = entry if engine == "local" else EntrySource.of(project, entry_id)

        async def drive() -> None:
            from tubeless.batch._spi import run_outcomes

            signals.attach()
            progress.attach()
            try:
                async for outcome in run_outcomes(
                    source,
                    rows,
                    concurrency=concurrency,
                    engine=engine,  # type: ignore[arg-type]
                    trace=sinks,
                    output=output,
                    retry_failed=retry_failed,
                    fail_fast=fail_fast,
                    ray_address=ray_address,
                    signal=token,
                    on_row=progress.row,
                    count_tools=label == "eval",
                    checkpoints=checkpoints,
                    record_dir=record_dir,
                    replay_dir=replay_dir,
                    replays=replays,
                    records=records,
                    row_retries=row_retries,
                    max_cost_usd=max_cost_usd,
                    max_total_tokens=max_total_tokens,
                ):
                    finished.add(outcome.row)
                    if collect is not None:
                        collect.append(outcome)
                    if output is None and label == "batch":
                        from tubeless.batch._spi import row_line

                        rows_out.write(row_line(outcome.row))
                        rows_out.flush()
            except asyncio.CancelledError:
                pass
            finally:
                progress.detach()
                signals.detach()

        # stdout holds rows only: anything else printed meanwhile (a handler's print(), Ray's
        # messages about its workers) goes to stderr.
        rows_out = sys.stdout
        with contextlib.redirect_stdout(sys.stderr):
            asyncio.run(drive())
    finally:
        progress.close()
        for sink in sinks:
            try:
                sink.close()
            except Exception as exc:
                if not any(sink is failed for failed in warnings.failed):  # warned already
                    click.echo(f"warning: closing trace {sink!r} failed: {exc}", err=True)
        warnings.remove()
        signals.restore()
    # Rows not run (a cancellation) count when the number of rows was known beforehand.
    summary = finished.summary(
        total=max(total, finished.rows) if total is not None else None, skipped=progress.reused
    )
    if label == "batch":
        for line in summary.lines():
            click.echo(f"batch: {line}", err=True)
        if progress.live:  # plain lines named each failed row as it failed
            for line in progress.failed_lines():
                click.echo(f"batch: {line}", err=True)
    if signals.acted:
        click.echo(f"error: {signals.cancelled_line().replace('the run', 'the batch')}", err=True)
        return EXIT_CANCELLED
    not_completed = summary.failed or summary.cancelled or summary.exhausted
    return EXIT_EXECUTION if not_completed else EXIT_OK
