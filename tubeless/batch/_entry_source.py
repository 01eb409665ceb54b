"""Where a worker's entry comes from, and where its trace records go (a leaf of the batch package).

The engines that run rows in other processes (``process``, ``ray``) import this rather than the
engine interface (``_engine.py``), which imports them when an engine of theirs is asked for.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tubeless.pipeline import Pipeline

__all__ = ["EntrySource", "OnRecord"]

OnRecord = Callable[[Mapping[str, Any]], None]
"""Given each trace record a worker shipped, as it arrives (the driver writes the sinks)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class EntrySource:
    """An entry that workers load from its project file (``process`` and ``ray`` engines)."""

    path: str
    """The project file (absolute)."""
    entry_id: str | None = None
    """The entry's id; ``None`` for the project's only entry or its default."""

    @classmethod
    def of(cls, path: str | os.PathLike[str], entry_id: str | None = None) -> EntrySource:
        return cls(path=str(Path(path).resolve()), entry_id=entry_id)

    def load(self) -> Pipeline:
        """Load the project and pick the entry (``KeyError`` for an unknown id)."""
        from tubeless.project import load_project

        return load_project(self.path).entry(self.entry_id)
