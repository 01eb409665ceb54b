"""A ``process`` engine worker as the driver holds it: its process and pipe, how it is started
(forked from the driver, or spawned as a fresh interpreter: :mod:`tubeless.batch._fork`), how
its readiness is read and how it is reaped.

The engine (:mod:`tubeless.batch._process`) decides when to start one and what it runs.
"""

from __future__ import annotations

import asyncio
import json
import signal as signals
import socket
import subprocess
import sys
from collections import deque
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from multiprocessing.connection import Connection
from typing import Any

from tubeless.batch._fork import Forked, fork
from tubeless.batch._frames import Frames
from tubeless.batch._process_worker import run_worker
from tubeless.errors import BATCH_ENGINE_UNAVAILABLE, BatchError

__all__ = ["Worker", "forked", "ready", "reap", "spawned"]


class Worker:
    """One worker process and the driver's end of its pipe."""

    __slots__ = ("conn", "fd", "frames", "process", "sent", "serial", "since")

    def __init__(
        self, process: subprocess.Popen[bytes] | Forked, conn: Connection, serial: int
    ) -> None:
        self.process = process
        self.conn = conn
        self.fd = conn.fileno()
        self.frames = Frames(self.fd)
        """The pipe as the event loop reads it, once the worker is ready (before: ``conn``)."""
        self.serial = serial
        self.sent: deque[asyncio.Future[Any]] = deque()
        """The rows sent and not done, in the order sent: the first one runs (a worker starts
        a row once the one before it ended), the others wait in the worker."""
        self.since = 0.0
        """When the row it runs started (``time.monotonic``)."""


def forked(entry: Any, settings: dict[str, Any], serial: int, others: Iterable[int]) -> Worker:
    """A copy of the driver, which loaded ``entry``; ``others``: the driver's ends of the other
    workers' pipes (closed in the copy, so that each worker sees only its own close)."""
    parent, child = socket.socketpair()
    drivers = [*others, parent.fileno()]
    process = fork(lambda: run_worker(Connection(child.detach()), entry, settings), close=drivers)
    child.close()
    return Worker(process, Connection(parent.detach()), serial)


def spawned(settings: dict[str, Any], serial: int) -> Worker:
    """A fresh interpreter that loads the entry itself."""
    parent, child = socket.socketpair()
    spec = json.dumps({**settings, "fd": child.fileno()})
    process = subprocess.Popen(
        [sys.executable, "-m", "tubeless.batch._process_worker", spec],
        pass_fds=(child.fileno(),),
        stdin=subprocess.DEVNULL,
        stdout=2,  # what a handler prints must not land among the rows on stdout
    )
    child.close()
    return Worker(process, Connection(parent.detach()), serial)


async def ready(worker: Worker, threads: ThreadPoolExecutor) -> None:
    """Until the worker says it is ready (read in a thread: it may take a while to load).

    Raises:
        BatchError: ``TUBELESS_BATCH_ENGINE_UNAVAILABLE`` when it could not load the entry.
    """
    loop = asyncio.get_running_loop()
    try:
        message = await loop.run_in_executor(threads, worker.conn.recv)
    except (EOFError, OSError):
        message = ("failed", "the worker process exited while loading the project")
    if message[0] != "ready":
        raise BatchError(
            BATCH_ENGINE_UNAVAILABLE, f"a worker could not load the entry: {message[1]}"
        )


def reap(worker: Worker) -> str:
    """Wait briefly for the process to end (killing it if it does not) and say how it ended."""
    try:
        code = worker.process.wait(5)
    except (subprocess.TimeoutExpired, TimeoutError):
        worker.process.kill()
        code = worker.process.wait()
    if code < 0:
        return f"killed by {signals.Signals(-code).name}"
    return f"exit status {code}"
