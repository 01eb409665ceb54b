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
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from tubeless._cli._cassette import cassette_for, check_cassette_options
from tubeless._cli._complete import RunCommand
from tubeless._cli._exit import EXIT_CANCELLED, CliLoadError
from tubeless._cli._flags import DerivedFlag, derive_flags, unflagged
from tubeless._cli._run_input import build_input
from tubeless._cli._run_options import OPTION_NAMES, VALUE_OPTIONS, builtin_params
from tubeless._cli._sink_warnings import SinkWarnings

if TYPE_CHECKING:
    from tubeless import Pipeline, PipelineRun
    from tubeless._cli._signals import RunSignals
    from tubeless.project import Project

__all__ = ["entry_command_for", "find_project", "run"]

_OUTER_HELP = """Run an agent or pipeline of PROJECT (a YAML file) and print its result as JSON.

ID may be omitted when the project has one entry or names a default. Flags may come in any
order; each input property has its own flag: see `tubeless run PROJECT [ID] --help`."""


def find_project(args: list[str]) -> int | None:
    """The index of the project argument: the first YAML path (or, failing that, file)."""
    previous = ""
    candidates: list[int] = []
    for index, arg in enumerate(args):
        if not arg.startswith("-") and previous not in VALUE_OPTIONS:
            candidates.append(index)
        previous = arg if arg.startswith("--") and "=" not in arg else ""
    for index in candidates:
        if args[index].endswith((".yaml", ".yml")):
            return index
    for index in candidates:
        if os.path.isfile(args[index]):
            return index
    return candidates[0] if candidates else None


def _load(path: str) -> Project:
    from tubeless.project import load_project

    if not Path(path).exists():
        raise FileNotFoundError(2, "No such file or directory", path)
    return load_project(path)


def _entry_id(args: list[str], value_options: frozenset[str] | set[str]) -> str | None:
    """The ID argument: the first positional that is not an option's value."""
    previous = ""
    for arg in args:
        if not arg.startswith("-") and previous not in value_options:
            return arg
        previous = arg if arg.startswith("--") and "=" not in arg else ""
    return None


def _input_schema(entry: Pipeline) -> dict[str, Any] | None:
    schema = entry.options_schema
    if schema is None:
        return None
    from tubeless.frozen import thaw

    try:
        generated = thaw(schema.json_schema())
    except Exception:  # a type without a JSON Schema simply gets no flags
        return None
    return generated if isinstance(generated, dict) else None


@click.command(
    "run",
    cls=RunCommand,
    context_settings={"ignore_unknown_options": True, "allow_extra_args": True},
    add_help_option=False,
    help=_OUTER_HELP,
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
            _help_command(note).main(["--help"], "tubeless run", standalone_mode=False)
            return
        raise click.UsageError("Missing argument 'PROJECT' (a project YAML file).", ctx=ctx)
    path = args.pop(position)
    project = _load(path)
    try:
        chosen, command = _choose(project, path, args)
    except CliLoadError as exc:
        if not wants_help:
            raise
        note = f"{exc} (name the entry to see its own input flags)."
        _help_command(note).main(["--help"], "tubeless run", standalone_mode=False)
        return
    with command.make_context(f"{path} {chosen}", args, parent=ctx) as entry_ctx:
        command.invoke(entry_ctx)


def _choose(project: Project, path: str, args: list[str]) -> tuple[str, click.Command]:
    """The entry named in ``args`` (removed from them) or the default, and its command."""
    # Values of derived options can look like ids; tell them apart using every entry's flags.
    derived_values = {
        f"--{flag.option}"
        for entry in project.entries.values()
        for flag in derive_flags(_input_schema(entry))
        if flag.kind != "boolean"
    }
    entry_id = _entry_id(args, VALUE_OPTIONS | derived_values)
    before = ""
    if entry_id is not None:
        position = args.index(entry_id)
        before = args[position - 1] if position else ""
        del args[position]
    try:
        entry = project.entry(entry_id)
    except KeyError as exc:
        _refuse_unknown_option(before, project)
        raise CliLoadError(str(exc.args[0])) from None
    chosen = entry_id or next(k for k, v in project.entries.items() if v is entry)
    return chosen, _entry_command(project, chosen, entry, path)


def _refuse_unknown_option(option: str, project: Project) -> None:
    """``run p.yaml --txt hi``: report ``--txt`` (a usage error), not an entry named ``hi``."""
    if not option.startswith("--") or "=" in option:
        return
    known = set(OPTION_NAMES)
    for entry in project.entries.values():
        for flag in derive_flags(_input_schema(entry)):
            known.add(f"--{flag.option}")
            if flag.kind == "boolean":
                known.add(f"--no-{flag.option}")
    if option not in known:
        raise click.NoSuchOption(option, possibilities=sorted(known))


def entry_command_for(path: str, args: list[str]) -> click.Command | None:
    """The entry command ``tubeless run PATH ARGS...`` would build, or None (for completion)."""
    rest = list(args)
    if path in rest:
        rest.remove(path)
    try:
        return _choose(_load(path), path, rest)[1]
    except Exception:  # completion never reports errors: it offers nothing instead
        return None


def _help_command(note: str) -> click.Command:
    """``run --help`` when no entry is known: the built-in options, and what is missing."""
    return click.Command(
        name="PROJECT [ID]",
        params=builtin_params(None, is_agent=None),
        help=f"{_OUTER_HELP}\n\n{note}",
        options_metavar="PROJECT [ID] [OPTIONS]",
        context_settings={"max_content_width": 100, "help_option_names": ["--help", "-h"]},
    )


def _entry_command(project: Project, entry_id: str, entry: Pipeline, path: str) -> click.Command:
    is_agent = entry_id in project.agents
    flags = derive_flags(_input_schema(entry))
    params: list[click.Parameter] = [flag.click_option() for flag in flags]
    params += builtin_params(entry, is_agent=is_agent)
    kind = "agent" if is_agent else "pipeline"
    description = entry.description or entry.name or ""

    def callback(**options: Any) -> None:
        raw = build_input(flags, options, _input_schema(entry))
        code = _execute(entry, raw, options, is_agent=is_agent, flags=flags)
        if code:
            raise SystemExit(code)

    return click.Command(
        name=entry_id,
        params=params,
        callback=callback,
        help=f"Run the {kind} {entry_id!r} of {path}. {description}".strip(),
        epilog=_unflagged_epilog(_input_schema(entry)),
        context_settings={"max_content_width": 100},
    )


def _unflagged_epilog(schema: dict[str, Any] | None) -> str | None:
    """Which input properties have no flag, and how to pass them."""
    missing = unflagged(schema)
    if not missing:
        return None
    listed = "; ".join(f"{name} ({reason})" for name, reason in missing)
    return f"Input properties without a flag, set them with --input or --input-file: {listed}."


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
