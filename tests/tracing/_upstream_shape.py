"""An independent check that trace records have the original release's shape (UPSTREAM §1.12, §2).

Written from the digest, not from our writer: every record kind's top-level fields and payload
(§2.2, §2.3), the error object with its decoder limits, the fan-out diagnostics (§1.9), and the
definition snapshot (§1.12) with keys exactly as listed, in that order, and both fingerprints
recomputed from the snapshot as the original's reader recomputes them (``"sha256:" +
hex(sha256(JSON.stringify(x)))``):

- the structural fingerprint over ``{version, metadata?, steps, targetIds,
  requiredFinalizerStepIds?, optionsValidated, resultValidated}``, each step rebuilt afresh in
  the original's key order (a composed step's entry ``{pipelineId, mode, maxIterations?,
  controls?, stepIds, identity, concurrency?}``, not the snapshot's ``mode``-first order) with
  nested child and capability identities reduced to ``{version, structuralFingerprint}``;
- the definition id over ``{version, structuralFingerprint, implementationVersion?, children}``,
  ``children`` derived from the snapshot: ``null`` per plain step, the child's full identity per
  composed step, ``{child, capabilities}`` per agent step.

``problems(record)`` returns what is wrong, one sentence each (empty when the record is fine).
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Callable, Mapping
from typing import Any

FINGERPRINT = re.compile(r"^sha256:[a-f0-9]{64}$")

ENVELOPE = (
    "version",
    "name",
    "runId",
    "pipelineId",
    "timestampMs",
    "parentRunId",
    "correlationId",
    "itemKey",
    "iteration",
)
STEP_TERMINAL = (("stepId",), ("attemptId", "durationMs"))
#: Record name -> (required record-specific fields, optional ones).
RECORD_FIELDS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "pipeline.started": ((), ()),
    "step.planned": (("stepId",), ()),
    "step.running": (("stepId", "attemptId"), ()),
    "step.attempted": STEP_TERMINAL,
    "step.complete": STEP_TERMINAL,
    "step.skipped": STEP_TERMINAL,
    "step.failed": (("stepId", "error"), ("attemptId", "durationMs")),
    "step.cancelled": (("stepId", "error"), ("attemptId", "durationMs")),
    "pipeline.log": ((), ("stepId", "attemptId")),
    "pipeline.finalize.started": ((), ()),
    "pipeline.finalize.completed": (("durationMs",), ()),
    "pipeline.finalize.failed": (("durationMs", "error"), ()),
    "pipeline.completed": ((), ("durationMs", "error")),
}
SNAPSHOT_KEYS = (
    "identity",
    "metadata",
    "steps",
    "targetIds",
    "requiredFinalizerStepIds",
    "optionsValidated",
    "resultValidated",
)
SNAPSHOT_REQUIRED = ("identity", "steps", "targetIds", "optionsValidated", "resultValidated")
STEP_KEYS = (
    "id",
    "metadata",
    "dependencies",
    "optionalDependencies",
    "skipAfterFailureOf",
    "dryRun",
    "runtimeSkipPossible",
    "outputValidated",
    "cache",
    "agent",
    "nestedPipeline",
    "remote",
)
STEP_REQUIRED = (
    "id",
    "dependencies",
    "optionalDependencies",
    "skipAfterFailureOf",
    "dryRun",
    "runtimeSkipPossible",
    "outputValidated",
)
NESTED_KEYS = (
    "mode",
    "pipelineId",
    "stepIds",
    "identity",
    "concurrency",
    "maxIterations",
    "controls",
)
AGENT_KEYS = ("limits", "capabilities", "resultSchemaFingerprint")
CAPABILITY_KEYS = ("name", "description", "inputSchemaFingerprint", "identity")
LIMIT_KEYS = ("maxTurns", "maxCalls", "maxDecisions", "maxDepth", "maxConcurrency")
SKIP_REASONS = (
    "dry-run",
    "failed-dependency",
    "fail-fast",
    "filtered",
    "policy",
    "unmet-dependency",
)
SELECTION_KINDS = (
    "all",
    "exact",
    "not-selected",
    "target",
    "required-dependency",
    "failure-gate",
    "optional-only",
    "outside-target-closure",
)
ERROR_KINDS = (
    "cancellation",
    "child",
    "definition",
    "finalization",
    "selection",
    "step",
    "validation",
)
ERROR_PHASES = ("definition", "planning", "execution", "finalization")

Found = list[str]


def js_stringify(value: Any) -> str:
    """``JSON.stringify`` of data holding no floats and no integer-like keys (checked first)."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def original_fingerprint(value: Any) -> str:
    return "sha256:" + hashlib.sha256(js_stringify(value).encode("utf-8")).hexdigest()


def _reduced(identity: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "version": identity["version"],
        "structuralFingerprint": identity["structuralFingerprint"],
    }


def _full(identity: Mapping[str, Any]) -> dict[str, Any]:
    """A child's full identity as the definition id hashes it (UPSTREAM §1.12 key order)."""
    out = _reduced(identity)
    if "implementationVersion" in identity:
        out["implementationVersion"] = identity["implementationVersion"]
    out["definitionId"] = identity["definitionId"]
    return out


def _present(source: Mapping[str, Any], keys: tuple[str, ...]) -> dict[str, Any]:
    """A fresh object with ``keys`` in this order, those ``source`` has (JS drops undefined)."""
    return {key: source[key] for key in keys if key in source}


def _hashed_controls(controls: Mapping[str, Any]) -> dict[str, Any]:
    out = _present(controls, ("cache", "dryRun", "continueOnError", "maxConcurrency"))
    for key in ("targets", "stepIds"):
        if key in controls:
            out[key] = sorted(controls[key])
    return out


def _hashed_nested(nested: Mapping[str, Any]) -> dict[str, Any]:
    """``{pipelineId, mode, maxIterations (iterate), controls? (iterate), stepIds, identity?,
    concurrency?}``, built afresh: not the snapshot's own order (``mode`` first)."""
    out: dict[str, Any] = {"pipelineId": nested["pipelineId"], "mode": nested["mode"]}
    if nested["mode"] == "iterate":
        out["maxIterations"] = nested.get("maxIterations")  # the shape check requires it
        if "controls" in nested:
            out["controls"] = _hashed_controls(nested["controls"])
    out["stepIds"] = nested["stepIds"]
    if "identity" in nested:
        out["identity"] = _reduced(nested["identity"])
    if "concurrency" in nested:
        out["concurrency"] = nested["concurrency"]
    return out


def _hashed_step(entry: Mapping[str, Any]) -> dict[str, Any]:
    out = _present(
        entry,
        (
            "id",
            "metadata",
            "dependencies",
            "optionalDependencies",
            "skipAfterFailureOf",
            "dryRun",
            "runtimeSkipPossible",
            "outputValidated",
        ),
    )
    if "cache" in entry:
        out["cache"] = _present(entry["cache"], ("policy", "maxAgeMs"))
    if "agent" in entry:
        agent = dict(entry["agent"])
        agent["capabilities"] = [
            {**c, "identity": _reduced(c["identity"])} for c in agent["capabilities"]
        ]
        out["agent"] = agent
    if "nestedPipeline" in entry:
        out["nestedPipeline"] = _hashed_nested(entry["nestedPipeline"])
    if "remote" in entry:
        out["remote"] = _present(entry["remote"], ("engine", "target"))
    return out


def hashed_structure(snapshot: Mapping[str, Any]) -> dict[str, Any]:
    """What the original hashes into ``structuralFingerprint``, rebuilt from a snapshot."""
    out: dict[str, Any] = {"version": snapshot["identity"]["version"]}
    for key in SNAPSHOT_KEYS[1:]:
        if key == "steps":
            out["steps"] = [_hashed_step(entry) for entry in snapshot["steps"]]
        elif key in snapshot:
            out[key] = snapshot[key]
    return out


def _child(entry: Mapping[str, Any]) -> Any:
    nested = entry.get("nestedPipeline")
    child = _full(nested["identity"]) if nested and "identity" in nested else None
    if "agent" not in entry:
        return child
    return {
        "child": child,
        "capabilities": [_full(c["identity"]) for c in entry["agent"]["capabilities"]],
    }


def hashed_definition(snapshot: Mapping[str, Any]) -> dict[str, Any]:
    """What the original hashes into ``definitionId``: ``{version, structuralFingerprint,
    implementationVersion?, children}`` (no cache versions: nothing here caches)."""
    identity = snapshot["identity"]
    out = _present(identity, ("version", "structuralFingerprint", "implementationVersion"))
    out["children"] = [_child(entry) for entry in snapshot["steps"]]
    return out


def expected_version(snapshot: Mapping[str, Any]) -> int:
    """3 with metadata or a version-3 child; 2 with an agent, an iteration or a version-2
    child; otherwise 1."""
    children: list[int] = []
    metadata = "metadata" in snapshot
    special = False
    for entry in snapshot["steps"]:
        metadata = metadata or "metadata" in entry
        nested = entry.get("nestedPipeline")
        if nested is not None:
            special = special or nested["mode"] == "iterate"
            children.append(nested["identity"]["version"])
        if "agent" in entry:
            special = True
            children.extend(c["identity"]["version"] for c in entry["agent"]["capabilities"])
    if metadata or 3 in children:
        return 3
    return 2 if special or 2 in children else 1


def _utf16(key: str) -> bytes:
    return key.encode("utf-16-be", "surrogatepass")


def _canonical(value: Any) -> bool:
    """Whether every object in ``value`` lists its keys sorted, as JavaScript sorts strings."""
    if isinstance(value, dict):
        return list(value) == sorted(value, key=_utf16) and all(map(_canonical, value.values()))
    if isinstance(value, list):
        return all(map(_canonical, value))
    return True


# -- small checks -----------------------------------------------------------------------------
def _object(
    value: Any,
    where: str,
    found: Found,
    required: tuple[str, ...],
    allowed: tuple[str, ...],
    *,
    ordered: bool = False,
) -> bool:
    if not isinstance(value, dict):
        found.append(f"{where}: expected an object")
        return False
    found.extend(f"{where}: {key!r} is missing" for key in required if key not in value)
    found.extend(f"{where}: unexpected key {key!r}" for key in value if key not in allowed)
    if ordered and [k for k in value if k in allowed] != [k for k in allowed if k in value]:
        found.append(f"{where}: keys out of the listed order: {list(value)}")
    return all(key in value for key in required)


def _check(ok: bool, where: str, what: str, found: Found) -> None:
    if not ok:
        found.append(f"{where}: {what}")


def _is_int(value: Any, minimum: int = 0) -> bool:
    return type(value) is int and value >= minimum


def _strings(value: Any, limit: int = 128) -> bool:
    return (
        isinstance(value, list) and len(value) <= limit and all(isinstance(v, str) for v in value)
    )


def _is_identity(value: Any, where: str, found: Found) -> None:
    if _object(
        value,
        where,
        found,
        ("version", "structuralFingerprint", "definitionId"),
        ("version", "structuralFingerprint", "definitionId", "implementationVersion"),
    ):
        _check(value["version"] in (1, 2, 3), where, "version must be 1, 2 or 3", found)
        for key in ("structuralFingerprint", "definitionId"):
            _check(
                isinstance(value.get(key), str) and bool(FINGERPRINT.match(value[key])),
                where,
                f"{key} is no sha256 fingerprint",
                found,
            )


def _no_floats_or_index_keys(value: Any, where: str, found: Found) -> None:
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, float):
            found.append(f"{where}: holds a float (JSON.stringify would print it differently)")
        elif isinstance(item, dict):
            found.extend(f"{where}: integer-like key {k!r}" for k in item if k.isdigit())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)


# -- errors -----------------------------------------------------------------------------------
def _cause(value: Any, where: str, found: Found, *, depth_limit: int, string_limit: int) -> None:
    depth = 0
    while value is not None:
        depth += 1
        if not _object(
            value, where, found, ("message", "name"), ("message", "name", "sourceCode", "cause")
        ):
            return
        _check(
            isinstance(value["message"], str) and len(value["message"]) <= string_limit,
            where,
            "cause message must be a bounded string",
            found,
        )
        value = value.get("cause")
    _check(depth <= depth_limit, where, f"cause chain deeper than {depth_limit}", found)


def _fan_out(value: Any, where: str, found: Found) -> None:
    if not _object(
        value,
        where,
        found,
        ("failures", "failureCount", "omittedFailureCount"),
        ("failures", "failureCount", "omittedFailureCount", "schedulerError"),
    ):
        return
    failures = value["failures"]
    if not isinstance(failures, list) or len(failures) > 32:
        found.append(f"{where}: failures must be a list of at most 32")
        return
    for i, failure in enumerate(failures):
        at = f"{where}.failures[{i}]"
        if _object(
            failure,
            at,
            found,
            ("index", "key", "keyTruncated", "cancelled"),
            ("index", "key", "keyTruncated", "cancelled", "error"),
        ):
            _check(_is_int(failure["index"]), at, "index must be an integer >= 0", found)
            _check(
                isinstance(failure["key"], str) and len(failure["key"]) <= 1024,
                at,
                "key must be a string of at most 1024 characters",
                found,
            )
            for flag in ("keyTruncated", "cancelled"):
                _check(isinstance(failure[flag], bool), at, f"{flag} must be a boolean", found)
            if "error" in failure:
                _cause(failure["error"], at + ".error", found, depth_limit=8, string_limit=1024)
    count, omitted = value["failureCount"], value["omittedFailureCount"]
    _check(
        _is_int(count) and _is_int(omitted) and omitted == count - len(failures),
        where,
        "omittedFailureCount must be failureCount - len(failures)",
        found,
    )


def _error(value: Any, where: str, found: Found) -> None:
    keys = ("code", "kind", "phase", "message", "stack", "sourceCode", "cause", "issues", "fanOut")
    if not _object(value, where, found, keys[:4], keys):
        return
    _check(value["kind"] in ERROR_KINDS, where, "unknown error kind", found)
    _check(value["phase"] in ERROR_PHASES, where, "unknown error phase", found)
    _check(
        isinstance(value["message"], str) and len(value["message"]) <= 4096,
        where,
        "message must be a string of at most 4096 characters",
        found,
    )
    if "cause" in value:
        _cause(value["cause"], where + ".cause", found, depth_limit=15, string_limit=4096)
    issues = value.get("issues", [])
    _check(isinstance(issues, list) and len(issues) <= 128, where, "issues: at most 128", found)
    for issue in issues if isinstance(issues, list) else ():
        if _object(issue, where + ".issues[]", found, ("message",), ("message", "path")):
            path = issue.get("path", [])
            _check(
                isinstance(path, list)
                and all(
                    isinstance(p, str) or (type(p) in (int, float) and math.isfinite(p))
                    for p in path
                ),
                where,
                "issue paths hold strings and finite numbers",
                found,
            )
    if "fanOut" in value:
        _fan_out(value["fanOut"], where + ".fanOut", found)


# -- the definition snapshot ------------------------------------------------------------------
def _snapshot_step(entry: Any, where: str, found: Found) -> None:
    if not _object(entry, where, found, STEP_REQUIRED, STEP_KEYS, ordered=True):
        return
    for key in ("dependencies", "optionalDependencies", "skipAfterFailureOf"):
        _check(
            _strings(entry[key], limit=10**6) and entry[key] == sorted(entry[key]),
            where,
            f"{key} must be a sorted list of step ids",
            found,
        )
    _check(entry["dryRun"] in ("run", "skip", "custom"), where, "dryRun", found)
    nested = entry.get("nestedPipeline")
    if nested is not None and _object(
        nested,
        where + ".nestedPipeline",
        found,
        ("mode", "pipelineId", "stepIds", "identity"),
        NESTED_KEYS,
        ordered=True,
    ):
        _check(nested["mode"] in ("single", "for-each", "iterate"), where, "mode", found)
        _check(_strings(nested["stepIds"], limit=10**6), where, "stepIds", found)
        _is_identity(nested.get("identity"), where + ".nestedPipeline.identity", found)
        _check(
            ("maxIterations" in nested) == (nested["mode"] == "iterate"),
            where,
            "maxIterations exactly for iterate",
            found,
        )
    agent = entry.get("agent")
    if agent is not None and _object(
        agent, where + ".agent", found, AGENT_KEYS, AGENT_KEYS, ordered=True
    ):
        limits = agent["limits"]
        if _object(limits, where + ".agent.limits", found, LIMIT_KEYS, LIMIT_KEYS):
            _check(all(_is_int(limits[k]) for k in LIMIT_KEYS), where, "integer limits", found)
        _check(
            bool(FINGERPRINT.match(str(agent["resultSchemaFingerprint"]))),
            where,
            "resultSchemaFingerprint",
            found,
        )
        for i, cap in enumerate(agent["capabilities"]):
            at = f"{where}.agent.capabilities[{i}]"
            if _object(cap, at, found, CAPABILITY_KEYS, CAPABILITY_KEYS, ordered=True):
                _check(
                    bool(FINGERPRINT.match(str(cap["inputSchemaFingerprint"]))),
                    at,
                    "inputSchemaFingerprint",
                    found,
                )
                _is_identity(cap["identity"], at + ".identity", found)


def snapshot_problems(snapshot: Any, identity: Any, where: str = "definitionSnapshot") -> Found:
    found: Found = []
    if not _object(snapshot, where, found, SNAPSHOT_REQUIRED, SNAPSHOT_KEYS, ordered=True):
        return found
    _check(snapshot["identity"] == identity, where, "carries another identity", found)
    _is_identity(snapshot["identity"], where + ".identity", found)
    _check(isinstance(snapshot["steps"], list), where, "steps must be a list", found)
    for i, entry in enumerate(snapshot["steps"] if isinstance(snapshot["steps"], list) else ()):
        _snapshot_step(entry, f"{where}.steps[{i}]", found)
    for key in ("targetIds", "requiredFinalizerStepIds"):
        if key in snapshot:
            _check(
                _strings(snapshot[key], limit=10**6) and snapshot[key] == sorted(snapshot[key]),
                where,
                f"{key} must be a sorted list",
                found,
            )
    _check(
        snapshot.get("requiredFinalizerStepIds") != [],
        where,
        "requiredFinalizerStepIds is written although empty",
        found,
    )
    if "metadata" in snapshot:
        _check(
            isinstance(snapshot["metadata"], dict) and _canonical(snapshot["metadata"]),
            where,
            "metadata must be an object with its keys sorted at every level",
            found,
        )
    _no_floats_or_index_keys(snapshot, where, found)
    if found:
        return found
    version = expected_version(snapshot)
    _check(
        snapshot["identity"]["version"] == version,
        where,
        f"identity version must be {version}",
        found,
    )
    structural = original_fingerprint(hashed_structure(snapshot))
    _check(
        structural == snapshot["identity"]["structuralFingerprint"],
        where,
        f"structural fingerprint does not match (recomputed {structural})",
        found,
    )
    definition = original_fingerprint(hashed_definition(snapshot))
    _check(
        definition == snapshot["identity"]["definitionId"],
        where,
        f"definition ID does not match (recomputed {definition})",
        found,
    )
    return found


# -- payloads ---------------------------------------------------------------------------------
def _started(p: dict[str, Any], found: Found) -> None:
    keys = (
        "dryRun",
        "planOk",
        "stepCount",
        "targetIds",
        "definitionIdentity",
        "definitionSnapshot",
    )
    if not _object(p, "payload", found, keys[:4], keys):
        return
    _check(_strings(p["targetIds"]), "payload", "targetIds", found)
    if "definitionIdentity" in p:
        _is_identity(p["definitionIdentity"], "payload.definitionIdentity", found)
    if "definitionSnapshot" in p:
        found.extend(snapshot_problems(p["definitionSnapshot"], p.get("definitionIdentity")))
        size = len(js_stringify(p["definitionSnapshot"]).encode("utf-8"))
        _check(size <= 256 * 1024, "payload", "definition snapshot over 256 KiB", found)


def _planned(p: dict[str, Any], found: Found) -> None:
    keys = (
        "dependencies",
        "optionalDependencies",
        "skipAfterFailureOf",
        "dryRun",
        "runtimeSkipPossible",
        "selected",
        "selectionReasons",
        "name",
        "description",
        "nestedPipeline",
        "remote",
    )
    if not _object(p, "payload", found, keys[:7], keys):
        return
    for key in keys[:3]:
        _check(_strings(p[key]), "payload", f"{key} must be a list of strings", found)
    reasons = p["selectionReasons"]
    _check(
        isinstance(reasons, list)
        and len(reasons) <= 128
        and all(isinstance(r, dict) and r.get("kind") in SELECTION_KINDS for r in reasons),
        "payload",
        "selectionReasons",
        found,
    )
    nested = p.get("nestedPipeline")
    nested_keys = ("mode", "pipelineId", "stepCount", "stepIds", "maxIterations")
    if nested is not None and _object(
        nested, "payload.nestedPipeline", found, nested_keys[:4], nested_keys
    ):
        _check(
            _strings(nested["stepIds"]) and _is_int(nested["stepCount"]),
            "payload",
            "nestedPipeline stepIds/stepCount",
            found,
        )
        _check(
            ("maxIterations" in nested) == (nested["mode"] == "iterate"),
            "payload",
            "maxIterations exactly for iterate",
            found,
        )


def _running(p: dict[str, Any], found: Found) -> None:
    if not _object(p, "payload", found, (), ("progress",)) or "progress" not in p:
        return
    keys = ("completed", "total", "message", "details", "detailCount")
    progress = p["progress"]
    if _object(progress, "payload.progress", found, ("completed",), keys) and (
        "details" in progress
    ):
        details = progress["details"]
        _check(
            isinstance(details, list) and len(details) <= 128,
            "payload.progress",
            "details: a list of at most 128 rows",
            found,
        )
        _check(
            progress.get("detailCount", len(details)) >= len(details),
            "payload.progress",
            "detailCount below the number of rows",
            found,
        )


def _attempted(p: dict[str, Any], found: Found) -> None:
    if _object(p, "payload", found, ("attempt", "attributes"), ("attempt", "attributes")):
        attributes = p["attributes"]
        _check(
            isinstance(attributes, dict)
            and all(
                isinstance(v, (bool, str)) or (type(v) in (int, float) and math.isfinite(v))
                for v in attributes.values()
            ),
            "payload",
            "attributes",
            found,
        )


def _status(expected: str, *extra: str) -> Callable[[dict[str, Any], Found], None]:
    def check(p: dict[str, Any], found: Found) -> None:
        if _object(p, "payload", found, ("status",), ("status", *extra)):
            _check(p["status"] == expected, "payload", f"status must be {expected!r}", found)
            if "reason" in extra:
                _check(p.get("reason") in SKIP_REASONS, "payload", "skip reason", found)

    return check


def _log(p: dict[str, Any], found: Found) -> None:
    if _object(p, "payload", found, ("level", "message"), ("level", "message")):
        _check(p["level"] in ("log", "warn", "error"), "payload", "level", found)


def _empty(p: dict[str, Any], found: Found) -> None:
    _object(p, "payload", found, (), ())


def _completed(p: dict[str, Any], found: Found) -> None:
    keys = ("status", "dryRun", "errorCount", "finalized", "stepCount")
    if _object(p, "payload", found, keys, keys):
        _check(
            p["status"] in ("completed", "failed", "cancelled"),
            "payload",
            "status must be terminal",
            found,
        )


PAYLOADS: dict[str, Callable[[dict[str, Any], Found], None]] = {
    "pipeline.started": _started,
    "step.planned": _planned,
    "step.running": _running,
    "step.attempted": _attempted,
    "step.complete": _status("completed"),
    "step.skipped": _status("skipped", "reason", "message", "dependencyId"),
    "step.failed": _status("failed"),
    "step.cancelled": _status("cancelled"),
    "pipeline.log": _log,
    "pipeline.finalize.started": _empty,
    "pipeline.finalize.completed": _empty,
    "pipeline.finalize.failed": _empty,
    "pipeline.completed": _completed,
}


def problems(record: Any) -> Found:
    """What keeps the original release's reader from accepting ``record`` (empty: nothing)."""
    found: Found = []
    name = record.get("name") if isinstance(record, dict) else None
    if name not in RECORD_FIELDS:
        return [f"unknown record name {name!r}"]
    required, optional = RECORD_FIELDS[name]
    allowed = (*ENVELOPE, *required, *optional, "payload")
    if not _object(
        record,
        name,
        found,
        ("version", "name", "runId", "pipelineId", "timestampMs", "payload", *required),
        allowed,
    ):
        return found
    _check(record["version"] == 3, name, "version must be 3", found)
    for key in (
        "runId",
        "pipelineId",
        "parentRunId",
        "correlationId",
        "itemKey",
        "stepId",
        "attemptId",
    ):
        if key in record:
            _check(isinstance(record[key], str) and record[key] != "", name, key, found)
    _check(_is_int(record["timestampMs"]), name, "timestampMs must be an integer", found)
    if "durationMs" in record:
        duration = record["durationMs"]
        _check(type(duration) in (int, float) and duration >= 0, name, "durationMs", found)
    iteration = record.get("iteration")
    if iteration is not None and _object(
        iteration,
        "iteration",
        found,
        ("runId", "stepId", "attemptId", "index"),
        ("runId", "stepId", "attemptId", "index"),
    ):
        _check(
            iteration["runId"] == record.get("parentRunId"),
            name,
            "iteration.runId must equal parentRunId",
            found,
        )
        _check(_is_int(iteration["index"], 1), name, "iteration.index must be >= 1", found)
    if "error" in record:
        _error(record["error"], "error", found)
    PAYLOADS[name](record["payload"], found)
    return [f"{name}: {problem}" for problem in found]


# -- regenerating the golden fixtures ---------------------------------------------------------
def refingerprint(records: list[dict[str, Any]]) -> int:
    """Recompute, in place, the identity of every record carrying a definition snapshot (and
    of the records naming the same identity), by the algorithm above; how many changed."""
    changed = 0
    for record in records:
        snapshot = record["payload"].get("definitionSnapshot")
        if snapshot is None:
            continue
        old = dict(snapshot["identity"])
        new = dict(old)
        new["structuralFingerprint"] = original_fingerprint(hashed_structure(snapshot))
        new["definitionId"] = original_fingerprint(hashed_definition({**snapshot, "identity": new}))
        if new == old:
            continue
        for other in records:
            payload = other["payload"]
            if payload.get("definitionIdentity") == old:
                payload["definitionIdentity"] = dict(new)
                changed += 1
            if payload.get("definitionSnapshot", {}).get("identity") == old:
                payload["definitionSnapshot"]["identity"] = dict(new)
    return changed


if __name__ == "__main__":  # python -m tests.tracing._upstream_shape FIXTURE.ndjson...
    import sys
    from pathlib import Path

    for name in sys.argv[1:]:
        path = Path(name)
        lines = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
        count = refingerprint(lines)
        path.write_text("".join(js_stringify(r) + "\n" for r in lines), encoding="utf-8")
        print(f"{path}: {count} identities recomputed")
