"""``McpServer`` (how to reach a server) and ``mcp_tools`` (its tools for an agent).

Nothing here contacts a server or imports the SDK: a server is only configuration until an
agent run connects it (``tubeless.mcp._client``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tubeless.agent import Tool
from tubeless.agent._spi import TOOL_NAME, sourced_tool
from tubeless.errors import AgentDefinitionError

if TYPE_CHECKING:
    from tubeless.agent._spi import SourceSession

__all__ = [
    "DEFAULT_MAX_RESULT_BLOCKS",
    "DEFAULT_MAX_RESULT_BYTES",
    "DEFAULT_TIMEOUT_S",
    "McpServer",
    "mcp_tools",
    "registered_name",
]

#: Seconds a request (the handshake, a listing, one tool call) may take before the run fails.
DEFAULT_TIMEOUT_S = 60.0
#: The largest tool result value, in bytes of compact UTF-8 JSON (past it: MCP_PROTOCOL_ERROR).
DEFAULT_MAX_RESULT_BYTES = 4 * 1024 * 1024
#: The most content blocks a tool result may hold (past it: MCP_PROTOCOL_ERROR).
DEFAULT_MAX_RESULT_BLOCKS = 10_000
_SERVER_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_-]{0,63}")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")


@dataclass(frozen=True, kw_only=True, slots=True)
class McpServer:
    """An MCP server reached over stdio (``command``) or streamable HTTP (``url``).

    Make one with :meth:`stdio` or :meth:`http`. Equal servers share one connection per run;
    inside a worker scope (:class:`~tubeless.mcp.SharedConnections`, which the batch engines
    open per worker) runs share one connection per server unless ``per_run`` is set.

    Attributes:
        name: The server's name in messages (a letter, then letters, digits, ``_``, ``-``).
        command: The program and its arguments (stdio); the process lives as long as the run.
        env: Environment variables for the process, over a minimal inherited set.
        cwd: The process's working directory.
        url: The streamable HTTP endpoint (``http://`` or ``https://``).
        headers_env: HTTP headers whose values are read from environment variables when the
            run connects (never stored), as ``(header, variable)`` pairs.
        timeout_s: Seconds each request may take; past it the run fails.
        max_result_bytes: The largest value a call may return, in bytes of compact UTF-8 JSON
            (images and other blocks included, as base64); a larger one is a recoverable
            ``MCP_PROTOCOL_ERROR`` naming this bound.
        max_result_blocks: The most content blocks a result may hold; a result with more is
            refused before it is parsed (a recoverable ``MCP_PROTOCOL_ERROR`` naming this bound).
        max_concurrency: The most calls in flight to this server at once, over everything that
            shares the connection (``None``: no bound beyond the agents' own limits).
        per_run: Keep one connection per run even inside a worker scope (for a stateful server
            whose state must not outlive a run).

    ``per_run``, ``max_concurrency`` and the bounds are not part of any definition identity:
    they change how tools are reached, not what they do.
    """

    name: str
    command: tuple[str, ...] | None = None
    env: tuple[tuple[str, str], ...] = ()
    cwd: str | None = None
    url: str | None = None
    headers_env: tuple[tuple[str, str], ...] = ()
    timeout_s: float = DEFAULT_TIMEOUT_S
    max_result_bytes: int = DEFAULT_MAX_RESULT_BYTES
    max_result_blocks: int = DEFAULT_MAX_RESULT_BLOCKS
    max_concurrency: int | None = None
    per_run: bool = False

    def __post_init__(self) -> None:
        where = f"MCP server {self.name!r}"
        if not isinstance(self.name, str) or not _SERVER_NAME.fullmatch(self.name):
            raise AgentDefinitionError(
                f"MCP server name {self.name!r} must start with a letter and contain only "
                "letters, digits, '_' or '-' (at most 64 characters)."
            )
        if (self.command is None) == (self.url is None):
            raise AgentDefinitionError(f"{where} needs exactly one of command and url.")
        if self.command is not None and (
            not self.command or not all(isinstance(p, str) and p for p in self.command)
        ):
            raise AgentDefinitionError(f"{where}: command must be a nonempty list of strings.")
        if self.url is not None and not re.match(r"https?://", self.url):
            raise AgentDefinitionError(f"{where}: url must start with http:// or https://.")
        for header, variable in self.headers_env:
            if not _ENV_NAME.fullmatch(variable):
                raise AgentDefinitionError(
                    f"{where}: header {header!r} names {variable!r}, not an environment variable."
                )
        timeout = self.timeout_s
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout > 0:
            raise AgentDefinitionError(f"{where}: timeout_s must be a number above 0.")
        for label, bound in (
            ("max_result_bytes", self.max_result_bytes),
            ("max_result_blocks", self.max_result_blocks),
            ("max_concurrency", 1 if self.max_concurrency is None else self.max_concurrency),
        ):
            if isinstance(bound, bool) or not isinstance(bound, int) or bound < 1:
                raise AgentDefinitionError(f"{where}: {label} must be an integer above 0.")
        if not isinstance(self.per_run, bool):
            raise AgentDefinitionError(f"{where}: per_run must be true or false.")

    @classmethod
    def stdio(
        cls,
        name: str,
        command: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        max_result_bytes: int = DEFAULT_MAX_RESULT_BYTES,
        max_result_blocks: int = DEFAULT_MAX_RESULT_BLOCKS,
        max_concurrency: int | None = None,
        per_run: bool = False,
    ) -> McpServer:
        """A server started as a subprocess speaking MCP on its stdin and stdout."""
        return cls(
            name=name,
            command=tuple(command),
            env=tuple(sorted((env or {}).items())),
            cwd=cwd,
            timeout_s=timeout_s,
            max_result_bytes=max_result_bytes,
            max_result_blocks=max_result_blocks,
            max_concurrency=max_concurrency,
            per_run=per_run,
        )

    @classmethod
    def http(
        cls,
        name: str,
        url: str,
        *,
        headers_env: Mapping[str, str] | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        max_result_bytes: int = DEFAULT_MAX_RESULT_BYTES,
        max_result_blocks: int = DEFAULT_MAX_RESULT_BLOCKS,
        max_concurrency: int | None = None,
        per_run: bool = False,
    ) -> McpServer:
        """A server reached over streamable HTTP at ``url``."""
        return cls(
            name=name,
            url=url,
            headers_env=tuple(sorted((headers_env or {}).items())),
            timeout_s=timeout_s,
            max_result_bytes=max_result_bytes,
            max_result_blocks=max_result_blocks,
            max_concurrency=max_concurrency,
            per_run=per_run,
        )

    @property
    def transport(self) -> str:
        """``"stdio"`` or ``"http"``."""
        return "stdio" if self.command is not None else "http"

    def connect(self) -> AbstractAsyncContextManager[SourceSession]:
        """Connect (needs the ``mcp`` extra); leaving the context closes the connection.

        Inside a worker scope (and without ``per_run``) this borrows the scope's connection
        instead, which the scope closes when it ends.
        """
        from tubeless.mcp._connection import open_session
        from tubeless.mcp._pool import current_pool

        pool = current_pool()
        if pool is not None and not self.per_run:
            return pool.borrow(self)
        return open_session(self)


def registered_name(key: str, tool: str) -> str:
    """The agent's name for server tool ``tool`` under key ``key``: ``<key>__<tool>``.

    Characters a tool name may not hold become ``_``.
    """
    return f"{key}__{_UNSAFE.sub('_', tool)}"


def mcp_tools(
    server: McpServer, include: Sequence[str], *, key: str | None = None
) -> dict[str, Tool]:
    """The tools ``include`` of ``server``, for ``define_agent(tools=...)``.

    Each is registered as ``<key>__<tool>`` (``key`` defaults to the server's name). Nothing is
    contacted here: when a run starts it connects, checks every included tool exists, and uses
    the server's descriptions and input schemas (arguments are validated by them). Only the
    included tools can be called. MCP tools have no preview, so dry runs skip them.

    Raises:
        AgentDefinitionError: For an empty or repeated ``include``, or a name that is not a
            valid tool name once registered.
    """
    if not isinstance(server, McpServer):
        raise AgentDefinitionError("mcp_tools needs an McpServer (McpServer.stdio or .http).")
    prefix = server.name if key is None else key
    if isinstance(include, str) or not include:
        raise AgentDefinitionError(
            f"mcp_tools for server {server.name!r} needs a nonempty list of tool names to include."
        )
    tools: dict[str, Tool] = {}
    for tool in include:
        if not isinstance(tool, str) or not tool.strip():
            raise AgentDefinitionError(f"Server {server.name!r}: include holds a blank name.")
        name = registered_name(prefix, tool)
        if not TOOL_NAME.fullmatch(name):
            raise AgentDefinitionError(
                f"Tool name {name!r} (server {server.name!r}, tool {tool!r}) must start with a "
                "letter and have at most 128 characters."
            )
        if name in tools:
            raise AgentDefinitionError(
                f"Server {server.name!r}: include names tool {tool!r} twice (as {name!r})."
            )
        tools[name] = sourced_tool(
            server,
            tool,
            description=f"MCP tool {tool!r} of server {server.name!r} (the server describes it "
            "when a run connects).",
        )
    return tools
