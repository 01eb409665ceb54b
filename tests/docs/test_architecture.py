"""docs/architecture.md cannot drift from the code: every module path it names exists, every
function its call path names is defined in the file it names, and its table of hook points is
exactly the methods of ``TurnHooks``; README links it."""

from __future__ import annotations

import re
from pathlib import Path

from tubeless.agent._hooks import TurnHooks

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "architecture.md"
#: A path in the package (a module or a folder), wherever the page names one.
_PATH = re.compile(r"\btubeless/(?:[\w.]+/)*[\w.]*\w/?")
#: A line of the call path: ``<module path>  <function>`` (the function defined in that file).
_FRAME = re.compile(r"(tubeless/[\w/]+\.py)\s+([A-Za-z_]\w*)\b")
#: A row of the hook table: its first cell names the method, with its arguments.
_HOOK_ROW = re.compile(r"^\|\s*`(\w+)\(", re.MULTILINE)


def _text() -> str:
    return PAGE.read_text(encoding="utf-8")


def _section(text: str, title: str) -> str:
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else len(text)]


def test_every_module_path_the_page_names_exists() -> None:
    named = set(_PATH.findall(_text()))
    assert len(named) >= 15, named
    missing = sorted(path for path in named if not (ROOT / path).exists())
    assert missing == []


def test_every_frame_of_the_call_path_is_a_function_of_the_module_it_names() -> None:
    frames = _FRAME.findall(_section(_text(), "From `run()` to a tool handler"))
    assert len(frames) >= 12, frames
    for path, function in frames:
        source = (ROOT / path).read_text(encoding="utf-8")
        defined = re.search(rf"^\s*(?:async )?def {function}\(", source, re.MULTILINE)
        assert defined, (path, function)


def test_the_hook_table_lists_exactly_the_methods_of_turn_hooks() -> None:
    listed = _HOOK_ROW.findall(_section(_text(), "The turn's hook points"))
    methods = {name for name, value in vars(TurnHooks).items() if callable(value)}
    methods = {name for name in methods if not name.startswith("_")}
    assert len(listed) == len(set(listed))
    assert set(listed) == methods


def test_readme_links_the_page() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "(docs/architecture.md)" in readme
