"""One problem the static checks found in a project document, before it becomes a located issue."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Problem"]


@dataclass(frozen=True, slots=True)
class Problem:
    """A problem at ``pointer`` (a JSON pointer into the document), with its error ``code``."""

    pointer: str
    message: str
    code: str
    at_key: bool = False
    """Located at the mapping key rather than its value (an unknown or misspelt key)."""
