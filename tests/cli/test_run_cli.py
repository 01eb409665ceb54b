"""``tubeless run``: derived flags, input merging, traces, result on stdout, exit codes, signals."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.fixtures.cli import ROOT, tubeless
from tests.fixtures.processes import write_project as _project
from tubeless._cli import main
from tubeless._cli._flags import derive_flags
from tubeless.tracing import read_trace

SCRIPTED = ROOT / "projects" / "scripted-agent.yaml"
DELEGATION = ROOT / "projects" / "delegation.yaml"
TEXT = ROOT / "projects" / "text-pipeline.yaml"


@pytest.mark.parametrize(
    ("args", "answer"),
    [
        pytest.param(
            [SCRIPTED, "--question", "hello tubeless"], "14 characters; HELLO; TUBELESS", id="flag"
        ),
        pytest.param([SCRIPTED], "14 characters; HELLO; TUBELESS", id="default-input"),
        pytest.param(
            ["--question", "missing word", SCRIPTED],
            "12 characters; Observed NOT_FOUND: Word unavailable; WORD",
            id="flags-before-project",
        ),
        pytest.param(
            [SCRIPTED, "scripted-agent", "--dry-run", "--question", "preview"],
            "7 characters; PREVIEW",
            id="explicit-id-dry-run",
        ),
        pytest.param(
            [SCRIPTED, "--", "--question", "red"], "3 characters; RED", id="lone-double-dash"
        ),
        pytest.param(
            [DELEGATION, "--question", "red blue"],
            "Summary: 3 characters; RED | 4 characters; BLUE",
            id="delegation-default",
        ),
        pytest.param(
            [TEXT, "--target", "count", "--input", '{"question": "abc"}'],
            "3 characters",
            id="pipeline-target",
        ),
        pytest.param(
            [TEXT, "--input", '{"question": "x y"}', "--question", "hello tubeless"],
            "14 characters; HELLO; TUBELESS",
            id="flag-overrides-input",
        ),
    ],
)
def test_run_prints_only_the_result_json_on_stdout(
    capsys: pytest.CaptureFixture[str], args: list[str | Path], answer: str
) -> None:
    outcome = tubeless(capsys, "run", *args, "--quiet")
    assert (outcome.code, outcome.err) == (0, "")
    assert json.loads(outcome.out) == {"answer": answer}


def test_input_file_yaml_and_stdin(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = tmp_path / "input.yaml"
    source.write_text("question: from yaml\n", encoding="utf-8")
    outcome = tubeless(capsys, "run", SCRIPTED, "--input-file", source, "-q")
    assert json.loads(outcome.out) == {"answer": "9 characters; FROM; YAML"}
    monkeypatch.setattr("sys.stdin", __import__("io").StringIO('{"question": "stdin"}'))
    outcome = tubeless(capsys, "run", SCRIPTED, "--input-file", "-", "-q")
    assert json.loads(outcome.out) == {"answer": "5 characters; STDIN"}


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        pytest.param(["run"], 1, "Missing argument 'PROJECT'", id="no-project"),
        pytest.param(["run", SCRIPTED, "--nope"], 1, "No such option", id="unknown-flag"),
        pytest.param(
            ["run", ROOT / "projects" / "missing.yaml"], 2, "No such file", id="missing-project"
        ),
        pytest.param(
            ["run", DELEGATION, "nope"],
            2,
            "no entry 'nope'; choose from agent-summary, delegating-agent, scripted-agent",
            id="unknown-id",
        ),
        pytest.param(
            ["run", SCRIPTED, "--input", "{bad"],
            4,
            "--input is not valid JSON",
            id="bad-input-json",
        ),
        pytest.param(
            ["run", SCRIPTED, "--input", '{"question": 5}'],
            4,
            "TUBELESS_OPTIONS_VALIDATION_FAILED",
            id="input-rejected-by-schema",
        ),
        pytest.param(
            ["run", SCRIPTED, "--max-concurrency", "2"],
            1,
            "No such option",
            id="max-concurrency-is-for-pipelines",
        ),
        pytest.param(
            ["run", TEXT, "--max-concurrency", "0"],
            1,
            "--max-concurrency",
            id="max-concurrency-range",
        ),
        pytest.param(
            ["run", TEXT, "--target", "words"],
            1,
            "Invalid value for '--target'",
            id="undeclared-target-choice",
        ),
        pytest.param(
            ["run", TEXT, "--target", "count", "--step", "words"],
            5,
            "TUBELESS_PLANNING_SELECTION_CONFLICT",
            id="plan-not-ok",
        ),
    ],
)
def test_run_exit_codes(
    capsys: pytest.CaptureFixture[str], args: list[str | Path], code: int, message: str
) -> None:
    outcome = tubeless(capsys, *args, "-q") if len(args) > 1 else tubeless(capsys, *args)
    assert outcome.code == code, outcome.err
    assert message in outcome.err
    assert "Traceback" not in outcome.err


FAILING = """\
    version: 1
    project: {id: failing}
    python_path: [.]
    pipelines:
      failing:
        input: {schema: {type: object}}
        steps:
          - {id: boom, run: "helpers:boom"}
"""


def test_a_failed_run_exits_6_with_one_error_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = _project(
        tmp_path,
        FAILING,
        """\
        def boom(inputs, ctx):
            raise RuntimeError("disk on fire")
    """,
    )
    outcome = tubeless(capsys, "run", path, "-q")
    assert outcome.code == 6
    assert outcome.out == ""
    assert outcome.err.splitlines() == [
        "error: TUBELESS_STEP_FAILED: step boom: RuntimeError: disk on fire"
    ]


def test_trace_dash_keeps_stdout_pure_ndjson(capsys: pytest.CaptureFixture[str]) -> None:
    outcome = tubeless(capsys, "run", SCRIPTED, "--question", "hi", "--trace", "-")
    assert outcome.code == 0
    records = [json.loads(line) for line in outcome.out.splitlines()]
    assert records[0]["name"] == "pipeline.started"
    assert records[-1]["name"] == "pipeline.completed"
    assert json.loads(outcome.err.splitlines()[-1]) == {"answer": "2 characters; HI"}


def test_traces_go_to_every_file_given(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    ndjson, sqlite = tmp_path / "out" / "run.ndjson", tmp_path / "run.sqlite"
    outcome = tubeless(capsys, "run", SCRIPTED, "--trace", ndjson, "--trace", sqlite, "-q")
    assert outcome.code == 0
    assert read_trace(ndjson) == read_trace(sqlite)
    assert read_trace(ndjson)[-1]["payload"]["status"] == "completed"


def test_entry_help_lists_the_derived_flags(capsys: pytest.CaptureFixture[str]) -> None:
    outcome = tubeless(capsys, "run", SCRIPTED, "scripted-agent", "--help")
    assert outcome.code == 0
    assert "--question STRING" in outcome.out
    assert "The text to work on." in outcome.out
    assert "--max-concurrency" not in outcome.out  # agents bound concurrency with limits
    pipeline_help = tubeless(capsys, "run", TEXT, "--help").out
    assert "--max-concurrency" in pipeline_help
    assert "--target [count|report]" in pipeline_help


def test_flag_derivation_follows_the_rules() -> None:
    """snake/camel → kebab, nullable unwrapped, enum → choice, bool pair, arrays repeat."""
    schema = {
        "type": "object",
        "required": ["max_items"],
        "$defs": {"Mode": {"enum": ["fast", "slow"]}},
        "properties": {
            "max_items": {"type": "integer", "description": "How many."},
            "maxDepth": {"anyOf": [{"type": "number"}, {"type": "null"}]},
            "mode": {"$ref": "#/$defs/Mode"},
            "verbose": {"type": "boolean"},
            "tags": {"type": "array", "items": {"type": "string"}},
            "nested": {"type": "object"},
            "trace": {"type": "string"},
        },
    }
    flags = {f.option: (f.kind, f.multiple, f.required, f.choices) for f in derive_flags(schema)}
    assert flags == {
        "max-items": ("integer", False, True, ()),
        "max-depth": ("number", False, False, ()),
        "mode": ("choice", False, False, ("fast", "slow")),
        "verbose": ("boolean", False, False, ()),
        "tags": ("string", True, False, ()),
    }


FLAGS = """\
    version: 1
    project: {id: flags}
    python_path: [.]
    pipelines:
      echo:
        input:
          schema:
            type: object
            required: [count]
            properties:
              count: {type: integer}
              ratio: {type: number}
              loud: {type: boolean}
              tags: {type: array, items: {type: string}}
              mode: {enum: [fast, slow]}
        steps:
          - {id: echo, run: "helpers:echo"}
"""


def test_derived_flags_build_a_typed_input(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = _project(
        tmp_path,
        FLAGS,
        """\
        def echo(inputs, ctx):
            return ctx.options
    """,
    )
    outcome = tubeless(
        capsys,
        "run",
        path,
        "--count",
        "3",
        "--ratio",
        "0.5",
        "--loud",
        "--tags",
        "a",
        "--tags",
        "b",
        "--mode",
        "slow",
        "-q",
    )
    assert outcome.code == 0, outcome.err
    assert json.loads(outcome.out) == {
        "count": 3,
        "ratio": 0.5,
        "loud": True,
        "tags": ["a", "b"],
        "mode": "slow",
    }
    assert json.loads(tubeless(capsys, "run", path, "--count", "1", "--no-loud", "-q").out) == {
        "count": 1,
        "loud": False,
    }
    bad = tubeless(capsys, "run", path, "--count", "three", "-q")
    assert (bad.code, bad.err.strip()) == (4, "error: --count: expected an integer, found 'three'")
    missing = tubeless(capsys, "run", path, "-q")  # required, but never click-required
    assert missing.code == 4
    assert "TUBELESS_OPTIONS_VALIDATION_FAILED" in missing.err
    assert "[required]" in tubeless(capsys, "run", path, "--help").out


SLOW = """\
    version: 1
    project: {id: slow}
    python_path: [.]
    pipelines:
      slow:
        input: {schema: {type: object}}
        steps:
          - {id: wait, run: "helpers:wait"}
"""


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_cancels_the_run_exits_7_and_completes_the_trace(
    tmp_path: Path, signum: int
) -> None:
    ready = tmp_path / "ready"
    path = _project(
        tmp_path,
        SLOW,
        f"""\
        import pathlib

        async def wait(inputs, ctx):
            pathlib.Path({str(ready)!r}).write_text("ready")
            await ctx.signal.wait()
            ctx.signal.raise_if_cancelled()
    """,
    )
    trace = tmp_path / "run.sqlite"
    process = subprocess.Popen(
        [sys.executable, "-m", "tubeless", "run", str(path), "--trace", str(trace)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    deadline = time.monotonic() + 60  # a hang guard, not a timing assertion
    while not ready.exists() and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    process.send_signal(signum)
    out, err = process.communicate(timeout=60)
    assert process.returncode == 7, err
    assert out == ""
    assert f"{signal.Signals(signum).name} received" in err
    records = read_trace(trace)
    assert records[-1]["name"] == "pipeline.completed"
    assert records[-1]["payload"]["status"] == "cancelled"


def test_verbose_shows_handler_logs(capsys: pytest.CaptureFixture[str]) -> None:
    outcome = tubeless(capsys, "-v", "run", TEXT, "-q")
    assert outcome.code == 0
    assert "uppercasing a word of 5 characters" in outcome.err


def test_a_second_signal_stops_waiting_for_a_handler_that_ignores_cancellation(
    tmp_path: Path,
) -> None:
    ready = tmp_path / "ready"
    path = _project(
        tmp_path,
        SLOW,
        f"""\
        import asyncio, pathlib

        async def wait(inputs, ctx):
            pathlib.Path({str(ready)!r}).write_text("ready")
            await asyncio.sleep(3600)  # ignores ctx.signal on purpose
    """,
    )
    trace = tmp_path / "run.ndjson"
    process = subprocess.Popen(
        [sys.executable, "-m", "tubeless", "run", str(path), "--trace", str(trace)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    deadline = time.monotonic() + 60  # hang guards, not timing assertions
    while not ready.exists() and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    process.send_signal(signal.SIGINT)
    assert process.stderr is not None
    first = ""
    while "cancelling the run" not in first:  # the plain report's notice: the signal was seen
        line = process.stderr.readline()
        assert line, first
        first += line
    process.send_signal(signal.SIGINT)
    out, err = process.communicate(timeout=60)
    assert out == ""
    assert process.returncode == 7, first + err
    assert [line for line in err.splitlines() if line.startswith("error:")] == [
        "error: TUBELESS_RUN_CANCELLED: SIGINT received twice; the run was cancelled without "
        "waiting for its handlers"
    ]
    records = read_trace(trace)
    assert records[-1]["name"] == "pipeline.completed"
    assert records[-1]["payload"]["status"] == "cancelled"


CONTINUING = """\
    version: 1
    project: {id: continuing}
    python_path: [.]
    pipelines:
      continuing:
        input: {schema: {type: object}}
        finalize: {run: "helpers:summary"}
        steps:
          - {id: boom, run: "helpers:boom"}
          - {id: fine, run: "helpers:fine"}
"""


def test_continue_on_error_finalizes_prints_the_value_and_still_exits_6(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = _project(
        tmp_path,
        CONTINUING,
        """\
        def boom(inputs, ctx):
            raise RuntimeError("broken branch")

        def fine(inputs, ctx):
            return "fine"

        def summary(outputs, ctx):
            return sorted(outputs)
    """,
    )
    stopped = tubeless(capsys, "run", path, "-q")
    assert (stopped.code, stopped.out) == (6, "")
    continued = tubeless(capsys, "run", path, "--continue-on-error", "-q")
    assert continued.code == 6
    assert json.loads(continued.out) == ["fine"]
    assert "broken branch" in continued.err


def test_step_selects_exact_steps(capsys: pytest.CaptureFixture[str]) -> None:
    outcome = tubeless(capsys, "run", TEXT, "--step", "count", "--question", "four", "-q")
    assert (outcome.code, json.loads(outcome.out)) == (0, {"answer": "4 characters"})


def test_debug_shows_a_traceback_for_a_failing_load(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    broken = tmp_path / "broken.yaml"
    broken.write_text("version: 1\nproject: {id: x}\nagents: {a: {}}\n", encoding="utf-8")
    plain = tubeless(capsys, "run", broken)
    assert plain.code == 4
    assert "Traceback" not in plain.err
    debug = tubeless(capsys, "--debug", "run", broken)
    assert debug.code == 4
    assert "Traceback" in debug.err


_FLAG_HELP_PROJECT = """\
version: 1
project: {id: f}
allow_modules: [builtins]
pipelines:
  f:
    input:
      schema:
        type: object
        properties:
          count: {type: integer, minimum: 1, maximum: 10, default: 3, description: How many.}
          ratio: {type: number, exclusiveMinimum: 0}
          mode: {enum: [fast, slow], default: fast}
          tags: {type: array, items: {type: string}}
          config: {type: object}
          trace: {type: string}
        required: [mode]
    steps:
      - {id: a, run: builtins:divmod}
"""


def test_entry_help_shows_defaults_ranges_choices_and_repeats(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Derived flags show the schema's default, range, choices, repeatability and requiredness."""
    project = tmp_path / "f.yaml"
    project.write_text(_FLAG_HELP_PROJECT)
    assert main(["run", str(project), "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "--count INTEGER How many. [default: 3; 1 <= x <= 10]" in text
    assert "--ratio NUMBER [x > 0]" in text
    assert '--mode [fast|slow] [default: "fast"; required]' in text
    assert "--tags STRING [repeatable]" in text
    assert (
        "Input properties without a flag, set them with --input or --input-file: "
        "config (an object); trace (--trace is a built-in option)."
    ) in text


def test_a_bare_word_input_says_to_quote_it_as_json(capsys: pytest.CaptureFixture[str]) -> None:
    """`--input hi` is not JSON: the error shows the quoted form."""
    assert main(["run", str(SCRIPTED), "--input", "hi"]) == 4
    err = capsys.readouterr().err
    assert err.startswith("error: --input is not valid JSON:")
    assert """(a string must be quoted as JSON: --input '"hi"')""" in err


@pytest.mark.parametrize(
    ("args", "option", "suggestion"),
    [
        pytest.param(["--txt", "hi"], "--txt", "--target", id="before-the-id"),
        pytest.param(
            ["--question", "q", "--questoin", "hi"], "--questoin", "--question", id="after-a-flag"
        ),
    ],
)
def test_an_unknown_option_is_reported_not_taken_as_the_id(
    args: list[str], option: str, suggestion: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """`run p.yaml --txt hi` is a usage error about --txt (exit 1) with a did-you-mean."""
    assert main(["run", str(SCRIPTED), *args]) == 1
    first = capsys.readouterr().err.splitlines()[0]
    assert first == f"error: No such option '{option}'. Did you mean '{suggestion}'?"


def test_an_unknown_id_after_a_known_flag_is_still_an_unknown_id(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`run p.yaml --quiet nope`: --quiet is known, so 'nope' really is the id (exit 2)."""
    assert main(["run", str(SCRIPTED), "--quiet", "nope"]) == 2
    assert "has no entry 'nope'" in capsys.readouterr().err


def test_run_help_without_a_project_lists_the_built_in_options(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`tubeless run --help` shows every built-in option, and says how to see the input flags."""
    assert main(["run", "--help"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("Usage: tubeless run PROJECT [ID] [OPTIONS]")
    for option in (
        "--input JSON",
        "--input-file FILE",
        "--dry-run",
        "--target T",
        "--step S",
        "--trace PATH|-",
        "--quiet",
        "--max-concurrency",
    ):
        assert option in out, option
    assert "Name a project to see its entry's own input flags" in out


def test_run_help_with_several_entries_and_no_default(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """When the entry cannot be chosen, --help still works and lists the choices."""
    project = tmp_path / "two.yaml"
    project.write_text(
        textwrap.dedent(f"""\
        version: 1
        project: {{id: two}}
        python_path: [{ROOT}]
        pipelines:
          one: {{steps: [{{id: a, run: examples.text_pipeline:split_words}}]}}
          other: {{steps: [{{id: a, run: examples.text_pipeline:split_words}}]}}
        """)
    )
    assert main(["run", str(project), "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "--input JSON" in text
    assert "has several entries and no default; choose one of one, other" in text


def _builtin_options() -> list[tuple[str, bool]]:
    """Every spelling of every built-in option of ``run``, and whether it takes a value: read
    from the options themselves, so that a new option is covered the day it is added."""
    import click

    from tubeless._cli._run_options import builtin_params

    return [
        (name, not (param.is_flag or param.count))
        for param in builtin_params(None, is_agent=None)
        if isinstance(param, click.Option)
        for name in (*param.opts, *param.secondary_opts)
    ]


@pytest.mark.parametrize(("option", "takes_value"), _builtin_options())
def test_an_unknown_id_after_any_built_in_option_is_an_unknown_id(
    option: str, takes_value: bool, capsys: pytest.CaptureFixture[str]
) -> None:
    """`run p.yaml --otel nosuch`: --otel is a real flag of run, so 'nosuch' is the id (exit 2),
    not `No such option '--otel'` (the resolution's own list of options had drifted)."""
    value = ["value"] if takes_value else []
    outcome = tubeless(capsys, "run", SCRIPTED, option, *value, "nosuch")
    assert outcome.code == 2, outcome.err
    assert outcome.err.splitlines() == [
        "error: project 'scripted-agent' has no entry 'nosuch'; choose from scripted-agent"
    ]


def test_an_input_property_named_like_any_built_in_option_gets_no_flag(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Properties `key`, `restart`, `record`, `deny_all` would shadow (or be shadowed by) the
    built-in options of the same name: they get no flag and `--help` says why."""
    project = _project(
        tmp_path,
        """\
        version: 1
        project: {id: clash}
        python_path: [.]
        pipelines:
          clash:
            input:
              schema:
                type: object
                properties:
                  key: {type: string}
                  restart: {type: boolean}
                  record: {type: string}
                  deny_all: {type: boolean}
                  topic: {type: string}
            steps:
              - {id: echo, run: "helpers:echo"}
        """,
        """\
        def echo(inputs, ctx):
            return dict(ctx.options)
        """,
    )
    outcome = tubeless(capsys, "run", project, "--help")
    assert outcome.code == 0, outcome.err
    assert " ".join(outcome.out.split()).endswith(
        "Input properties without a flag, set them with --input or --input-file: "
        "key (--key is a built-in option); restart (--restart is a built-in option); "
        "record (--record is a built-in option); deny_all (--deny-all is a built-in option)."
    )


_DECIDERS = """\
def initial_state(validated):
    return {}


def word_len(value, ctx):
    return len(value)


def returns_none(state, ctx):
    {"kind": "finish", "result": 1}


def returns_text(state, ctx):
    return "finish"


def gives_a_reason(state, ctx):
    return {"kind": "finish", "result": 1, "reason": "SECRET-REASON"}


def misspells_a_tool(state, ctx):
    return {"kind": "continue", "calls": [{"id": "a", "tool": "word_length", "input": "x"}]}


def raises(state, ctx):
    return {}["answer"]
"""


@pytest.mark.parametrize(
    ("decide", "line"),
    [
        pytest.param(
            "returns_none",
            "TUBELESS_CHILD_FAILED (TUBELESS_AGENT_INVALID_DECISION): agent a, turn 1: Agent "
            "decision must be a plain dict; decide returned None (missing return?)",
            id="none",
        ),
        pytest.param(
            "returns_text",
            "TUBELESS_CHILD_FAILED (TUBELESS_AGENT_INVALID_DECISION): agent a, turn 1: Agent "
            "decision must be a plain dict; decide returned str",
            id="str",
        ),
        pytest.param(
            "gives_a_reason",
            "TUBELESS_CHILD_FAILED (TUBELESS_AGENT_INVALID_DECISION): agent a, turn 1: Agent "
            "decision must finish(result) or continue with a nonempty calls array; a finish "
            "decision has only 'kind' and 'result', found the extra key 'reason'",
            id="extra-key",
        ),
        pytest.param(
            "misspells_a_tool",
            "TUBELESS_CHILD_FAILED (TUBELESS_AGENT_INVALID_DECISION): agent a, turn 1: Unknown "
            "agent tool: 'word_length'; did you mean 'word_len'? (tools: word_len)",
            id="unknown-tool",
        ),
        pytest.param(
            "raises",
            "TUBELESS_CHILD_FAILED (TUBELESS_STEP_FAILED): agent a, turn 1: decide raised "
            "KeyError: 'answer'",
            id="exception",
        ),
    ],
)
def test_a_decision_error_says_what_decide_gave(
    decide: str, line: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """What a user writing their first decide sees: the type returned, the extra key by name,
    the tool they meant, and that the exception came from decide; never a value."""
    project = _project(
        tmp_path,
        f"""\
        version: 1
        project: {{id: deciders}}
        python_path: [.]
        agents:
          a:
            input: {{schema: {{type: object}}}}
            result: {{schema: {{}}}}
            initial_state: "helpers:initial_state"
            decide: "helpers:{decide}"
            tools:
              word_len:
                description: The length of a word.
                run: "helpers:word_len"
                input: {{schema: {{type: string}}}}
                output: {{schema: {{type: integer}}}}
        """,
        _DECIDERS,
    )
    outcome = tubeless(capsys, "run", project, "-q")
    assert (outcome.code, outcome.out) == (6, "")
    assert outcome.err.splitlines() == [f"error: {line}"]
