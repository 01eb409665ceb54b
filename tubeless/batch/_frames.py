"""The driver's end of a ``process`` worker's pipe, in the framing of
:class:`multiprocessing.connection.Connection` (which the worker's end still uses): each message
is a pickle after its length (4 bytes, big-endian; ``-1`` then 8 bytes for a message of 2 GiB
or more).

Why not ``Connection`` itself in the driver: its ``recv`` reads a message in two system calls
(the length, then the body) and ``send`` pickles through a ``ForkingPickler`` made per message;
at two workers on two cores, the driver's CPU per row is taken from the workers. Here one
``read`` takes whatever the pipe holds (often a row's records and its ``done`` together) and
each message costs one ``pickle.loads``; a message read in part waits for the rest.
"""

from __future__ import annotations

import os
import pickle
from typing import Any

__all__ = ["Frames", "send"]

_READ = 1 << 16
_LARGE = 0x7FFFFFFF


def send(fd: int, message: Any) -> None:
    """Write ``message`` whole to the blocking pipe ``fd`` (``OSError`` if it is closed)."""
    body = pickle.dumps(message, pickle.HIGHEST_PROTOCOL)
    size = len(body)
    if size > _LARGE:
        data = memoryview(b"\xff\xff\xff\xff" + size.to_bytes(8, "big") + body)
    else:
        data = memoryview(size.to_bytes(4, "big") + body)
    while data:
        data = data[os.write(fd, data) :]


class Frames:
    """The messages read from one pipe, as they come whole."""

    __slots__ = ("fd", "have", "need", "parts")

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.parts: list[bytes] = []
        """What was read of a message not yet whole (joined once it is: a large message
        read in many pieces is copied once)."""
        self.have = 0
        self.need = 0
        """The bytes that message takes, once its length was read (else one more than held)."""

    def read(self) -> list[Any] | None:
        """The messages that one ``read`` of the (readable) pipe completes; ``None`` when the
        pipe is closed (the other end died or closed it)."""
        try:
            data = os.read(self.fd, max(_READ, self.need - self.have))
        except BlockingIOError:
            return []
        except OSError:
            return None
        if not data:
            return None
        if self.parts:
            self.parts.append(data)
            self.have += len(data)
            if self.have < self.need:
                return []
            data = b"".join(self.parts)
            self.parts, self.have, self.need = [], 0, 0
        messages = []
        end, offset = len(data), 0
        view = memoryview(data)
        while offset < end:
            need = end - offset + 1  # the length is not whole yet
            if end - offset >= 4:
                size = int.from_bytes(view[offset : offset + 4], "big", signed=True)
                start = offset + 4
                if size == -1 and end - offset >= 12:
                    size = int.from_bytes(view[start : start + 8], "big")
                    start += 8
                if size >= 0:
                    need = start - offset + size
                    if need <= end - offset:
                        messages.append(pickle.loads(view[start : start + size]))
                        offset += need
                        continue
            self.parts, self.have, self.need = [data[offset:]], end - offset, need
            break
        return messages
