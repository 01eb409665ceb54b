"""``tubeless serve`` under load: ``python -m benchmarks.serve_load [--runs N] [--clients C]``.

- Runs per second, and p50/p99 latency of ``POST /v1/entries/scripted-agent/runs`` with
  ``wait_s`` (each request waits for its run's result), on ``projects/scripted-agent.yaml`` with
  1 and 8 uvicorn workers, driven by ``C`` concurrent httpx clients on loopback. Each request
  has its own input, so each is a real checkpointed run (a repeated input would answer its
  saved result without running), and each answer is checked against the expected text.
- Event-stream latency: for runs followed live over ``GET /v1/runs/{id}/events``, the time
  from a record's commit to its arrival at the client. A watcher thread polls the trace store
  (read-only, every millisecond) and notes when each record's row first becomes visible: that
  is its commit, give or take the poll. The time from a record's creation (its
  ``timestampMs``) to its arrival is reported beside it; it adds the trace sink's batching.

The server is a real ``tubeless serve`` process with its stores in a temporary folder (on
disk, or on a tmpfs with ``--tmpfs``). ``python -m benchmarks.serve_peers`` runs the same load
against LangGraph's and ADK's servers as well.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

import httpx

from benchmarks.peers.scripted import expected_answer

ROOT = Path(__file__).resolve().parents[1]
PROJECT = ROOT / "projects" / "scripted-agent.yaml"
TOKEN = "benchmark-token-0123456789"
HEADERS = {"authorization": f"Bearer {TOKEN}"}
#: A tmpfs folder for the "in memory" configuration (checkpoints and traces never reach a disk).
TMPFS = Path("/dev/shm")

#: Sends one run of ``question`` and says whether its answer came back right.
PostRun = Callable[[httpx.AsyncClient, str, str], Awaitable[bool]]


def free_port() -> int:
    """A free TCP port on 127.0.0.1."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_ready(process: subprocess.Popen[bytes], url: str, timeout: float = 90) -> None:
    """Wait until ``url`` answers 200, or stop ``process`` and raise."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and process.poll() is None:
        try:
            if httpx.get(url, timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    stop(process)
    raise RuntimeError(f"the server did not answer {url}")


def stop(process: subprocess.Popen[bytes]) -> None:
    """Stop a server started in its own session (its whole process group)."""
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(30)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def start_tubeless(folder: Path, workers: int) -> tuple[subprocess.Popen[bytes], str]:
    """``tubeless serve`` on the scripted agent, its stores in ``folder``."""
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TUBELESS_SERVE_TOKEN": TOKEN}
    command = [sys.executable, "-m", "tubeless", "serve", str(PROJECT), "--port", str(port)]
    command += ["--workers", str(workers), "--max-runs", "1000"]
    command += ["--checkpoints", str(folder / "c.sqlite"), "--trace", str(folder / "t.sqlite")]
    process = subprocess.Popen(
        command,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    wait_ready(process, f"{url}/healthz")
    return process, url


async def post_tubeless(client: httpx.AsyncClient, question: str, key: str) -> bool:
    """One run over tubeless's API, waiting for its result."""
    body = {"input": {"question": question}, "wait_s": 60}
    answer = await client.post("/v1/entries/scripted-agent/runs", json=body)
    if answer.status_code != 200:
        return False
    run = answer.json()
    return bool(
        run.get("status") == "completed"
        and (run.get("result") or {}).get("answer") == expected_answer(question)
    )


def percentile(values: list[float], q: float) -> float:
    """The ``q`` quantile of ``values`` (nearest rank)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def load(
    url: str,
    post: PostRun,
    *,
    runs: int,
    clients: int,
    tag: str,
    headers: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """``runs`` runs from ``clients`` concurrent clients after one warm-up run per client.

    Questions are ``"<tag> run <i>"`` (three words: a count and three uppercase calls), so
    every run is new to the server and every server gets the same work.
    """
    latencies: list[float] = []
    failed = 0
    queue: asyncio.Queue[int] = asyncio.Queue()
    for i in range(runs):
        queue.put_nowait(i)
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(
        base_url=url, headers=dict(headers or {}), timeout=120, limits=limits
    ) as client:

        async def one_client() -> None:
            nonlocal failed
            while not queue.empty():
                i = queue.get_nowait()
                start = time.perf_counter()
                ok = await post(client, f"{tag} run {i}", f"{tag}-run-{i}")
                latencies.append(time.perf_counter() - start)
                failed += not ok

        warm = [post(client, f"{tag} warm {i}", f"{tag}-warm-{i}") for i in range(clients)]
        await asyncio.gather(*warm)  # not counted
        start = time.perf_counter()
        await asyncio.gather(*(one_client() for _ in range(clients)))
        wall = time.perf_counter() - start
    return {
        "runs": runs,
        "clients": clients,
        "runs_per_s": round(runs / wall, 1),
        "p50_ms": round(statistics.median(latencies) * 1000, 1),
        "p99_ms": round(percentile(latencies, 0.99) * 1000, 1),
        "failed": failed,
    }


class CommitWatcher:
    """Notes the wall time at which each trace row first becomes visible to a reader."""

    def __init__(self, trace: Path, poll_s: float = 0.001) -> None:
        self.seen: dict[int, float] = {}
        self._trace = trace
        self._poll_s = poll_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def __enter__(self) -> CommitWatcher:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _watch(self) -> None:
        conn = sqlite3.connect(f"file:{self._trace}?mode=ro", uri=True, check_same_thread=False)
        last = 0
        try:
            while not self._stop.is_set():
                rows = conn.execute(
                    "SELECT id FROM pipeline_run_events WHERE id > ? ORDER BY id", (last,)
                ).fetchall()
                now = time.time()
                for (row_id,) in rows:
                    self.seen[row_id] = now
                    last = row_id
                time.sleep(self._poll_s)
        finally:
            conn.close()


async def stream_latency(url: str, runs: int, trace: Path) -> dict[str, Any]:
    """Follow ``runs`` runs live; commit-to-client and creation-to-client per record (ms)."""
    from_commit: list[float] = []
    from_creation: list[float] = []
    arrivals: list[tuple[int, float, float]] = []  # sequence, arrival, its stream's opening
    with CommitWatcher(trace) as watcher:
        async with httpx.AsyncClient(base_url=url, headers=HEADERS, timeout=120) as client:
            for i in range(runs):
                body = {"input": {"question": f"stream run {i}"}}
                run = (await client.post("/v1/entries/scripted-agent/runs", json=body)).json()
                path = f"/v1/runs/{run['run_id']}/events"
                opened = time.time()  # the request is sent: records committed later are live
                async with client.stream("GET", path) as response:
                    event, event_id = "", ""
                    async for line in response.aiter_lines():
                        if line.startswith("event:"):
                            event = line.split(":", 1)[1].strip()
                        elif line.startswith("id:"):
                            event_id = line.split(":", 1)[1].strip()
                        elif line.startswith("data:") and event == "record":
                            now = time.time()
                            record = json.loads(line[5:])
                            from_creation.append(now * 1000 - record["timestampMs"])
                            arrivals.append((int(event_id), now, opened))
                        elif line.startswith("data:") and event == "end":
                            break
    # Only records committed after their stream was asked for are live; earlier ones are the
    # catch-up a late follower gets, bounded by reading, not by committing.
    for sequence, arrived, opened in arrivals:
        committed = watcher.seen.get(sequence)
        if committed is not None and committed >= opened:
            from_commit.append((arrived - committed) * 1000)
    return {
        "records": len(from_creation),
        "live_records": len(from_commit),
        "commit_to_client_ms": _quantiles(from_commit),
        "creation_to_client_ms": _quantiles(from_creation),
    }


def _quantiles(values: list[float]) -> dict[str, float] | None:
    if not values:
        return None
    return {"p50": round(statistics.median(values), 1), "p99": round(percentile(values, 0.99), 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--stream-runs", type=int, default=20)
    parser.add_argument("--tmpfs", action="store_true", help=f"stores under {TMPFS}")
    args = parser.parse_args()
    parent = str(TMPFS) if args.tmpfs else None
    for workers in (1, 8):
        with tempfile.TemporaryDirectory(dir=parent) as folder:
            process, url = start_tubeless(Path(folder), workers)
            try:
                row: dict[str, Any] = {"workers": workers, "tmpfs": args.tmpfs}
                row |= asyncio.run(
                    load(
                        url,
                        post_tubeless,
                        runs=args.runs,
                        clients=args.clients,
                        tag=f"w{workers}",
                        headers=HEADERS,
                    )
                )
                if workers == 1 and args.stream_runs:
                    trace = Path(folder) / "t.sqlite"
                    row["stream"] = asyncio.run(stream_latency(url, args.stream_runs, trace))
            finally:
                stop(process)
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
