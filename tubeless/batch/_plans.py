"""Each row's key and plan: what a row runs with beyond its input.

A row's key (:func:`row_keys`) is the default checkpoint key of its validated input (DESIGN.md
§11), the second row with the same input ``<key>#2``, the third ``#3``, in input order, so rows
never share a lease and a rerun finds each row's own checkpoint. It is the row's ``key`` in the
output and, with checkpoints, its checkpoint key. The keys round 2 gave the same rows (from the
raw input) are kept beside them, so that its checkpoints and output files are still found.

Keys are given a row at a time (:class:`RowNamer`), so a batch never holds its rows' keys: the
counts that number repeats are kept per key in the batch's :class:`~tubeless.batch._ledger.Ledger`
(a temporary file). An input with no JSON form (``NaN`` from Python, a set, a non-string key)
becomes a row with a problem, which fails alone (``TUBELESS_BATCH_INPUT_INVALID``).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from tubeless.batch._inputs import InputRow, new_row, text_key
from tubeless.batch._ledger import Ledger
from tubeless.batch._row import NO_PLAN, RowPlan
from tubeless.errors import TubelessError

if TYPE_CHECKING:
    from tubeless.pipeline import Pipeline

__all__ = ["NamedRow", "PlanMaker", "RowKeys", "RowNamer", "row_keys", "row_plans"]

_NOT_JSON = (
    "not a JSON value (JSON has no NaN or infinity, no sets or other objects, and only "
    "strings as keys)"
)


class NamedRow(NamedTuple):
    """A row and its keys (a named tuple, not a frozen dataclass: one is made per row, and a
    tuple costs less than half as much to make)."""

    row: InputRow
    key: str
    """Its checkpoint key, and its ``key`` in the output."""
    earlier_checkpoint: str | None
    """The checkpoint key round 2 gave it (its raw input's; ``None`` when the same)."""
    earlier_row: str | None
    """The ``key`` round 2 wrote in its row of the output (never suffixed)."""


_new_named = tuple.__new__


class RowNamer:
    """Gives each row its key, in input order (DESIGN.md §11: the default checkpoint key of its
    validated input, ``#2``, ``#3``... for later rows of the same input), and the keys round 2
    gave it. Repeats are counted in ``ledger``, not in memory."""

    def __init__(self, pipeline: Pipeline, ledger: Ledger, *, earlier: bool = True) -> None:
        from tubeless.pipeline._spi import UNVALIDATED, checkpoint_keys, validated_or_unvalidated

        self.pipeline, self.ledger = pipeline, ledger
        # Round 2's keys are only looked up in a checkpoint file or a previous output: a batch
        # with neither does not make them (``None``, as for an input whose keys agree).
        self.earlier = earlier
        self._keys, self._validated = checkpoint_keys, validated_or_unvalidated
        self._unvalidated = UNVALIDATED

    def name(self, row: InputRow) -> NamedRow:
        """The row's keys; the row comes back holding its validated input (when its entry has
        an options schema that accepts it), which its run then takes instead of validating."""
        return self.name_given(row.index, row)

    def name_given(self, index: int, item: Any) -> NamedRow:
        """:meth:`name` for an input given in memory (``item`` at ``index``; an
        :class:`InputRow` is named as it is), whose row is made once, holding its validated
        input (not made, then made again with it)."""
        if isinstance(item, InputRow):
            row: InputRow | None = item
            index, line, raw = item.index, item.line, item.raw
        else:
            row, line, raw = None, index + 1, item
        raw_base: str | None = None
        if row is not None and row.problem is not None:  # an unreadable line: its text names it
            base = text_key(self.pipeline.id, row.text)
        else:
            try:
                validated = self._validated(self.pipeline, raw)
                base, raw_base = self._keys(self.pipeline.id, raw, validated, earlier=self.earlier)
            except (TypeError, ValueError, RecursionError, TubelessError):
                text = f"index {index}: {type(raw).__name__}"
                row = InputRow(index=index, line=line, problem=_NOT_JSON, text=text)
                base = text_key(self.pipeline.id, text)
            else:
                if validated is not self._unvalidated and self.pipeline.options_schema is not None:
                    row = new_row(index, line, raw, (validated,))
                elif row is None:
                    row = new_row(index, line, raw)
        # Round 2 numbered repeats of the same raw input the same way, under its raw-input key.
        earlier = raw_base or base
        count, earlier_count = self.ledger.number(base, earlier)
        key = base if count == 1 else f"{base}#{count}"
        old = earlier if earlier_count == 1 else f"{earlier}#{earlier_count}"
        # (``NamedRow(...)`` without its ``__new__``'s Python frame: the same tuple, made in C.)
        return _new_named(
            NamedRow, (row, key, None if old == key else old, None if earlier == key else earlier)
        )


@dataclass(frozen=True, slots=True)
class RowKeys:
    """The keys of a batch's rows, by index (:func:`row_keys`)."""

    keys: list[str]
    """Each row's key: its checkpoint key, and its ``key`` in the output."""
    earlier_checkpoints: list[str | None]
    """The checkpoint key round 2 gave each row (its raw input's; ``None`` when the same)."""
    earlier_rows: list[str | None]
    """The ``key`` round 2 wrote in each row of the output (never suffixed)."""


def row_keys(pipeline: Pipeline, rows: Iterable[InputRow]) -> RowKeys:
    """Every row's key and the keys round 2 gave it, as lists (a batch uses
    :class:`RowNamer`, a row at a time)."""
    ledger = Ledger()
    try:
        named = [RowNamer(pipeline, ledger).name(row) for row in rows]
    finally:
        ledger.close()
    return RowKeys(
        keys=[n.key for n in named],
        earlier_checkpoints=[n.earlier_checkpoint for n in named],
        earlier_rows=[n.earlier_row for n in named],
    )


class PlanMaker:
    """Each row's checkpoint keys and cassette (paths absolute: workers may run elsewhere)."""

    def __init__(
        self,
        *,
        checkpoints: bool,
        record_dir: str | os.PathLike[str] | None = None,
        replay_dir: str | os.PathLike[str] | None = None,
        replays: Mapping[int, str] | None = None,
        records: Mapping[int, str] | None = None,
    ) -> None:
        self.checkpoints = checkpoints
        self.record = None if record_dir is None else Path(record_dir).resolve()
        self.replay = None if replay_dir is None else Path(replay_dir).resolve()
        self.replays, self.records = replays or {}, records or {}
        if self.record is not None:
            self.record.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.none = not (
            self.checkpoints or self.record or self.replay or self.replays or self.records
        )
        """Every row's plan is :data:`NO_PLAN` (nothing beyond its input: most batches)."""

    def plan(self, named: NamedRow) -> RowPlan:
        if self.none:
            return NO_PLAN
        index = named.row.index
        name = f"{index}.cassette.jsonl"
        recorded = self.records.get(index)
        if recorded is None and self.record is not None:
            recorded = str(self.record / name)
        replayed = self.replays.get(index)
        if replayed is None and self.replay is not None:
            replayed = str(self.replay / name)
        return RowPlan(
            checkpoint_key=named.key if self.checkpoints else None,
            earlier_key=named.earlier_checkpoint if self.checkpoints else None,
            record=None if recorded is None else str(Path(recorded).resolve()),
            replay=None
            if replayed is None or recorded is not None
            else str(Path(replayed).resolve()),
        )


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
    """Each row's plan, as a list (a batch uses :class:`PlanMaker`, a row at a time)."""
    maker = PlanMaker(
        checkpoints=checkpoints,
        record_dir=record_dir,
        replay_dir=replay_dir,
        replays=replays,
        records=records,
    )
    return [
        maker.plan(
            NamedRow(
                row,
                keys.keys[row.index],
                keys.earlier_checkpoints[row.index],
                keys.earlier_rows[row.index],
            )
        )
        for row in rows
    ]
