"""tubeless serve against its peers' servers: ``python -m benchmarks.serve_peers``.

The load of ``benchmarks.serve_load`` (same clients, same warm-up, same count; every request
one new run of the scripted agent, waiting for its result, its answer checked) against:

- ``tubeless serve`` with 1 and 8 workers, its checkpoint and trace stores on disk (the
  default: every commit synced) and on a tmpfs (``/dev/shm``: no disk, so comparable with
  the peers' in-memory stores);
- ``langgraph dev`` (``langgraph-cli[inmem]``): ``POST /threads/{id}/runs/wait`` creating the
  thread, the graph of ``benchmarks/peers/langgraph_graph.py``; its runtime keeps threads and
  checkpoints in memory and pickles them to ``.langgraph_api/`` every 10 s. With its default
  one job at a time, and with ``--n-jobs-per-worker`` equal to the clients;
- ``adk api_server`` (``google-adk``): ``POST /run`` with ``--auto_create_session``, the agent
  of ``benchmarks/peers/adk_agents/scripted``; sessions in memory (``memory://``) and in its
  default local SQLite file.

A peer whose command is not found (``--langgraph-bin``/``--adk-bin``, else on ``PATH``) is
skipped with a line saying so. Servers alternate within each round (``--rounds``); the load
average is printed with each row. One JSON line per row, then a Markdown table.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from benchmarks.peers.scripted import expected_answer
from benchmarks.serve_load import (
    HEADERS,
    ROOT,
    TMPFS,
    PostRun,
    free_port,
    load,
    post_tubeless,
    start_tubeless,
    stop,
    wait_ready,
)

PEERS = ROOT / "benchmarks" / "peers"
#: Keeps peer servers off the network: no analytics, no tracing upload.
QUIET_ENV = {
    "LANGGRAPH_CLI_NO_ANALYTICS": "1",
    "LANGSMITH_TRACING": "false",
    "LANGCHAIN_TRACING_V2": "false",
    "ADK_DISABLE_TELEMETRY": "1",
}


@dataclass(frozen=True)
class Server:
    """One row's server: how to start it and how to send it one run."""

    name: str
    persists: str
    #: A context manager yielding ``(url, headers)`` while the server runs.
    running: Callable[[Path], Any]
    post: PostRun


@dataclass(frozen=True)
class Skipped:
    """A peer that is not installed here."""

    name: str
    reason: str


def _spawn(command: list[str], cwd: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, **QUIET_ENV, "PYTHONPATH": str(ROOT)}
    log = (cwd / "server.log").open("wb")
    return subprocess.Popen(
        command, cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )


def _tubeless(workers: int, tmpfs: bool) -> Server:
    @contextmanager
    def running(folder: Path) -> Iterator[tuple[str, dict[str, str]]]:
        with tempfile.TemporaryDirectory(dir=str(TMPFS) if tmpfs else str(folder)) as stores:
            process, url = start_tubeless(Path(stores), workers)
            try:
                yield url, HEADERS
            finally:
                stop(process)

    where = "tmpfs" if tmpfs else "disk"
    persists = "SQLite on tmpfs (lost with the machine)" if tmpfs else "SQLite on disk, synced"
    plural = "s" if workers > 1 else ""
    return Server(
        f"tubeless serve, {workers} worker{plural}, {where}", persists, running, post_tubeless
    )


def _langgraph(binary: str, jobs: int | None) -> Server:
    @contextmanager
    def running(folder: Path) -> Iterator[tuple[str, dict[str, str]]]:
        graph = PEERS / "langgraph_graph.py"
        config = {"dependencies": [str(ROOT)], "graphs": {"scripted": f"{graph}:graph"}}
        (folder / "langgraph.json").write_text(json.dumps(config))
        port = free_port()
        command = [binary, "dev", "--no-browser", "--no-reload", "--port", str(port)]
        command += ["--config", "langgraph.json"]
        if jobs is not None:
            command += ["--n-jobs-per-worker", str(jobs)]
        process = _spawn(command, folder)
        try:
            wait_ready(process, f"http://127.0.0.1:{port}/ok")
            yield f"http://127.0.0.1:{port}", {}
        finally:
            stop(process)

    async def post(client: httpx.AsyncClient, question: str, key: str) -> bool:
        body = {"assistant_id": "scripted", "input": {"question": question}}
        body["if_not_exists"] = "create"
        answer = await client.post(f"/threads/{uuid.uuid4()}/runs/wait", json=body)
        if answer.status_code != 200:
            return False
        return bool(answer.json().get("answer") == expected_answer(question))

    name = "langgraph dev" + (f", {jobs} jobs" if jobs else ", 1 job (its default)")
    persists = "memory, pickled to disk every 10 s"
    return Server(name, persists, running, post)


def _adk(binary: str, memory: bool) -> Server:
    @contextmanager
    def running(folder: Path) -> Iterator[tuple[str, dict[str, str]]]:
        agents = folder / "agents"
        shutil.copytree(PEERS / "adk_agents", agents, ignore=shutil.ignore_patterns("__pycache__"))
        port = free_port()
        command = [binary, "api_server", "--port", str(port), "--auto_create_session"]
        if memory:
            command += ["--session_service_uri", "memory://"]
        process = _spawn([*command, str(agents)], folder)
        try:
            wait_ready(process, f"http://127.0.0.1:{port}/list-apps")
            yield f"http://127.0.0.1:{port}", {}
        finally:
            stop(process)

    async def post(client: httpx.AsyncClient, question: str, key: str) -> bool:
        body = {
            "app_name": "scripted",
            "user_id": "bench",
            "session_id": f"{key}-{uuid.uuid4().hex[:8]}",
            "new_message": {"role": "user", "parts": [{"text": question}]},
        }
        answer = await client.post("/run", json=body)
        if answer.status_code != 200 or not answer.json():
            return False
        parts = (answer.json()[-1].get("content") or {}).get("parts") or [{}]
        return bool(parts[0].get("text") == expected_answer(question))

    name = "adk api_server, " + ("memory sessions" if memory else "SQLite sessions (its default)")
    persists = "memory" if memory else "SQLite on disk (its default .adk/ folder)"
    return Server(name, persists, running, post)


def _find(given: str | None, command: str) -> str | None:
    if given:
        return given if Path(given).is_file() and os.access(given, os.X_OK) else None
    return shutil.which(command)


def servers(langgraph_bin: str | None, adk_bin: str | None, clients: int) -> list[Server | Skipped]:
    """Every row's server, peers not found as :class:`Skipped`."""
    rows: list[Server | Skipped] = []
    for tmpfs in (False, True):
        rows += [_tubeless(1, tmpfs), _tubeless(8, tmpfs)]
    langgraph = _find(langgraph_bin, "langgraph")
    if langgraph is None:
        why = "`langgraph` not found (pip install 'langgraph-cli[inmem]'; --langgraph-bin PATH)"
        rows.append(Skipped("langgraph dev", why))
    else:
        rows += [_langgraph(langgraph, None), _langgraph(langgraph, clients)]
    adk = _find(adk_bin, "adk")
    if adk is None:
        rows.append(
            Skipped("adk api_server", "`adk` not found (pip install google-adk; --adk-bin PATH)")
        )
    else:
        rows += [_adk(adk, True), _adk(adk, False)]
    return rows


def measure(server: Server, runs: int, clients: int, tag: str) -> dict[str, Any]:
    """One row: start the server in a fresh folder, load it, stop it."""
    before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as folder, server.running(Path(folder)) as (url, headers):
        row = asyncio.run(
            load(url, server.post, runs=runs, clients=clients, tag=tag, headers=headers)
        )
    load_avg = f"{before:.1f} to {os.getloadavg()[0]:.1f}"
    return {"server": server.name, "persists": server.persists, **row, "load": load_avg}


def table(rows: list[dict[str, Any]]) -> str:
    """The rows as Markdown."""
    lines = ["| server | runs are kept in | runs/s | p50 | p99 | failed | load |"]
    lines.append("|---|---|---|---|---|---|---|")
    for row in rows:
        if "skipped" in row:
            lines.append(f"| {row['server']} | skipped: {row['skipped']} | | | | | |")
            continue
        lines.append(
            f"| {row['server']} | {row['persists']} | {row['runs_per_s']} | {row['p50_ms']} ms"
            f" | {row['p99_ms']} ms | {row['failed']} | {row['load']} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=1, help="alternations of every server")
    parser.add_argument("--langgraph-bin", help="the `langgraph` command (else found on PATH)")
    parser.add_argument("--adk-bin", help="the `adk` command (else found on PATH)")
    parser.add_argument("--only", help="only servers whose name contains this text")
    args = parser.parse_args(argv)
    rows: list[dict[str, Any]] = []
    chosen = servers(args.langgraph_bin, args.adk_bin, args.clients)
    if args.only:
        chosen = [s for s in chosen if args.only in s.name]
    for skipped in (s for s in chosen if isinstance(s, Skipped)):
        rows.append({"server": skipped.name, "skipped": skipped.reason})
        print(json.dumps(rows[-1]), flush=True)
    for round_ in range(args.rounds):
        for index, server in enumerate(s for s in chosen if isinstance(s, Server)):
            row = measure(server, args.runs, args.clients, f"r{round_}s{index}")
            rows.append({"round": round_ + 1, **row})
            print(json.dumps(rows[-1]), flush=True)
    print(table(rows))


if __name__ == "__main__":
    main()
