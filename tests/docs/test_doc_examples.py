"""Every ```python block in README.md and docs/*.md runs as written, and prints what it shows.

What a ``print(...)`` shows is its trailing comment (``print(x)   # 3``: the comment starts with
the printed text, and may go on to explain it), or, with no trailing comment, the comment lines
right below it (``# /: an object needs ...``, one per printed line).
"""

from __future__ import annotations

import re
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
_BLOCK = re.compile(r"^```python\n(.*?)^```", re.DOTALL | re.MULTILINE)


def _documents() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


class _Prints:
    """A ``print`` for the blocks' namespace: prints as usual, and notes what each line of a
    block printed (to stdout; a print to another file is passed through unnoted)."""

    def __init__(self, blocks: set[str]) -> None:
        self.blocks = blocks
        self.printed: dict[tuple[str, int], list[str]] = defaultdict(list)

    def __call__(
        self, *values: Any, sep: str | None = " ", end: str | None = "\n", **kw: Any
    ) -> None:
        print(*values, sep=sep, end=end, **kw)
        if kw.get("file") not in (None, sys.stdout):
            return
        frame = sys._getframe(1)
        while frame is not None and frame.f_code.co_filename not in self.blocks:
            frame = frame.f_back
        if frame is not None:
            text = (" " if sep is None else sep).join(map(str, values))
            self.printed[frame.f_code.co_filename, frame.f_lineno].extend(text.splitlines())


def _shown(lines: list[str], index: int) -> tuple[str, list[str]] | None:
    """What the page shows for the print on ``lines[index]``: ``("starts", [comment])`` for a
    trailing comment, ``("equals", [lines])`` for the comment lines below, or None."""
    code, hash_, comment = lines[index].partition("  # ")
    if hash_ and code.strip():
        return "starts", [comment.strip()]
    below = []
    for line in lines[index + 1 :]:
        if not line.strip().startswith("# "):
            break
        below.append(line.strip().removeprefix("# "))
    return ("equals", below) if below else None


@pytest.mark.parametrize("path", _documents(), ids=lambda p: p.name)
def test_python_blocks_run(
    path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The blocks of one document run in order, sharing one namespace, from the repo root, and
    each print shows what its comment says."""
    monkeypatch.chdir(ROOT)
    blocks = _BLOCK.findall(path.read_text(encoding="utf-8"))
    names = [f"{path.name}[block {index}]" for index in range(len(blocks))]
    prints = _Prints(set(names))
    namespace: dict[str, object] = {"__name__": f"doc_{path.stem}", "print": prints}
    for name, source in zip(names, blocks, strict=True):
        exec(compile(source, name, "exec"), namespace)
    capsys.readouterr()
    wrong = []
    for (name, line), printed in sorted(prints.printed.items()):
        lines = blocks[names.index(name)].splitlines()
        shown = _shown(lines, line - 1)
        if shown is None:
            continue
        how, expected = shown
        ok = (
            len(printed) == 1 and expected[0].startswith(printed[0])
            if how == "starts"
            else printed == expected
        )
        if not ok:
            wrong.append(f"{name} line {line}: {lines[line - 1].strip()}\n  printed {printed}")
    assert not wrong, "\n".join(wrong)
