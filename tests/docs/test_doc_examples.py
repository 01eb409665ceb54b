"""Every ```python block in README.md and docs/*.md runs as written."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
_BLOCK = re.compile(r"^```python\n(.*?)^```", re.DOTALL | re.MULTILINE)


def _documents() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


@pytest.mark.parametrize("path", _documents(), ids=lambda p: p.name)
def test_python_blocks_run(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The blocks of one document run in order, sharing one namespace, from the repo root."""
    monkeypatch.chdir(ROOT)
    blocks = _BLOCK.findall(path.read_text(encoding="utf-8"))
    namespace: dict[str, object] = {"__name__": f"doc_{path.stem}"}
    for index, source in enumerate(blocks):
        code = compile(source, f"{path.name}[block {index}]", "exec")
        exec(code, namespace)
