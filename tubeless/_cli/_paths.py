"""Options that name files must name different ones (usage errors, exit 1).

A cassette recorded over the checkpoint file, or batch rows written over the inputs file, would
destroy one of them without a word; the files are compared as the OS sees them (``samefile``
where both exist, else their resolved paths), so a link or ``./`` spelling is no way around it.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterable

import click

__all__ = ["refuse_shared_files", "same_file"]


def same_file(one: str, other: str) -> bool:
    """Whether two paths name one file (an existing one by identity, else by resolved path)."""
    try:
        if os.path.exists(one) and os.path.exists(other):
            return os.path.samefile(one, other)
    except OSError:
        pass
    return os.path.realpath(one) == os.path.realpath(other)


def _is_file(target: str | None) -> bool:
    # stdin/stdout and store URLs (postgresql://) are no files to compare.
    return target is not None and target.strip() not in ("", "-") and "://" not in target


def refuse_shared_files(named: Iterable[tuple[str, str | None]]) -> None:
    """A usage error for the first two options (``(option, path)`` pairs) naming one file."""
    files = [(option, path) for option, path in named if _is_file(path)]
    for (first, path), (second, other) in itertools.combinations(files, 2):
        assert path is not None and other is not None
        if same_file(path, other):
            raise click.UsageError(
                f"{first} and {second} name the same file ({path}): one would overwrite the "
                "other; use two files"
            )
