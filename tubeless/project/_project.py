"""``load_project``: file → checked spec → compiled agents and pipelines."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pydantic

from tubeless.errors import (
    DOCUMENT_INVALID,
    REFERENCE_INVALID,
    TEMPLATE_INVALID,
    ReferenceResolutionError,
    TemplateError,
    TubelessError,
)
from tubeless.pipeline import Pipeline
from tubeless.project import metaschema
from tubeless.project._check import check_schema
from tubeless.project._compile import Compiler
from tubeless.project._issues import DocumentIssue, raise_issues
from tubeless.project._semantics import check_semantics
from tubeless.project._yaml import LoadedDocument, load_document
from tubeless.project.spec import ProjectSpec

__all__ = ["CheckedProject", "Project", "check_project", "load_project"]


@dataclass(frozen=True, kw_only=True)
class Project:
    """A compiled project: its agents and pipelines are ordinary ``Pipeline`` objects."""

    id: str
    path: Path
    name: str | None = None
    description: str | None = None
    default: str | None = None
    agents: Mapping[str, Pipeline] = field(default_factory=dict)
    pipelines: Mapping[str, Pipeline] = field(default_factory=dict)

    @property
    def entries(self) -> dict[str, Pipeline]:
        """Agents and pipelines by id (one namespace)."""
        return {**self.agents, **self.pipelines}

    def get(self, entry_id: str) -> Pipeline:
        """The agent or pipeline ``entry_id``.

        Raises:
            KeyError: Naming the ids the project has.
        """
        entries = self.entries
        if entry_id not in entries:
            choices = ", ".join(sorted(entries)) or "none"
            raise KeyError(f"project {self.id!r} has no entry {entry_id!r}; choose from {choices}")
        return entries[entry_id]

    def entry(self, entry_id: str | None = None) -> Pipeline:
        """``entry_id``, or (when omitted) the default entry or the only one.

        Raises:
            KeyError: When the id is unknown, or omitted with several entries and no default.
        """
        if entry_id is not None:
            return self.get(entry_id)
        if self.default is not None:
            return self.get(self.default)
        entries = self.entries
        if len(entries) == 1:
            return next(iter(entries.values()))
        if not entries:
            raise KeyError(
                f"project {self.id!r} has no entries: add an agent under agents: or a pipeline "
                "under pipelines:"
            )
        choices = ", ".join(sorted(entries)) or "none"
        raise KeyError(
            f"project {self.id!r} has several entries and no default; choose one of {choices}"
        )


@dataclass(frozen=True, kw_only=True)
class CheckedProject:
    """A document that passed every check that imports nothing."""

    document: LoadedDocument
    spec: ProjectSpec


def _issue(doc: LoadedDocument, pointer: str, message: str, code: str, *, key: bool = False
           ) -> DocumentIssue:
    line, column = doc.source.locate(pointer, key=key)
    return DocumentIssue(file=doc.file, line=line, column=column, pointer=pointer,
                         message=message, code=code)


def _pydantic_issues(doc: LoadedDocument, error: pydantic.ValidationError) -> list[DocumentIssue]:
    issues = []
    for detail in error.errors(include_input=False, include_url=False):
        pointer = "".join(
            "/" + str(part).replace("~", "~0").replace("/", "~1")
            for part in detail["loc"] if not str(part).startswith(("function-", "union["))
        )
        issues.append(_issue(doc, pointer, detail["msg"], DOCUMENT_INVALID))
    return issues


def _raise(issues: Sequence[DocumentIssue]) -> None:
    """Raise the error class the issues call for (documents first, then templates)."""
    if not issues:
        return
    if all(issue.code == TEMPLATE_INVALID for issue in issues):
        ordered = sorted(issues, key=lambda i: (i.line, i.column, i.pointer))
        raise TemplateError(_summary(ordered), ordered)
    if all(issue.code == REFERENCE_INVALID for issue in issues):
        ordered = sorted(issues, key=lambda i: (i.line, i.column, i.pointer))
        raise ReferenceResolutionError(_summary(ordered), ordered)
    raise_issues(issues)


def _summary(issues: Sequence[DocumentIssue]) -> str:
    extra = len(issues) - 1
    more = f" (and {extra} more problem{'s' if extra > 1 else ''})" if extra else ""
    return issues[0].format() + more


def check_project(path: str | os.PathLike[str]) -> CheckedProject:
    """Load and check a project file without importing or running anything from it.

    Raises:
        DocumentError: Every structural problem, located (``TUBELESS_DOCUMENT_INVALID``).
        TemplateError: When the only problems are invalid templates.
        OSError: When the file cannot be read.
    """
    doc = load_document(path)
    issues = check_schema(doc, metaschema.load())
    _raise(issues)
    try:
        spec = ProjectSpec.model_validate(doc.data)
    except pydantic.ValidationError as exc:
        raise_issues(_pydantic_issues(doc, exc))
    _raise([
        _issue(doc, pointer, message, code, key=at_key)
        for pointer, message, code, at_key in check_semantics(spec)
    ])
    return CheckedProject(document=doc, spec=spec)


def load_project(
    path: str | os.PathLike[str], overrides: Mapping[str, Mapping[str, Any]] | None = None
) -> Project:
    """Load, check and compile a project file.

    Args:
        path: The YAML file.
        overrides: Replace agent callables, e.g. ``{"my-agent": {"decide": scripted(...)}}``
            (fields: ``initial_state``, ``decide``, ``dry_run``, ``reduce``).

    Raises:
        DocumentError: For structural problems (``TUBELESS_DOCUMENT_INVALID``).
        TemplateError: For invalid templates (``TUBELESS_TEMPLATE_INVALID``).
        ReferenceResolutionError: For references that cannot be imported or used.
        PipelineDefinitionError: For graphs the pipeline core rejects (``DEFINITION_*``).
        AgentDefinitionError: For agents the harness rejects, and for bad ``overrides``.
    """
    checked = check_project(path)
    doc, spec = checked.document, checked.spec
    compiler = Compiler(spec, Path(doc.file).resolve().parent, overrides)
    built = compiler.build_all()
    _raise([_issue(doc, pointer, message, code) for pointer, message, code in compiler.issues])
    if compiler.definition_errors:
        pointer, error = compiler.definition_errors[0]
        line, column = doc.source.locate(pointer)
        where = f"{doc.file}:{line}:{column} {pointer}: "
        assert isinstance(error, TubelessError), "the compiler keeps only definition errors"
        raise error.located(where) from error
    return Project(
        id=spec.project.id,
        path=Path(doc.file),
        name=spec.project.name,
        description=spec.project.description,
        default=spec.project.default,
        agents={key: built[key] for key in spec.agents},
        pipelines={key: built[key] for key in spec.pipelines},
    )
