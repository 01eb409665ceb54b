"""``load_project``: file → checked spec → compiled agents and pipelines."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

import pydantic

from tubeless.errors import (
    AGENT_INVALID_DEFINITION,
    DOCUMENT_INVALID,
    REFERENCE_INVALID,
    TEMPLATE_INVALID,
    AgentDefinitionError,
    PipelineDefinitionError,
    PipelineError,
    ReferenceResolutionError,
    TemplateError,
    TubelessError,
    is_definition_code,
)
from tubeless.project import metaschema
from tubeless.project._check import check_schema
from tubeless.project._issues import DocumentIssue, raise_issues, sort_issues
from tubeless.project._references import Resolver
from tubeless.project._semantics import check_semantics
from tubeless.project._yaml import LoadedDocument, load_document
from tubeless.project.spec import ProjectSpec

if TYPE_CHECKING:
    # Compiling imports the pipeline core and the agent harness; checking a project
    # (``check_project``, ``tubeless validate``) needs neither, so they are imported by
    # ``load_project`` only.
    from tubeless.pipeline import Pipeline

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


def _pydantic_issues(doc: LoadedDocument, error: pydantic.ValidationError) -> list[DocumentIssue]:
    issues = []
    for detail in error.errors(include_input=False, include_url=False):
        pointer = "".join(
            "/" + str(part).replace("~", "~0").replace("/", "~1")
            for part in detail["loc"]
            if not str(part).startswith(("function-", "union["))
        )
        issues.append(doc.issue(pointer, detail["msg"], DOCUMENT_INVALID))
    return issues


def _raise(
    issues: Sequence[DocumentIssue],
    spec: ProjectSpec | None = None,
    cause: BaseException | None = None,
) -> None:
    """Raise the error class the issues call for (documents first, then templates, references
    and the step graph); ``cause`` is what a failed import raised (``--debug`` shows it)."""
    if not issues:
        return
    if spec is not None and all(is_definition_code(issue.code) for issue in issues):
        _raise_definition(issues, spec)
    if all(issue.code == TEMPLATE_INVALID for issue in issues):
        ordered = sorted(issues, key=lambda i: (i.line, i.column, i.pointer))
        raise TemplateError(_summary(ordered), ordered)
    if all(issue.code == REFERENCE_INVALID for issue in issues):
        ordered = sorted(issues, key=lambda i: (i.line, i.column, i.pointer))
        raise ReferenceResolutionError(_summary(ordered), ordered) from cause
    raise_issues(issues)


def _step_id(spec: ProjectSpec, pointer: str) -> str | None:
    """The id of the step ``/pipelines/<id>/steps/<index>/...`` names, if it names one."""
    parts = pointer.split("/")
    if len(parts) < 5 or parts[1] != "pipelines" or parts[3] != "steps":
        return None
    pipeline = spec.pipelines.get(parts[2].replace("~1", "/").replace("~0", "~"))
    if pipeline is None or not parts[4].isdigit() or int(parts[4]) >= len(pipeline.steps):
        return None
    return pipeline.steps[int(parts[4])].id


def _raise_definition(issues: Sequence[DocumentIssue], spec: ProjectSpec) -> NoReturn:
    """The static graph problems as the core's :class:`PipelineDefinitionError` (or, when all
    are about agents, the harness's :class:`AgentDefinitionError`), located."""
    ordered = sorted(issues, key=lambda i: (i.line, i.column, i.pointer))
    if all(issue.code == AGENT_INVALID_DEFINITION for issue in ordered):
        agent_error = AgentDefinitionError(ordered[0].message)
        raise _located(agent_error, ordered)
    parts = ordered[0].pointer.split("/")
    pipeline_id = parts[2].replace("~1", "/").replace("~0", "~") if len(parts) > 2 else ""
    errors = [
        PipelineError(
            code=issue.code,
            kind="definition",
            phase="definition",
            message=issue.message,
            step_id=_step_id(spec, issue.pointer),
        )
        for issue in ordered
    ]
    located = _located(PipelineDefinitionError(pipeline_id, errors), ordered)
    # Said as the CLI says it (the issues may span several pipelines; the core's own message
    # names one).
    first = ordered[0]
    extra = len(ordered) - 1
    more = f" (and {extra} more problem{'s' if extra > 1 else ''})" if extra else ""
    message = f"{first.format().removesuffix(first.message)}[{first.code}] {first.message}{more}"
    TubelessError.__init__(located, located.code, message)
    raise located


_Definition = TypeVar("_Definition", PipelineDefinitionError, AgentDefinitionError)


def _located(error: _Definition, issues: Sequence[DocumentIssue]) -> _Definition:
    """A copy of ``error`` whose message starts at the first issue, carrying every issue."""
    first = issues[0]
    located = error.located(f"{first.file}:{first.line}:{first.column} {first.pointer}: ")
    located.issues = tuple(issues)
    return located


def _summary(issues: Sequence[DocumentIssue]) -> str:
    extra = len(issues) - 1
    more = f" (and {extra} more problem{'s' if extra > 1 else ''})" if extra else ""
    return issues[0].format() + more


def check_project(path: str | os.PathLike[str]) -> CheckedProject:
    """Load and check a project file without importing or running anything from it.

    Raises:
        DocumentError: Every structural problem, located (``TUBELESS_DOCUMENT_INVALID``).
        TemplateError: When the only problems are invalid templates.
        ReferenceResolutionError: When the only problems are ``python_path`` folders that are
            missing, are not folders, or shadow a standard-library module.
        PipelineDefinitionError: When the only problems are in a pipeline's step graph.
        AgentDefinitionError: When the only problems are agents the harness would reject.
        OSError: When the file cannot be read.
    """
    # The loader's problems of single values (a YAML 1.1 form, a tag, ...) are reported with the
    # meta-schema's, in one file order, rather than hiding them.
    doc = load_document(path, keep_going=True)
    _raise([*doc.issues, *check_schema(doc, metaschema.load())])
    try:
        spec = ProjectSpec.model_validate(doc.data)
    except pydantic.ValidationError as exc:
        raise_issues(_pydantic_issues(doc, exc))
    issues = [
        doc.issue(problem.pointer, problem.message, problem.code, key=problem.at_key)
        for problem in check_semantics(spec)
    ]
    # The python_path folders are a look at the file system, not an import: checked here, so
    # that plain `validate` finds a missing one as `run` does.
    resolver = Resolver(Path(doc.file).resolve().parent, spec.python_path, spec.allow_modules)
    issues += [
        doc.issue(f"/python_path/{index}", message, REFERENCE_INVALID)
        for index, message in resolver.folder_problems()
    ]
    _raise(issues, spec)
    return CheckedProject(document=doc, spec=spec)


def _definition_issues(
    doc: LoadedDocument, spec: ProjectSpec, pointer: str, error: Exception
) -> list[DocumentIssue]:
    """A compile-time definition error as located issues: each of a pipeline's problems at its
    step when it names one, else at the entry."""
    if not isinstance(error, PipelineDefinitionError):
        assert isinstance(error, AgentDefinitionError), error
        return [doc.issue(pointer, error.message, error.code)]
    steps = {}
    parts = pointer.split("/")
    if len(parts) == 3 and parts[1] == "pipelines":
        pipeline = spec.pipelines.get(parts[2].replace("~1", "/").replace("~0", "~"))
        if pipeline is not None:
            steps = {step.id: f"{pointer}/steps/{i}" for i, step in enumerate(pipeline.steps)}
    return [
        doc.issue(steps.get(problem.step_id or "", pointer), problem.message, problem.code)
        for problem in error.errors
    ]


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
    from tubeless.project._compile import Compiler

    checked = check_project(path)
    doc, spec = checked.document, checked.spec
    compiler = Compiler(spec, Path(doc.file).resolve().parent, overrides)
    built = compiler.build_all()
    _raise(
        [
            doc.issue(pointer, message, code, key=pointer in compiler.at_key)
            for pointer, message, code in compiler.issues
        ],
        cause=compiler.import_failures[0] if compiler.import_failures else None,
    )
    if compiler.definition_errors:
        issues = sort_issues(
            issue
            for pointer, error in compiler.definition_errors
            for issue in _definition_issues(doc, spec, pointer, error)
        )
        error = compiler.definition_errors[0][1]
        if isinstance(error, PipelineDefinitionError):
            raise _located(error, issues) from error
        assert isinstance(error, AgentDefinitionError), error
        raise _located(error, issues) from error
    return Project(
        id=spec.project.id,
        path=Path(doc.file),
        name=spec.project.name,
        description=spec.project.description,
        default=spec.project.default,
        agents={key: built[key] for key in spec.agents},
        pipelines={key: built[key] for key in spec.pipelines},
    )
