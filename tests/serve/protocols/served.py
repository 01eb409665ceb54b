"""A project for the protocols on real ``tubeless serve`` processes, and the servers on it.

The agent ``worker`` makes ``steps`` turns of one call each to the tool ``mode``: ``safe``
(answers its text in capitals), ``publish`` (needs approval; marks a file each time it runs)
or ``wait`` (an async tool that waits until its run is cancelled, and marks that it started).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

from tests.fixtures.servers import AGENT_STEPS, ONE_CALL_A_TURN, TOKEN, ServedProject, Server

__all__ = ["TOKEN", "Protocols"]

_HELPERS = (
    """
import asyncio, os, pathlib

_DIR = pathlib.Path(os.environ["SERVE_TEST_DIR"])


def initial(value):
    return {"text": value["text"], "steps": value.get("steps", 1),
            "mode": value.get("mode", "safe"), "done": 0, "outs": []}


def safe(text, ctx):
    return text.upper()


async def wait(text, ctx):
    (_DIR / f"waiting-{text}").touch()
    while not ctx.signal.cancelled:
        await asyncio.sleep(0.02)
    return text
"""
    + ONE_CALL_A_TURN
)

_PROJECT = (
    """\
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
"""
    + AGENT_STEPS
    + """\
      safe: {run: "helpers:safe", description: Capitals., replay: safe,
             input: {schema: {type: string}}, output: {schema: {type: string}}}
      publish: {run: "helpers:publish", description: Publish text., approval: always,
                input: {schema: {type: string}}, output: {schema: {type: string}}}
      wait: {run: "helpers:wait", description: Waits until cancelled.,
             input: {schema: {type: string}}, output: {schema: {type: string}}}
"""
)


class Protocols(ServedProject):
    """The project in ``folder`` and the servers started on it (killed by ``close``)."""

    def __init__(self, folder: Path) -> None:
        super().__init__(folder, _PROJECT, _HELPERS)

    def start(self, *args: str, port: int | None = None, auth: bool = True) -> Server:
        if not auth:
            args = (*args, "--no-auth")
        return self.start_server(args, port, TOKEN if auth else None)


@contextlib.contextmanager
def protocols_in(folder: Path) -> Iterator[Protocols]:
    found = Protocols(folder)
    try:
        yield found
    finally:
        found.close()
