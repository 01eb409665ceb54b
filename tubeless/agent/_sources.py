"""Tool sources: servers that describe and run tools only once a run connects them.

A sourced tool (``tubeless.mcp`` makes them) is a handler tool whose description and input
schema are placeholders until a run connects its source; plans, graphs and definition
identities see the placeholders and contact nothing. The agent step opens every source its
tools name once per invocation (an enclosing agent's open connection is reused), checks each
tool exists, and hands the turns the live descriptors: ``decide`` sees them in
``ctx.capabilities`` and arguments are validated by them before any call of a batch starts.
What an invocation opened it closes when it ends, however it ends. Dry runs connect nothing
(sourced tools have no preview, so they are skipped there). A checkpointed invocation's journal
is told the live descriptors: they join what its checkpoint is compared with.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from tubeless.agent._prepare import CompiledTool
from tubeless.agent._tools import Tool, ToolContext, descriptor
from tubeless.errors import AgentDefinitionError
from tubeless.frozen import FrozenDict
from tubeless.schema import Schema, SchemaDefinitionError

if TYPE_CHECKING:
    from tubeless.pipeline import StepContext

__all__ = [
    "SOURCES_SLOT",
    "LiveTools",
    "Remote",
    "SourceSession",
    "ToolSource",
    "connect_sources",
    "sourced_tool",
]

#: The run-environment slot carrying ``{source: session}`` down a run tree.
SOURCES_SLOT = "tubeless.agent.sources"
#: What a sourced tool accepts before its server describes it: any JSON object.
_PLACEHOLDER_SCHEMA: Mapping[str, Any] = {"type": "object"}
_MAX_DESCRIPTION = 4096


class SourceSession(Protocol):
    """One open connection to a source, for the length of an agent invocation."""

    def describe(self, name: str) -> tuple[str, Mapping[str, Any]]:
        """The live ``(description, input JSON Schema)`` of tool ``name``; raises if absent."""
        ...

    def validator(self, name: str) -> Schema:
        """How tool ``name``'s arguments are validated (the source reads its own schemas)."""
        ...

    async def call(self, name: str, arguments: Any, ctx: ToolContext) -> Any:
        """Run tool ``name``; raise ``ToolError`` for a failure the agent may recover from."""
        ...


class ToolSource(Protocol):
    """A server that supplies tools (hashable: equal sources share one connection)."""

    def connect(self) -> AbstractAsyncContextManager[SourceSession]:
        """Open a connection; leaving the context closes it (and stops a local server)."""
        ...


@dataclass(frozen=True, slots=True)
class Remote:
    """Where a sourced tool lives: its source and its name there."""

    source: ToolSource
    name: str


@dataclass(frozen=True, slots=True)
class LiveTools:
    """An invocation's view of its tools once the sources described theirs."""

    capabilities: tuple[FrozenDict, ...]
    registry: Mapping[str, CompiledTool]
    descriptors: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    """Each sourced tool as its server described it, by registered name: ``{server, tool,
    description, input_schema}`` (what a checkpoint records of the server)."""


def _handler(remote: Remote) -> Any:
    async def run(arguments: Any, ctx: ToolContext) -> Any:
        sessions: Mapping[Any, SourceSession] = ctx._step.slots.get(SOURCES_SLOT) or {}
        session = sessions.get(remote.source)
        if session is None:
            # Reached only by running the tool's pipeline outside an agent that connected it.
            raise AgentDefinitionError(
                f"Tool {remote.name!r} belongs to a server that only an agent run connects."
            )
        return await session.call(remote.name, arguments, ctx)

    return run


def sourced_tool(source: ToolSource, name: str, *, description: str) -> Tool:
    """A tool that ``source`` describes and runs once a run connects it.

    ``description`` stands in (for plans, graphs and identities) until the server's own is known.
    Sourced tools have no preview: dry runs skip them.
    """
    remote = Remote(source, name)
    return Tool(
        kind="handler",
        description=description,
        input_schema=Schema.json(dict(_PLACEHOLDER_SCHEMA)),
        output_schema=Schema.json({}),
        input_json_schema=descriptor(_PLACEHOLDER_SCHEMA, "input_json_schema"),
        _run=_handler(remote),
        _preview=None,
        remote=remote,
        replay="unsafe",  # the server's side effects are unknown (DESIGN.md §15)
    )


def sources_of(registry: Mapping[str, CompiledTool]) -> tuple[ToolSource, ...]:
    """The distinct sources of a registry's sourced tools, in tool-name order."""
    found: dict[ToolSource, None] = {}
    for entry in registry.values():
        remote = entry.tool.remote
        if remote is not None:
            found.setdefault(remote.source, None)
    return tuple(found)


def _live_entry(
    entry: CompiledTool, session: SourceSession, descriptors: dict[str, Mapping[str, Any]]
) -> tuple[FrozenDict, CompiledTool]:
    remote: Remote = entry.tool.remote
    description, schema = session.describe(remote.name)
    descriptors[entry.name] = {
        "server": getattr(remote.source, "name", None),
        "tool": remote.name,
        "description": description,
        "input_schema": schema,
    }
    description = description.strip()[:_MAX_DESCRIPTION] or entry.tool.description
    label = f"The input schema of tool {entry.name!r}"
    json_schema = descriptor(schema, label)
    try:
        validator = session.validator(remote.name)
    except (SchemaDefinitionError, TypeError, ValueError) as exc:
        raise AgentDefinitionError(f"{label} is not a usable JSON Schema: {exc}") from exc
    fields = {name: getattr(entry.tool, name) for name in Tool.__slots__}
    fields.update(description=description, input_schema=validator, input_json_schema=json_schema)
    live = CompiledTool(entry.name, Tool(**fields), entry.pipeline)
    capability = FrozenDict._trusted(
        {"name": entry.name, "description": description, "input_json_schema": json_schema}
    )
    return capability, live


@asynccontextmanager
async def connect_sources(
    registry: Mapping[str, CompiledTool],
    capabilities: tuple[FrozenDict, ...],
    ctx: StepContext,
) -> AsyncIterator[tuple[LiveTools | None, dict[str, Any]]]:
    """Connect the registry's sources for one invocation: its live tools and the slots to add.

    Yields ``(None, {})`` when nothing needs connecting (no sourced tool, or a dry run).
    """
    sources = sources_of(registry)
    if not sources or ctx.dry_run:
        yield None, {}
        return
    inherited: Mapping[Any, SourceSession] = ctx.slots.get(SOURCES_SLOT) or {}
    sessions = dict(inherited)
    async with AsyncExitStack() as stack:
        for source in sources:
            if source not in sessions:
                sessions[source] = await stack.enter_async_context(source.connect())
        shown = {c["name"]: c for c in capabilities}
        live_registry: dict[str, CompiledTool] = {}
        descriptors: dict[str, Mapping[str, Any]] = {}
        for name, entry in registry.items():
            remote: Remote | None = entry.tool.remote
            if remote is None:
                live_registry[name] = entry
                continue
            shown[name], live_registry[name] = _live_entry(
                entry, sessions[remote.source], descriptors
            )
        live = LiveTools(tuple(shown[name] for name in registry), live_registry, descriptors)
        yield live, {SOURCES_SLOT: sessions}
