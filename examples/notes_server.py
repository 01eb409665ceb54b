"""A small MCP server written with the official SDK: a notebook the agent can add to and search.

It speaks MCP on stdin/stdout (the notes live as long as the process, so one run)::

    python -m examples.notes_server

``projects/mcp-notes.yaml`` and ``examples/mcp_notes.py`` start it for each run.
"""

from __future__ import annotations

from mcp.server import MCPServer

server = MCPServer("notes")
_notes: list[str] = []


@server.tool()
def add_note(text: str) -> dict[str, int]:
    """Add a note; returns its number and how many notes there are."""
    _notes.append(text)
    return {"number": len(_notes), "count": len(_notes)}


@server.tool()
def find_notes(word: str) -> list[str]:
    """The notes that contain the word (case-insensitive), oldest first."""
    return [note for note in _notes if word.lower() in note.lower()]


if __name__ == "__main__":
    server.run()
