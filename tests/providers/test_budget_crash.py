"""A request in flight when its process is killed keeps its whole reservation: the resumed run
never refills the budget (a real process, killed with SIGKILL between the reservation and the
response, against a model server on 127.0.0.1)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.providers.fixtures.adapters import ADAPTERS
from tests.providers.fixtures.runs import ROOT
from tests.providers.test_budget_requests import QUESTION, _replies, route_through
from tubeless.durable import SqliteCheckpoints
from tubeless.project import load_project

CHAT = ADAPTERS[1]
MAX_OUT = 64
WAIT_S = 60.0

_PROJECT = """\
version: 1
project: {{id: crash}}
python_path: [{root}]
agents:
  crash:
    input: {{schema: examples.text:Question}}
    result: {{schema: examples.text:Answer}}
    result_json_schema: {{type: string}}
    initial_state: {{use: tubeless.providers:question_state, with: {{max_bytes: 4096}}}}
    reduce: {{use: tubeless.providers:append_outcomes, with: {{max_bytes: 16384}}}}
    decide:
      use: tubeless.providers.chat:completions
      with: {{model: gpt-4.1-mini, max_output_tokens: {max_out}, base_url: '{url}',
              api_key_env: ''}}
    limits: {{max_turns: 8, max_decisions: 8, max_total_tokens: {bound}}}
    tools:
      uppercase: examples.text:uppercase
"""


class ModelServer:
    """Answers with the scripted replies in order; a ``None`` reply holds the request open
    (until the test ends) and tells the test it arrived."""

    def __init__(self, replies: list[Any]) -> None:
        self.replies = list(replies)
        self.sizes: list[int] = []
        self.holding = threading.Event()
        self.release = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                server.sizes.append(len(body))
                reply = server.replies.pop(0)
                if reply is None:
                    server.holding.set()
                    server.release.wait(WAIT_S)
                    return
                data = json.dumps(reply).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.release.set()
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(WAIT_S)


@pytest.fixture
def servers() -> Iterator[list[ModelServer]]:
    made: list[ModelServer] = []
    try:
        yield made
    finally:
        for server in made:
            server.close()


def _write(path: Path, url: str, bound: int) -> None:
    path.write_text(_PROJECT.format(root=ROOT, max_out=MAX_OUT, url=url, bound=bound))


def _command(path: Path, store: Path) -> list[str]:
    return [
        sys.executable,
        "-m",
        "tubeless",
        "run",
        str(path),
        "--question",
        QUESTION,
        "--checkpoints",
        str(store),
    ]


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT)}


def _consumed(store: Path) -> dict[str, Any]:
    checkpoints = SqliteCheckpoints(store)
    try:
        [stored] = checkpoints.list()
        with checkpoints.acquire(stored.key) as lease:
            text = lease.read()
    finally:
        checkpoints.close()
    assert text is not None
    usage: dict[str, Any] = json.loads(text)["agents"]["crash"]["budget"]["usage"]
    return usage


@pytest.mark.slow
@pytest.mark.skipif(sys.platform == "win32", reason="SIGKILL")
def test_a_request_in_flight_at_a_kill_keeps_its_reservation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, servers: list[ModelServer]
) -> None:
    path = tmp_path / "crash.yaml"
    store = tmp_path / "checkpoints.sqlite"
    # The body sizes of the first three requests (deterministic), from an in-process run.
    _write(path, "http://127.0.0.1:9/v1", 10**9)
    probe = CHAT.server(*_replies(CHAT, usage=False))
    route_through(monkeypatch, probe.transport)
    run = asyncio.run(load_project(path).entry().run({"question": QUESTION}))
    assert run.status == "completed", [e.format() for e in run.errors]
    r1, r2, r3 = (len(request.content) + MAX_OUT for request in probe.requests[:3])
    monkeypatch.undo()
    # Room for the first request, the killed one, the second asked again, not a third.
    bound = r1 + r2 + r2 + r3 - 1
    replies = _replies(CHAT, usage=False)

    killed = ModelServer([replies[0], None])
    servers.append(killed)
    _write(path, killed.url, bound)
    process = subprocess.Popen(
        _command(path, store),
        env=_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        assert killed.holding.wait(WAIT_S), "the second request never arrived"
        os.kill(process.pid, signal.SIGKILL)
    finally:
        process.wait(WAIT_S)
    assert process.returncode == -signal.SIGKILL
    saved = _consumed(store)
    # The first request kept its whole reservation (no usage data), the killed one too.
    assert saved["input_tokens"] + saved["output_tokens"] == r1 + r2
    assert killed.sizes == [r1 - MAX_OUT, r2 - MAX_OUT]

    resumed = ModelServer([replies[1], replies[2], replies[3], replies[4]])
    servers.append(resumed)
    _write(path, resumed.url, bound)
    again = subprocess.run(
        _command(path, store), env=_env(), capture_output=True, text=True, timeout=WAIT_S
    )
    assert again.returncode == 6, again.stderr
    assert "TUBELESS_AGENT_LIMIT_REACHED" in again.stderr
    # Resumed: turn 2 asked again, then turn 3 did not fit what the killed request kept.
    assert resumed.sizes == [r2 - MAX_OUT]
    reservations = [size + MAX_OUT for size in killed.sizes + resumed.sizes]
    assert sum(reservations) <= bound
    final = _consumed(store)
    assert final["input_tokens"] + final["output_tokens"] == r1 + r2 + r2
