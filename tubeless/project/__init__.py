"""YAML projects: loading with exact locations, the meta-schema, references and compiling.

The names are loaded on first use (PEP 562), so importing a submodule such as
:mod:`tubeless.project.metaschema` (``tubeless schema``, ``tubeless init``) does not import the
loader, pydantic or jsonschema.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tubeless._lazy import lazy_attributes

if TYPE_CHECKING:
    from tubeless.project._project import CheckedProject, Project, check_project, load_project

__all__ = ["CheckedProject", "Project", "check_project", "load_project"]

_HOMES: dict[str, tuple[str, str]] = {name: ("tubeless.project._project", name) for name in __all__}

__getattr__, __dir__ = lazy_attributes(globals(), _HOMES)
