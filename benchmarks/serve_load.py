"""``tubeless serve`` under load: ``python -m benchmarks.serve_load [--runs N] [--clients C]``.

- Runs per second, and p50/p99 latency of ``POST /v1/entries/scripted-agent/runs`` with
  ``wait_s`` (each request waits for its run's result), on ``projects/scripted-agent.yaml`` with
  1 and 8 uvicorn workers, driven by ``C`` concurrent httpx clients on loopback. Each request
  has its own input, so each is a real checkpointed run (a repeated input would answer its
  saved result without running).
- Event-stream latency: for runs followed live over ``GET /v1/runs/{id}/events``, the time from
  a record's creation (its ``timestampMs``) to its arrival at the client. This bounds the
  commit-to-client time from above: it includes the trace sink's batching (a commit at every
  turn end, else within a quarter second) and the stream's poll (0.1 s).

The server is a real ``tubeless serve`` process with its stores in a temporary folder. LangGraph's
and ADK's servers are not installed here, so their rows are not measured.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
PROJECT = ROOT / "projects" / "scripted-agent.yaml"
TOKEN = "benchmark-token-0123456789"


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _start(folder: Path, workers: int) -> tuple[subprocess.Popen[bytes], str]:
    port = _port()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TUBELESS_SERVE_TOKEN": TOKEN}
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tubeless",
            "serve",
            str(PROJECT),
            "--port",
            str(port),
            "--workers",
            str(workers),
            "--max-runs",
            "1000",
            "--checkpoints",
            str(folder / "c.sqlite"),
            "--trace",
            str(folder / "t.sqlite"),
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                return process, url
        except httpx.HTTPError:
            time.sleep(0.1)
    os.killpg(process.pid, signal.SIGKILL)
    raise RuntimeError("the server did not start")


def _stop(process: subprocess.Popen[bytes]) -> None:
    os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(30)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def _load(url: str, runs: int, clients: int, tag: str) -> dict[str, Any]:
    headers = {"authorization": f"Bearer {TOKEN}"}
    latencies: list[float] = []
    failed = 0
    queue: asyncio.Queue[int] = asyncio.Queue()
    for i in range(runs):
        queue.put_nowait(i)
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(
        base_url=url, headers=headers, timeout=120, limits=limits
    ) as client:

        async def one_client() -> None:
            nonlocal failed
            while not queue.empty():
                i = queue.get_nowait()
                body = {"input": {"question": f"{tag} run {i}"}, "wait_s": 60}
                start = time.perf_counter()
                answer = await client.post("/v1/entries/scripted-agent/runs", json=body)
                latencies.append(time.perf_counter() - start)
                if answer.status_code != 200 or answer.json().get("status") != "completed":
                    failed += 1

        # warm-up: one run per client, not counted
        for i in range(clients):
            await client.post(
                "/v1/entries/scripted-agent/runs",
                json={"input": {"question": f"{tag} warm {i}"}, "wait_s": 60},
            )
        start = time.perf_counter()
        await asyncio.gather(*(one_client() for _ in range(clients)))
        wall = time.perf_counter() - start
    return {
        "runs": runs,
        "clients": clients,
        "runs_per_s": round(runs / wall, 1),
        "p50_ms": round(statistics.median(latencies) * 1000, 1),
        "p99_ms": round(_percentile(latencies, 0.99) * 1000, 1),
        "failed": failed,
    }


async def _stream_latency(url: str, runs: int) -> dict[str, Any]:
    headers = {"authorization": f"Bearer {TOKEN}"}
    delays: list[float] = []
    async with httpx.AsyncClient(base_url=url, headers=headers, timeout=120) as client:
        for i in range(runs):
            body = {"input": {"question": f"stream run {i}"}}
            run = (await client.post("/v1/entries/scripted-agent/runs", json=body)).json()
            async with client.stream("GET", f"/v1/runs/{run['run_id']}/events") as response:
                event = ""
                async for line in response.aiter_lines():
                    if line.startswith("event:"):
                        event = line.split(":", 1)[1].strip()
                    elif line.startswith("data:") and event == "record":
                        record = json.loads(line[5:])
                        delays.append(time.time() * 1000 - record["timestampMs"])
                    elif line.startswith("data:") and event == "end":
                        break
    return {
        "records": len(delays),
        "p50_ms": round(statistics.median(delays), 1),
        "p99_ms": round(_percentile(delays, 0.99), 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--stream-runs", type=int, default=20)
    args = parser.parse_args()
    for workers in (1, 8):
        with tempfile.TemporaryDirectory() as folder:
            process, url = _start(Path(folder), workers)
            try:
                row = asyncio.run(_load(url, args.runs, args.clients, f"w{workers}"))
                row["workers"] = workers
                if workers == 1:
                    row["stream"] = asyncio.run(_stream_latency(url, args.stream_runs))
            finally:
                _stop(process)
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
