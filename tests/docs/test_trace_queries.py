"""docs/traces.md's "Querying a SQLite trace": its commands make a real SQLite trace, and each of
its SQL queries, run on that trace, prints the output the page shows below it."""

from __future__ import annotations

import re
import shlex
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tubeless._cli import main

ROOT = Path(__file__).resolve().parents[2]
_TITLE = "## Querying a SQLite trace\n"
_BLOCK = re.compile(r"^```(\w+)\n(.*?)^```", re.DOTALL | re.MULTILINE)
_EXIT = re.compile(r"#\s*exit (\d+)\s*$")
#: Run ids differ from run to run (the page says so); compared as one placeholder.
_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def _blocks() -> list[tuple[str, str]]:
    text = (ROOT / "docs" / "traces.md").read_text(encoding="utf-8")
    section = text[text.index(_TITLE) :]
    section = section[: section.index("\n## ", len(_TITLE))]
    return [(match.group(1), match.group(2)) for match in _BLOCK.finditer(section)]


def _commands() -> list[str]:
    return [
        line
        for lang, body in _blocks()
        if lang == "sh"
        for line in body.splitlines()
        if line.startswith("tubeless ")
    ]


def _queries() -> list[tuple[str, str]]:
    """Each ```sql block with the ```text block that follows it."""
    blocks = _blocks()
    pairs = []
    for index, (lang, body) in enumerate(blocks):
        if lang == "sql":
            assert blocks[index + 1][0] == "text", body
            pairs.append((body, blocks[index + 1][1]))
    return pairs


@pytest.fixture(scope="module")
def trace(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The page's commands, run in process from the repository root, their files in a temporary
    folder; each exits as its `# exit N` comment says (0 without one)."""
    folder = tmp_path_factory.mktemp("queries")
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(ROOT)
        for command in _commands():
            expected = _EXIT.search(command)
            argv = shlex.split(command, comments=True)[1:]
            if "<" in argv:  # `< /dev/null`: in-process stdin is no terminal anyway
                del argv[argv.index("<") : argv.index("<") + 2]
            argv = [str(folder / arg) if arg.endswith(".sqlite") else arg for arg in argv]
            assert main(argv) == (int(expected.group(1)) if expected else 0), command
    yield folder / "runs.sqlite"


def _table(cursor: sqlite3.Cursor) -> list[str]:
    """Rows as `sqlite3 -header` prints them: a header, then values joined by `|`."""
    header = "|".join(column[0] for column in cursor.description)
    rows = ["|".join("" if v is None else str(v) for v in row) for row in cursor.fetchall()]
    return [header, *rows]


def _comparable(lines: list[str]) -> tuple[str, list[str]]:
    """The header, and the rows with run ids masked; a duration column (`*_ms`) is dropped and
    the rows sorted, since an order by duration differs from run to run."""
    header, *rows = (_UUID.sub("<id>", line) for line in lines)
    timed = [i for i, name in enumerate(header.split("|")) if name.endswith("_ms")]
    if not timed:
        return header, rows
    kept = ["|".join(v for i, v in enumerate(row.split("|")) if i not in timed) for row in rows]
    return header, sorted(kept)


def test_the_section_has_the_four_queries_and_its_commands() -> None:
    assert len(_commands()) == 4
    headers = [output.splitlines()[0] for _, output in _queries()]
    assert [header.split("|")[0] for header in headers] == [
        "tool",
        "agent_run",
        "agent_run",
        "entry",
    ]


@pytest.mark.parametrize("index", range(4), ids=["calls", "slowest", "failed", "runs"])
def test_each_query_prints_what_the_page_shows(trace: Path, index: int) -> None:
    query, output = _queries()[index]
    with sqlite3.connect(f"file:{trace}?mode=ro", uri=True) as db:
        got = _table(db.execute(query))
    assert _comparable(got) == _comparable(output.splitlines()), "\n".join(got)


def test_the_python_line_reads_a_query_from_stdin(trace: Path) -> None:
    """The page's `python3 -c ...` form runs a query file on a read-only open."""
    (line,) = [
        line
        for lang, body in _blocks()
        if lang == "sh"
        for line in body.splitlines()
        if line.startswith("python3 -c ")
    ]
    argv = shlex.split(line)
    assert argv[-2:] == ["<", "calls-per-tool.sql"]
    script = argv[2].replace("runs.sqlite", str(trace))
    done = subprocess.run(
        [sys.executable, "-c", script],
        input=_queries()[0][0],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "[('uppercase', 5), ('count', 2)]\n"
