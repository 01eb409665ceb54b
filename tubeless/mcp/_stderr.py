"""A stdio server's own stderr, line by line to the ``tubeless.run`` logger.

The CLI shows that logger with ``-v`` only, so a server's chatter never reaches the terminal of
a plain or ``--quiet`` run; a Python caller sees it wherever it sends that logger's INFO
records. Lines are cut at :data:`MAX_LINE` characters and a connection logs at most
:data:`MAX_LINES` of them (then one line saying how many more there were).
"""

from __future__ import annotations

import logging
import os
import threading
from typing import BinaryIO, TextIO

__all__ = ["MAX_LINE", "MAX_LINES", "StderrLog"]

MAX_LINE = 2000
MAX_LINES = 1000
_log = logging.getLogger("tubeless.run")


class StderrLog:
    """A pipe for a server process's stderr, read by a thread of its own until it closes.

    ``file`` is what the process is started with; :meth:`release` closes this process's copy
    of it once the server is started (the pipe then ends when the server does).
    """

    def __init__(self, server: str) -> None:
        read_fd, write_fd = os.pipe()
        self._server = server
        self.file: TextIO = os.fdopen(write_fd, "w")
        reader = os.fdopen(read_fd, "rb")
        # A daemon: it ends with the pipe, and never holds up the interpreter's exit.
        self._thread = threading.Thread(target=self._pump, args=(reader,), daemon=True)
        self._thread.start()

    def release(self) -> None:
        """Close this process's end of the pipe (the server keeps its own)."""
        if not self.file.closed:
            self.file.close()

    def _pump(self, reader: BinaryIO) -> None:
        shown = 0
        more = 0
        with reader:
            while True:
                chunk = reader.readline(MAX_LINE)
                if not chunk:
                    break
                if not chunk.endswith(b"\n") and len(chunk) == MAX_LINE:
                    # The rest of an overlong line is skipped.
                    while (rest := reader.readline(MAX_LINE)) and not rest.endswith(b"\n"):
                        pass
                line = chunk.decode("utf-8", "replace").rstrip("\r\n")
                if shown < MAX_LINES:
                    shown += 1
                    _log.info("MCP server %r (stderr): %s", self._server, line)
                else:
                    more += 1
        if more:
            _log.info("MCP server %r (stderr): %d more lines not shown", self._server, more)
