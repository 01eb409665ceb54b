"""Project files arrive in pull requests: checking one imports and runs nothing, the loader's
bounds hold before anything is expanded, and templates stay in their sandbox (issue 9,
"Untrusted project files"; DESIGN.md §5 and §6).

Goes deeper than ``tests/project/test_yaml_loading.py``, ``tests/project/test_templates.py``,
``tests/project/test_references.py`` and ``tests/cli/test_validate_cli.py``: mutated copies of
every shipped project are fuzzed through ``check_project`` and ``tubeless validate``; hostile
files go through the whole CLI with memory measured; every kind of reference position is tried
with the standard library.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from tests.fixtures.guards import cli, hang_guard, peak_memory, restored_imports
from tests.fixtures.guards import template_project as _template_project
from tubeless import PipelineExecutionError
from tubeless.errors import (
    DOCUMENT_INVALID,
    REFERENCE_INVALID,
    TEMPLATE_INVALID,
    AgentDefinitionError,
    DocumentError,
    PipelineDefinitionError,
    ReferenceResolutionError,
    TemplateError,
    is_definition_code,
)
from tubeless.project import check_project, load_project
from tubeless.testing import finish, scripted

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = sorted((ROOT / "projects").glob("*.yaml"))
HANG_GUARD = 30  # seconds; hang guards only, never timing assertions (DESIGN.md §9)
MEMORY_BOUND = 20 * 1024 * 1024
# check_project also finds step-graph problems (a mutation can make a dependency cycle).
LOCATED = (
    DocumentError,
    TemplateError,
    ReferenceResolutionError,
    PipelineDefinitionError,
    AgentDefinitionError,
)
CODES = {DOCUMENT_INVALID, TEMPLATE_INVALID, REFERENCE_INVALID}


def known_code(code: str) -> bool:
    return code in CODES or is_definition_code(code)


def assert_located(error: BaseException, path: Path, text_lines: int | None = None) -> None:
    """Every issue names the file, a line and column from 1 and a JSON pointer."""
    assert isinstance(error, LOCATED), repr(error)
    assert known_code(error.code)
    assert error.issues, "a located error carries its issues"
    for issue in error.issues:
        assert issue.file == str(path)
        assert known_code(issue.code)
        assert issue.line >= 1 and issue.column >= 1, issue.format()
        if text_lines is not None:
            assert issue.line <= text_lines + 1, issue.format()
        assert issue.pointer == "" or issue.pointer.startswith("/"), issue.format()
        assert issue.format().startswith(f"{path}:{issue.line}:{issue.column} ")


# -- fuzzing mutated copies of every shipped project ----------------------------------------------
TEXTS = {path.stem: path.read_bytes() for path in SHIPPED}
KEYS = sorted({key.decode() for text in TEXTS.values() for key in re.findall(rb"([a-z_]+):", text)})
JUNK_KEYS = ["", "tool", "Agents", "__class__", "<<", "? x", "a b", "'q'", "1", "true", "~", "é"]
VALUES = [
    "",
    "null",
    "~",
    "true",
    "no",
    "0",
    "-1",
    "3.5",
    ".nan",
    "-.inf",
    "0x10",
    "1e309",
    "[]",
    "{}",
    "[1, [2, [3]]]",
    "{a: {b: c}}",
    "'quoted'",
    '"dq \\u0000"',
    "|\n  block",
    ">-\n  folded",
    "2024-01-01",
    "examples.text:count",
    "os:system",
    "builtins:eval",
    "{use: os:system, with: {command: touch MARKER}}",
    "'{{ input.question }}'",
    "'{{ input.__class__ }}'",
    "'{{ unclosed'",
    "'{% include \"x\" %}'",
    "*missing",
]
INSERTS = [
    "!!python/object/apply:os.system ['touch MARKER'] ",
    "!!python/name:builtins.eval ",
    "!!python/object/new:os.system [x] ",
    "!!binary ",
    "!!set ",
    "!!str ",
    "!!int ",
    "!custom ",
    "&a ",
    "*a ",
    "&b [*a, *a, *a] ",
    "<<: *a\n",
    "? ",
    "- ",
    "{",
    "[",
    "}",
    "]",
    '"',
    "'",
    "#",
    ": ",
    "%YAML 1.1\n",
    "%TAG ! tag:example.com,2000:\n",
    "---\n",
    "...\n",
    "\t",
    "\x00",
    "\x1b[2J",
    "\ufeff",
    "\u2028",
    "\r",
    "\x85",
    "\udcff",
]
BOMB = "lol0: &l0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n" + "".join(
    f"lol{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * 9) + "]\n" for i in range(1, 9)
)


def _lines(data: bytes) -> list[bytes]:
    return data.split(b"\n")


@st.composite
def mutated_projects(draw: st.DrawFn) -> tuple[str, bytes]:
    name = draw(st.sampled_from(sorted(TEXTS)))
    data = TEXTS[name]
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(
            st.sampled_from(
                [
                    "flip",
                    "flip",
                    "delete-line",
                    "duplicate-line",
                    "swap-lines",
                    "indent",
                    "rename-key",
                    "swap-value",
                    "swap-value",
                    "truncate",
                    "insert",
                    "insert",
                    "bomb",
                ]
            )
        )
        event(kind)
        lines = _lines(data)
        index = draw(st.integers(0, len(lines) - 1))
        if kind == "flip" and data:
            position = draw(st.integers(0, len(data) - 1))
            byte = draw(st.integers(0, 255) | st.sampled_from(list(b":-[]{}&*!|>'\"#%@`\t\n ")))
            data = data[:position] + bytes([byte]) + data[position + 1 :]
        elif kind == "flip":
            data = b"\x00"
        elif kind == "delete-line":
            del lines[index]
            data = b"\n".join(lines)
        elif kind == "duplicate-line":
            lines.insert(index, lines[index])
            data = b"\n".join(lines)
        elif kind == "swap-lines":
            other = draw(st.integers(0, len(lines) - 1))
            lines[index], lines[other] = lines[other], lines[index]
            data = b"\n".join(lines)
        elif kind == "indent":
            shift = draw(st.sampled_from([-4, -2, -1, 1, 2, 4]))
            line = lines[index]
            lines[index] = b" " * shift + line if shift > 0 else line[-shift:]
            data = b"\n".join(lines)
        elif kind == "rename-key":
            keys = list(re.finditer(rb"[a-z_]+(?=:)", data))
            if keys:
                match = keys[draw(st.integers(0, len(keys) - 1))]
                new = draw(st.sampled_from(KEYS + JUNK_KEYS)).encode()
                data = data[: match.start()] + new + data[match.end() :]
        elif kind == "swap-value":
            values = list(re.finditer(rb"(?<=: )[^\n{}\[\],#]+", data))
            if values:
                match = values[draw(st.integers(0, len(values) - 1))]
                new = draw(st.sampled_from(VALUES)).encode()
                data = data[: match.start()] + new + data[match.end() :]
        elif kind == "truncate":
            data = data[: draw(st.integers(0, len(data)))]
        elif kind == "insert":
            token = draw(st.sampled_from(INSERTS)).encode("utf-8", "surrogatepass")
            line = lines[index]
            at = draw(st.integers(0, len(line)))
            lines[index] = line[:at] + token + line[at:]
            data = b"\n".join(lines)
        else:  # an alias bomb inserted between two lines
            lines.insert(index, BOMB.encode())
            data = b"\n".join(lines)
    return name, data


@pytest.fixture(scope="module")
def trap_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder whose ``examples`` package leaves a marker when imported; mutated projects are
    written below it, so their ``python_path: [..]`` names it."""
    base = tmp_path_factory.mktemp("fuzz")
    package = base / "examples"
    package.mkdir()
    (package / "__init__.py").write_text(
        f"import pathlib\npathlib.Path({str(base / 'IMPORTED')!r}).write_text('x')\n",
        encoding="utf-8",
    )
    (base / "projects").mkdir()
    return base


#: Top-level keys each of which makes a YAML file a project file for ``tubeless validate``.
PROJECT_KEYS = (b"project", b"agents", b"pipelines", b"python_path")


@settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(case=mutated_projects())
def test_a_mutated_project_is_valid_or_refused_with_located_issues(
    case: tuple[str, bytes], trap_folder: Path
) -> None:
    """``check_project`` and ``tubeless validate`` give a project or located issues: never
    another exception, never a hang, never an import, never a side effect."""
    name, data = case
    path = trap_folder / "projects" / f"{name}.yaml"
    path.write_bytes(data)
    text_lines = len(data.decode("utf-8", "replace").splitlines()) + 1
    modules = set(sys.modules)

    with hang_guard():
        try:
            check_project(path)
        except LOCATED as exc:
            event(f"refused: {type(exc).__name__}")
            assert_located(exc, path, text_lines)
            refused = True
        else:
            event("valid")
            refused = False
        code, out, err = cli("validate", "--json", "--allow-empty", path)

    if err.startswith(f"skipped: {path}: not a project file"):
        # A mutation that loses every top-level project key: by validate's one rule for what a
        # project file is, a named file like this is skipped (check_project still ran).
        event("skipped by validate")
        keys = [re.search(rb"^" + key + rb"[ \t]*:(?:[ \t]|$)", data, re.M) for key in PROJECT_KEYS]
        assert not any(keys), err
        assert (code, json.loads(out), err.count("\n")) == (0, {"ok": True, "files": []}, 1)
        return
    assert code == (4 if refused else 0), err
    assert err == ""
    report = json.loads(out)
    assert report["ok"] is not refused
    for problem in report["files"][0]["errors"]:
        assert known_code(problem["code"])
        assert problem["line"] >= 1 and problem["column"] >= 1
    assert not (trap_folder / "IMPORTED").exists()
    assert not (trap_folder / "projects" / "MARKER").exists()
    assert not Path("MARKER").exists()
    assert not {m for m in set(sys.modules) - modules if m.split(".")[0] == "examples"}


# -- validate imports and executes nothing --------------------------------------------------------
TRAP_MODULE = """\
import pathlib, sys

pathlib.Path(__file__).with_name("IMPORTED-" + __name__).write_text("imported")

from tubeless import define_tool, pipeline_tool  # noqa: E402

Text = str


def factory(**settings):
    pathlib.Path(__file__).with_name("FACTORY-CALLED").write_text("called")
    return decide


def decide(state, ctx):
    return {"kind": "finish", "result": "done"}


def anything(*args, **kwargs):
    return None


tool = define_tool(description="T.", input_schema=str, output_schema=str, run=anything)
"""

TRAP_PROJECT = """\
version: 1
project: {id: trap, default: agent}
python_path: [lib, lib/pkg, ../outside]
allow_modules: [os, subprocess]
agents:
  agent:
    input: {schema: trap_a:Text}
    result: {schema: trap_b:Text}
    initial_state: {question: "{{ input }}"}
    decide: {use: trap_c:factory, with: {key: value}}
    dry_run: trap_d:decide
    reduce: trap_e:anything
    tools:
      direct: trap_f:tool
      declared:
        run: trap_g:anything
        description: Run.
        input: {schema: trap_h:Text}
        output: {schema: {type: string}}
        preview: trap_i:anything
      system: {run: os:rename, description: S., input: {schema: {type: string}},
               output: {schema: {}}}
      child: {pipeline: flow, description: Child., input: {schema: trap_j:Text},
              map_options: trap_k:anything}
pipelines:
  flow:
    input: {schema: trap_l:Text}
    result: {schema: trap_m:Text}
    finalize: {run: trap_n:anything}
    steps:
      - {id: a, run: trap_o:anything, skip: trap_p:anything, dry_run: trap_q:anything,
         output: {schema: trap_r:Text}}
      - {id: b, run: "subprocess:run"}
      - id: c
        for_each_pipeline: {pipeline: inner, items: trap_s:anything, key: trap_t:anything,
                            map_options: trap_u:anything}
      - {id: d, from_pipeline: {pipeline: inner, map_options: trap_v:anything,
                                map_result: trap_w:anything}}
  inner:
    steps:
      - {id: x, run: trap_x:anything}
"""
TRAP_NAMES = [f"trap_{letter}" for letter in "abcdefghijklmnopqrstuvwx"]


@pytest.fixture
def trap_project(tmp_path: Path) -> Iterator[Path]:
    """A valid project whose every reference names its own module, each leaving a marker when
    imported; the python_path folders also hold ``sitecustomize``/``usercustomize`` traps."""
    lib = tmp_path / "lib"
    (lib / "pkg").mkdir(parents=True)
    (tmp_path / "outside").mkdir()
    for index, name in enumerate(TRAP_NAMES):
        folder = [lib, lib / "pkg", tmp_path / "outside"][index % 3]
        (folder / f"{name}.py").write_text(TRAP_MODULE, encoding="utf-8")
    for folder in (lib, lib / "pkg", tmp_path / "outside"):
        for name in ("sitecustomize", "usercustomize", "__init__"):
            (folder / f"{name}.py").write_text(TRAP_MODULE, encoding="utf-8")
    (lib / "evil.pth").write_text("import os; os.system('touch PTH-RAN')\n", encoding="utf-8")
    project = tmp_path / "project" / "trap.yaml"
    project.parent.mkdir()
    project.write_text(
        TRAP_PROJECT.replace("lib, lib/pkg, ../outside", "../lib, ../lib/pkg, ../outside"),
        encoding="utf-8",
    )
    with restored_imports():
        yield project


def _markers(root: Path) -> list[str]:
    return sorted(
        str(path.relative_to(root))
        for pattern in ("IMPORTED-*", "FACTORY-CALLED", "PTH-RAN", "MARKER")
        for path in root.rglob(pattern)
    )


def test_validate_in_every_format_and_folder_mode_imports_and_runs_nothing(
    trap_project: Path,
) -> None:
    root = trap_project.parent.parent
    assert cli("validate", trap_project)[0] == 0  # warms tubeless.project up
    modules, path = set(sys.modules), list(sys.path)

    outcomes = [
        cli("validate", trap_project),
        cli("validate", "--json", trap_project),
        cli("validate", "--format", "github", trap_project),
        cli("validate", root),
        cli("validate", trap_project.parent, trap_project),
    ]

    assert [code for code, _, _ in outcomes] == [0] * len(outcomes)
    assert json.loads(outcomes[1][1])["ok"] is True
    assert _markers(root) == []
    assert set(sys.modules) == modules
    assert sys.path == path
    assert not any(name in sys.modules for name in TRAP_NAMES)


def test_validate_as_a_process_imports_no_project_module(trap_project: Path) -> None:
    """``-X importtime`` lists every module the process imported: none is the project's."""
    root = trap_project.parent.parent
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "tubeless", "validate", "--json", root],
        capture_output=True,
        text=True,
        cwd=root,
        timeout=60,
        check=False,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert done.returncode == 0, done.stderr
    imported = {line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines()}
    assert imported.isdisjoint(TRAP_NAMES)
    assert _markers(root) == []


def test_resolve_does_import_the_trap_so_the_markers_prove_something(trap_project: Path) -> None:
    root = trap_project.parent.parent
    code, _, err = cli("validate", "--resolve", trap_project)
    assert code == 0, err
    assert {
        name.removeprefix("IMPORTED-") for name in (p.name for p in root.rglob("IMPORTED-*"))
    } >= set(TRAP_NAMES)
    assert (
        (root / "lib" / "FACTORY-CALLED").exists()
        or (root / "lib" / "pkg" / "FACTORY-CALLED").exists()
        or (root / "outside" / "FACTORY-CALLED").exists()
    )


# -- hostile files are refused before any expansion ------------------------------------------------
def _bomb() -> str:
    lines = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, 12)]
    return "version: 1\nproject: {id: bomb}\n" + "\n".join(lines) + "\n"


def _write_hostile(tmp_path: Path, kind: str) -> tuple[Path, str]:
    """A hostile file of ``kind`` and a fragment of the message refusing it."""
    marker = tmp_path / "MARKER"
    path = tmp_path / f"{kind}.yaml"
    head = "version: 1\nproject: {id: hostile}\n"
    if kind == "apply-os-system":
        path.write_text(
            head + f"agents: !!python/object/apply:os.system ['touch {marker}']\n",
            encoding="utf-8",
        )
        return path, "can run code when loaded"
    if kind == "name-builtins-eval":
        path.write_text(
            head + "pipelines:\n  x:\n    steps:\n"
            f"      - {{id: a, run: !!python/name:builtins.eval \"open('{marker}', 'w')\"}}\n",
            encoding="utf-8",
        )
        return path, "tag !!python/name:builtins.eval is not allowed"
    if kind == "object-new":
        path.write_text(
            head + f"x: !!python/object/new:subprocess.Popen [['touch', '{marker}']]\n",
            encoding="utf-8",
        )
        return path, "can run code when loaded"
    if kind == "alias-bomb":
        path.write_text(_bomb(), encoding="utf-8")
        return path, "more than 10,000 values"
    if kind == "merge-bomb":
        lines = ["a0: &a0 {k0: x}"] + [
            f"a{i}: &a{i} {{<<: [*a{i - 1}, *a{i - 1}], k{i}: x}}" for i in range(1, 40)
        ]
        path.write_text(head + "\n".join(lines) + "\n", encoding="utf-8")
        return path, "more than"
    if kind == "nesting-10000":
        path.write_text(head + "agents: " + "[" * 10_000 + "]" * 10_000 + "\n", encoding="utf-8")
        return path, "nested more than 64 levels"
    if kind == "nesting-1000-block":
        path.write_text(
            head + "agents:\n" + "".join(" " * i + "k:\n" for i in range(1, 1_001)),
            encoding="utf-8",
        )
        return path, "nested more than 64 levels"
    if kind == "sparse-50mb":
        with path.open("wb") as stream:
            stream.write(head.encode())
            stream.truncate(50 * 1024 * 1024)
        return path, "limited to 1 MiB"
    if kind == "binary":
        path.write_bytes(bytes(range(256)) * 1024)
        return path, "not valid UTF-8"
    if kind == "elf":
        path.write_bytes(Path(sys.executable).resolve().read_bytes()[:65_536])
        return path, "UTF-8"
    raise AssertionError(kind)


HOSTILE = [
    "apply-os-system",
    "name-builtins-eval",
    "object-new",
    "alias-bomb",
    "merge-bomb",
    "nesting-10000",
    "nesting-1000-block",
    "sparse-50mb",
    "binary",
    "elf",
]

#: Hostile files that are not project files by validate's rule (it names them as skipped).
NOT_PROJECT_FILES = frozenset({"binary", "elf"})


@pytest.fixture(scope="module")
def warm_cli(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Import what validate and run import lazily, so their memory is not counted below."""
    folder = tmp_path_factory.mktemp("warm")
    path, _ = _write_hostile(folder, "alias-bomb")
    cli("validate", path)
    cli("run", path)
    with contextlib.suppress(DocumentError):
        load_project(path)


@pytest.mark.parametrize(
    "kind",
    [
        pytest.param(kind, marks=pytest.mark.slow) if kind == "nesting-10000" else kind
        for kind in HOSTILE
    ],
)
def test_a_hostile_file_is_refused_by_the_loader_bounds_with_little_memory(
    tmp_path: Path, kind: str, warm_cli: None
) -> None:
    path, fragment = _write_hostile(tmp_path, kind)

    with hang_guard(), peak_memory() as peak:
        with pytest.raises(DocumentError) as checked:
            check_project(path)
        validated = cli("validate", path)
        as_json = cli("validate", "--json", path)
        ran = cli("run", path)

    messages = [issue.message for issue in checked.value.issues]
    assert any(fragment in message for message in messages), messages
    assert_located(checked.value, path)
    if kind in NOT_PROJECT_FILES:  # no top-level project key: validate skips it
        assert validated[0] == 2
        assert validated[2].startswith(f"skipped: {path}: not a project file ")
        assert json.loads(as_json[1]) == {"ok": False, "files": []}
    else:
        assert validated[0] == 4
        assert validated[2].startswith(f"error: {path}:")
        assert json.loads(as_json[1])["files"][0]["errors"][0]["code"] == DOCUMENT_INVALID
    assert "Traceback" not in validated[2]
    assert (ran[0], ran[1]) == (4, "")
    assert "Traceback" not in ran[2]
    assert not (tmp_path / "MARKER").exists()
    assert peak[0] < MEMORY_BOUND, f"peak {peak[0]:,} bytes"


def test_a_folder_of_hostile_files_is_scanned_with_little_memory(
    tmp_path: Path, warm_cli: None
) -> None:
    """``validate DIR`` sniffs every YAML file (1 MiB at most each) and refuses them all."""
    for kind in HOSTILE:
        _write_hostile(tmp_path, kind)
    (tmp_path / "zero.yaml").symlink_to("/dev/zero")
    (tmp_path / "loop").symlink_to(tmp_path)

    with hang_guard(), peak_memory() as peak:
        code, out, err = cli("validate", tmp_path)

    assert code == 4
    assert out == ""
    assert "Traceback" not in err
    assert not (tmp_path / "MARKER").exists()
    assert peak[0] < MEMORY_BOUND, f"peak {peak[0]:,} bytes"


# -- references to the standard library --------------------------------------------------------
STDLIB = [
    ("os:system", "os"),
    ("subprocess:run", "subprocess"),
    ("builtins:eval", "builtins"),
    ("shutil:rmtree", "shutil"),
    ("importlib:import_module", "importlib"),
]
HELPERS = """\
import os
import subprocess
from os import system

from tubeless import define_tool


def decide(state, ctx):
    return {"kind": "finish", "result": "done"}


def plain(inputs, ctx):
    return "ran"
"""
POSITIONS = {
    "decide": """\
version: 1
project: {id: refs}
python_path: [.]
ALLOW
agents:
  helper:
    input: {schema: {type: object}}
    result: {schema: {}}
    initial_state: {a: "1"}
    decide: REF
""",
    "step-run": """\
version: 1
project: {id: refs}
python_path: [.]
ALLOW
pipelines:
  flow:
    steps:
      - {id: only, run: "REF"}
""",
    "tool-run": """\
version: 1
project: {id: refs}
python_path: [.]
ALLOW
agents:
  helper:
    input: {schema: {type: object}}
    result: {schema: {}}
    initial_state: {a: "1"}
    decide: helpers:decide
    tools:
      shell: {run: "REF", description: Run it., input: {schema: {type: string}},
              output: {schema: {}}}
""",
    "factory-use": """\
version: 1
project: {id: refs}
python_path: [.]
ALLOW
agents:
  helper:
    input: {schema: {type: object}}
    result: {schema: {}}
    initial_state: {a: "1"}
    decide: {use: "REF", with: {}}
""",
}


def _reference_project(tmp_path: Path, position: str, reference: str, allow: str | None) -> Path:
    (tmp_path / "helpers.py").write_text(HELPERS, encoding="utf-8")
    text = POSITIONS[position].replace("REF", reference)
    text = text.replace("ALLOW\n", f"allow_modules: [{allow}]\n" if allow else "")
    path = tmp_path / "project.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def _refusal(module: str) -> str:
    return f"names the standard library module {module!r}; add it to allow_modules"


@pytest.mark.parametrize("position", sorted(POSITIONS))
@pytest.mark.parametrize(("reference", "module"), STDLIB, ids=[r for r, _ in STDLIB])
def test_a_standard_library_callable_is_refused_in_every_position(
    tmp_path: Path, position: str, reference: str, module: str
) -> None:
    path = _reference_project(tmp_path, position, reference, allow=None)

    with restored_imports():
        check_project(path)  # references are not resolved without --resolve
        with pytest.raises(ReferenceResolutionError) as caught:
            load_project(path)
        code, _, err = cli("validate", "--resolve", path)

    assert_located(caught.value, path)
    assert [issue.message for issue in caught.value.issues] == [
        f"{reference!r} {_refusal(module)} if the project really needs it"
    ]
    assert code == 4
    assert _refusal(module) in err


@pytest.mark.parametrize("position", sorted(POSITIONS))
@pytest.mark.parametrize(("reference", "module"), STDLIB, ids=[r for r, _ in STDLIB])
def test_a_standard_library_callable_is_accepted_once_its_module_is_allowed(
    tmp_path: Path, position: str, reference: str, module: str
) -> None:
    path = _reference_project(tmp_path, position, reference, allow=module)

    with restored_imports():
        try:
            project = load_project(path)  # resolved, never called
        except ReferenceResolutionError as exc:
            # What is left is the call's shape, which shows the reference got through: the
            # factory is called at load without arguments (a required one is named first, or
            # the call refuses with a TypeError), a callable must take the harness's arguments.
            (issue,) = exc.issues
            assert issue.message.startswith(
                (
                    f"{reference!r} needs the setting",
                    f"factory {reference!r} failed: TypeError",
                    f"{reference!r} cannot be called as",
                )
            ), issue
        else:
            assert position != "factory-use"
            assert set(project.entries) == ({"flow"} if position == "step-run" else {"helper"})


@pytest.mark.parametrize(
    ("reference", "module"),
    [
        pytest.param("helpers:os.system", "os", id="through-an-imported-module"),
        pytest.param("helpers:subprocess.run", "subprocess", id="through-a-submodule-attr"),
        pytest.param("helpers:system", "os", id="re-exported-name"),
        pytest.param("tubeless._cli.run:os.system", "os", id="through-a-library-module"),
    ],
)
def test_a_standard_library_callable_reached_through_another_module_is_refused(
    tmp_path: Path, reference: str, module: str
) -> None:
    path = _reference_project(tmp_path, "step-run", reference, allow=None)
    with restored_imports(), pytest.raises(ReferenceResolutionError) as caught:
        load_project(path)
    assert_located(caught.value, path)


# -- templates stay in the sandbox ----------------------------------------------------------------


def _template_outcome(path: Path) -> tuple[str, str | None, str]:
    """(``load`` or ``run`` or ``none``, the code, the message) of a template's failure."""
    try:
        check_project(path)
        agent = load_project(
            path, overrides={"helper": {"decide": scripted(lambda state, ctx: finish(state))}}
        ).get("helper")
    except LOCATED as exc:
        assert_located(exc, path)
        return "load", exc.code, str(exc)
    try:
        agent.run_sync({})
    except PipelineExecutionError as exc:
        return "run", exc.source_code, str(exc)
    return "none", None, ""


TEMPLATES = [
    pytest.param("{{ input.__class__ }}", id="dunder-class"),
    pytest.param("{{ input.__class__.__mro__[1].__subclasses__() }}", id="subclasses"),
    pytest.param("{{ ''.__class__.__base__.__subclasses__() }}", id="str-subclasses"),
    pytest.param("{{ input.__init__.__globals__ }}", id="init-globals"),
    pytest.param("{{ __import__('os').system('touch MARKER') }}", id="import"),
    pytest.param("{{ self.__init__.__globals__ }}", id="self-dunder"),
    pytest.param("{{ self._TemplateReference__context }}", id="self-private"),
    pytest.param("Q: {{ self }}", id="self"),
    pytest.param("{{ config.items() }}", id="config"),
    pytest.param("{{ lipsum.__globals__['os'].system('touch MARKER') }}", id="lipsum-globals"),
    pytest.param("Q: {{ lipsum(1) }}", id="lipsum"),
    pytest.param("{{ cycler.__init__.__globals__.os.popen('touch MARKER') }}", id="cycler"),
    pytest.param("{{ joiner.__init__.__globals__ }}", id="joiner"),
    pytest.param("{{ namespace.__init__.__globals__ }}", id="namespace"),
    pytest.param("{{ range(10**9) | list }}", id="range-1e9"),
    pytest.param("{{ input.update({'a': 1}) }}", id="mutate-input"),
    pytest.param("{{ '{0.__class__.__mro__}'.format(input) }}", id="format"),
    pytest.param("{% include '/etc/passwd' %}", id="include"),
    pytest.param("{% import 'os' as os %}{{ os }}", id="import-tag"),
    pytest.param("{% from '/etc/passwd' import root %}{{ root }}", id="from-import"),
    pytest.param("{% extends '/etc/passwd' %}", id="extends"),
    pytest.param("{{ 2**100000 }}", id="fold-big-power"),
    pytest.param(
        "{{ " + "(" * 300 + "1" + ")" * 300 + " }}",
        id="nested-300",
    ),
]


@pytest.mark.parametrize("template", TEMPLATES)
def test_a_sandbox_escape_fails_with_template_invalid_and_runs_nothing(
    tmp_path: Path, template: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    path = _template_project(tmp_path, template)

    with hang_guard(), peak_memory() as peak:
        where, code, message = _template_outcome(path)

    assert code == TEMPLATE_INVALID, (where, message)
    assert not (tmp_path / "MARKER").exists()
    assert peak[0] < MEMORY_BOUND, f"peak {peak[0]:,} bytes"


def test_a_template_syntax_problem_is_found_by_validate_at_its_location(tmp_path: Path) -> None:
    path = _template_project(tmp_path, "{% include %}")
    code, _, err = cli("validate", path)
    assert code == 4
    assert err.startswith(f"error: {path}:11:14 /agents/helper/initial_state/value: ")


@pytest.mark.parametrize(
    ("template", "stage"),
    [
        pytest.param("{{ 'ab' * 2**24 }}", "validate", id="folded-at-load"),
        pytest.param("Q: {{ ('a' ~ 'b') * 2**24 }}", "validate", id="folded-text"),
        pytest.param("{{ input.question * 2**24 }}", "run", id="from-input"),
        pytest.param("{{ [input.question] * 2**21 }}", "run", id="list"),
        pytest.param("{{ 'x' | center(2**25) }}", "run", id="filter-width"),
    ],
)
def test_a_template_cannot_build_a_huge_value(
    tmp_path: Path, template: str, stage: str, warm_cli: None
) -> None:
    """Sizes stay bounded (a 32 MiB value is refused), at load as at run."""
    path = _template_project(tmp_path, template)
    with hang_guard(), peak_memory() as peak:
        code, _, err = cli("validate", path)
        outcome = _template_outcome(path) if code == 0 else ("load", TEMPLATE_INVALID, err)
    assert outcome[1] == TEMPLATE_INVALID, outcome
    assert peak[0] < MEMORY_BOUND, f"{stage}: peak {peak[0]:,} bytes"


RLIMITED = """\
import json, resource, sys
limit = 1536 * 1024 * 1024
resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
from tubeless import PipelineExecutionError, TemplateError
from tubeless.project import load_project
from tubeless.testing import finish, scripted
try:
    agent = load_project(
        sys.argv[1], overrides={"helper": {"decide": scripted(lambda s, c: finish(s))}}
    ).get("helper")
except TemplateError as exc:  # refused when the project loads: better still
    print(json.dumps({"code": exc.code, "message": str(exc)}))
    sys.exit(0)
try:
    agent.run_sync({})
except PipelineExecutionError as exc:
    print(json.dumps({"code": exc.source_code, "message": str(exc)}))
else:
    print(json.dumps({"code": None, "message": ""}))
"""


@pytest.mark.skipif(sys.platform != "linux", reason="RLIMIT_AS is enforced on Linux only")
@pytest.mark.parametrize(
    "template",
    [
        pytest.param("{{ 'a' * 10**10 }}", id="repeat-1e10"),
        pytest.param("{{ input.question * 10**10 }}", id="input-repeat-1e10"),
        pytest.param("{{ '%10000000000s' | format(1) }}", id="format-width"),
    ],
)
def test_a_ten_gigabyte_template_is_refused_by_a_bound_not_by_running_out_of_memory(
    tmp_path: Path, template: str
) -> None:
    """Run in a child process whose address space is capped at 1.5 GiB, so that the current
    behaviour (an attempt to allocate 10 GB) cannot hurt the machine running the tests."""
    path = _template_project(tmp_path, template)
    done = subprocess.run(
        [sys.executable, "-c", RLIMITED, str(path)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
        check=False,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    outcome = json.loads(done.stdout)
    assert outcome["code"] == TEMPLATE_INVALID
    assert "MemoryError" not in outcome["message"]
