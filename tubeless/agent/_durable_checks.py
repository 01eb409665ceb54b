"""What a checkpoint is compared with before an agent resumes from it (DESIGN.md §11).

A saved entry must be well formed and must have been saved by the same definition: the same
``implementation_version``, limits, tools (each tool's input schema and pipeline), result
schema, delegation depth and input; otherwise ``TUBELESS_AGENT_CHECKPOINT_MISMATCH`` says what
changed.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import pydantic_core

from tubeless.errors import CHECKPOINT_INVALID, CHECKPOINT_MISMATCH, CheckpointError
from tubeless.frozen import FreezeError, canonical_json, freeze
from tubeless.pipeline import Pipeline
from tubeless.pipeline._identity import descriptor_fingerprint

if TYPE_CHECKING:
    from tubeless.agent._turn import TurnSpec

__all__ = ["DurableAgent", "check_saved", "input_digest"]


class DurableAgent:
    """What a checkpoint of one agent definition is compared with (computed once)."""

    __slots__ = ("_definition", "implementation_version", "pipeline", "spec")

    def __init__(self, spec: TurnSpec, implementation_version: str | None) -> None:
        self.spec = spec
        self.implementation_version = implementation_version
        self.pipeline: Pipeline | None = None
        """The agent's pipeline (set once ``define_agent`` built it)."""
        self._definition: dict[str, Any] | None = None

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
            }
        return self._definition


def input_digest(value: Any) -> str | None:
    """The sha256 of an agent's validated input, when it has a JSON form."""
    try:
        text = canonical_json(freeze(value))
    except (FreezeError, TypeError, ValueError):
        try:
            text = canonical_json(freeze(pydantic_core.to_jsonable_python(value)))
        except Exception:
            return None
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _changed(saved: Mapping[str, Any], now: Mapping[str, Any]) -> str | None:
    """What differs between a saved definition and the current one, said for people."""
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


def check_saved(
    saved: Any,
    key: str,
    route: str,
    definition: Mapping[str, Any],
    digest: str | None,
    depth: int,
) -> dict[str, Any]:
    """The saved entry of ``route``, once it is well formed and matches this definition."""
    try:
        phase = saved["phase"]
        budget = saved["budget"]
        checks = [
            phase in ("decide", "calls", "completed", "failed"),
            isinstance(saved["definition"], dict),
            type(budget["calls"]) is int and type(budget["decisions"]) is int,
            type(saved["turn"]) is int and type(saved["calls"]) is int,
            type(saved["state_version"]) is int,
        ]
        if phase == "calls":
            checks.append(isinstance(saved["decision"]["admitted"], bool))
            for call in saved["decision"]["calls"]:
                checks.append(call["status"] in ("pending", "running", "completed"))
                checks.append(isinstance(call["id"], str) and isinstance(call["tool"], str))
                checks.append(call["status"] != "completed" or isinstance(call["outcome"], dict))
        if phase == "failed":
            checks.append(isinstance(saved["failure"]["code"], str))
        well_formed = all(checks)
    except (KeyError, TypeError, IndexError):
        well_formed = False
    if not well_formed:
        raise CheckpointError(
            CHECKPOINT_INVALID, f"checkpoint {key!r}: the entry of agent {route!r} is malformed"
        )
    what = _changed(saved["definition"], definition)
    if what is None and budget.get("depth") != depth:
        what = f"its delegation depth changed ({budget.get('depth')} -> {depth})"
    if what is None and digest is not None and saved.get("input") not in (None, digest):
        what = "the input changed"
    if what is not None:
        raise CheckpointError(
            CHECKPOINT_MISMATCH,
            f"Checkpoint {key!r} was saved by a different definition of agent {route!r}: "
            f"{what}; restart the key to start over, or use another key",
        )
    return saved  # type: ignore[no-any-return]  # checked above
