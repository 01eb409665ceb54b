"""A project for the protocols on real ``tubeless serve`` processes, and the servers on it.

The agent ``worker`` makes ``steps`` turns of one call each to the tool ``mode``: ``safe``
(answers its text in capitals), ``publish`` (needs approval; marks a file each time it runs)
or ``wait`` (an async tool that waits until its run is cancelled, and marks that it started).
"""

from __future__ import annotations

import contextlib
import textwrap
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

from tests.fixtures.processes import HANG_GUARD, cli_env
from tests.serve.conftest import TOKEN, Server, free_port

__all__ = ["TOKEN", "Protocols"]

_HELPERS = """
import asyncio, os, pathlib

_DIR = pathlib.Path(os.environ["SERVE_TEST_DIR"])


def initial(value):
    return {"text": value["text"], "steps": value.get("steps", 1),
            "mode": value.get("mode", "safe"), "done": 0, "outs": []}


def decide(state, ctx):
    if state["done"] >= state["steps"]:
        return {"kind": "finish", "result": {"outs": list(state["outs"])}}
    n = state["done"] + 1
    return {"kind": "continue",
            "calls": [{"id": f"c{n}", "tool": state["mode"], "input": f"{state['text']}-{n}"}]}


def reduce(state, outcomes):
    outs = [o["value"] if o["ok"] else o["error"]["code"] for o in outcomes]
    return {**state, "done": state["done"] + 1, "outs": [*state["outs"], *outs]}


def safe(text, ctx):
    return text.upper()


def publish(text, ctx):
    with open(_DIR / "marks.txt", "a") as f:
        f.write(f"publish {ctx.execution['idempotency_key']}\\n")
    return "published " + text


async def wait(text, ctx):
    (_DIR / f"waiting-{text}").touch()
    while not ctx.signal.cancelled:
        await asyncio.sleep(0.02)
    return text
"""

_PROJECT = """\
version: 1
project:
  {id: served-protocols, name: Served protocols, description: Protocol tests., default: worker}
python_path: [.]
agents:
  worker:
    description: Works through steps with one tool call each.
    implementation_version: worker-3
    input:
      schema:
        type: object
        properties:
          text: {type: string}
          steps: {type: integer, minimum: 0, maximum: 20}
          mode: {enum: [safe, publish, wait]}
        required: [text]
        additionalProperties: false
    result: {schema: {type: object}}
    initial_state: "helpers:initial"
    decide: "helpers:decide"
    reduce: "helpers:reduce"
    limits: {max_turns: 10, max_calls: 10}
    tools:
      safe: {run: "helpers:safe", description: Capitals., replay: safe,
             input: {schema: {type: string}}, output: {schema: {type: string}}}
      publish: {run: "helpers:publish", description: Publish text., approval: always,
                input: {schema: {type: string}}, output: {schema: {type: string}}}
      wait: {run: "helpers:wait", description: Waits until cancelled.,
             input: {schema: {type: string}}, output: {schema: {type: string}}}
"""


class Protocols:
    """The project in ``folder`` and the servers started on it (killed by ``close``)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.marks_dir = folder / "marks"
        self.marks_dir.mkdir()
        name = f"helpers_{uuid.uuid4().hex}"
        (folder / f"{name}.py").write_text(textwrap.dedent(_HELPERS), encoding="utf-8")
        self.project = folder / "project.yaml"
        self.project.write_text(_PROJECT.replace('"helpers:', f'"{name}:'), encoding="utf-8")
        self.servers: list[Server] = []

    def start(self, *args: str, port: int | None = None, auth: bool = True) -> Server:
        env = cli_env(SERVE_TEST_DIR=str(self.marks_dir))
        if auth:
            env["TUBELESS_SERVE_TOKEN"] = TOKEN
        else:
            env.pop("TUBELESS_SERVE_TOKEN", None)
            args = (*args, "--no-auth")
        server = Server(self.project, port or free_port(), args, env)
        self.servers.append(server)
        return server.wait_ready()

    def marks(self) -> list[str]:
        path = self.marks_dir / "marks.txt"
        return path.read_text().splitlines() if path.exists() else []

    def wait_for(self, name: str) -> None:
        deadline = time.monotonic() + HANG_GUARD
        while not (self.marks_dir / name).exists():
            assert time.monotonic() < deadline, f"{name} never appeared"
            time.sleep(0.02)

    def close(self) -> None:
        for server in self.servers:
            with contextlib.suppress(Exception):
                server.kill()


@contextlib.contextmanager
def protocols_in(folder: Path) -> Iterator[Protocols]:
    found = Protocols(folder)
    try:
        yield found
    finally:
        found.close()
