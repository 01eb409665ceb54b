"""YAML projects: loading with exact locations, the meta-schema, references and compiling."""

from __future__ import annotations

from tubeless.project._project import CheckedProject, Project, check_project, load_project

__all__ = ["CheckedProject", "Project", "check_project", "load_project"]
