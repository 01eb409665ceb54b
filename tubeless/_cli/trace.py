"""``tubeless trace show|convert|export-otel``: read a stored trace back, copy it to the other
storage, or send it to an OpenTelemetry collector.

The commands read with :func:`tubeless.tracing.read_trace`, so they accept NDJSON
(``.ndjson``, ``.jsonl``) and SQLite (``.sqlite``, ``.sqlite3``, ``.db``) traces and Postgres
stores (a ``postgresql://`` or ``postgres://`` URL, shown with its password masked) alike.
Exit codes follow the ``trace`` column of DESIGN.md §6: a missing or unreadable trace exits 2 (a
``FileNotFoundError`` or a ``TraceReadError`` reaching :func:`tubeless._cli._exit.exit_code_for`),
an unknown or ambiguous run id exits 1 (a :class:`CliLoadError` under ``trace``), and so does
a refused ``convert`` and ``export-otel`` without the SDK; spans the collector did not take exit 2
(an ``OSError``).

The tracing modules are imported inside the commands: ``tubeless --help`` imports this module,
and must not pay for ``sqlite3`` or the projection.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Final

import click

from tubeless._cli._exit import CliLoadError

if TYPE_CHECKING:
    from tubeless.tracing.projection import RunTree

__all__ = ["trace"]

#: How many run ids an "unknown run" error lists.
_MAX_LISTED_RUNS: Final = 10
_STDOUT: Final = "-"


@click.group("trace", no_args_is_help=False)
def trace() -> None:
    """Show stored traces, convert them between NDJSON, SQLite and Postgres, or export them as
    spans."""


def _bound_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """``--max-bytes`` and ``--max-records``: the reader's bounds, for traces known to be big.

    The defaults repeat ``tubeless.tracing.reader.MAX_TRACE_BYTES`` and ``MAX_RECORDS`` (a test
    pins them): importing them would load the tracing storage for ``--help``.
    """
    command = click.option(
        "--max-records",
        type=click.IntRange(min=1),
        default=100_000,
        show_default=True,
        metavar="N",
        help="Refuse a trace with more records.",
    )(command)
    return click.option(
        "--max-bytes",
        type=click.IntRange(min=1),
        default=64 * 1024 * 1024,
        show_default=True,
        metavar="BYTES",
        help="Refuse a larger NDJSON file.",
    )(command)


@trace.command("show")
@click.argument("trace_file", metavar="TRACE", type=click.Path(path_type=str))
@click.argument("run_id", metavar="[RUN_ID]", required=False)
@click.option("--last", is_flag=True, help="Show the last root run of TRACE.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
@_bound_options
def show(
    trace_file: str,
    run_id: str | None,
    last: bool,
    as_json: bool,
    max_bytes: int,
    max_records: int,
) -> None:
    """List the runs in TRACE, or show one run as a tree of steps, turns and calls.

    TRACE is an NDJSON (.ndjson, .jsonl) or SQLite (.sqlite, .sqlite3, .db) trace, or a
    Postgres trace store (postgresql://USER@HOST/DB). Without
    RUN_ID, one line per root run; with RUN_ID, that run (any run of the file, such as an agent
    turn) with everything it started. RUN_ID may be the start of a run id that begins no other
    run; --last shows the run that started last.
    """
    from tubeless.tracing.projection import format_run_list, format_tree, run_trees

    if last and run_id is not None:
        raise click.UsageError("give RUN_ID or --last, not both")
    trees = run_trees(_read(trace_file, max_bytes, max_records))
    if last:
        if not trees:
            raise CliLoadError(f"{_where(trace_file)} holds no runs")
        tree = trees[-1]
    elif run_id is None:
        if as_json:
            click.echo(_dumps({"runs": [_summary(tree) for tree in trees]}))
        else:
            click.echo(format_run_list(trees), nl=False)
        return
    else:
        tree = _find(run_id, trace_file, trees)
    click.echo(_dumps(tree.to_dict()) if as_json else format_tree(tree), nl=as_json)


@trace.command("convert")
@click.argument("source", metavar="IN", type=click.Path(path_type=str))
@click.argument("target", metavar="OUT", type=click.Path(path_type=str))
@_bound_options
def convert(source: str, target: str, max_bytes: int, max_records: int) -> None:
    """Copy the records of trace IN into a new trace OUT, in order.

    The storage of each side follows its extension: .ndjson or .jsonl for NDJSON, .sqlite,
    .sqlite3 or .db for SQLite, a postgresql:// URL for Postgres; OUT may be - for NDJSON on
    standard output. An OUT file must not exist; a Postgres OUT is added to, as runs add to it.
    """
    from tubeless.tracing.reader import TraceReadError, storage_kind, write_trace

    to_stdout = target == _STDOUT
    to_file = not to_stdout
    if not to_stdout:
        try:
            to_file = storage_kind(target) != "postgres"
        except TraceReadError as exc:
            raise click.BadParameter(_problem_of(exc), param_hint="OUT") from exc
        if to_file:
            _refuse_existing(source, target)
        elif source == target:
            raise click.ClickException(f"IN and OUT are the same store: {_where(target)}")
    records = _read(source, max_bytes, max_records)
    if to_file:
        _claim(target)
    try:
        count = write_trace(records, target)
    except BaseException as exc:
        if to_file:
            _discard(target)
        if isinstance(exc, ImportError):
            from tubeless._cli._trace_stores import missing_driver

            raise missing_driver("OUT", exc) from None
        if _is_sqlite_error(exc):
            raise OSError(f"cannot write {_safe(target)}: {exc}") from exc
        raise
    noun = "record" if count == 1 else "records"
    click.echo(f"wrote {count} {noun} to {_where(target)}", err=True)


@trace.command("export-otel")
@click.argument("trace_file", metavar="TRACE", type=click.Path(path_type=str))
@_bound_options
def export_otel(trace_file: str, max_bytes: int, max_records: int) -> None:
    """Send every run of TRACE to an OpenTelemetry collector as spans, over OTLP/HTTP.

    The spans are those `run --otel` sends live. The collector and the service are set by the
    standard variables: OTEL_EXPORTER_OTLP_ENDPOINT (default http://localhost:4318) or
    OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, OTEL_EXPORTER_OTLP_HEADERS, OTEL_EXPORTER_OTLP_TIMEOUT,
    OTEL_SERVICE_NAME (default tubeless).
    """
    from tubeless._cli._otel import endpoint_of, hold_sdk_logs, open_otlp_sink, undelivered
    from tubeless.tracing.otel import feed

    release = hold_sdk_logs()
    try:
        sink = open_otlp_sink("export-otel")  # first: without the SDK, nothing is read
        try:
            records = _read(trace_file, max_bytes, max_records)
        except BaseException:
            sink.close()
            raise
        runs = feed(sink, records)
    finally:
        release()
    failed = undelivered(sink)
    if failed is not None:
        raise OSError(errno.EIO, f"OpenTelemetry export failed: {failed}", endpoint_of(sink))
    assert sink.delivery is not None  # an OTLP sink counts what it sent
    noun = "run" if runs == 1 else "runs"
    click.echo(f"sent {sink.delivery.sent} spans of {runs} {noun} to {endpoint_of(sink)}", err=True)


# -- helpers ----------------------------------------------------------------------------------
_BOUND_OPTIONS: Final = {"max_bytes": "--max-bytes", "max_records": "--max-records"}


def _read(trace_file: str, max_bytes: int, max_records: int) -> list[dict[str, Any]]:
    """The records of ``trace_file``; a bound error names the option that raises the bound."""
    from tubeless._cli._trace_stores import read_trace_value
    from tubeless.tracing.reader import TraceReadError

    try:
        return read_trace_value(trace_file, max_bytes=max_bytes, max_records=max_records)
    except TraceReadError as exc:
        option = _BOUND_OPTIONS.get(exc.bound or "")
        if option is None:
            raise
        raise TraceReadError(
            f"{exc.problem} ({option} raises the bound)",
            path=exc.path,
            line=exc.line,
            bound=exc.bound,
        ) from exc


def _dumps(value: Any) -> str:
    # ensure_ascii (the default) escapes every control and bidi character of recorded text.
    return json.dumps(value, indent=2)


def _summary(tree: RunTree) -> dict[str, Any]:
    return {
        "run_id": tree.run_id,
        "pipeline_id": tree.pipeline_id,
        "status": tree.status,
        "started_at_ms": tree.started_at_ms,
        "duration_ms": tree.duration_ms,
    }


def _safe(text: str) -> str:
    from tubeless.tracing.projection import terminal_safe

    return terminal_safe(text)


def _where(trace: str) -> str:
    """A trace's name for messages: a store URL with its password masked, a path as it is."""
    from tubeless.tracing.reader import storage_kind

    with contextlib.suppress(Exception):
        if storage_kind(trace) == "postgres":
            from tubeless.tracing.postgres import redact_dsn

            return _safe(redact_dsn(trace))
    return _safe(trace)


def _find(run_id: str, trace_file: str, trees: Sequence[RunTree]) -> RunTree:
    """The run called ``run_id``, else the one run whose id begins with it."""
    from tubeless.tracing.projection import find_run

    exact = find_run(trees, run_id)
    if exact is not None:
        return exact
    begun = [run for tree in trees for run in tree.walk() if run.run_id.startswith(run_id)]
    if not begun:
        raise CliLoadError(_unknown_run(run_id, trace_file, trees))
    if len(begun) > 1:
        listed = ", ".join(_safe(run.run_id) for run in begun[:_MAX_LISTED_RUNS])
        more = len(begun) - _MAX_LISTED_RUNS
        suffix = f" (and {more} more)" if more > 0 else ""
        raise CliLoadError(
            f"run {_safe(run_id)!r} is ambiguous: {len(begun)} runs in {_where(trace_file)} "
            f"begin with it: {listed}{suffix}"
        )
    return begun[0]


def _unknown_run(run_id: str, trace_file: str, trees: Sequence[RunTree]) -> str:
    where = _where(trace_file)
    asked = repr(_safe(run_id))
    if not trees:
        return f"unknown run {asked}; {where} holds no runs"
    listed = ", ".join(_safe(tree.run_id) for tree in trees[:_MAX_LISTED_RUNS])
    more = len(trees) - _MAX_LISTED_RUNS
    suffix = f" (and {more} more)" if more > 0 else ""
    return f"unknown run {asked}; runs in {where}: {listed}{suffix}"


def _problem_of(exc: Exception) -> str:
    """A ``TraceReadError``'s problem without its ``TUBELESS_*`` code."""
    return str(getattr(exc, "message", exc))


def _refuse_existing(source: str, target: str) -> None:
    if os.path.lexists(target):
        if os.path.exists(source) and os.path.samefile(source, target):
            raise click.ClickException(f"IN and OUT are the same file: {_safe(target)}")
        raise click.ClickException(f"{_safe(target)} exists; remove it or choose another path")


def _claim(target: str) -> None:
    """Create OUT empty, atomically refusing a file that appeared since the first check.

    An empty file is a valid start for both storages: NDJSON appends to it, and SQLite treats
    a zero-byte file as a new database.
    """
    parent = os.path.dirname(target)
    if parent:
        os.makedirs(parent, exist_ok=True)  # as the sinks do
    try:
        with open(target, "x", encoding="utf-8"):
            pass
    except FileExistsError as exc:
        raise click.ClickException(
            f"{_safe(target)} exists; remove it or choose another path"
        ) from exc


def _discard(target: str) -> None:
    """Remove a half-written OUT (created by this command) so that a retry is not refused."""
    with contextlib.suppress(OSError):
        os.unlink(target)


def _is_sqlite_error(exc: BaseException) -> bool:
    # sqlite3 is loaded already when a SQLite sink raised; otherwise the error is not its own.
    sqlite3 = sys.modules.get("sqlite3")
    return sqlite3 is not None and isinstance(exc, sqlite3.Error)
