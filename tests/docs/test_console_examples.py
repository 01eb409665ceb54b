"""The ``console`` examples of docs/cli.md and docs/testing.md named below print what the pages
show, run from the repository root: `validate projects/`, and the OpenAI recipe's replay, as
shipped (it passes, on both pages) and with its `count` tool drifted (it diverges)."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import examples.text
from tests.fixtures.cli import Outcome, tubeless
from tubeless import define_tool

ROOT = Path(__file__).resolve().parents[2]
_CONSOLE = re.compile(r"^```console\n(.*?)^```", re.DOTALL | re.MULTILINE)


@dataclass(frozen=True)
class Example:
    """One ``$ command`` of a console block, the lines shown after it and its exit code (a
    trailing ``# exit N`` line; 0 without one)."""

    command: str
    output: str
    code: int

    def outcome(self) -> Outcome:
        """What the page promises, in the form the ``tubeless`` fixture gives."""
        return Outcome(self.code, self.output, "")


def console_examples(page: str) -> list[Example]:
    """Every ``$`` command of the page's console blocks (``\\`` continuations joined)."""
    found: list[Example] = []
    for block in _CONSOLE.findall((ROOT / "docs" / page).read_text(encoding="utf-8")):
        command: list[str] | None = None
        output: list[str] = []
        lines = iter(block.splitlines())
        for line in lines:
            if line.startswith("$ "):
                if command is not None:
                    found.append(_example(command, output))
                command, output = [line.removeprefix("$ ")], []
                while command[-1].endswith("\\"):
                    command[-1] = command[-1].removesuffix("\\")
                    command.append(next(lines).strip())
            else:
                output.append(line)
        if command is not None:
            found.append(_example(command, output))
    return found


def _example(command: list[str], output: list[str]) -> Example:
    code = 0
    if output and output[-1].startswith("# exit "):
        code = int(output.pop().removeprefix("# exit "))
    text = "".join(f"{line}\n" for line in output)
    return Example(" ".join(part.strip() for part in command), text, code)


def examples_of(page: str, prefix: str) -> list[Example]:
    """The examples of the page whose command starts with ``prefix``, in page order."""
    return [ex for ex in console_examples(page) if ex.command.startswith(prefix)]


def example(page: str, prefix: str) -> Example:
    """The one example of the page whose command starts with ``prefix``."""
    (found,) = examples_of(page, prefix)
    return found


REPLAY = "tubeless run projects/openai-agent.yaml --replay projects/openai-agent.cassette.jsonl"


def run(capsys: pytest.CaptureFixture[str], ex: Example) -> Outcome:
    """The example's command in process, stdout and stderr joined as a terminal shows them
    (each example prints on one of the two)."""
    argv = shlex.split(ex.command)
    assert argv[0] == "tubeless"
    outcome = tubeless(capsys, *argv[1:])
    return Outcome(outcome.code, outcome.out + outcome.err, "")


@pytest.fixture(autouse=True)
def from_the_repository_root(monkeypatch: pytest.MonkeyPatch) -> None:
    """The pages' commands run from the repository root, with no OpenAI key and a base URL
    nothing listens on: a replay that asked the model would fail, not reach a network."""
    monkeypatch.chdir(ROOT)
    for name in ("OPENAI_API_KEY", "OPENAI_MODEL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")


def test_the_parser_reads_continuations_and_exit_codes() -> None:
    """The parser itself: a continued command is one command, `# exit N` is its code."""
    ex = examples_of("cli.md", REPLAY)[-1]
    assert ex.command.endswith(
        '--question "Uppercase red and blue, then count the characters of both joined by a space."'
    )
    assert ex.code == 6


def test_validate_projects_lists_every_project(capsys: pytest.CaptureFixture[str]) -> None:
    """cli.md's `tubeless validate projects/` shows one `ok:` line per shipped project."""
    ex = example("cli.md", "tubeless validate projects/")
    assert run(capsys, ex) == ex.outcome()
    shipped = sorted(f"ok: projects/{path.name}" for path in (ROOT / "projects").glob("*.yaml"))
    assert ex.output.splitlines() == shipped


@pytest.mark.parametrize("page", ["testing.md", "cli.md"])
def test_the_shipped_cassette_replays(page: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Both pages' first replay of the OpenAI recipe, on the files as shipped, gives the
    recorded answer (cli.md used to show it diverging)."""
    ex = examples_of(page, REPLAY)[0]
    assert run(capsys, ex) == ex.outcome()


async def _count_one_too_many(text: str, ctx: Any) -> int:
    return len(text) + 1


def test_a_drifted_tool_diverges_as_cli_md_shows(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """cli.md's divergence: the same replay after `count` was edited to count one character too
    many (same description and schemas, so the cassette still matches the definition)."""
    drifted = define_tool(
        description=examples.text.count.description,
        input_schema=str,
        output_schema=int,
        run=_count_one_too_many,
        preview=_count_one_too_many,
    )
    monkeypatch.setattr(examples.text, "count", drifted)
    shipped, ex = examples_of("cli.md", REPLAY)
    assert ex.command == shipped.command
    assert run(capsys, ex) == ex.outcome()
    shown = run(capsys, Example(f"{ex.command} --show-values", "", 6))
    assert shown.out == ex.output.replace("\n", ": recorded 8, got 9\n")


def test_no_page_cites_the_design_contract() -> None:
    """DESIGN.md is not part of the repository, so no page may send a reader to it."""
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    citing = [page.name for page in pages if "DESIGN" in page.read_text(encoding="utf-8")]
    assert citing == []
