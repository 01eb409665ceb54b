"""Definition identity: canonical-JSON SHA-256 fingerprints of what a pipeline is.

The structural fingerprint covers the graph (steps in execution order, their dependencies,
dry-run policies, skip predicates' presence), targets, required finalizer outputs, the
fingerprints of every schema, agent metadata and, for composed steps, the child's structural
identity. The definition id adds ``implementation_version`` and the full identities of children
and capabilities. Names, descriptions and handler code never enter either: bump
``implementation_version`` when behaviour changes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tubeless.frozen import fingerprint, thaw
from tubeless.pipeline._results import DefinitionIdentity
from tubeless.schema import Schema

if TYPE_CHECKING:
    from tubeless.pipeline._pipeline import Pipeline
    from tubeless.pipeline._step import Step

__all__ = ["compute_identity", "schema_fingerprint"]


def schema_fingerprint(schema: Schema) -> str:
    """The fingerprint of a schema's JSON Schema, or of its type name when it has none."""
    try:
        return schema.fingerprint
    except Exception:  # some pydantic types have no JSON Schema; describe them another way
        source = schema.source
        name = getattr(source, "__qualname__", None) or repr(source)
        shape: dict[str, Any] = {"type": f"{getattr(source, '__module__', '')}.{name}"}
        fields = getattr(source, "model_fields", None)
        if isinstance(fields, dict):
            shape["fields"] = {
                key: [repr(info.annotation), info.is_required()] for key, info in fields.items()
            }
        return fingerprint(shape)


def _structural(identity: DefinitionIdentity) -> dict[str, Any]:
    return {"version": identity.version, "structuralFingerprint": identity.structural_fingerprint}


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
    if s.output_schema is not None:
        snap["outputSchema"] = schema_fingerprint(s.output_schema)
    if s.agent is not None:
        snap["agent"] = thaw(s.agent)
    if s.nested is not None:
        nested: dict[str, Any] = {
            "mode": s.nested.mode,
            "pipelineId": s.nested.pipeline.id,
            "identity": _structural(s.nested.pipeline.identity),
        }
        if s.nested.concurrency is not None:
            nested["concurrency"] = s.nested.concurrency
        if s.nested.max_iterations is not None:
            nested["maxIterations"] = s.nested.max_iterations
        snap["nestedPipeline"] = nested
    if s.capabilities:
        snap["capabilities"] = [_structural(p.identity) for p in s.capabilities]
    return snap


def _version(pipeline: Pipeline) -> int:
    for s in pipeline.order:
        if s.agent is not None or (s.nested is not None and s.nested.mode == "iterate"):
            return 2
        if s.nested is not None and s.nested.pipeline.identity.version >= 2:
            return 2
        if any(p.identity.version >= 2 for p in s.capabilities):
            return 2
    return 1


def _child_entry(s: Step) -> Any:
    if s.nested is None and not s.capabilities:
        return None
    child = None if s.nested is None else s.nested.pipeline.identity.to_wire()
    if not s.capabilities:
        return child
    return {"child": child, "capabilities": [p.identity.to_wire() for p in s.capabilities]}


def compute_identity(pipeline: Pipeline) -> tuple[DefinitionIdentity, dict[str, Any]]:
    """The identity of ``pipeline`` and the snapshot it was computed from."""
    version = _version(pipeline)
    structure: dict[str, Any] = {
        "version": version,
        "steps": [_step_snapshot(s) for s in pipeline.order],
        "targetIds": sorted(pipeline.target_ids),
        "requiredFinalizerStepIds": sorted(pipeline.finalizer.required),
        "finalizer": pipeline.finalizer.kind,
        "optionsValidated": pipeline.options_schema is not None,
        "resultValidated": pipeline.result_schema is not None,
    }
    if pipeline.options_schema is not None:
        structure["optionsSchema"] = schema_fingerprint(pipeline.options_schema)
    if pipeline.result_schema is not None:
        structure["resultSchema"] = schema_fingerprint(pipeline.result_schema)
    structural = fingerprint(structure)
    definition_id = fingerprint(
        {
            "version": version,
            "structuralFingerprint": structural,
            "implementationVersion": pipeline.implementation_version,
            "children": [_child_entry(s) for s in pipeline.order],
        }
    )
    identity = DefinitionIdentity(
        version=version,
        structural_fingerprint=structural,
        definition_id=definition_id,
        implementation_version=pipeline.implementation_version,
    )
    snapshot = {"identity": identity.to_wire()}
    snapshot.update((k, v) for k, v in structure.items() if k != "version")
    return identity, snapshot
