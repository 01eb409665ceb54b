"""docs/getting-started.md runs as written: every command of its shell blocks, in a fresh folder,
with the outputs its comments promise; and its install line brings what the last step needs."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "getting-started.md"
_SH_BLOCK = re.compile(r"^```sh\n(.*?)^```", re.DOTALL | re.MULTILINE)
#: `# {"answer": "2 words"} on stdout`: the JSON printed on stdout.
_PRINTS_JSON = re.compile(r"#\s*(\{.*\}) on stdout")
#: `# 2 passed`: pytest's summary.
_PASSED = re.compile(r"#\s*(\d+ passed)")


def _blocks() -> list[str]:
    return _SH_BLOCK.findall(PAGE.read_text(encoding="utf-8"))


def _install_block() -> str:
    (block,) = [block for block in _blocks() if "pip install" in block]
    return block


def _shell(line: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """One line of the page in bash, with this interpreter's `tubeless` and `pytest` first on
    PATH and this tree importable (as `pip install` would make it)."""
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONPATH"] = str(ROOT)
    return subprocess.run(
        ["bash", "-c", line], cwd=cwd, env=env, capture_output=True, text=True, timeout=120
    )


@pytest.mark.slow
def test_every_command_of_the_page_runs_as_written(tmp_path: Path) -> None:
    """From `tubeless init hello` to `pytest  # 2 passed` and `validate`: each line exits 0 and
    prints what its comment says."""
    lines = [
        line.strip()
        for block in _blocks()
        if block != _install_block()
        for line in block.splitlines()
        if line.strip()
    ]
    assert lines[0] == "tubeless init hello"
    assert any(line.startswith("pytest") for line in lines)
    cwd = tmp_path
    promised = 0
    for line in lines:
        if line.startswith("cd "):
            cwd = cwd / line.removeprefix("cd ").strip()
            continue
        done = _shell(line, cwd)
        assert done.returncode == 0, f"{line}\n{done.stdout}{done.stderr}"
        if match := _PRINTS_JSON.search(line):
            assert json.loads(done.stdout) == json.loads(match.group(1)), line
            promised += 1
        if match := _PASSED.search(line):
            assert match.group(1) in done.stdout, f"{line}\n{done.stdout}"
            promised += 1
    assert promised == 2


def test_the_install_line_brings_pytest() -> None:
    """The page installs the `test` extra, which holds pytest: all the generated tests import
    (they run their coroutines with asyncio.run, so no pytest plugin is needed)."""
    installs = [line for line in _install_block().splitlines() if "pip install" in line]
    assert installs and all("[test]'" in line for line in installs), installs
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    test_extra = project["optional-dependencies"]["test"]
    assert [re.split(r"[<>=!~ ]", requirement)[0] for requirement in test_extra] == ["pytest"]
    template = ROOT / "tubeless" / "_cli" / "_init_files" / "test_module.py.tmpl"
    imports = {
        line.split()[1].split(".")[0]
        for line in template.read_text(encoding="utf-8").splitlines()
        if line.startswith(("import ", "from "))
    }
    assert imports <= {"__future__", "asyncio", "pathlib", "tubeless", "pytest"}, imports
