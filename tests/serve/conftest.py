"""Real ``tubeless serve`` processes on 127.0.0.1, driven with httpx.

``served`` writes a small project (tools that leave marks in a folder and can be held mid-call
by a ``hold`` file until a ``release`` file appears) and starts servers on it; every server a
test started is killed at the end. Every wait is a hang guard, never a timing assertion.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.fixtures.processes import HANG_GUARD, cli_env

TOKEN = "serve-test-token-0123456789"

_HELPERS = """
import os, pathlib, time

_DIR = pathlib.Path(os.environ["SERVE_TEST_DIR"])


def initial(value):
    return {"text": value.get("text", "x"), "steps": value.get("steps", 1),
            "mode": value.get("mode", "work"), "done": 0, "outs": []}


def decide(state, ctx):
    if state["done"] >= state["steps"]:
        return {"kind": "finish", "result": {"outs": list(state["outs"])}}
    n = state["done"] + 1
    return {"kind": "continue",
            "calls": [{"id": f"c{n}", "tool": state["mode"], "input": f"{state['text']}-{n}"}]}


def reduce(state, outcomes):
    outs = [o["value"] if o["ok"] else o["error"]["code"] for o in outcomes]
    return {**state, "done": state["done"] + 1, "outs": [*state["outs"], *outs]}


def _work(text, ctx, kind):
    with open(_DIR / "marks.txt", "a") as f:
        f.write(f"{kind} {ctx.execution['idempotency_key']}\\n")
    secret = sorted(k for k in os.environ if k.startswith("TUBELESS_SERVE"))
    (_DIR / "environment.txt").write_text(" ".join(secret))
    if (_DIR / "hold").exists():
        (_DIR / "holding").write_text(text)
        deadline = time.monotonic() + 30
        while not (_DIR / "release").exists() and time.monotonic() < deadline:
            time.sleep(0.02)
    return text.upper()


def work(text, ctx):
    return _work(text, ctx, "unsafe")


def safe(text, ctx):
    return _work(text, ctx, "safe")


def publish(text, ctx):
    with open(_DIR / "marks.txt", "a") as f:
        f.write(f"publish {ctx.execution['idempotency_key']}\\n")
    return "published " + text
"""

_PROJECT = """\
version: 1
project: {id: served, default: worker}
python_path: [.]
agents:
  worker:
    description: Works through steps with one tool call each.
    input:
      schema:
        type: object
        properties:
          text: {type: string}
          steps: {type: integer, minimum: 0, maximum: 20}
          mode: {enum: [work, safe, publish]}
        additionalProperties: false
    result: {schema: {type: object}}
    initial_state: "helpers:initial"
    decide: "helpers:decide"
    reduce: "helpers:reduce"
    limits: {max_turns: 10, max_calls: 10}
    tools:
      work: {run: "helpers:work", description: Work on text (unsafe to repeat).,
             input: {schema: {type: string}}, output: {schema: {type: string}}}
      safe: {run: "helpers:safe", description: Work on text (safe to repeat)., replay: safe,
             input: {schema: {type: string}}, output: {schema: {type: string}}}
      publish: {run: "helpers:publish", description: Publish text., approval: always,
                input: {schema: {type: string}}, output: {schema: {type: string}}}
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    """One ``tubeless serve`` process."""

    def __init__(self, project: Path, port: int, args: tuple[str, ...], env: dict[str, str]):
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.stderr_path = project.parent / f"serve-{port}-{uuid.uuid4().hex[:6]}.err"
        self._err = open(self.stderr_path, "w")  # noqa: SIM115 (closed in stop)
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tubeless", "serve", str(project), "--port", str(port), *args],
            stdout=subprocess.DEVNULL,
            stderr=self._err,
            env=env,
            start_new_session=True,
        )

    def wait_ready(self) -> Server:
        deadline = time.monotonic() + HANG_GUARD
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(f"the server exited: {self.stderr()}")
            try:
                if httpx.get(f"{self.url}/healthz", timeout=2).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
        raise AssertionError(f"the server did not start: {self.stderr()}")

    def stderr(self) -> str:
        self._err.flush()
        return self.stderr_path.read_text(errors="replace")

    def client(self, token: str | None = TOKEN) -> httpx.Client:
        headers = {"authorization": f"Bearer {token}"} if token else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=HANG_GUARD)

    def kill(self) -> None:
        """kill -9 the whole process group (uvicorn workers included)."""
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(HANG_GUARD)
        self._err.close()

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(HANG_GUARD)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(HANG_GUARD)
        self._err.close()


class Served:
    """A test project and the servers started on it."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.marks_dir = folder / "marks"
        self.marks_dir.mkdir()
        name = f"helpers_{uuid.uuid4().hex}"
        (folder / f"{name}.py").write_text(textwrap.dedent(_HELPERS), encoding="utf-8")
        self.project = folder / "project.yaml"
        self.project.write_text(_PROJECT.replace('"helpers:', f'"{name}:'), encoding="utf-8")
        self.servers: list[Server] = []

    def start(
        self,
        *args: str,
        port: int | None = None,
        token: str | None = TOKEN,
        env: dict[str, str] | None = None,
    ) -> Server:
        env = cli_env(SERVE_TEST_DIR=str(self.marks_dir), **(env or {}))
        if token is not None:
            env["TUBELESS_SERVE_TOKEN"] = token
        else:
            env.pop("TUBELESS_SERVE_TOKEN", None)
        server = Server(self.project, port or free_port(), args, env)
        self.servers.append(server)
        return server.wait_ready()

    def marks(self) -> list[str]:
        path = self.marks_dir / "marks.txt"
        return path.read_text().splitlines() if path.exists() else []

    def hold(self) -> None:
        (self.marks_dir / "hold").touch()

    def release(self) -> None:
        (self.marks_dir / "release").touch()

    def wait_holding(self) -> None:
        deadline = time.monotonic() + HANG_GUARD
        while not (self.marks_dir / "holding").exists():
            assert time.monotonic() < deadline, "no call reached the hold"
            time.sleep(0.02)


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    found = Served(tmp_path)
    try:
        yield found
    finally:
        for server in found.servers:
            with contextlib.suppress(Exception):
                server.kill()


def wait_status(client: httpx.Client, run_id: str, statuses: set[str]) -> dict[str, Any]:
    """The run once its status is one of ``statuses`` (hang guard only)."""
    deadline = time.monotonic() + HANG_GUARD
    while True:
        run = client.get(f"/v1/runs/{run_id}").json()
        if run["status"] in statuses:
            return run
        assert time.monotonic() < deadline, f"run stayed {run['status']}"
        time.sleep(0.05)


def sse_events(response: httpx.Response) -> Iterator[dict[str, Any]]:
    """Parsed events of a streaming SSE response: ``{event, id, data}``."""
    event: dict[str, Any] = {}
    for line in response.iter_lines():
        if line == "":
            if event:
                yield event
            event = {}
        elif line.startswith(":"):
            continue
        else:
            field, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if field == "data":
                event["data"] = json.loads(value)
            else:
                event[field] = value


def read_stream(
    client: httpx.Client,
    run_id: str,
    headers: dict[str, str] | None = None,
    stop_after: int | None = None,
) -> list[dict[str, Any]]:
    """Events of the run's stream until ``end`` (or ``stop_after`` record events)."""
    found: list[dict[str, Any]] = []
    records = 0
    with client.stream("GET", f"/v1/runs/{run_id}/events", headers=headers or {}) as response:
        assert response.status_code == 200, response.read()
        for event in sse_events(response):
            found.append(event)
            if event.get("event") == "record":
                records += 1
                if stop_after is not None and records >= stop_after:
                    break
            if event.get("event") == "end":
                break
    return found
