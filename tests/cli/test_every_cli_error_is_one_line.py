"""Every CLI error is one line (issue 14 item 16): a template error's line break, any message's."""

from __future__ import annotations

import textwrap
import uuid
from pathlib import Path

import pytest

from tubeless._cli import main

TEMPLATE_PROJECT = """\
version: 1
project: {id: templated}
python_path: [.]
agents:
  templated:
    input: {schema: {type: object}}
    result: {schema: "builtins:str"}
    initial_state:
      question: "{{ input.text | format(1) }}"
    decide: "MODULE:decide"
"""


@pytest.mark.parametrize("command", ["plan", "run", "inspect"])
def test_a_template_error_is_one_error_line(
    command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 14 item 16: a template whose jinja message has a line break prints one line."""
    module = f"templated_{uuid.uuid4().hex}"
    (tmp_path / f"{module}.py").write_text(
        "def decide(state, ctx):\n    return {'kind': 'finish', 'result': 'x'}\n",
        encoding="utf-8",
    )
    path = tmp_path / "project.yaml"
    path.write_text(TEMPLATE_PROJECT.replace("MODULE", module), encoding="utf-8")

    code = main([command, str(path)])
    err = capsys.readouterr().err

    assert code == 4
    assert err.count("\n") == 1, err
    assert err.startswith(f"error: {path}:9:17 /agents/templated/initial_state/question: ")
    assert "No filter named 'format'" in err


def test_every_cli_error_line_collapses_line_breaks(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 14 item 16: the one error-line formatter makes any message one line."""
    module = f"breaking_{uuid.uuid4().hex}"
    (tmp_path / f"{module}.py").write_text(
        textwrap.dedent("""\
            def boom(inputs, ctx):
                raise ValueError("one\\r\\ntwo\\nthree\\u2028four\\x85five")
        """),
        encoding="utf-8",
    )
    path = tmp_path / "project.yaml"
    path.write_text(
        "version: 1\nproject: {id: breaking}\npython_path: [.]\npipelines:\n"
        f'  breaking:\n    steps:\n      - {{id: s, run: "{module}:boom"}}\n',
        encoding="utf-8",
    )

    code = main(["run", str(path), "-q"])
    err = capsys.readouterr().err

    assert code == 6
    assert err == "error: TUBELESS_STEP_FAILED: step s: ValueError: one two three four five\n"
