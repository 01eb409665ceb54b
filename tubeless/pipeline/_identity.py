"""Definition identity: the original release's fingerprints of what a pipeline is (UPSTREAM §1.12).

A fingerprint is ``"sha256:" + hex(sha256(JSON.stringify(x)))`` of an object built in a fixed
key order; JSON descriptors are canonicalised (keys sorted) first. :func:`js_json` writes what
JavaScript's ``JSON.stringify`` writes, so a reader of the original release recomputes both
fingerprints from a traced definition snapshot and finds the same identity.

- The **structural fingerprint** hashes ``{version, metadata?, steps, targetIds,
  requiredFinalizerStepIds?, optionsValidated, resultValidated}``: the steps in execution order
  (sorted dependency lists, dry-run policy, whether a skip predicate and an output schema exist,
  agent metadata, the nested child), each rebuilt afresh in the original's key order, with child
  and capability identities reduced to ``{version, structuralFingerprint}``. The snapshot is the
  same structure in its own key order, with the pipeline's identity in place of ``version`` and
  the full child and capability identities.
- ``metadata`` holds what tubeless fingerprints beyond the original graph: the options, result
  and step output schemas' fingerprints, a finalizer other than the last step's output and an
  agent step's limit policy and tool approvals (the original's validators have no JSON form).
  It is written with its keys sorted, so whether a reader canonicalises it or not, it hashes the
  same; a definition with metadata has identity version 3 (the original's "graph metadata").
- The **definition id** hashes ``{version, structuralFingerprint, implementationVersion?,
  children}``: ``children`` has ``null`` per plain step, the child's full identity per composed
  step and ``{child, capabilities}`` per agent step, all of which the snapshot carries.

Names, descriptions and handler code never enter either: bump ``implementation_version`` when
behaviour changes.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final

from tubeless.frozen import thaw
from tubeless.pipeline._results import DefinitionIdentity
from tubeless.schema import Schema

if TYPE_CHECKING:
    from tubeless.pipeline._pipeline import Pipeline
    from tubeless.pipeline._step import Step

__all__ = ["compute_identity", "descriptor_fingerprint", "js_json", "schema_fingerprint"]

# JavaScript objects list "array index" keys ("0", "7", up to 2**32 - 2) first, ascending.
_INDEX_KEY: Final = re.compile(r"0|[1-9][0-9]{0,9}")
_MAX_INDEX: Final = 2**32 - 2
_SURROGATE: Final = re.compile("[\ud800-\udfff]")


# -- JSON.stringify ---------------------------------------------------------------------------
def js_json(value: Any) -> str:
    """``JSON.stringify(value)`` as JavaScript writes it.

    Keys keep their order, except that integer-like keys come first in ascending order (as in
    any JavaScript object); numbers use JavaScript's shortest form (``1.0`` is ``1``, ``1e-7``
    stays ``1e-7``); lone surrogates are escaped; non-finite numbers are ``null``.

    Raises:
        TypeError: For values JSON cannot represent.
    """
    out: list[str] = []
    _write(value, out)
    return "".join(out)


def _write(value: Any, out: list[str]) -> None:
    if value is None:
        out.append("null")
    elif value is True:
        out.append("true")
    elif value is False:
        out.append("false")
    elif isinstance(value, int):
        out.append(str(value))
    elif isinstance(value, float):
        out.append(_js_number(value))
    elif isinstance(value, str):
        out.append(_js_string(value))
    elif isinstance(value, Mapping):
        out.append("{")
        for i, key in enumerate(_js_keys(value)):
            if i:
                out.append(",")
            out.append(_js_string(key))
            out.append(":")
            _write(value[key], out)
        out.append("}")
    elif isinstance(value, (list, tuple)):
        out.append("[")
        for i, item in enumerate(value):
            if i:
                out.append(",")
            _write(item, out)
        out.append("]")
    else:
        raise TypeError(f"{type(value).__name__} is not JSON data")


def _js_keys(mapping: Mapping[Any, Any]) -> list[str]:
    for key in mapping:
        if not isinstance(key, str):
            raise TypeError(f"JSON object keys must be strings, got {type(key).__name__}")
    index = [k for k in mapping if _INDEX_KEY.fullmatch(k) and int(k) <= _MAX_INDEX]
    if not index:
        return list(mapping)
    rest = [k for k in mapping if not (_INDEX_KEY.fullmatch(k) and int(k) <= _MAX_INDEX)]
    return sorted(index, key=int) + rest


def _js_string(text: str) -> str:
    encoded = json.dumps(text, ensure_ascii=False)
    if _SURROGATE.search(text) is None:
        return encoded
    return _SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", encoded)


def _js_number(number: float) -> str:
    """JavaScript's ``Number.prototype.toString`` for a float."""
    if not math.isfinite(number):
        return "null"
    if number == 0:
        return "0"
    sign = "-" if number < 0 else ""
    # Imported here: only fingerprints of non-integral floats need it (decimal is ~1 % of
    # ``import tubeless``).
    from decimal import Decimal

    # repr gives the shortest digits that round-trip, as JavaScript does; only the layout differs.
    parts = Decimal(repr(abs(number))).as_tuple()
    digits = "".join(map(str, parts.digits)).rstrip("0") or "0"
    assert isinstance(parts.exponent, int)
    point = parts.exponent + len(parts.digits)  # value = 0.<digits> * 10**point
    k = len(digits)
    if k <= point <= 21:
        return sign + digits + "0" * (point - k)
    if 0 < point <= 21:
        return sign + digits[:point] + "." + digits[point:]
    if -6 < point <= 0:
        return sign + "0." + "0" * -point + digits
    exponent = point - 1
    mantissa = digits if k == 1 else digits[0] + "." + digits[1:]
    return f"{sign}{mantissa}e{'+' if exponent >= 0 else '-'}{abs(exponent)}"


def _fingerprint(value: Any) -> str:
    return "sha256:" + hashlib.sha256(js_json(value).encode("utf-8", "surrogatepass")).hexdigest()


def _utf16(key: str) -> bytes:
    return key.encode("utf-16-be", "surrogatepass")


def _canonical(value: Any) -> Any:
    """``value`` with every object's keys sorted as JavaScript sorts strings (UTF-16 units)."""
    if isinstance(value, Mapping):
        return {key: _canonical(value[key]) for key in sorted(value, key=_utf16)}
    if isinstance(value, (list, tuple)):
        return [_canonical(item) for item in value]
    return value


def descriptor_fingerprint(descriptor: Any) -> str:
    """The fingerprint of a JSON descriptor (a JSON Schema), canonicalised with sorted keys."""
    return _fingerprint(_canonical(descriptor))


def schema_fingerprint(schema: Schema) -> str:
    """The fingerprint of a schema's JSON Schema, or of its type name when it has none."""
    try:
        return descriptor_fingerprint(schema.json_schema())
    except Exception:  # some pydantic types have no JSON Schema; describe them another way
        source = schema.source
        name = getattr(source, "__qualname__", None) or repr(source)
        shape: dict[str, Any] = {"type": f"{getattr(source, '__module__', '')}.{name}"}
        fields = getattr(source, "model_fields", None)
        if isinstance(fields, dict):
            shape["fields"] = {
                key: [repr(info.annotation), info.is_required()] for key, info in fields.items()
            }
        return descriptor_fingerprint(shape)


# -- the snapshot and the identity ------------------------------------------------------------
def _reduced(identity: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "version": identity["version"],
        "structuralFingerprint": identity["structuralFingerprint"],
    }


def _full(identity: DefinitionIdentity) -> dict[str, Any]:
    """A child's full identity, keys in the order the definition id hashes them."""
    out: dict[str, Any] = {
        "version": identity.version,
        "structuralFingerprint": identity.structural_fingerprint,
    }
    if identity.implementation_version is not None:
        out["implementationVersion"] = identity.implementation_version
    out["definitionId"] = identity.definition_id
    return out


def _step_snapshot(s: Step) -> dict[str, Any]:
    snap: dict[str, Any] = {
        "id": s.id,
        "dependencies": sorted(s.depends_on),
        "optionalDependencies": sorted(s.optional_depends_on),
        "skipAfterFailureOf": sorted(s.skip_after_failure_of),
        "dryRun": "run" if s.dry_run is None else "skip" if s.dry_run == "skip" else "custom",
        "runtimeSkipPossible": s.skip is not None,
        "outputValidated": s.output_schema is not None,
    }
    if s.agent_snapshot is not None:
        snap["agent"] = thaw(s.agent_snapshot)
    if s.nested is not None:
        child = s.nested.pipeline
        nested: dict[str, Any] = {
            "mode": s.nested.mode,
            "pipelineId": child.id,
            "stepIds": list(child.step_ids),
            "identity": child.identity.to_wire(),
        }
        if s.nested.concurrency is not None:
            nested["concurrency"] = s.nested.concurrency
        if s.nested.max_iterations is not None:
            nested["maxIterations"] = s.nested.max_iterations
        snap["nestedPipeline"] = nested
    return snap


def _present(source: Mapping[str, Any], keys: tuple[str, ...]) -> dict[str, Any]:
    """A fresh object with those of ``keys`` that ``source`` has, in this order."""
    return {key: source[key] for key in keys if key in source}


_STEP_KEYS: Final = (
    "id",
    "metadata",
    "dependencies",
    "optionalDependencies",
    "skipAfterFailureOf",
    "dryRun",
    "runtimeSkipPossible",
    "outputValidated",
)


def _hashed_step(snap: Mapping[str, Any]) -> dict[str, Any]:
    """A snapshot step as the structural fingerprint hashes it.

    The original builds the entry afresh in its own key order (a composed step's
    ``pipelineId`` before ``mode``), not in the snapshot's, with identities reduced.
    """
    out = _present(snap, _STEP_KEYS)
    agent = snap.get("agent")
    if agent is not None:
        out["agent"] = {
            **agent,
            "capabilities": [
                {**c, "identity": _reduced(c["identity"])} if "identity" in c else c
                for c in agent["capabilities"]
            ],
        }
    nested = snap.get("nestedPipeline")
    if nested is not None:
        entry: dict[str, Any] = {"pipelineId": nested["pipelineId"], "mode": nested["mode"]}
        if nested["mode"] == "iterate":
            entry["maxIterations"] = nested["maxIterations"]
        entry["stepIds"] = nested["stepIds"]
        entry["identity"] = _reduced(nested["identity"])
        if "concurrency" in nested:
            entry["concurrency"] = nested["concurrency"]
        out["nestedPipeline"] = entry
    return out


def _version(pipeline: Pipeline, metadata: Mapping[str, Any]) -> int:
    """3 with metadata or a version-3 child; 2 with an agent, an iteration or a version-2
    child; 1 otherwise (UPSTREAM §1.12: earlier hashes stay reproducible)."""
    found = {3} if metadata else set()
    for s in pipeline.order:
        if s.agent is not None or s.agent_snapshot is not None:
            found.add(2)
        if s.nested is not None:
            found.add(2 if s.nested.mode == "iterate" else 1)
            found.add(s.nested.pipeline.identity.version)
        found.update(p.identity.version for p in s.capabilities)
    return max(found, default=1)


def _child_entry(s: Step) -> Any:
    child = None if s.nested is None else _full(s.nested.pipeline.identity)
    if s.agent_snapshot is None and not s.capabilities:
        return child
    return {"child": child, "capabilities": [_full(p.identity) for p in s.capabilities]}


def _metadata(pipeline: Pipeline) -> dict[str, Any]:
    """What the identity covers beyond the original graph, keys sorted at every level.

    The definition's ``metadata``, hashed into the structural fingerprint, which the original
    release's reader recomputes from the snapshot, so a schema change changes the identity and
    the reader still accepts the file.
    """
    out: dict[str, Any] = {}
    if pipeline.options_schema is not None:
        out["optionsSchemaFingerprint"] = schema_fingerprint(pipeline.options_schema)
    if pipeline.result_schema is not None:
        out["resultSchemaFingerprint"] = schema_fingerprint(pipeline.result_schema)
    outputs = {
        s.id: schema_fingerprint(s.output_schema)
        for s in pipeline.order
        if s.output_schema is not None
    }
    if outputs:
        out["outputSchemaFingerprints"] = outputs
    if pipeline.finalizer.kind != "last":
        out["finalizer"] = pipeline.finalizer.kind
    policies = {s.id: policy for s in pipeline.order if (policy := _agent_policy(s.agent))}
    if policies:
        out["agentPolicies"] = policies
    canonical: dict[str, Any] = _canonical(out)
    return canonical


_BUDGETS = ("maxInputTokens", "maxOutputTokens", "maxTotalTokens", "maxCostUsd")


def _agent_policy(agent: Mapping[str, Any] | None) -> dict[str, Any]:
    """An agent step's non-default limit policy, budgets and tool approvals, if any.

    The snapshot's ``agent`` entry keeps the original release's shape; they go to the
    definition's metadata instead.
    """
    if agent is None:
        return {}
    policy: dict[str, Any] = {}
    limits = agent.get("limits", {})
    on_limit = limits.get("onLimit")
    if on_limit is not None:
        policy["onLimit"] = on_limit
    for budget in _BUDGETS:  # token and cost budgets (round 3), only when set
        if budget in limits:
            policy[budget] = limits[budget]
    approvals = {
        str(c["name"]): c["approval"] for c in agent.get("capabilities", ()) if "approval" in c
    }
    if approvals:
        policy["approvals"] = approvals
    return policy


def compute_identity(pipeline: Pipeline) -> tuple[DefinitionIdentity, dict[str, Any]]:
    """The identity of ``pipeline`` and its definition snapshot (UPSTREAM §1.12 shape)."""
    metadata = _metadata(pipeline)
    version = _version(pipeline, metadata)
    body: dict[str, Any] = {"metadata": metadata} if metadata else {}
    body["steps"] = steps = [_step_snapshot(s) for s in pipeline.order]
    body["targetIds"] = sorted(pipeline.target_ids)
    required = sorted(pipeline.finalizer.required)
    if required:
        body["requiredFinalizerStepIds"] = required
    body["optionsValidated"] = pipeline.options_schema is not None
    body["resultValidated"] = pipeline.result_schema is not None
    structural = _fingerprint(
        {"version": version, **body, "steps": [_hashed_step(snap) for snap in steps]}
    )
    hashed: dict[str, Any] = {"version": version, "structuralFingerprint": structural}
    if pipeline.implementation_version is not None:
        hashed["implementationVersion"] = pipeline.implementation_version
    hashed["children"] = [_child_entry(s) for s in pipeline.order]
    identity = DefinitionIdentity(
        version=version,
        structural_fingerprint=structural,
        definition_id=_fingerprint(hashed),
        implementation_version=pipeline.implementation_version,
    )
    return identity, {"identity": identity.to_wire(), **body}
