"""Eval cases files, version 1, as pydantic models (``schemas/cases.schema.json`` comes from here).

::

    # yaml-language-server: $schema=../schemas/cases.schema.json
    version: 1
    entry: scripted-agent          # optional: the project's only entry or its default
    python_path: [..]              # folders (relative to this file) for check references
    cases:
      - id: hello
        input: {question: hello tubeless}
        expect: {result: {answer: ...}, max_turns: 2, tools: {count: 1}}

A cases file is loaded like a project document: every problem is reported with its file, line,
column and JSON pointer (``TUBELESS_DOCUMENT_INVALID``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

import pydantic
from pydantic import BaseModel, ConfigDict, Field

from tubeless.errors import REFERENCE_INVALID, ReferenceResolutionError
from tubeless.project._issues import raise_issues
from tubeless.project._yaml import load_document
from tubeless.project.spec import ID_PATTERN, REFERENCE_PATTERN

__all__ = ["CASE_ID_PATTERN", "Case", "CaseSpec", "Cases", "CasesSpec", "ExpectSpec", "load_cases"]

#: Case ids: also JUnit test names.
CASE_ID_PATTERN = r"^[A-Za-z0-9_][A-Za-z0-9_.:-]{0,127}$"

Count = Annotated[int, Field(ge=0, le=2**53 - 1)]


class ExpectSpec(BaseModel):
    """What a case expects of its run; every expectation given must hold."""

    model_config = ConfigDict(extra="forbid")

    result: Any = Field(None, description="The result, exactly (compared as JSON data).")
    result_contains: Any = Field(
        None,
        description="A part of the result: an object's keys and values (recursively), "
        "or a substring of a string result.",
    )
    status: Literal["completed", "failed", "cancelled"] | None = Field(
        None, description="The run's status (default: completed, unless error_code is given)."
    )
    error_code: Annotated[str, Field(pattern=r"^[A-Z][A-Z0-9_]*$")] | None = Field(
        None, description="The failed row's error code (the deepest original code)."
    )
    max_turns: Count | None = Field(None, description="At most this many turns.")
    max_calls: Count | None = Field(None, description="At most this many tool calls.")
    tools: dict[Annotated[str, Field(pattern=r"^[A-Za-z][A-Za-z0-9_-]{0,127}$")], Count] | None = (
        Field(
            None,
            description="Exactly this many calls per tool name (tools not named are not checked).",
        )
    )
    check: Annotated[str, Field(pattern=REFERENCE_PATTERN)] | None = Field(
        None,
        description="A callable(result, summary) that raises AssertionError when the "
        "case fails; summary holds status, error, turns, calls, tools, run_id, duration_ms.",
    )


class CaseSpec(BaseModel):
    """One case: an input and what its run must show."""

    model_config = ConfigDict(extra="forbid")

    id: Annotated[str, Field(pattern=CASE_ID_PATTERN, description="The case's id (unique).")]
    description: str | None = Field(None, description="What the case is about.")
    input: Any = Field(None, description="The raw input of the run.")
    cassette: Annotated[str, Field(min_length=1)] | None = Field(
        None,
        description="A cassette to replay the case from (a path relative to this "
        "file): decisions come from it, no model is asked, and a divergence fails the case.",
    )
    expect: ExpectSpec = Field(default_factory=ExpectSpec, description="The expectations.")


class CasesSpec(BaseModel):
    """A cases file."""

    model_config = ConfigDict(extra="forbid")

    version: Literal[1] = Field(description="The cases format version (1).")
    entry: Annotated[str, Field(pattern=ID_PATTERN)] | None = Field(
        None, description="The agent or pipeline to run (default: the project's default)."
    )
    python_path: list[str] = Field(
        default_factory=list,
        description="Folders relative to this file, put first on sys.path for check references.",
    )
    cases: list[CaseSpec] = Field(min_length=1, description="The cases, run in this order.")


@dataclass(frozen=True, kw_only=True, slots=True)
class Case:
    """A loaded case: its spec, where its input is written, and its resolved check."""

    spec: CaseSpec
    line: int
    expected: frozenset[str]
    """The expectations given (``result: null`` is an expectation, an absent one is not)."""
    check: Any = None
    cassette: Path | None = None
    """The case's cassette (absolute), when it names one."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Cases:
    path: Path
    entry: str | None
    cases: tuple[Case, ...]


def load_cases(path: str | os.PathLike[str]) -> Cases:
    """Load and check a cases file, and resolve its ``check`` references.

    Raises:
        DocumentError: Every problem, located (``TUBELESS_DOCUMENT_INVALID``).
        ReferenceResolutionError: A ``check`` that cannot be imported.
        OSError: When the file cannot be read.
    """
    from tubeless.project import _project
    from tubeless.project._check import check_schema
    from tubeless.project._references import ReferenceProblem, Resolver
    from tubeless.project.metaschema import load_cases_schema

    doc = load_document(path)
    issues = check_schema(doc, load_cases_schema())
    if issues:
        raise_issues(issues)
    try:
        spec = CasesSpec.model_validate(doc.data)
    except pydantic.ValidationError as exc:
        raise_issues(_project._pydantic_issues(doc, exc))
    seen: set[str] = set()
    duplicates = []
    for index, case in enumerate(spec.cases):
        if case.id in seen:
            duplicates.append(doc.issue(f"/cases/{index}/id", f"duplicate case id {case.id!r}"))
        seen.add(case.id)
    if duplicates:
        raise_issues(duplicates)
    resolver = Resolver(Path(doc.file).resolve().parent, spec.python_path, ())
    resolver.activate()
    cases = []
    problems = []
    for index, case in enumerate(spec.cases):
        check = None
        if case.expect.check is not None:
            try:
                check = resolver.resolve(case.expect.check, "callable")
            except ReferenceProblem as exc:
                pointer = f"/cases/{index}/expect/check"
                problems.append(doc.issue(pointer, str(exc), REFERENCE_INVALID))
        pointer = (
            f"/cases/{index}/input" if "input" in case.model_fields_set else (f"/cases/{index}")
        )
        cassette = None
        if case.cassette is not None:
            cassette = (Path(doc.file).resolve().parent / case.cassette).resolve()
        cases.append(
            Case(
                spec=case,
                line=doc.source.locate(pointer)[0],
                expected=frozenset(case.expect.model_fields_set),
                check=check,
                cassette=cassette,
            )
        )
    if problems:
        raise ReferenceResolutionError(problems[0].format(), problems)
    return Cases(path=Path(doc.file), entry=spec.entry, cases=tuple(cases))
