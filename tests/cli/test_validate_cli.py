"""``tubeless validate`` and ``tubeless schema``: output formats, exit codes, and that plain
``validate`` imports nothing from the projects it checks (DESIGN.md §5 and §6)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.fixtures.cli import ROOT, Outcome, tubeless_process
from tubeless._cli import cli, main
from tubeless.project import metaschema

SHIPPED = sorted((ROOT / "projects").glob("*.yaml"))

# A valid project whose references all live in the repository's examples package.
VALID = """\
version: 1
project: {id: demo}
python_path: [REPO]
agents:
  helper:
    input: {schema: examples.text:Question}
    result: {schema: examples.text:Answer}
    initial_state: examples.scripted_agent:initial_state
    decide: examples.scripted_agent:decide
    tools:
      count: examples.text:count
"""

# Two meta-schema problems: a limit below its minimum (line 9) and a misspelt key (line 10).
INVALID = """\
version: 1
project: {id: demo}
agents:
  helper:
    input: {schema: examples.text:Question}
    result: {schema: {type: string}}
    initial_state: examples.scripted_agent:initial_state
    decide: examples.scripted_agent:decide
    limits: {max_turns: 0}
    tool: {}
"""
INVALID_ISSUES = [
    (9, 25, "/agents/helper/limits/max_turns", "expected an integer >= 1, found 0"),
    (10, 5, "/agents/helper/tool", "unknown key 'tool'; did you mean 'tools'?"),
]

# A step that depends on itself passes the meta-schema and the cross-reference checks; the
# static step graph check finds it (with or without --resolve).
SELF_DEPENDENT = """\
version: 1
project: {id: demo}
python_path: [REPO]
pipelines:
  words:
    steps:
      - {id: split, run: examples.text_pipeline:split_words, depends_on: [split]}
"""

# Every kind of reference names the module ``trap``, which leaves a marker file when imported.
TRAP_MODULE = """\
import pathlib

from tubeless import define_tool

pathlib.Path(__file__).with_name("IMPORTED").write_text("imported", encoding="utf-8")

Text = str


def initial_state(validated):
    return {"done": False}


def decide(state, ctx):
    return {"kind": "finish", "result": "done"}


def decide_factory():
    return decide


def reduce(state, outcomes):
    return state


def run(inputs, ctx):
    return "ran"


def count(text, ctx):
    return len(text)


def skip(inputs, ctx):
    return False


def items(inputs, ctx):
    return []


def key(item, index):
    return str(index)


def map_options(item, index, inputs, ctx):
    return item


def finalize(outputs, ctx):
    return "finalized"


tool = define_tool(description="Count.", input_schema=str, output_schema=int, run=count)
"""
TRAP_PROJECT = """\
version: 1
project: {id: trap, default: agent}
python_path: [lib]
agents:
  agent:
    input: {schema: trap:Text}
    result: {schema: trap:Text}
    initial_state: trap:initial_state
    decide: trap:decide
    dry_run: {use: trap:decide_factory}
    reduce: trap:reduce
    tools:
      count: trap:tool
      measure:
        run: trap:count
        description: Measure a text.
        input: {schema: trap:Text}
        output: {schema: {type: integer}}
        preview: trap:count
pipelines:
  flow:
    input: {schema: trap:Text}
    result: {schema: trap:Text}
    finalize: {run: trap:finalize}
    steps:
      - {id: a, run: trap:run, skip: trap:skip, dry_run: trap:run, output: {schema: trap:Text}}
      - id: b
        for_each_pipeline:
          pipeline: child
          items: trap:items
          key: trap:key
          map_options: trap:map_options
  child:
    input: {schema: trap:Text}
    steps:
      - {id: c, run: trap:run}
"""


def invoke(*args: str | Path) -> Outcome:
    """``tubeless validate ARGS`` in process with click's ``CliRunner``."""
    result = CliRunner().invoke(cli, ["validate", *map(str, args)])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exc_info
    return Outcome(result.exit_code, result.stdout, result.stderr)


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text.replace("REPO", str(ROOT)), encoding="utf-8")
    return path


@pytest.fixture(autouse=True)
def restore_import_state() -> Iterator[None]:
    """``--resolve`` in process puts project folders on ``sys.path``; put it back."""
    saved = list(sys.path)
    yield
    sys.path[:] = saved


# -- shipped projects -----------------------------------------------------------------------
@pytest.mark.parametrize("resolve", [False, True], ids=["plain", "resolve"])
@pytest.mark.parametrize("project", SHIPPED, ids=[path.stem for path in SHIPPED])
def test_every_shipped_project_is_valid(project: Path, resolve: bool) -> None:
    args = ["--resolve", project] if resolve else [project]
    assert invoke(*args) == Outcome(0, f"ok: {project}\n", "")


@pytest.mark.slow
def test_the_projects_folder_validates_end_to_end_with_and_without_resolve() -> None:
    expected = "".join(f"ok: projects/{path.name}\n" for path in SHIPPED)
    assert tubeless_process("validate", "projects") == Outcome(0, expected, "")
    assert tubeless_process("validate", "--resolve", "projects/") == Outcome(0, expected, "")


# -- invalid files ----------------------------------------------------------------------------
def test_an_invalid_document_exits_4_with_one_located_error_line_per_problem(
    tmp_path: Path,
) -> None:
    bad = write(tmp_path / "bad.yaml", INVALID)
    expected = "".join(
        f"error: {bad}:{line}:{column} {pointer}: {message}\n"
        for line, column, pointer, message in INVALID_ISSUES
    )
    assert invoke(bad) == Outcome(4, "", expected)
    assert tubeless_process("validate", bad) == Outcome(4, "", expected)


def test_every_file_is_checked_and_one_invalid_file_makes_the_exit_code_4(
    tmp_path: Path,
) -> None:
    good = write(tmp_path / "good.yaml", VALID)
    bad = write(tmp_path / "bad.yaml", INVALID)
    shipped = SHIPPED[0]

    outcome = invoke(good, bad, shipped)

    assert outcome.code == 4
    assert outcome.out == f"ok: {good}\nok: {shipped}\n"
    assert [line.split(" ")[1] for line in outcome.err.splitlines()] == [
        f"{bad}:9:25",
        f"{bad}:10:5",
    ]


def test_a_directory_checks_its_projects_recursively_in_sorted_order_and_skips_other_yaml(
    tmp_path: Path,
) -> None:
    write(tmp_path / "b.yaml", VALID)
    write(tmp_path / "a" / "z.yml", VALID)
    write(tmp_path / "a" / "bad.yaml", INVALID)
    write(tmp_path / "a" / "notes.txt", VALID)  # not YAML by its name
    write(tmp_path / ".github" / "workflows" / "ci.yaml", VALID)  # hidden folder
    write(tmp_path / "ci.yml", "on: push\njobs: {test: {runs-on: ubuntu-latest}}\n")
    write(tmp_path / "quoted.yaml", VALID.replace("version:", '"version":'))

    outcome = invoke(tmp_path)

    assert outcome.code == 4
    assert outcome.out == "".join(
        f"ok: {tmp_path / name}\n" for name in ("a/z.yml", "b.yaml", "quoted.yaml")
    )
    assert outcome.err.startswith(f"error: {tmp_path / 'a' / 'bad.yaml'}:9:25 ")


def test_a_directory_without_projects_exits_2_unless_empty_is_allowed(tmp_path: Path) -> None:
    """More cases in test_validate_files.py."""
    write(tmp_path / "ci.yml", "on: push\n")
    assert invoke(tmp_path).code == 2
    assert invoke("--allow-empty", tmp_path) == Outcome(
        0, "", f"warning: {tmp_path}: no project files found\n"
    )


def test_a_file_named_twice_is_checked_once(tmp_path: Path) -> None:
    good = write(tmp_path / "good.yaml", VALID)
    assert invoke(good, tmp_path, good) == Outcome(0, f"ok: {good}\n", "")


def test_a_named_file_that_does_not_look_like_a_project_is_skipped_with_a_note(
    tmp_path: Path,
) -> None:
    """The folder rule applies to named files too (more cases in test_validate_files.py)."""
    ci = write(tmp_path / "ci.yml", "on: push\n")
    assert invoke("--allow-empty", ci) == Outcome(
        0, "", f"skipped: {ci}: not a project file (no top-level project key)\n"
    )


def test_a_missing_file_exits_2_after_the_other_files_are_checked(tmp_path: Path) -> None:
    good = write(tmp_path / "good.yaml", VALID)
    bad = write(tmp_path / "bad.yaml", INVALID)
    missing = tmp_path / "missing.yaml"

    assert invoke(missing) == Outcome(2, "", f"error: {missing}: No such file or directory\n")
    outcome = invoke(good, missing, bad)
    assert (outcome.code, outcome.out) == (2, f"ok: {good}\n")
    assert outcome.err.splitlines()[0] == f"error: {missing}: No such file or directory"
    assert len(outcome.err.splitlines()) == 3
    assert tubeless_process("validate", missing).code == 2


@pytest.mark.parametrize(
    "args",
    [
        pytest.param([], id="no-file"),
        pytest.param(["--format", "xml", "projects"], id="bad-format"),
        pytest.param(["--json", "--format", "github", "projects"], id="conflicting-formats"),
        pytest.param(["--nope", "projects"], id="unknown-option"),
    ],
)
def test_usage_errors_exit_1(args: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", *args]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: ")
    assert "Usage: tubeless validate [OPTIONS] FILE_OR_DIR..." in err


def test_a_yaml_1_1_refusal_is_reported_with_the_file_s_other_problems(tmp_path: Path) -> None:
    """Issue 28, item 15: `on:`, `yes` and `010` no longer hide the meta-schema's problems."""
    bad = write(
        tmp_path / "bad.yaml",
        INVALID.replace("  helper:\n", "  helper:\n    name: yes\n").replace(
            "{max_turns: 0}", "{max_turns: 0, max_calls: 010}"
        )
        + "    tools: {on: examples.text:count}\n",
    )

    outcome = invoke(bad)

    assert (outcome.code, outcome.out) == (4, "")
    assert [line.split(": ", 2)[1] for line in outcome.err.splitlines()] == [
        f"{bad}:5:11 /agents/helper/name",
        f"{bad}:10:25 /agents/helper/limits/max_turns",
        f"{bad}:10:39 /agents/helper/limits/max_calls",
        f"{bad}:11:5 /agents/helper/tool",
        f"{bad}:12:13 /agents/helper/tools",
    ]
    assert "'yes' is a boolean in YAML 1.1" in outcome.err.splitlines()[0]
    assert "found null" not in outcome.err


# -- formats ----------------------------------------------------------------------------------
@pytest.mark.parametrize("flag", [["--json"], ["--format", "json"]], ids=["json", "format-json"])
def test_json_output_is_one_object_with_every_file_and_every_error(
    tmp_path: Path, flag: list[str]
) -> None:
    good = write(tmp_path / "good.yaml", VALID)
    bad = write(tmp_path / "bad.yaml", INVALID)
    missing = tmp_path / "missing.yaml"

    outcome = invoke(*flag, good, bad, missing)

    assert (outcome.code, outcome.err) == (2, "")
    assert json.loads(outcome.out) == {
        "ok": False,
        "files": [
            {"file": str(good), "ok": True, "errors": []},
            {
                "file": str(bad),
                "ok": False,
                "errors": [
                    {
                        "code": "TUBELESS_DOCUMENT_INVALID",
                        "message": message,
                        "pointer": pointer,
                        "line": line,
                        "column": column,
                    }
                    for line, column, pointer, message in INVALID_ISSUES
                ],
            },
            {
                "file": str(missing),
                "ok": False,
                "errors": [
                    {
                        "code": None,
                        "message": "No such file or directory",
                        "pointer": None,
                        "line": None,
                        "column": None,
                    }
                ],
            },
        ],
    }


def test_json_output_of_valid_files_says_ok() -> None:
    outcome = invoke("--json", *SHIPPED)
    assert (outcome.code, outcome.err) == (0, "")
    assert json.loads(outcome.out) == {
        "ok": True,
        "files": [{"file": str(path), "ok": True, "errors": []} for path in SHIPPED],
    }


def test_github_format_prints_one_error_annotation_per_problem(tmp_path: Path) -> None:
    good = write(tmp_path / "good.yaml", VALID)
    bad = write(tmp_path / "bad.yaml", INVALID)

    outcome = invoke("--format", "github", good, bad)

    assert (outcome.code, outcome.err) == (4, "")
    assert outcome.out.splitlines() == [
        f"::error file={bad},line={line},col={column},title=TUBELESS_DOCUMENT_INVALID"
        f"::{pointer}: {message}"
        for line, column, pointer, message in INVALID_ISSUES
    ]


def test_github_annotations_escape_percent_newlines_and_property_delimiters(
    tmp_path: Path,
) -> None:
    # The key holds a real line break: the pointer carries it, the message quotes it escaped.
    odd = write(tmp_path / "a,b:c.yaml", INVALID.replace("tool: {}", '"50%\\nof": {}'))
    escaped_file = str(odd).replace(",", "%2C").replace(":", "%3A")

    outcome = invoke("--format", "github", odd)

    assert outcome.code == 4
    assert outcome.out.splitlines()[1] == (
        f"::error file={escaped_file},line=10,col=5,title=TUBELESS_DOCUMENT_INVALID"
        "::/agents/helper/50%25%0Aof: unknown key '50%25\\nof'; valid keys: decide, description, "
        "dry_run, implementation_version, initial_state, input, limits, name, reduce, result, "
        "result_json_schema, tools"
    )
    assert len(outcome.out.splitlines()) == 2


def test_text_output_escapes_control_characters_from_the_file(tmp_path: Path) -> None:
    """A hostile key cannot split an error line or send escape sequences to the terminal."""
    bad = write(tmp_path / "bad.yaml", INVALID.replace("tool: {}", '"\\e[2J\\nx\\u202e": {}'))

    outcome = invoke(bad)

    assert outcome.code == 4
    assert outcome.err.splitlines()[1].startswith(
        f"error: {bad}:10:5 /agents/helper/\\x1b[2J\\nx\\u202e: unknown key "
    )
    assert len(outcome.err.splitlines()) == 2
    assert "\x1b" not in outcome.err
    assert "\x1b" not in invoke("--json", bad).out


# -- --resolve ----------------------------------------------------------------------------------
@pytest.mark.slow
def test_a_bad_reference_is_found_only_with_resolve(tmp_path: Path) -> None:
    project = write(
        tmp_path / "project.yaml",
        VALID.replace("examples.scripted_agent:decide", "examples.scripted_agent:decyde"),
    )
    expected_error = (
        f"error: {project}:9:13 /agents/helper/decide: module 'examples.scripted_agent' has "
        "no attribute 'decyde'; did you mean 'decide'?\n"
    )

    assert invoke(project) == Outcome(0, f"ok: {project}\n", "")
    assert invoke("--resolve", project) == Outcome(4, "", expected_error)
    assert tubeless_process("validate", project).code == 0
    assert tubeless_process("validate", "--resolve", project) == Outcome(4, "", expected_error)


def test_a_graph_problem_is_found_without_resolve_and_names_its_code(tmp_path: Path) -> None:
    """Issue 15: plain validate checks the static step graph, at the dependency's location."""
    project = write(tmp_path / "project.yaml", SELF_DEPENDENT)
    expected = Outcome(
        4,
        "",
        f"error: {project}:7:75 /pipelines/words/steps/0/depends_on/0: "
        "[TUBELESS_DEFINITION_DEPENDENCY_SELF_REFERENCE] Step 'split' depends on itself in "
        "depends_on.\n",
    )

    assert invoke(project) == expected
    assert invoke("--resolve", project) == expected
    assert json.loads(invoke("--json", project).out)["files"][0]["errors"] == [
        {
            "code": "TUBELESS_DEFINITION_DEPENDENCY_SELF_REFERENCE",
            "message": "Step 'split' depends on itself in depends_on.",
            "pointer": "/pipelines/words/steps/0/depends_on/0",
            "line": 7,
            "column": 75,
        }
    ]


def test_an_agent_definition_error_exits_4_under_resolve_without_a_traceback(
    tmp_path: Path,
) -> None:
    # A pipeline used as a tool needs an input schema (found with and without --resolve).
    project = write(
        tmp_path / "project.yaml",
        VALID.replace(
            "      count: examples.text:count\n",
            "      count: {pipeline: words, description: Count.}\n"
            "pipelines:\n  words:\n    steps:\n"
            "      - {id: count, run: examples.text_pipeline:count_characters}\n",
        ),
    )

    outcome = tubeless_process("validate", "--resolve", project)

    assert (outcome.code, outcome.out) == (4, "")
    assert outcome.err.startswith(f"error: {project}")
    assert "[TUBELESS_AGENT_INVALID_DEFINITION] Pipeline 'words' has no input schema" in outcome.err
    assert "Traceback" not in outcome.err


def test_python_path_folders_are_checked_without_resolve_and_without_importing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 28, item 14: a missing folder, a file, and a folder shadowing the standard library
    are found by plain validate (a look at the file system, no import), as run finds them."""
    write(tmp_path / "lib" / "json.py", "raise SystemExit('imported')\n")
    write(tmp_path / "notes.txt", "not a folder\n")
    project = write(
        tmp_path / "project.yaml", VALID.replace("[REPO]", "[REPO, nosuch, notes.txt, lib]")
    )
    column = len("python_path: [REPO, ".replace("REPO", str(ROOT))) + 1
    problems = [
        (column, 1, "python_path folder nosuch does not exist"),
        (column + 8, 2, "python_path folder notes.txt is not a folder"),
        (
            column + 19,
            3,
            "lib/json.py shadows the standard library module 'json' (imports of 'json' get "
            "this file); rename it",
        ),
    ]
    expected = "".join(
        f"error: {project}:3:{col} /python_path/{index}: {message}\n"
        for col, index, message in problems
    )

    assert invoke(project) == Outcome(4, "", expected)
    assert not [
        name
        for name, module in sys.modules.items()
        if str(getattr(module, "__file__", None) or "").startswith(str(tmp_path))
    ]
    assert invoke("--resolve", project) == Outcome(4, "", expected)
    assert tubeless_process("validate", project) == Outcome(4, "", expected)
    assert [
        error["code"] for error in json.loads(invoke("--json", project).out)["files"][0]["errors"]
    ] == ["TUBELESS_REFERENCE_INVALID"] * 3
    assert main(["run", str(project)]) == 2  # DESIGN.md §6: a reference problem under run
    assert capsys.readouterr().err == expected


# -- validate imports nothing -------------------------------------------------------------------
@pytest.fixture
def trap(tmp_path: Path) -> Iterator[Path]:
    write(tmp_path / "lib" / "trap.py", TRAP_MODULE)
    yield write(tmp_path / "trap.yaml", TRAP_PROJECT)
    sys.modules.pop("trap", None)


def test_plain_validate_imports_nothing_from_the_project(trap: Path) -> None:
    marker = trap.parent / "lib" / "IMPORTED"
    assert invoke(trap) == Outcome(0, f"ok: {trap}\n", "")  # also loads tubeless.project
    modules, path = set(sys.modules), list(sys.path)

    assert invoke(trap) == Outcome(0, f"ok: {trap}\n", "")

    assert set(sys.modules) == modules
    assert sys.path == path
    assert "trap" not in sys.modules
    assert not marker.exists()
    assert tubeless_process("validate", trap) == Outcome(0, f"ok: {trap}\n", "")
    assert not marker.exists()


def test_validate_resolve_imports_the_project(trap: Path) -> None:
    marker = trap.parent / "lib" / "IMPORTED"
    assert tubeless_process("validate", "--resolve", trap) == Outcome(0, f"ok: {trap}\n", "")
    assert marker.read_text(encoding="utf-8") == "imported"


# -- schema ---------------------------------------------------------------------------------------
def test_schema_prints_the_shipped_meta_schema() -> None:
    result = CliRunner().invoke(cli, ["schema"])
    assert (result.exit_code, result.stderr) == (0, "")
    assert json.loads(result.stdout) == metaschema.load()
    assert result.stdout == metaschema.render(metaschema.load())


def test_schema_end_to_end_matches_the_committed_file() -> None:
    outcome = tubeless_process("schema")
    assert outcome == Outcome(
        0, (ROOT / "schemas" / "project.schema.json").read_text(encoding="utf-8"), ""
    )


# -- help stays cheap ---------------------------------------------------------------------------
def test_help_imports_no_project_machinery() -> None:
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "tubeless", "--help"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0
    assert "validate" in done.stdout
    assert "schema" in done.stdout
    imported = {line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines()}
    heavy = {name for name in imported if name.split(".")[0] in {"pydantic", "jsonschema", "yaml"}}
    assert heavy == set()
