"""Hostile project files and templates are refused within bounds (issue 14 items 1, 2, 5, 8, 9,
17): validate folds no template, numbers are bounded before conversion, callables come from an
allowlist of places, the template sandbox is bounded by work and size, big valid files check
without generating code.

Each test failed before its fix. Bounds are sizes and counts (``tracemalloc`` peaks, numbers of
calls), never timings; time limits are hang guards only (DESIGN.md §9).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import jinja2.compiler
import pytest

from tests.fixtures.guards import cli, hang_guard, peak_memory, restored_imports, template_project
from tubeless import PipelineExecutionError
from tubeless.errors import DOCUMENT_INVALID, REFERENCE_INVALID, TEMPLATE_INVALID, DocumentError
from tubeless.project import check_project, load_project
from tubeless.testing import finish, scripted

ROOT = Path(__file__).resolve().parents[2]
MEMORY_BOUND = 20 * 1024 * 1024


def echo_state() -> dict[str, Any]:
    return {"helper": {"decide": scripted(lambda state, ctx: finish(state))}}


@pytest.fixture(scope="module")
def warm(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Import and compile what the checks use lazily, so that it is not counted below."""
    path = template_project(tmp_path_factory.mktemp("warm"), "{{ input.question | upper }}")
    cli("validate", path)
    load_project(path, overrides=echo_state()).get("helper").run_sync({})


# -- item 1: validate parses templates and folds nothing --------------------------------------
FOLDED = [
    pytest.param("{{ [1]|batch(5000000, 0)|list|length }}", id="batch"),
    pytest.param("{{ [1]|slice(2000000)|list|length }}", id="slice"),
    pytest.param("{{ ('x'|list) * 1 ~ [1]|batch(3000000, 0)|list|string }}", id="nested"),
]


@pytest.mark.parametrize("template", FOLDED)
def test_validate_checks_a_template_without_evaluating_its_literal_filters(
    tmp_path: Path, template: str, warm: None
) -> None:
    """Issue 14 item 1: checking a template (validate, check_project, load_project) parses it
    and walks the tree; jinja2 folds no filter, so a 40 MB constant is never built."""
    path = template_project(tmp_path, template)

    with hang_guard(), peak_memory() as peak:
        check_project(path)
        code, out, err = cli("validate", path)
        load_project(path, overrides=echo_state())

    assert (code, err) == (0, ""), err
    assert out == f"ok: {path}\n"
    assert peak[0] < 5 * 1024 * 1024, f"peak {peak[0]:,} bytes"


def test_validate_still_finds_unknown_names_and_filters_by_walking_the_tree(
    tmp_path: Path,
) -> None:
    """Issue 14 item 1: the hand-written walk keeps jinja2's rules: names bound by the template
    (set, for, macro arguments, loop, caller) are fine; others and unknown filters are not."""
    valid = (
        "{% set a = input.question %}{% for w in a.split() %}{{ loop.index }}{{ w }}{% endfor %}"
        "{% macro m(x, y=a) %}{{ x ~ y ~ caller() }}{% endmacro %}{% call m(1) %}z{% endcall %}"
    )
    assert cli("validate", template_project(tmp_path, valid))[0] == 0
    for template, message in [
        ("{% for w in input %}{% endfor %}{{ w }}", "unknown: w"),
        ("{{ loop.index }}", "unknown: loop"),
        ("{{ self }}", "unknown: self"),
        ("{{ input | nosuch }}", "invalid template: No filter named 'nosuch'."),
    ]:
        code, _, err = cli("validate", template_project(tmp_path, template))
        assert code == 4, template
        assert message in err, err


# -- item 2 and 9: numbers are bounded before they are converted -------------------------------
def _number_file(tmp_path: Path, where: str, number: str) -> Path:
    path = tmp_path / "numbers.yaml"
    (tmp_path / "factories.py").write_text("def make(**kw):\n    return print\n", encoding="utf-8")
    if where == "version":
        text = f"version: {number}\nproject: {{id: numbers}}\n"
    else:  # inside a factory's with:, which no schema constrains
        text = (
            "version: 1\nproject: {id: numbers}\npython_path: [.]\npipelines:\n  p:\n"
            "    steps:\n      - {id: s, run: 'factories:make'}\n"
            "agents:\n  a:\n    input: {schema: {}}\n    result: {schema: {}}\n"
            "    initial_state: {x: '1'}\n"
            f"    decide: {{use: factories:make, with: {{n: {number}}}}}\n"
        )
    path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize("where", ["version", "with"])
def test_a_sexagesimal_integer_is_refused_before_it_is_converted(
    tmp_path: Path, where: str
) -> None:
    """Issue 14 item 2: ``1:0:0:...`` (YAML 1.1 base 60) converts in quadratic time; a number
    longer than 100 characters is refused, located, before any conversion."""
    path = _number_file(tmp_path, where, "1" + ":0" * 20_000)

    with hang_guard(), pytest.raises(DocumentError) as caught:
        check_project(path)

    (issue,) = caught.value.issues
    line = 1 if where == "version" else 13
    assert (issue.code, issue.line) == (DOCUMENT_INVALID, line)
    assert issue.pointer == ("/version" if where == "version" else "/agents/a/decide/with/n")
    assert "is a number of 40,001 characters; numbers may have at most 100" in issue.message


@pytest.mark.parametrize(
    "number",
    [
        pytest.param("0x" + "f" * 5000, id="hex"),
        pytest.param("0b" + "1" * 20000, id="binary"),
        pytest.param("1" + ":0" * 2000, id="sexagesimal-int"),
        pytest.param("1" + ":0" * 2000 + ".5", id="sexagesimal-float"),
        pytest.param("0" + "7" * 6000, id="octal"),
    ],
)
@pytest.mark.parametrize("command", ["validate", "plan", "run"])
def test_a_huge_number_is_a_located_document_error_in_every_command(
    tmp_path: Path, number: str, command: str
) -> None:
    """Issue 14 item 9: integers past 4,300 digits and sexagesimal floats exit 4 with the file,
    line and pointer (they exited 6 with "Exceeds the limit" and no location)."""
    path = _number_file(tmp_path, "version", number)

    with restored_imports():
        code, out, err = cli(command, path)

    assert (code, out) == (4, "")
    assert err.startswith(f"error: {path}:1:10 /version: "), err
    assert "numbers may have at most 100" in err
    assert len(err.splitlines()) == 1


# -- item 5: callables come from an allowlist of places ----------------------------------------
HELPERS = """\
import functools
import operator
import os
import pathlib
from subprocess import Popen


def decide(state, ctx):
    return {"kind": "finish", "result": "done"}


def plain(inputs, ctx):
    return "ran"


class Decider:
    def __init__(self, state, ctx):
        self.state = state


class Factory:
    def __init__(self, **settings):
        self.settings = settings

    def __call__(self, state, ctx):
        return {"kind": "finish", "result": "done"}


factory_instance = Factory()
bound = factory_instance.__call__
partial_plain = functools.partial(plain)
cached = functools.lru_cache(maxsize=None)(plain)
run_eval = eval.__call__
run_exec = exec.__call__
run_system = os.system.__call__
partial_system = functools.partial(os.system, "true")
getter = operator.itemgetter("x")
Path = pathlib.Path
join = ", ".join
"""
POSITIONS = {
    "initial_state": "    initial_state: REF\n    decide: helpers:decide\n",
    "decide": "    initial_state: {a: '1'}\n    decide: REF\n",
    "factory-use": "    initial_state: {a: '1'}\n    decide: {use: REF, with: {}}\n",
    "tool-run": (
        "    initial_state: {a: '1'}\n    decide: helpers:decide\n    tools:\n"
        "      t: {run: REF, description: Run., input: {schema: {}}, output: {schema: {}}}\n"
    ),
}


def reference_project(tmp_path: Path, position: str, reference: str, allow: str = "") -> Path:
    (tmp_path / "helpers.py").write_text(HELPERS, encoding="utf-8")
    path = tmp_path / "project.yaml"
    path.write_text(
        "version: 1\nproject: {id: refs}\npython_path: [.]\n"
        + (f"allow_modules: [{allow}]\n" if allow else "")
        + "agents:\n  helper:\n    input: {schema: {}}\n    result: {schema: {}}\n"
        + POSITIONS[position].replace("REF", f"'{reference}'"),
        encoding="utf-8",
    )
    return path


REFUSED = [
    pytest.param("helpers:Popen", "subprocess", id="re-exported-stdlib-class"),
    pytest.param("helpers:run_eval", "builtins", id="eval-method-wrapper"),
    pytest.param("helpers:run_exec", "builtins", id="exec-method-wrapper"),
    pytest.param("helpers:run_system", "os", id="os-system-method-wrapper"),
    pytest.param("helpers:Popen.__call__", "subprocess", id="class-call-wrapper"),
    pytest.param("helpers:partial_system", "os", id="partial-of-os-system"),
    pytest.param("helpers:getter", "operator", id="stdlib-callable-object"),
    pytest.param("helpers:Path", "pathlib", id="stdlib-class"),
    pytest.param("helpers:join", "builtins", id="bound-str-method"),
]


@pytest.mark.parametrize("position", sorted(POSITIONS))
@pytest.mark.parametrize(("reference", "module"), REFUSED)
def test_a_callable_from_the_standard_library_is_refused_however_it_is_reached(
    tmp_path: Path, position: str, reference: str, module: str
) -> None:
    """Issue 14 item 5: classes, method-wrappers, partials and callable objects whose defining
    module is the standard library are refused in every position (unless allowed)."""
    path = reference_project(tmp_path, position, reference)

    with restored_imports():
        code, _, err = cli("validate", "--resolve", path)
    with restored_imports():
        report = json.loads(cli("validate", "--resolve", "--json", path)[1])

    assert code == 4, err
    assert f"{reference!r} reaches the standard library module {module!r}" in err
    assert [error["code"] for error in report["files"][0]["errors"]] == [REFERENCE_INVALID]


def test_a_re_exported_popen_cannot_run_a_command_from_the_input(tmp_path: Path) -> None:
    """Issue 14 item 5: ``initial_state: helpers:Popen`` with ``--input '["touch", F]'`` ran a
    command; now the project does not load (exit 2) and nothing runs."""
    marker = tmp_path / "MARKER"
    path = reference_project(tmp_path, "initial_state", "helpers:Popen")

    with restored_imports():
        code, out, err = cli("run", path, "--input", json.dumps(["touch", str(marker)]))

    assert (code, out) == (2, "")
    assert "reaches the standard library module 'subprocess'" in err
    assert not marker.exists()


ACCEPTED = [
    pytest.param("helpers:plain", id="project-function"),
    pytest.param("helpers:Decider", id="project-class"),
    pytest.param("helpers:factory_instance", id="project-callable-object"),
    pytest.param("helpers:bound", id="bound-method-of-a-project-object"),
    pytest.param("helpers:partial_plain", id="partial-of-a-project-function"),
    pytest.param("helpers:cached", id="lru-cached-project-function"),
    pytest.param("helpers:plain.__call__", id="method-wrapper-of-a-project-function"),
    pytest.param("yaml:dump", id="installed-package-function"),
    pytest.param("tubeless.testing:scripted", id="tubeless-function"),
]


@pytest.mark.parametrize("reference", ACCEPTED)
def test_a_callable_from_the_project_or_an_installed_package_is_accepted(
    tmp_path: Path, reference: str
) -> None:
    """Issue 14 item 5: the allowlist accepts the project's own functions, classes, callable
    objects and their wrappers, and installed packages' callables (tubeless's included)."""
    path = reference_project(tmp_path, "decide", reference)
    with restored_imports():
        project = load_project(path)
    assert set(project.entries) == {"helper"}


@pytest.mark.parametrize(
    ("reference", "module"),
    [("helpers:Popen", "subprocess"), ("helpers:run_system", "os"), ("helpers:getter", "operator")],
)
def test_allow_modules_lets_a_standard_library_callable_through(
    tmp_path: Path, reference: str, module: str
) -> None:
    """Issue 14 item 5: listing the module in ``allow_modules`` accepts what it defines."""
    path = reference_project(tmp_path, "decide", reference, allow=module)
    with restored_imports():
        assert set(load_project(path).entries) == {"helper"}


def test_the_shipped_projects_and_provider_factories_still_load() -> None:
    """Issue 14 item 5: ``tubeless.providers`` factories and the shipped examples pass."""
    with restored_imports():
        for path in sorted((ROOT / "projects").glob("*.yaml")):
            load_project(path)


# -- item 8: the sandbox is bounded by work and size ---------------------------------------------
def run_template(tmp_path: Path, template: str) -> tuple[str, str | None, str]:
    """(``load``/``run``/``none``, the code, the message) of rendering ``template``."""
    path = template_project(tmp_path, template)
    agent = load_project(path, overrides=echo_state()).get("helper")
    try:
        agent.run_sync({})
    except PipelineExecutionError as exc:
        return "run", exc.source_code, str(exc)
    return "none", None, ""


BIG = "'a' * 900000"
RUN_TIME = [
    pytest.param(
        "{% set x = " + BIG + " %}{{ " + " ~ ".join(["x"] * 40) + " }}",
        "may not join text past 1,000,000 characters",
        id="tilde-concat",
    ),
    pytest.param("{{ input.question.ljust(40000000) }}", "calling 'ljust' could build", id="ljust"),
    pytest.param("{{ input.question.zfill(40000000) }}", "calling 'zfill'", id="zfill"),
    pytest.param("{{ input.question.center(40000000) }}", "calling 'center'", id="center"),
    pytest.param("{{ ('\\t' * 100).expandtabs(400000) }}", "calling 'expandtabs'", id="expandtabs"),
    pytest.param(
        "{{ '{:>40000000}'.format(input.question) }}", "the format string", id="format-width"
    ),
    pytest.param("{{ ('a' * 1000).replace('a', 'b' * 40000) }}", "calling 'replace'", id="replace"),
    pytest.param("{{ ('b' * 40000).join('a' * 1000) }}", "calling 'join'", id="join"),
    pytest.param(
        "{{ (['b' * 40000] * 20) | join('x' * 40000) }}",
        "the filter 'join' could",
        id="join-filter",
    ),
    pytest.param("{{ [1]|batch(5000000, 0)|list|length }}", "the filter 'batch'", id="batch"),
    pytest.param("{{ [1]|slice(5000000)|list|length }}", "the filter 'slice'", id="slice"),
    pytest.param(
        "{% set n = 2 ** 6000 %}"
        + "".join("{% set n = n * n %}" for _ in range(12))
        + "{{ n > 0 }}",
        "such a large product",
        id="integer-squaring",
    ),
    pytest.param(
        "{% for a in input.question * 400000 %}" + "x" * 20 + "{% endfor %}",
        "may not output more than 1,000,000 characters",
        id="literal-loop-output",
    ),
]


@pytest.mark.parametrize(("template", "fragment"), RUN_TIME)
def test_a_template_is_bounded_by_the_work_and_the_size_of_what_it_builds(
    tmp_path: Path, template: str, fragment: str, warm: None
) -> None:
    """Issue 14 item 8: each of these built tens of megabytes (or ran for ever); each now fails
    the run with TUBELESS_TEMPLATE_INVALID naming the bound, without building it."""
    with hang_guard(), peak_memory() as peak:
        where, code, message = run_template(tmp_path, template)

    assert (where, code) == ("run", TEMPLATE_INVALID), message
    assert "/agents/helper/initial_state/value: template failed: " in message
    assert fragment in message, message
    assert peak[0] < MEMORY_BOUND, f"peak {peak[0]:,} bytes"


WORK = [
    pytest.param(
        "{% for a in input.question * 40000 %}{% for b in input.question * 40000 %}"
        "{{ b }}{% endfor %}{% endfor %}",
        "more than 1,000,000 operations",
        id="nested-loops",
    ),
    pytest.param(
        "{% for a in input.question * 40000 %}{% for b in input.question * 40000 %}"
        "{% for c in 'ab' if false %}{% endfor %}{% endfor %}{% endfor %}",
        "more than 1,000,000 operations",
        id="nested-loops-outputting-nothing",
    ),
    pytest.param(
        "{% macro f(n) %}{% if n %}{{ f(n - 1) }}{{ f(n - 1) }}{% endif %}"
        "{% endmacro %}{{ f(40) }}",
        "more than 1,000,000 operations",
        id="exponential-macro",
    ),
]


@pytest.mark.parametrize(("template", "fragment"), WORK)
def test_a_template_that_would_run_for_ever_stops_at_its_operation_budget(
    tmp_path: Path, template: str, fragment: str, warm: None
) -> None:
    """Issue 14 item 8: nested loops (10 ** 10 iterations, even with nothing to output) and an
    exponential macro ran until killed; they stop at the operation budget (the hang guard is 30
    s; the budget is about a second of work)."""
    with hang_guard():
        where, code, message = run_template(tmp_path, template)

    assert (where, code) == ("run", TEMPLATE_INVALID), message
    assert fragment in message, message


def test_a_render_time_template_failure_exits_6_on_one_line(tmp_path: Path) -> None:
    """Issue 14 item 8: at run time a violated bound is TUBELESS_TEMPLATE_INVALID, exit 6."""
    path = template_project(tmp_path, "{{ input.question.ljust(10**9) }}")
    path.write_text(
        path.read_text().replace(
            "examples.scripted_agent:decide", "{use: tubeless.testing:scripted}"
        ),
        encoding="utf-8",
    )
    code, out, err = cli("run", path, "--quiet")
    assert (code, out) == (6, "")
    assert "TUBELESS_TEMPLATE_INVALID" in err
    assert "calling 'ljust' could build a value far past 1,000,000 items" in err


def test_ordinary_templates_render_as_before_under_the_budget(tmp_path: Path) -> None:
    """Issue 14 item 8: the bounds leave ordinary templates alone (loops, macros, filters)."""
    template = (
        "{% macro tag(w) %}<{{ w | upper }}>{% endmacro %}"
        "{% for w in input.question.split() * 3 %}{{ tag(w) }}{{ loop.index }}{% endfor %}"
        "|{{ '{:>6}'.format(input.question) ~ ('-' * 3) }}|{{ input | tojson }}"
        "|{{ input.get('ts', 1700000000000) }} {{ '{} ms'.format(86400000) }}"
        "|{{ input.name if input.name is defined else 86400000 }}"
    )
    path = template_project(tmp_path, template)
    agent = load_project(path, overrides=echo_state()).get("helper")
    state = agent.run_sync({"question": "a b"})
    assert state["value"] == (
        '<A>1<B>2<A>3<B>4<A>5<B>6|   a b---|{"question": "a b"}|1700000000000 86400000 ms|86400000'
    )


def test_a_render_can_be_stopped_cooperatively_by_its_check_callback() -> None:
    """Issue 14 item 8: the renderer calls ``check`` every few hundred operations; what it
    raises (``CancelToken.raise_if_cancelled`` raises RunCancelledError) ends the render."""
    from tubeless.pipeline import CancelToken
    from tubeless.pipeline._spi import RunCancelledError
    from tubeless.project._templates import compile_template_mapping

    render = compile_template_mapping(
        {"value": "{% for a in 'x' * 900000 %}{{ a }}{% endfor %}"}, "/state"
    )
    token, calls = CancelToken(), []

    def check() -> None:
        calls.append(1)
        if len(calls) == 3:
            token.cancel("stop")
        token.raise_if_cancelled()

    with pytest.raises(RunCancelledError):
        render({"input": {}}, check)
    assert len(calls) == 3


@pytest.mark.skipif(sys.platform != "linux", reason="RLIMIT_AS is enforced on Linux only")
def test_the_issue_figures_are_refused_in_a_capped_process(tmp_path: Path) -> None:
    """Issue 14 item 8: the issue's own cases (1.5 to 2.9 GB each) fail with the bound in a
    child capped at 1.5 GiB of address space (so that a regression cannot hurt the machine)."""
    script = (
        "import json, resource, sys\n"
        "resource.setrlimit(resource.RLIMIT_AS, (1536 << 20, 1536 << 20))\n"
        "from tubeless import PipelineExecutionError\n"
        "from tubeless.project import load_project\n"
        "from tubeless.testing import finish, scripted\n"
        "out = []\n"
        "for path in sys.argv[1:]:\n"
        "    agent = load_project(path, overrides={'helper': {'decide': scripted(\n"
        "        lambda s, c: finish(s))}}).get('helper')\n"
        "    try:\n"
        "        agent.run_sync({})\n"
        "        out.append(None)\n"
        "    except PipelineExecutionError as exc:\n"
        "        out.append([exc.source_code, str(exc)])\n"
        "print(json.dumps(out))\n"
    )
    templates = [
        "{% set x = 'a' * 999999 %}{{ " + " ~ ".join(["x"] * 3000) + " }}",
        "{{ 'x'.ljust(1500000000) }}",
        "{{ '{:>1500000000}'.format(1) }}",
        "{{ [1]|batch(150000000, 0)|list|length }}",
        "{{ [1]|slice(30000000)|list|length }}",
    ]
    paths = []
    for index, template in enumerate(templates):
        folder = tmp_path / str(index)
        folder.mkdir()
        paths.append(str(template_project(folder, template)))
    done = subprocess.run(
        [sys.executable, "-c", script, *paths],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
        check=False,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    outcomes = json.loads(done.stdout)
    assert [outcome[0] for outcome in outcomes] == [TEMPLATE_INVALID] * len(templates)
    assert not any("MemoryError" in outcome[1] for outcome in outcomes)


# -- item 17: big valid files check fast; the loader's counts are checked statically ------------
def _many_templates(tmp_path: Path, count: int) -> Path:
    lines = [
        "version: 1",
        "project: {id: big}",
        "agents:",
        "  a:",
        "    input: {schema: {}}",
        "    result: {schema: {}}",
        "    decide: m:decide",
        "    initial_state:",
    ]
    lines += [
        f'      k{i}: "{{% for w in input.words %}}{{{{ w | upper }}}}-{{{{ loop.index }}}} '
        f"{{% endfor %}}{{{{ input.name | default('anon') | title }}}} {{{{ {i} + 1 }}}}\""
        for i in range(count)
    ]
    path = tmp_path / "big.yaml"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_validate_generates_no_code_for_its_templates(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 14 item 17: a file of 4,836 templates took 6 s to validate, mostly in jinja2's
    code generator (run once per template for the name check); it never runs now, however
    many templates there are (500 here)."""
    path = _many_templates(tmp_path, 500)
    generated: list[object] = []
    original = jinja2.compiler.CodeGenerator.__init__

    def counting(self: Any, *args: Any, **kwargs: Any) -> None:
        generated.append(self)
        original(self, *args, **kwargs)

    monkeypatch.setattr(jinja2.compiler.CodeGenerator, "__init__", counting)
    code, _, err = cli("validate", path)
    assert (code, err) == (0, "")
    assert generated == []


EDGES = [
    "a: {b: , c: 1}\n",
    "a:\tb\n",
    "a: {s: x? y}\n",
    "a: !30\n",
    "k\ufeffey: 1\n",
    "a: [1, 2,\n  3]\n",
    "a: 'x\n  y'\n",
    "a: b: c\n",
    "- &a x\n- *a\n",
    "a: 1\r\nb: 2\r\n",
    'a: "\\u00e9\\x41"\nb: |\n  é\n',
]


@pytest.mark.parametrize(
    "text",
    [
        pytest.param(path.read_text(encoding="utf-8"), id=path.stem)
        for path in sorted((ROOT / "projects").glob("*.yaml"))
    ]
    + [pytest.param(edge, id=f"edge-{index}") for index, edge in enumerate(EDGES)],
)
def test_the_fast_yaml_reader_gives_what_the_pure_python_parser_gives(
    text: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 14 item 17: YAML is read once, by libyaml when it reads the text as PyYAML's own
    parser does; data, locations and messages are the same either way."""
    from tubeless.project import _yaml_events
    from tubeless.project._yaml import parse_document

    def outcome() -> Any:
        try:
            document = parse_document(text, file="p.yaml")
        except DocumentError as exc:
            return [issue.format() for issue in exc.issues]
        return document.data, document.source

    fast = outcome()
    if _yaml_events.FAST_LOADER is None:
        pytest.skip("PyYAML without libyaml: there is one parser only")
    monkeypatch.setattr(_yaml_events, "FAST_LOADER", None)
    assert outcome() == fast


def test_an_agent_with_more_tools_than_the_harness_takes_fails_plain_validate(
    tmp_path: Path,
) -> None:
    """Issue 14 item 17: 4,900 tools passed plain validate and failed loading ("at most 4096
    tools"); the count (and a tool description's 4,096 characters) are checked statically."""
    lines = [
        "version: 1",
        "project: {id: many}",
        "agents:",
        "  a:",
        "    input: {schema: {}}",
        "    result: {schema: {}}",
        "    initial_state: {x: '1'}",
        "    decide: m:decide",
        "    tools:",
        "      long: {pipeline: p, description: " + "d" * 4097 + "}",
    ]
    lines += [f"      t{i}: m:tool" for i in range(4900)]
    lines += ["pipelines:", "  p:", "    steps:", "      - {id: s, run: m:run}"]
    path = tmp_path / "tools.yaml"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")

    code, out, err = cli("validate", path)

    assert (code, out) == (4, "")
    assert err.splitlines() == [
        f"error: {path}:10:7 /agents/a/tools: expected a mapping of at most 4096 entries, "
        "found 4,901",
        f"error: {path}:10:40 /agents/a/tools/long/description: expected at most 4096 "
        f"characters, found '{'d' * 57}...' (4097 characters)",
    ]
