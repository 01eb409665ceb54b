"""Real ``tubeless serve`` processes on 127.0.0.1 (tests/fixtures/servers.py), driven with httpx.

``served`` writes a small project (tools that leave marks in a folder and can be held mid-call
by a ``hold`` file until a ``release`` file appears) and starts servers on it; every server a
test started is killed at the end. Every wait is a hang guard, never a timing assertion.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.fixtures.processes import HANG_GUARD
from tests.fixtures.servers import AGENT_STEPS, ONE_CALL_A_TURN, TOKEN, ServedProject, Server

__all__ = ["TOKEN", "Served", "Server", "read_stream", "sse_events", "wait_status"]

_HELPERS = (
    """
import os, pathlib, time

_DIR = pathlib.Path(os.environ["SERVE_TEST_DIR"])


def initial(value):
    return {"text": value.get("text", "x"), "steps": value.get("steps", 1),
            "mode": value.get("mode", "work"), "done": 0, "outs": []}


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
"""
    + ONE_CALL_A_TURN
)

_PROJECT = (
    """\
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
"""
    + AGENT_STEPS
    + """\
      work: {run: "helpers:work", description: Work on text (unsafe to repeat).,
             input: {schema: {type: string}}, output: {schema: {type: string}}}
      safe: {run: "helpers:safe", description: Work on text (safe to repeat)., replay: safe,
             input: {schema: {type: string}}, output: {schema: {type: string}}}
      publish: {run: "helpers:publish", description: Publish text., approval: always,
                input: {schema: {type: string}}, output: {schema: {type: string}}}
"""
)


class Served(ServedProject):
    """A test project and the servers started on it."""

    def __init__(self, folder: Path) -> None:
        super().__init__(folder, _PROJECT, _HELPERS)

    def start(
        self,
        *args: str,
        port: int | None = None,
        token: str | None = TOKEN,
        env: dict[str, str] | None = None,
    ) -> Server:
        return self.start_server(args, port, token, **(env or {}))

    def hold(self) -> None:
        (self.marks_dir / "hold").touch()

    def release(self) -> None:
        (self.marks_dir / "release").touch()

    def wait_holding(self) -> None:
        self.wait_for("holding", "no call reached the hold")


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    found = Served(tmp_path)
    try:
        yield found
    finally:
        found.close()


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
