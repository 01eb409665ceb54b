"""An MCP stdio "server" that reads requests and never answers one: ``python mcp_mute_server.py``
appends ``got METHOD`` (``got junk`` for a line that is not JSON) to the file ``MCP_TEST_LOG``
names, for each line it reads.

It imports nothing but the standard library, so that it reads its first request at once: the
real test server imports the MCP SDK first, which takes longer than a client's connect timeout
on a loaded machine (it was seen to take 15 s), and then it had read nothing before the client
gave up and killed it.
"""

from __future__ import annotations

import json
import os
import sys


def log(line: str) -> None:
    path = os.environ.get("MCP_TEST_LOG")
    if path:
        with open(path, "a", encoding="utf-8") as file:
            file.write(line + "\n")


def main() -> None:
    log(f"pid {os.getpid()}")
    for line in sys.stdin:
        try:
            log(f"got {json.loads(line).get('method')}")
        except ValueError:
            log("got junk")


if __name__ == "__main__":
    main()
