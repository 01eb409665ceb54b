"""The service interface of the project layer: what other packages may use of its private modules.

Another package uses a private module of this one only through here: ``from
tubeless.project._spi import NAME``. The import-linter contract "Private modules stay inside
their package" (``pyproject.toml``) refuses any other import of a ``tubeless.project._*`` module
from outside the package, so this list is everything other layers depend on beyond the public
``tubeless.project`` names. Users today: batch (YAML inputs read with the project loader's
bounds) and the CLI (which files ``validate`` and ``look`` treat as projects).

Each name is loaded from its home module when first imported from here, so importing this
module costs nothing and never loads a module its caller does not need.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tubeless._lazy import lazy_attributes

if TYPE_CHECKING:
    from tubeless.project._compile import Compiler
    from tubeless.project._files import RULE, not_a_project, projects_in
    from tubeless.project._yaml_events import (
        FAST_LOADER,
        MAX_ALIASES,
        MAX_DEPTH,
        Bounds,
        Loader,
        Replay,
        checked_events,
        events,
        fast_path_agrees,
    )
    from tubeless.project._yaml_nodes import Converter

__all__ = [
    "FAST_LOADER",
    "MAX_ALIASES",
    "MAX_DEPTH",
    "RULE",
    "Bounds",
    "Compiler",
    "Converter",
    "Loader",
    "Replay",
    "checked_events",
    "events",
    "fast_path_agrees",
    "not_a_project",
    "projects_in",
]

#: Each name's home: (module, attribute).
_HOMES: dict[str, tuple[str, str]] = {
    "Compiler": ("tubeless.project._compile", "Compiler"),
    "Bounds": ("tubeless.project._yaml_events", "Bounds"),
    "Converter": ("tubeless.project._yaml_nodes", "Converter"),
    "FAST_LOADER": ("tubeless.project._yaml_events", "FAST_LOADER"),
    "Loader": ("tubeless.project._yaml_events", "Loader"),
    "MAX_ALIASES": ("tubeless.project._yaml_events", "MAX_ALIASES"),
    "MAX_DEPTH": ("tubeless.project._yaml_events", "MAX_DEPTH"),
    "RULE": ("tubeless.project._files", "RULE"),
    "Replay": ("tubeless.project._yaml_events", "Replay"),
    "checked_events": ("tubeless.project._yaml_events", "checked_events"),
    "events": ("tubeless.project._yaml_events", "events"),
    "fast_path_agrees": ("tubeless.project._yaml_events", "fast_path_agrees"),
    "not_a_project": ("tubeless.project._files", "not_a_project"),
    "projects_in": ("tubeless.project._files", "projects_in"),
}

__getattr__, __dir__ = lazy_attributes(globals(), _HOMES)
