"""What a checkpoint is compared with before an agent resumes from it (DESIGN.md §11).

A saved entry (well formed: the document's parser refused any other) must have been saved by
the same definition: the same ``implementation_version``, limits, tools (each tool's input
schema and pipeline), result schema, delegation depth and input, and, for tools a server
supplies (MCP), the same tools as that server described them (name, description, input
schema); otherwise
``TUBELESS_AGENT_CHECKPOINT_MISMATCH`` says what changed (part by part, ``_changes``, for an
entry saved with its parts) and how to start over (``--restart``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from tubeless.agent._changes import changed_parts, definition_parts, said
from tubeless.durable._spi import ABSENT, AgentEntry, json_form
from tubeless.errors import CHECKPOINT_MISMATCH, CheckpointError
from tubeless.frozen import digest
from tubeless.pipeline import Pipeline
from tubeless.pipeline._spi import descriptor_fingerprint

if TYPE_CHECKING:
    from tubeless.agent._turn_types import TurnSpec

__all__ = [
    "RESTART",
    "DurableAgent",
    "check_saved",
    "checked_servers",
    "input_digest",
    "server_tools",
    "servers_changed",
]


#: How a refused checkpoint ends: the way to start the key over, on the command line and in
#: Python.
RESTART = "start it over with --restart (restart=True in Python), or use another key"


class DurableAgent:
    """What a checkpoint of one agent definition is compared with (computed once)."""

    __slots__ = ("_definition", "_parts", "implementation_version", "pipeline", "spec")

    def __init__(self, spec: TurnSpec, implementation_version: str | None) -> None:
        self.spec = spec
        self.implementation_version = implementation_version
        self.pipeline: Pipeline | None = None
        """The agent's pipeline (set once ``define_agent`` built it)."""
        self._definition: dict[str, Any] | None = None
        self._parts: dict[str, Any] | None = None

    def definition(self) -> dict[str, Any]:
        if self._definition is None:
            assert self.pipeline is not None
            spec = self.spec
            self._definition = {
                "definitionId": self.pipeline.identity.definition_id,
                "implementationVersion": self.implementation_version,
                "limits": spec.limits.to_dict(),
                "tools": {
                    name: {
                        "input": descriptor_fingerprint(entry.tool.input_json_schema),
                        "definitionId": entry.pipeline.identity.definition_id,
                    }
                    for name, entry in spec.registry.items()
                },
                "result": descriptor_fingerprint(spec.result_json_schema),
                "parts": self.parts(),
            }
        return self._definition

    def parts(self) -> dict[str, Any]:
        """The definition's parts (``_changes``), which checkpoints and cassettes keep."""
        if self._parts is None:
            assert self.pipeline is not None
            self._parts = definition_parts(self.pipeline)
        return self._parts


def input_digest(value: Any) -> str | None:
    """The sha256 (hex) of an agent's validated input as UTF-8 canonical JSON (the form
    checkpoints have always held), when it has a JSON form."""
    try:
        return digest(json_form(value), ensure_ascii=False).removeprefix("sha256:")
    except Exception:
        return None


def _changed(saved: Mapping[str, Any], now: Mapping[str, Any]) -> str | None:
    """What differs between a saved definition and the current one, said for people: part by
    part when the entry kept its parts, else the first difference its identity shows."""
    first = _first_change(saved, now)
    if first is None:
        return None
    parts = saved.get("parts")
    if isinstance(parts, Mapping):
        changes = changed_parts(parts, now["parts"])
        if changes:
            return said(changes)
    return first


def _first_change(saved: Mapping[str, Any], now: Mapping[str, Any]) -> str | None:
    """The first difference a saved identity shows (entries saved without their parts)."""
    if saved.get("implementationVersion") != now["implementationVersion"]:
        return (
            f"implementation_version changed ({saved.get('implementationVersion')!r} -> "
            f"{now['implementationVersion']!r})"
        )
    saved_limits = saved.get("limits") or {}
    for name, value in now["limits"].items():
        if saved_limits.get(name) != value:
            return f"limits changed ({name} {saved_limits.get(name)!r} -> {value!r})"
    saved_tools = saved.get("tools") or {}
    added = sorted(set(now["tools"]) - set(saved_tools))
    removed = sorted(set(saved_tools) - set(now["tools"]))
    if added or removed:
        parts = [f"added {', '.join(map(repr, added))}"] if added else []
        parts += [f"removed {', '.join(map(repr, removed))}"] if removed else []
        return f"tools changed ({'; '.join(parts)})"
    for name, tool in now["tools"].items():
        before = saved_tools[name] or {}
        if before.get("input") != tool["input"]:
            return f"tool {name!r} changed its input schema"
        if before.get("definitionId") != tool["definitionId"]:
            return f"tool {name!r} changed (its output schema or its pipeline)"
    if saved.get("result") != now["result"]:
        return "the result schema changed"
    if saved.get("definitionId") != now["definitionId"]:
        return f"the definition changed ({saved.get('definitionId')} -> {now['definitionId']})"
    return None


def server_tools(descriptors: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """What a checkpoint records of the tools servers supply, as the servers described them
    (by registered name): the server, the tool's name there, digests of its description and
    input schema."""
    return {
        name: {
            "server": found.get("server"),
            "tool": found.get("tool"),
            # The text as UTF-8; a lone surrogate (JSON from a server may hold one) as its bytes.
            "description": hashlib.sha256(
                str(found.get("description")).encode("utf-8", "surrogatepass")
            ).hexdigest(),
            "input": descriptor_fingerprint(found.get("input_schema")),
        }
        for name, found in sorted(descriptors.items())
    }


def servers_changed(saved: Mapping[str, Any], now: Mapping[str, Any]) -> str | None:
    """What differs in the tools servers supply, as their servers described them."""
    for name in sorted(set(saved) | set(now)):
        before, after = saved.get(name), now.get(name)
        if not isinstance(before, Mapping) or not isinstance(after, Mapping):
            return f"the server tools changed ({name!r} is new or gone)"
        where = (
            f"MCP server {after.get('server')!r} changed tool {after.get('tool')!r} "
            f"(registered as {name!r})"
        )
        if before.get("tool") != after.get("tool") or before.get("server") != after.get("server"):
            return f"tool {name!r} now comes from another server tool"
        if before.get("description") != after.get("description"):
            return f"{where}: its description"
        if before.get("input") != after.get("input"):
            return f"{where}: its input schema"
    return None


def checked_servers(
    definition: Mapping[str, Any],
    descriptors: Mapping[str, Mapping[str, Any]],
    key: str,
    route: str,
    resumed: bool,
) -> dict[str, Any]:
    """``definition`` with the servers' tools recorded (a new entry), or as saved once the
    servers describe the same tools (a resumed one); ``TUBELESS_AGENT_CHECKPOINT_MISMATCH``
    names what changed otherwise."""
    now = server_tools(descriptors)
    if not resumed:
        return {**definition, "servers": now}
    saved = definition.get("servers")
    what = servers_changed(saved if isinstance(saved, Mapping) else {}, now)
    if what is not None:
        raise CheckpointError(
            CHECKPOINT_MISMATCH,
            f"Checkpoint {key!r} was saved by a different definition of agent {route!r}: "
            f"{what}; {RESTART}",
        )
    return dict(definition)


def check_saved(
    saved: AgentEntry,
    key: str,
    route: str,
    definition: Mapping[str, Any],
    digest: str | None,
    depth: int,
) -> AgentEntry:
    """The saved entry of ``route`` (well formed: ``_document_parse`` read it), once it was
    saved by this definition, at this depth, for this input."""
    what = _changed(saved.definition, definition)
    if what is None and saved.budget.depth != depth:
        what = f"its delegation depth changed ({saved.budget.depth} -> {depth})"
    if what is None and digest is not None and saved.input not in (None, ABSENT, digest):
        what = "the input changed"
    if what is not None:
        raise CheckpointError(
            CHECKPOINT_MISMATCH,
            f"Checkpoint {key!r} was saved by a different definition of agent {route!r}: "
            f"{what}; {RESTART}",
        )
    return saved
