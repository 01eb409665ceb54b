"""The error tree drawn in ``tubeless.errors`` is complete and carries every code; the errors
behave as drawn (one base for the project errors, one ``deepest_source_code``, a declared
``recorded_cause``)."""

from __future__ import annotations

import ast
import importlib
import pkgutil
import re
from pathlib import Path
from typing import Any

import pytest

import tubeless
from tubeless import (
    DocumentError,
    PipelineExecutionError,
    ReferenceResolutionError,
    TemplateError,
    TubelessError,
    define_pipeline,
    from_pipeline,
    step,
)
from tubeless import errors as codes
from tubeless.errors import ErrorCause, ProjectError, cause_chain, deepest_source_code
from tubeless.pipeline._spi import ChildRunFailedError

TREE = tubeless.errors.__doc__ or ""
# A drawn entry: tree branches (or indentation), the class name, then what the line says of it.
_ENTRY = re.compile(r"^[\s│├└─]*(?P<name>_?[A-Z][A-Za-z]+)\b(?P<rest>.*)$")
_FAMILY = re.compile(r"TUBELESS_[A-Z_]*\*")


def _error_classes() -> list[type[BaseException]]:
    """Every exception class defined in the package, once each, by qualified name."""
    for module in pkgutil.walk_packages(tubeless.__path__, "tubeless."):
        importlib.import_module(module.name)
    found: dict[str, type[BaseException]] = {}
    pending: list[type[BaseException]] = [BaseException]
    while pending:
        cls = pending.pop()
        pending.extend(cls.__subclasses__())
        if cls.__module__.split(".")[0] == "tubeless":
            found[f"{cls.__module__}.{cls.__qualname__}"] = cls
    return [found[key] for key in sorted(found)]


ERROR_CLASSES = _error_classes()
TUBELESS_ERRORS = [cls for cls in ERROR_CLASSES if issubclass(cls, TubelessError)]


def _drawn() -> dict[str, str]:
    """Each class name drawn in the docstring → the rest of its line."""
    entries: dict[str, str] = {}
    for line in TREE.splitlines():
        match = _ENTRY.match(line)
        if match and match["name"] not in entries:
            entries[match["name"]] = match["rest"]
    return entries


def test_the_walk_finds_the_error_classes_of_every_layer() -> None:
    """Guards the walk itself: a broken import scan would make the tests below vacuous."""
    names = {cls.__name__ for cls in ERROR_CLASSES}
    assert {"TubelessError", "ToolError", "FreezeError", "SchemaValidationError"} <= names
    assert {"ProviderError", "TraceReadError", "LimitReachedError", "FanOutFailedError"} <= names
    assert len(TUBELESS_ERRORS) >= 19


@pytest.mark.parametrize("cls", ERROR_CLASSES, ids=lambda cls: cls.__name__)
def test_every_error_class_is_drawn_in_the_errors_docstring(cls: type[BaseException]) -> None:
    assert cls.__name__ in _drawn(), f"{cls.__module__}.{cls.__qualname__} is not drawn"


@pytest.mark.parametrize("cls", TUBELESS_ERRORS, ids=lambda cls: cls.__name__)
def test_every_tubeless_error_shows_its_code_in_the_tree(cls: type[TubelessError]) -> None:
    """A class with one code declares it as a class attribute and the tree shows it; a class
    whose code varies shows its family (``TUBELESS_DEFINITION_*``)."""
    line = _drawn().get(cls.__name__, "")
    fixed = getattr(cls, "code", None)
    if isinstance(fixed, str):
        assert fixed.startswith("TUBELESS_")
        assert re.search(rf"\b{fixed}\b", line), (cls.__name__, line)
    else:
        assert _FAMILY.search(line), (cls.__name__, line)


@pytest.mark.parametrize(
    ("cls", "code"),
    [
        pytest.param(DocumentError, codes.DOCUMENT_INVALID, id="document"),
        pytest.param(ReferenceResolutionError, codes.REFERENCE_INVALID, id="reference"),
        pytest.param(TemplateError, codes.TEMPLATE_INVALID, id="template"),
    ],
)
def test_the_three_issue_carrying_errors_share_one_base(cls: type[ProjectError], code: str) -> None:
    error = cls("p.yaml:1:1 /a: bad", ["an issue"])
    with pytest.raises(ProjectError) as caught:
        raise error
    assert isinstance(caught.value, TubelessError)
    assert (caught.value.code, cls.code, caught.value.issues) == (code, code, ("an issue",))
    assert caught.value.args == ("p.yaml:1:1 /a: bad",)


def _failing_child() -> Any:
    def fail(inputs: Any, ctx: Any) -> None:
        raise TubelessError("APP_BROKEN", "the lookup broke") from TubelessError(
            "APP_ROOT", "the root cause"
        )

    return define_pipeline(id="child", steps=[step("fail", fail)])


def test_a_child_failure_declares_the_recorded_cause_that_its_chain_continues_with() -> None:
    parent = define_pipeline(id="parent", steps=[from_pipeline("delegate", _failing_child())])

    with pytest.raises(PipelineExecutionError) as caught:
        parent.run_sync()

    failure = caught.value.run.errors[0].exception
    assert isinstance(failure, ChildRunFailedError)
    first = failure.run.errors[0]
    assert failure.recorded_cause == ErrorCause(
        message=first.message, name=first.code, source_code=first.code, cause=first.cause
    )
    assert not [name for name in vars(failure) if name.startswith("_")]
    chain = cause_chain(failure)
    assert chain is not None and chain.cause is not None
    assert (chain.cause.message, chain.cause.deepest().source_code) == (
        "the lookup broke",
        "APP_ROOT",
    )
    assert caught.value.source_code == "APP_ROOT"
    assert TubelessError("X", "no child").recorded_cause is None


def test_deepest_source_code_reads_a_recorded_error_and_a_bare_chain_alike() -> None:
    """One implementation serves the run record (``source_code``) and the execution error."""
    with pytest.raises(PipelineExecutionError) as caught:
        _failing_child().run_sync()

    recorded = caught.value.run.errors[0]
    assert deepest_source_code(recorded) == deepest_source_code(recorded.cause) == "APP_ROOT"
    assert recorded.source_code == caught.value.source_code == "APP_ROOT"
    assert deepest_source_code(None) is None
    assert not hasattr(importlib.import_module("tubeless.pipeline._failures"), "deepest_code")


def test_the_from_none_policy_is_written_in_the_errors_docstring() -> None:
    assert "``from None``" in TREE
    assert "values never leak" in TREE


# A whole string that is a code (``TUBELESS_STEP_FAILED``, ``MCP_TOOL_ERROR``); a family prefix
# (``TUBELESS_DEFINITION_``) or prose naming a code is not one.
_CODE = re.compile(r"(?:TUBELESS|MCP)(?:_[A-Z0-9]+)+")
_PACKAGE = Path(tubeless.__file__).parent


def _code_literals(path: Path) -> list[tuple[int, str]]:
    """``(line, code)`` of each code literal in a module, docstrings and ``__all__`` aside."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skipped: set[int] = set()
    for node in ast.walk(tree):
        # A bare string statement is a docstring (of a module, class, function or attribute).
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            skipped.add(id(node.value))
        # ``__all__`` lists the names of constants, which look like codes.
        if isinstance(node, ast.Assign) and any(
            isinstance(target, ast.Name) and target.id == "__all__" for target in node.targets
        ):
            skipped.update(id(item) for item in ast.walk(node.value))
        # An environment variable's name (``TOKEN_ENV = "TUBELESS_SERVE_TOKEN"``) is no code.
        if isinstance(node, ast.Assign) and any(
            isinstance(target, ast.Name) and target.id.endswith("_ENV") for target in node.targets
        ):
            skipped.update(id(item) for item in ast.walk(node.value))
    return [
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and id(node) not in skipped
        and _CODE.fullmatch(node.value)
    ]


def _is_code(name: str, value: object) -> bool:
    return name.isupper() and isinstance(value, str) and bool(_CODE.fullmatch(value))


def test_every_code_literal_of_the_package_is_written_in_errors_py() -> None:
    """Elsewhere a code is a constant imported from ``tubeless.errors``, never a literal."""
    strays = [
        f"{path.relative_to(_PACKAGE.parent)}:{line}: {code}"
        for path in sorted(_PACKAGE.rglob("*.py"))
        if path != _PACKAGE / "errors.py"
        for line, code in _code_literals(path)
    ]
    assert strays == []


def test_the_code_scan_sees_the_codes_of_errors_py() -> None:
    """Guards the scan: it finds each constant's literal in errors.py, so it would find a stray."""
    found = {code for _, code in _code_literals(_PACKAGE / "errors.py")}
    constants = {value for name, value in vars(codes).items() if _is_code(name, value)}
    assert {"TUBELESS_STEP_FAILED", "TUBELESS_PROVIDER_TIMEOUT", "MCP_TOOL_ERROR"} <= found
    assert constants == found


def test_no_two_code_constants_share_a_code() -> None:
    names = [name for name, value in vars(codes).items() if _is_code(name, value)]
    values = [getattr(codes, name) for name in names]
    assert len(values) == len(set(values)), names
