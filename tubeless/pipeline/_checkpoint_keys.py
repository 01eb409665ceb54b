"""The default checkpoint key of a run: its validated input's, and the key round 2 gave it.

``run(checkpoints=...)`` without a key validates the input first (the run then takes it as
validated, so it is validated once) and names the task by the validated value (DESIGN.md §11);
the CLI does the same to print the key before the run starts, and a batch for each row.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tubeless.durable._spi import default_key, legacy_key, validated_key
from tubeless.pipeline._run_state import UNVALIDATED

if TYPE_CHECKING:
    from tubeless.pipeline._pipeline import Pipeline

__all__ = ["checkpoint_keys", "validated_or_unvalidated"]


def validated_or_unvalidated(pipeline: Pipeline, raw_input: Any) -> Any:
    """``raw_input`` validated by the pipeline's options schema, or ``UNVALIDATED`` when the
    schema refuses it (the run then reports the refusal as it always does)."""
    schema = pipeline.options_schema
    if schema is None:
        return raw_input
    try:
        return schema.validate(raw_input)
    except Exception:
        return UNVALIDATED


def checkpoint_keys(
    entry_id: str, raw_input: Any, validated: Any, *, earlier: bool = True
) -> tuple[str, str | None]:
    """The default checkpoint key of a run (DESIGN.md §11) and the key round 2 gave the same
    input, which is still looked up (``None`` when it is the same key or there was none, or
    when not asked for: ``earlier=False``)."""
    if validated is UNVALIDATED:
        key = default_key(entry_id, raw_input)
    else:
        try:
            key = validated_key(entry_id, validated)
        except (TypeError, ValueError):  # no JSON form: the raw input names it
            key = default_key(entry_id, raw_input)
    if not earlier:
        return key, None
    legacy = legacy_key(entry_id, raw_input)
    return key, None if legacy == key else legacy
