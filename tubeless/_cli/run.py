"""``tubeless run PROJECT [ID] [--<flag>...]``: run one entry of a project.

The project is loaded first (its path is the first argument that names a YAML file, wherever it
stands), then a command for the chosen entry is built with one flag per input property, and the
rest of the arguments are parsed by it, so ``tubeless run PROJECT ID --help`` lists the entry's
own flags. The result is printed to stdout as JSON (stderr with ``--trace -``); the run report
goes to stderr.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import click

from tubeless._cli._cassette import cassette_for, check_cassette_options
from tubeless._cli._complete import RunCommand
from tubeless._cli._entry import OUTER_HELP, choose, find_project, help_command, load
from tubeless._cli._exit import EXIT_CANCELLED, CliLoadError
from tubeless._cli._flags import DerivedFlag
from tubeless._cli._sink_warnings import SinkWarnings

if TYPE_CHECKING:
    from tubeless import Pipeline, PipelineRun
    from tubeless._cli._signals import RunSignals

__all__ = ["run"]


@click.command(
    "run",
    cls=RunCommand,
    context_settings={"ignore_unknown_options": True, "allow_extra_args": True},
    add_help_option=False,
    help=OUTER_HELP,
    options_metavar="PROJECT [ID] [FLAGS]...",
)
@click.pass_context
def run(ctx: click.Context) -> None:
    args = [arg for arg in ctx.args if arg != "--"]
    position = find_project(args)
    wants_help = "--help" in args or "-h" in args
    if position is None:
        if wants_help:
            note = "Name a project to see its entry's own input flags as well."
            help_command(note).main(["--help"], "tubeless run", standalone_mode=False)
            return
        raise click.UsageError("Missing argument 'PROJECT' (a project YAML file).", ctx=ctx)
    path = args.pop(position)
    project = load(path)
    try:
        chosen, command = choose(project, path, args, _execute)
    except CliLoadError as exc:
        if not wants_help:
            raise
        note = f"{exc} (name the entry to see its own input flags)."
        help_command(note).main(["--help"], "tubeless run", standalone_mode=False)
        return
    with command.make_context(f"{path} {chosen}", args, parent=ctx) as entry_ctx:
        command.invoke(entry_ctx)


def _execute(
    entry: Pipeline,
    raw: Any,
    options: dict[str, Any],
    *,
    is_agent: bool,
    flags: Sequence[DerivedFlag] = (),
) -> int:
    from tubeless._cli._signals import RunSignals
    from tubeless.pipeline import CancelToken

    check_cassette_options(options)
    sinks: list[Any] = []
    otel: Any = None
    release_sdk_logs: Any = None
    trace_to_stdout = "-" in options["trace"]
    report_stream = sys.stderr
    result_stream = sys.stderr if trace_to_stdout else sys.stdout
    warnings = SinkWarnings().install()
    from tubeless._cli._approve import choose_approver, needs_approvals, prompt_abandoned

    prompting = (
        not options["approve_all"]
        and not options["deny_all"]
        and sys.stdin.isatty()
        and sys.stderr.isatty()
        and needs_approvals(entry)
    )
    # A prompt and the live view would draw over each other: prompts get plain report lines,
    # held while a prompt is open.
    reporter = _reporter(report_stream, quiet=options["quiet"], live=False if prompting else None)
    approver = choose_approver(
        approve_all=options["approve_all"],
        deny_all=options["deny_all"],
        interactive=prompting,
        report=reporter if hasattr(reporter, "hold") else None,
    )
    token = CancelToken()
    # Installed before anything opens and kept until every sink is closed (DESIGN.md §6).
    signals = RunSignals(token, reporter)
    signals.install()
    try:
        try:
            from tubeless._cli._trace_stores import open_trace_sink

            if options["checkpoints"] is not None and not options["dry_run"]:
                from tubeless._cli.checkpoints import open_for_run

                store, key = open_for_run(
                    options["checkpoints"],
                    options["trace"],
                    entry,
                    raw,
                    options["key"],
                    options["restart"],
                )
                options = {**options, "checkpoint_store": store, "key": key}
                if hasattr(reporter, "use_denial_reasons"):
                    reporter.use_denial_reasons(_denial_reasons(store, key, entry.id))
            for target in options["trace"]:
                sinks.append(open_trace_sink(target))
            if options["otel"]:
                from tubeless._cli._otel import hold_sdk_logs, open_otlp_sink

                release_sdk_logs = hold_sdk_logs()
                otel = open_otlp_sink("--otel")
                sinks.append(otel)
            if reporter is not None:
                sinks.append(reporter)
            with cassette_for(options):
                run_record = asyncio.run(
                    _run_with_signals(
                        entry, raw, options, sinks, signals, is_agent=is_agent, approver=approver
                    )
                )
        finally:
            if options.get("checkpoint_store") is not None:
                options["checkpoint_store"].close()
            for sink in sinks:
                try:
                    sink.close()
                except Exception as exc:
                    if not any(sink is failed for failed in warnings.failed):  # warned already
                        click.echo(f"warning: closing trace {sink!r} failed: {exc}", err=True)
            warnings.remove()
            if release_sdk_logs is not None:
                release_sdk_logs()
        if otel is not None:
            _warn_undelivered(otel)
        if signals.acted and (run_record is None or run_record.status == "cancelled"):
            # One line for a run the user stopped; the report (if any) told the rest.
            click.echo(f"error: {signals.cancelled_line()}", err=True)
            if signals.abandoned_threads or prompt_abandoned(approver):
                # Threads the run stopped waiting for would hold the interpreter's exit until
                # they return: everything is flushed and closed, so leave at once.
                _flush_and_exit(EXIT_CANCELLED)
            return EXIT_CANCELLED
        if run_record is None:
            return EXIT_CANCELLED
        code = _finish(run_record, result_stream, flags, options["checkpoints"])
        if prompt_abandoned(approver):
            _flush_and_exit(code)
        return code
    finally:
        signals.restore()


def _denial_reasons(store: Any, key: str, route: str) -> dict[tuple[int, str], str]:
    """The reasons given with ``tubeless deny`` for calls of the agent ``route``, by (turn, call
    id): the report shows them, the trace never holds them (free text a person typed)."""
    try:
        with store.acquire(key) as lease:
            text = lease.read()
        decisions = (json.loads(text or "{}").get("approvals") or {}).get("decisions") or ()
        return {
            (d["turn"], d["call_id"]): d["reason"]
            for d in decisions
            if d.get("route") == route
            and d.get("approved") is False
            and isinstance(d.get("reason"), str)
            and isinstance(d.get("turn"), int)
            and isinstance(d.get("call_id"), str)
        }
    except Exception:  # the report does without them; the run reads the file itself
        return {}


def _warn_undelivered(sink: Any) -> None:
    """One ``warning:`` line when spans did not reach the collector (the exit code stays)."""
    from tubeless._cli._otel import endpoint_of, undelivered

    line = undelivered(sink)
    if line is not None:
        click.echo(f"warning: OpenTelemetry export to {endpoint_of(sink)} failed: {line}", err=True)


def _flush_and_exit(code: int) -> None:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)


def _reporter(stream: Any, *, quiet: bool, live: bool | None = None) -> Any:
    from tubeless.reporting import choose_reporter

    return choose_reporter(stream, quiet=quiet, live=live)


async def _run_with_signals(
    entry: Pipeline,
    raw: Any,
    options: dict[str, Any],
    trace: list[Any],
    signals: RunSignals,
    *,
    is_agent: bool,
    approver: Any = None,
) -> PipelineRun | None:
    """The run, with ``signals`` acting on this loop; ``None`` once a second signal stopped it."""
    signals.attach()
    try:
        return await entry.run(
            raw,
            dry_run=options["dry_run"],
            targets=list(options["target"]) or None,
            step_ids=list(options["step"]) or None,
            max_concurrency=1 if is_agent else options["max_concurrency"],
            continue_on_error=options["continue_on_error"],
            trace=trace,
            signal=signals.token,
            run_id=options["run_id"],
            correlation_id=options["correlation_id"],
            approver=approver,
            checkpoints=options.get("checkpoint_store"),
            checkpoint_key=options["key"],
            restart=options["restart"],
        )
    except asyncio.CancelledError:
        return None
    finally:
        signals.detach()


def _finish(
    run_record: PipelineRun,
    stream: Any,
    flags: Sequence[DerivedFlag] = (),
    checkpoints: str | None = None,
) -> int:
    from tubeless._cli._exit import exit_code_for, report_error
    from tubeless.errors import FINAL_RESULT_VALIDATION_FAILED, PipelineExecutionError

    unprintable = None
    if run_record.finalized:
        try:
            text = _json(run_record.value)
        except ValueError as exc:  # NaN, an infinity, an integer too long to print
            unprintable = f"{FINAL_RESULT_VALIDATION_FAILED}: the result cannot be printed: {exc}"
        else:
            click.echo(text, file=stream)
    if unprintable is not None:
        click.echo(f"error: {unprintable}", err=True)
    if run_record.status == "completed":
        return 6 if unprintable is not None else 0
    if checkpoints is not None:
        from tubeless._cli.checkpoints import report_waiting

        waiting = report_waiting(run_record, checkpoints)
        if waiting is not None:
            return waiting
    error = PipelineExecutionError(run_record)
    state = getattr(click.get_current_context(silent=True), "obj", None)  # the CliState
    report_error(
        error,
        debug=getattr(state, "debug", False) is True,
        flags={flag.property: flag.option for flag in flags},
    )
    return exit_code_for(error, command="run")


def _json(value: Any) -> str:
    """Strict JSON (RFC 8259), or ValueError saying what cannot be written as such."""
    from pydantic_core import to_jsonable_python

    data = to_jsonable_python(value)
    try:
        return json.dumps(data, ensure_ascii=False, allow_nan=False)
    except ValueError as exc:
        if "Out of range float" in str(exc):
            raise ValueError("it holds NaN or an infinity, which JSON cannot express") from None
        if "integer string conversion" in str(exc):
            raise ValueError(
                f"it holds an integer of more than {sys.get_int_max_str_digits():,} digits"
            ) from None
        raise
