"""``tubeless mcp-serve PROJECT``: the project's entries as MCP tools over stdin/stdout.

Desktop assistants and IDEs start it as an MCP server (``command: tubeless``, ``args:
[mcp-serve, projects/x.yaml]``). Stdout carries the protocol, so nothing else is printed there;
logs and errors go to stderr. ``--checkpoints PATH|URL`` keeps every run in a SQLite checkpoint
file or a PostgreSQL database; without it runs are kept in memory for the life of the server.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import TYPE_CHECKING

import click

from tubeless._cli._complete import project_argument
from tubeless._cli._exit import CliLoadError

if TYPE_CHECKING:
    from tubeless.durable import CheckpointStore

__all__ = ["mcp_serve"]


@click.command("mcp-serve", short_help="Serve a project's entries as MCP tools over stdio.")
@project_argument()
@click.option(
    "--checkpoints",
    "checkpoints_path",
    default=None,
    metavar="PATH|URL",
    help="A SQLite checkpoint file or a postgresql:// URL for the runs (default: in memory).",
)
def mcp_serve(project: str, checkpoints_path: str | None) -> None:
    """Serve PROJECT over MCP on stdin/stdout: each entry is a tool named by its id."""
    try:
        import mcp  # noqa: F401
    except ImportError:
        raise CliLoadError("mcp-serve needs the MCP SDK: pip install 'tubeless[mcp]'") from None
    from tubeless.project import load_project
    from tubeless.serve.protocols import LocalRunner, serve_stdio

    if not Path(project).exists():
        raise FileNotFoundError(2, "No such file or directory", project)
    loaded = load_project(project)
    store: CheckpointStore
    if checkpoints_path is None:
        from tubeless.durable import MemoryCheckpoints

        store = MemoryCheckpoints()
    else:
        from tubeless.durable import open_checkpoints

        store = open_checkpoints(checkpoints_path)

    async def serve() -> None:
        runner = LocalRunner(loaded, checkpoints=store)
        try:
            await serve_stdio(runner)
        finally:
            await runner.close()

    try:
        asyncio.run(serve())
    finally:
        store.close()
