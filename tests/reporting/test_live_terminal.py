"""The live view in a real terminal (a pty): ``tubeless run`` shows its run id in the header and
a tool's ``ctx.report_progress`` on the call's row while the call runs (issue 13)."""

from __future__ import annotations

import fcntl
import os
import re
import select
import struct
import subprocess
import sys
import termios
import time
import uuid
from pathlib import Path

import pytest

from tubeless.tracing import read_trace

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="needs a pty")

ROOT = Path(__file__).resolve().parents[2]
HANG_GUARD = 30.0  # seconds; a hang guard, never a timing assertion (DESIGN.md §9)
#: The hang guard of a wait that includes ``tubeless run`` starting (slow on a loaded machine).
START_GUARD = 90.0
ESCAPES = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07|\r")

PROJECT = """\
version: 1
project: {id: pages}
python_path: [.]
agents:
  pages:
    input: {schema: {type: object}}
    result: {schema: {}}
    initial_state: {done: "no"}
    decide: "MODULE:decide"
    reduce: "MODULE:reduce"
    tools:
      read_pages: {run: "MODULE:read_pages", description: Reads., input: {schema: {type: string}},
                   output: {schema: {type: string}}}
"""
MODULE = """\
import pathlib, time

GO = pathlib.Path(__file__).with_name("GO")


def decide(state, ctx):
    if state["done"] == "no":
        return {"kind": "continue", "calls": [{"id": "c0", "tool": "read_pages", "input": "x"}]}
    return {"kind": "finish", "result": "done"}


def reduce(state, outcomes):
    return {"done": "yes"}


def read_pages(value, ctx):
    ctx.report_progress(3, 10, "pages")
    deadline = time.monotonic() + 60  # a hang guard: the test creates GO once it saw the row
    while not GO.exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    return value
"""


def _read_until(master: int, wanted: str, seen: list[str]) -> bool:
    """Read the terminal into ``seen`` until ``wanted`` shows (True) or the output ends; the
    process may still be starting."""
    deadline = time.monotonic() + START_GUARD
    while time.monotonic() < deadline:
        if wanted and wanted in ESCAPES.sub("", "".join(seen)):
            return True
        ready, _, _ = select.select([master], [], [], 0.1)
        if not ready:
            continue
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: the process closed the terminal
            return False
        if not chunk:
            return False
        seen.append(chunk.decode("utf-8", "replace"))
    raise AssertionError(f"gave up waiting for {wanted!r}: {''.join(seen)[-2000:]!r}")


def test_the_live_view_shows_the_run_id_and_a_tool_s_progress(tmp_path: Path) -> None:
    module = f"pages_{uuid.uuid4().hex}"
    (tmp_path / f"{module}.py").write_text(MODULE, encoding="utf-8")
    project = tmp_path / "pages.yaml"
    project.write_text(PROJECT.replace("MODULE", module), encoding="utf-8")
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 200, 0, 0))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TERM": "xterm-256color"}
    for name in ("NO_COLOR", "FORCE_COLOR", "COLUMNS", "LINES"):
        env.pop(name, None)
    process = subprocess.Popen(
        [sys.executable, "-m", "tubeless", "run", str(project), "--trace", "t.ndjson"],
        stdin=slave,
        stdout=subprocess.PIPE,
        stderr=slave,
        cwd=tmp_path,
        env=env,
    )
    os.close(slave)
    seen: list[str] = []
    try:
        assert _read_until(master, "3/10 pages", seen), ESCAPES.sub("", "".join(seen))
        (tmp_path / "GO").write_text("go", encoding="utf-8")
        _read_until(master, "", seen)
        out, _ = process.communicate(timeout=HANG_GUARD)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate(timeout=HANG_GUARD)
        os.close(master)

    assert (process.returncode, out) == (0, b'"done"\n')
    run_id = read_trace(tmp_path / "t.ndjson")[0]["runId"]
    screen = ESCAPES.sub("", "".join(seen))
    assert "Pipeline pages  running" in screen
    assert re.search(rf"Pipeline pages  completed  \S+  run {re.escape(run_id)}\n", screen), screen
    assert re.search(r"read_pages +c0 +\S+ +3/10 pages", screen), screen
