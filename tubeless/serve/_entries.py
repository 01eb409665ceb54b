"""A project's entries as the API shows them, and agents rebuilt with a run's tighter limits.

A run may ask for limits below the file's (never above): the agent is compiled again from the
same checked document with those limits, so its definition identity names them and a resumed
run is rebuilt the same way (the run's limits are kept with it). A limit the file leaves unset
is bounded by the default the agent runs with.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tubeless.errors import AGENT_INVALID_DEFINITION, OPTIONS_VALIDATION_FAILED
from tubeless.frozen import thaw

if TYPE_CHECKING:
    from tubeless.pipeline import Pipeline
    from tubeless.project import Project

__all__ = ["Entries", "RequestError"]

#: Limits a run may set, with the agent descriptor's (camelCase) name.
_LIMIT_NAMES = {
    "max_turns": "maxTurns",
    "max_calls": "maxCalls",
    "max_decisions": "maxDecisions",
    "max_depth": "maxDepth",
    "max_concurrency": "maxConcurrency",
}


class RequestError(Exception):
    """A request the API refuses: an HTTP status, a product code and a message without values."""

    def __init__(self, status: int, code: str, message: str, **extra: Any) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.extra = extra


def _agent_of(entry: Pipeline) -> Mapping[str, Any] | None:
    steps = entry.steps
    if len(steps) == 1 and steps[0].agent is not None:
        return steps[0].agent
    return None


def _json_schema(schema: Any) -> Any:
    if schema is None:
        return None
    try:
        return thaw(schema.json_schema())
    except Exception:  # a type without a JSON Schema is described as "anything"
        return {}


class Entries:
    """The entries of one project, and variants of its agents with tighter limits."""

    def __init__(self, project: Project) -> None:
        from tubeless.project import check_project

        self.project = project
        # The document as it was when the project loaded: a variant compiled later is that
        # project with lower limits, whatever the file holds by then.
        self._checked = check_project(project.path)
        self._variants: dict[tuple[str, tuple[tuple[str, int], ...]], Pipeline] = {}
        self._lock = threading.Lock()

    def get(self, entry_id: str) -> Pipeline:
        entries = self.project.entries
        if entry_id not in entries:
            from tubeless.errors import SERVE_NOT_FOUND

            raise RequestError(404, SERVE_NOT_FOUND, f"no entry {entry_id!r} in this project")
        return entries[entry_id]

    def describe(self) -> list[dict[str, Any]]:
        """``GET /v1/entries``: ids, descriptions, schemas, limits and tools, in id order."""
        shown = []
        for entry_id, entry in sorted(self.project.entries.items()):
            agent = _agent_of(entry)
            result = _json_schema(entry.result_schema)
            if agent is not None and agent.get("resultJsonSchema") is not None:
                result = thaw(agent["resultJsonSchema"])
            item: dict[str, Any] = {
                "id": entry_id,
                "kind": "agent" if agent is not None else "pipeline",
                "name": entry.name,
                "description": entry.description,
                "input_schema": _json_schema(entry.options_schema),
                "result_schema": result,
                "limits": None,
                "tools": [],
            }
            if agent is not None:
                limits = thaw(agent.get("limits") or {})
                item["limits"] = {
                    snake: limits[camel] for snake, camel in _LIMIT_NAMES.items() if camel in limits
                }
                if "onLimit" in limits:
                    item["limits"]["on_limit"] = limits["onLimit"]
                item["tools"] = [
                    {
                        "name": c.get("name"),
                        "description": c.get("description"),
                        "input_schema": thaw(c.get("inputJsonSchema")),
                    }
                    for c in agent.get("capabilities") or ()
                ]
            shown.append(item)
        return shown

    def validate_input(self, entry: Pipeline, raw: Any) -> Any:
        """The validated input, or 422 ``TUBELESS_OPTIONS_VALIDATION_FAILED`` (no values)."""
        schema = entry.options_schema
        if schema is None:
            return raw
        try:
            return schema.validate(raw)
        except Exception as exc:
            issues = getattr(exc, "issues", ())
            where = "; ".join(i.format() for i in issues if hasattr(i, "format"))
            raise RequestError(
                422,
                OPTIONS_VALIDATION_FAILED,
                f"the input does not match {entry.id!r}'s input schema"
                + (f" ({where})" if where else ""),
            ) from None

    def check_limits(self, entry_id: str, limits: Any) -> dict[str, int] | None:
        """The run's limits when each tightens (or equals) the file's; else 422 naming it."""
        if limits is None or limits == {}:
            return None
        if not isinstance(limits, dict):
            raise RequestError(422, AGENT_INVALID_DEFINITION, "limits must be an object")
        agent = _agent_of(self.get(entry_id))
        if agent is None:
            raise RequestError(
                422, AGENT_INVALID_DEFINITION, f"{entry_id!r} is a pipeline: it takes no limits"
            )
        bounds = thaw(agent.get("limits") or {})
        checked: dict[str, int] = {}
        for name, value in sorted(limits.items()):
            if name not in _LIMIT_NAMES:
                raise RequestError(
                    422,
                    AGENT_INVALID_DEFINITION,
                    f"unknown limit {name!r}; a run may set {', '.join(sorted(_LIMIT_NAMES))}",
                )
            if type(value) is not int or value < (0 if name in ("max_calls", "max_depth") else 1):
                raise RequestError(
                    422, AGENT_INVALID_DEFINITION, f"limit {name} must be a non-negative integer"
                )
            bound = bounds.get(_LIMIT_NAMES[name])
            if isinstance(bound, int) and value > bound:
                raise RequestError(
                    422,
                    AGENT_INVALID_DEFINITION,
                    f"limit {name}={value} loosens the project's {name}={bound}; "
                    "a run may only tighten limits",
                    limit=name,
                )
            checked[name] = value
        return checked

    def for_run(self, entry_id: str, limits: Mapping[str, int] | None) -> Pipeline:
        """The entry to run: the project's, or its agent rebuilt with ``limits``."""
        if not limits:
            return self.get(entry_id)
        frozen = tuple(sorted(limits.items()))
        with self._lock:
            found = self._variants.get((entry_id, frozen))
            if found is None:
                found = self._compile(entry_id, dict(frozen))
                self._variants[(entry_id, frozen)] = found
        return found

    def _compile(self, entry_id: str, limits: dict[str, int]) -> Pipeline:
        from tubeless.project._spi import Compiler

        checked = self._checked
        spec = checked.spec
        agent = spec.agents[entry_id]
        merged = {**agent.limits.model_dump(), **limits}
        changed = agent.model_copy(update={"limits": agent.limits.model_copy(update=merged)})
        spec = spec.model_copy(update={"agents": {**spec.agents, entry_id: changed}})
        compiler = Compiler(spec, Path(checked.document.file).resolve().parent)
        built = compiler.build_all()
        if entry_id not in built:  # the file compiled once; a variant only lowers numbers
            raise RequestError(
                422, AGENT_INVALID_DEFINITION, f"cannot apply limits to {entry_id!r}"
            )
        return built[entry_id]
