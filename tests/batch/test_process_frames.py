"""The ``process`` driver reads and writes its workers' pipes itself (``_frames``), in the
framing the workers' ``multiprocessing.connection.Connection`` uses: whatever messages a worker
sends, in whatever pieces the pipe hands them over, the driver reads the same messages in the
same order, and the worker reads what the driver sends."""

from __future__ import annotations

import os
import select
import socket
import threading
from multiprocessing.connection import Connection
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from tubeless.batch._frames import Frames, send

_MESSAGES = st.lists(
    st.tuples(
        st.sampled_from(["done", "records", "budget"]),
        st.one_of(st.integers(), st.text(max_size=50), st.binary(min_size=0, max_size=200_000)),
    ),
    max_size=12,
)


def _pair() -> tuple[Connection, int]:
    worker, driver = socket.socketpair()
    return Connection(worker.detach()), driver.detach()


@settings(max_examples=40, deadline=None)
@given(_MESSAGES)
def test_the_driver_reads_every_message_a_worker_sends_in_order(messages: list[Any]) -> None:
    worker, fd = _pair()
    try:
        writer = threading.Thread(target=lambda: [worker.send(m) for m in messages])
        writer.start()
        frames, got = Frames(fd), []
        while len(got) < len(messages):
            select.select([fd], [], [], 10)
            read = frames.read()
            assert read is not None
            got.extend(read)
        writer.join()
        assert got == messages
        worker.close()
        select.select([fd], [], [], 10)
        assert frames.read() is None  # the worker's end closed: the driver sees it
    finally:
        worker.close()
        os.close(fd)


@settings(max_examples=20, deadline=None)
@given(_MESSAGES)
def test_a_worker_reads_every_message_the_driver_sends(messages: list[Any]) -> None:
    worker, fd = _pair()
    try:
        got: list[Any] = []
        reader = threading.Thread(target=lambda: got.extend(worker.recv() for _ in messages))
        reader.start()
        for message in messages:
            send(fd, message)
        reader.join(10)
        assert got == messages
    finally:
        worker.close()
        os.close(fd)
