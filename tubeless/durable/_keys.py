"""Default checkpoint keys: the task an input names, and the keys earlier releases gave it.

A run's default key is ``<entry id>:<first 16 hex of sha256 of the canonical validated input>``
(DESIGN.md §11): the input after validation, defaults filled, as canonical JSON with non-ASCII
escaped (§24), so ``--n 3`` and an omitted ``n`` that defaults to 3 are one task, and an input
holding a lone surrogate has a key. Round 2 keyed the *raw* input, its text as UTF-8: such a key
(:func:`legacy_key`) is still found, so a task an older release left unfinished is resumed
rather than started again under a second key (:func:`find_key`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from tubeless.durable._session import decode
from tubeless.durable._store import CheckpointStore, StoredCheckpoint
from tubeless.errors import CHECKPOINT_INVALID_KEY, CheckpointError
from tubeless.frozen import FreezeError, digest, freeze, is_flat_json

__all__ = [
    "UNFINISHED",
    "default_key",
    "find_key",
    "json_form",
    "legacy_key",
    "unfinished_of",
    "validated_key",
]

#: The statuses of a checkpoint that a run of its key would go on with.
UNFINISHED = frozenset({"running", "waiting"})

_HEX_CHARS = 16


def json_form(value: Any) -> Any:
    """``value`` as frozen JSON data (a validated model dumped as JSON); ``FreezeError``,
    ``TypeError`` or ``ValueError`` when it has no JSON form."""
    try:
        return freeze(value)
    except FreezeError:
        import pydantic_core

        try:
            dumped = pydantic_core.to_jsonable_python(value)
        except pydantic_core.PydanticSerializationError as exc:
            raise TypeError(str(exc)) from None
        return freeze(dumped)


def default_key(entry_id: str, value: Any) -> str:
    """``<entry id>:<first 16 hex of sha256 of the canonical JSON of value>``, non-ASCII
    escaped (DESIGN.md §11, §24); ``value`` is the validated input (or the raw one).

    Raises:
        CheckpointError: ``TUBELESS_AGENT_INVALID_CHECKPOINT_KEY`` when ``value`` has no JSON
            form.
    """
    try:
        hexdigest = digest(json_form(value))
    except (FreezeError, TypeError, ValueError):
        raise CheckpointError(
            CHECKPOINT_INVALID_KEY,
            "The input is not plain JSON data, so no checkpoint key can be derived from it; "
            "pass checkpoint_key=",
        ) from None
    return f"{entry_id}:{hexdigest[7 : 7 + _HEX_CHARS]}"


def validated_key(entry_id: str, validated: Any) -> str:
    """:func:`default_key` of a validated input, which has a JSON form (a flat object is
    hashed as it is, anything else as :func:`json_form` makes it).

    Raises:
        TypeError, ValueError: When ``validated`` has no JSON form (``FreezeError`` is a
            ``ValueError``).
    """
    frozen = validated if is_flat_json(validated) else json_form(validated)
    return f"{entry_id}:{digest(frozen)[7 : 7 + _HEX_CHARS]}"


def legacy_key(entry_id: str, raw_input: Any) -> str | None:
    """The key round 2 gave ``raw_input`` (its canonical JSON as UTF-8, nothing validated or
    escaped), or ``None`` when it had none."""
    try:
        hexdigest = digest(freeze(raw_input), ensure_ascii=False)
    except (FreezeError, TypeError, ValueError):
        return None
    return f"{entry_id}:{hexdigest[7 : 7 + _HEX_CHARS]}"


def find_key(store: CheckpointStore, key: str, earlier: str | None) -> str:
    """``key``, unless the store holds nothing under it and does hold ``earlier`` (the key an
    older release gave the same input): then ``earlier``, so its task goes on there.

    Raises:
        CheckpointError: ``TUBELESS_CHECKPOINT_LOCKED`` while another run holds either key.
    """
    if earlier is None or earlier == key:
        return key
    with store.acquire(key) as lease:
        if lease.read() is not None:
            return key
    with store.acquire(earlier) as lease:
        return earlier if lease.read() is not None else key


def unfinished_of(
    stored: Sequence[StoredCheckpoint], entry_id: str, but: str
) -> list[tuple[StoredCheckpoint, int | None]]:
    """The unfinished checkpoints of ``entry_id`` other than key ``but``, most recently updated
    first, each with its entry agent's turn (unreadable documents are left out)."""
    found: list[tuple[StoredCheckpoint, int | None]] = []
    for item in stored:
        if item.key == but:
            continue
        try:
            document = decode(item.document, f"checkpoint {item.key!r}")
        except CheckpointError:
            continue
        if document.get("entry") != entry_id:
            continue
        if document.get("status", "running") not in UNFINISHED:
            continue
        agents = document.get("agents")
        root = agents.get(entry_id) if isinstance(agents, Mapping) else None
        turn = root.get("turn") if isinstance(root, Mapping) else None
        found.append((item, turn if type(turn) is int else None))
    found.sort(key=lambda pair: pair[0].updated_at_ms, reverse=True)
    return found
