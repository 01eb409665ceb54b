"""Each row's key and plan: what a row runs with beyond its input.

A row's key (:func:`row_keys`) is the default checkpoint key of its validated input (DESIGN.md
§11), the second row with the same input ``<key>#2``, the third ``#3``, in input order, so rows
never share a lease and a rerun finds each row's own checkpoint. It is the row's ``key`` in the
output and, with checkpoints, its checkpoint key. The keys round 2 gave the same rows (from the
raw input) are kept beside them, so that its checkpoints and output files are still found.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from tubeless.batch._inputs import InputRow, text_key
from tubeless.batch._row import RowPlan

if TYPE_CHECKING:
    from tubeless.pipeline import Pipeline

__all__ = ["RowKeys", "row_keys", "row_plans"]


@dataclass(frozen=True, slots=True)
class RowKeys:
    """The keys of a batch's rows, by index."""

    keys: list[str]
    """Each row's key: its checkpoint key, and its ``key`` in the output."""
    earlier_checkpoints: list[str | None]
    """The checkpoint key round 2 gave each row (its raw input's; ``None`` when the same)."""
    earlier_rows: list[str | None]
    """The ``key`` round 2 wrote in each row of the output (never suffixed)."""


def row_keys(pipeline: Pipeline, rows: Sequence[InputRow]) -> RowKeys:
    """Every row's key (DESIGN.md §11: the default checkpoint key of its validated input, with
    ``#2``, ``#3``... for later rows of the same input) and the keys round 2 gave it."""
    from tubeless.pipeline._checkpoint_keys import checkpoint_keys, validated_or_unvalidated

    bases: list[str] = []
    raw_bases: list[str | None] = []
    for row in rows:
        if row.problem is not None:
            bases.append(text_key(pipeline.id, row.text))
            raw_bases.append(None)
            continue
        key, earlier = checkpoint_keys(
            pipeline.id, row.raw, validated_or_unvalidated(pipeline, row.raw)
        )
        bases.append(key)
        raw_bases.append(earlier)
    keys = _numbered(bases)
    # Round 2 numbered repeats of the same raw input the same way, under its raw-input key.
    numbered = _numbered([raw or base for raw, base in zip(raw_bases, bases, strict=True)])
    return RowKeys(
        keys=keys,
        earlier_checkpoints=[
            None if old == new else old for old, new in zip(numbered, keys, strict=True)
        ],
        earlier_rows=[
            None if (raw or base) == new else (raw or base)
            for raw, base, new in zip(raw_bases, bases, keys, strict=True)
        ],
    )


def _numbered(bases: Sequence[str]) -> list[str]:
    """Each base, the second time it occurs ``<base>#2``, the third ``#3``..."""
    seen: dict[str, int] = {}
    numbered = []
    for base in bases:
        seen[base] = seen.get(base, 0) + 1
        numbered.append(base if seen[base] == 1 else f"{base}#{seen[base]}")
    return numbered


def row_plans(
    rows: Sequence[InputRow],
    keys: RowKeys,
    *,
    checkpoints: bool,
    record_dir: str | os.PathLike[str] | None = None,
    replay_dir: str | os.PathLike[str] | None = None,
    replays: Mapping[int, str] | None = None,
    records: Mapping[int, str] | None = None,
) -> list[RowPlan]:
    """Each row's checkpoint keys and cassette (paths absolute: workers may run elsewhere)."""
    record = None if record_dir is None else Path(record_dir).resolve()
    replay = None if replay_dir is None else Path(replay_dir).resolve()
    if record is not None:
        record.mkdir(mode=0o700, parents=True, exist_ok=True)
    plans = []
    for row in rows:
        name = f"{row.index}.cassette.jsonl"
        recorded = (records or {}).get(row.index)
        if recorded is None and record is not None:
            recorded = str(record / name)
        replayed = (replays or {}).get(row.index)
        if replayed is None and replay is not None:
            replayed = str(replay / name)
        plan = RowPlan(
            checkpoint_key=keys.keys[row.index] if checkpoints else None,
            earlier_key=keys.earlier_checkpoints[row.index] if checkpoints else None,
            record=None if recorded is None else str(Path(recorded).resolve()),
            replay=None
            if replayed is None or recorded is not None
            else str(Path(replayed).resolve()),
        )
        plans.append(plan)
    return plans
