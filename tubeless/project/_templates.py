"""Templates: jinja2, sandboxed, strict about undefined names, checked when a project loads.

A template mapping renders every string in it once per invocation with ``{input: <validated
input as JSON data>}``. A string that is exactly one ``{{ expression }}`` yields the expression's
native value (a list stays a list); any other string renders to text. One invocation renders
the whole mapping under one work budget (:mod:`tubeless.project._budget`); ``check`` is called
every few hundred operations and may raise to stop the render (``CancelToken.raise_if_cancelled``
makes it interruptible).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol

from jinja2 import Undefined

from tubeless.errors import TemplateError, one_line
from tubeless.project._budget import TemplateLimit, running
from tubeless.project._sandbox import compile_expression, compile_text
from tubeless.project._template_check import SINGLE as _SINGLE
from tubeless.project._template_check import escape as _escape
from tubeless.project._template_check import string_problem as _problem
from tubeless.project._template_check import template_problems
from tubeless.project._template_walk import PARSE_ERRORS

__all__ = ["Renderer", "compile_template_mapping", "template_problems"]


_Part = Callable[[Mapping[str, Any]], Any]


class Renderer(Protocol):
    """Renders a compiled template mapping from a context (``{"input": ...}``)."""

    def __call__(
        self, context: Mapping[str, Any], check: Callable[[], object] | None = None
    ) -> Any: ...


def _failed(where: str, exc: BaseException) -> TemplateError:
    if isinstance(exc, TemplateLimit):
        return TemplateError(f"{where}: template failed: {one_line(str(exc))}")
    return TemplateError(f"{where}: template failed: {type(exc).__name__}: {one_line(str(exc))}")


def _compile(text: str, where: str) -> _Part:
    """Compile one template string (it renders under the budget already running)."""
    problem = _problem(text)
    if problem is not None:
        raise TemplateError(f"{where}: {problem}")
    single = _SINGLE.match(text)
    try:
        if single is not None:
            expression = compile_expression(single.group("expr"))

            def native(context: Mapping[str, Any]) -> Any:
                try:
                    result = expression(**context)
                    if isinstance(result, Undefined):
                        str(result)  # StrictUndefined raises, naming what is missing
                except (Exception, TemplateLimit) as exc:  # the sandbox's and the expression's
                    raise _failed(where, exc) from None
                return result

            return native
        template = compile_text(text)
    except PARSE_ERRORS as exc:
        message = one_line(str(exc))
        raise TemplateError(f"{where}: invalid template: {type(exc).__name__}: {message}") from None

    def render(context: Mapping[str, Any]) -> Any:
        try:
            return template.render(**context)
        except (Exception, TemplateLimit) as exc:  # the sandbox's errors and the template's own
            raise _failed(where, exc) from None

    return render


def _compile_mapping(value: Any, where: str) -> _Part:
    if isinstance(value, str):
        return _compile(value, where)
    if isinstance(value, Mapping):
        parts = {
            key: _compile_mapping(item, f"{where}/{_escape(key)}") for key, item in value.items()
        }
        return lambda context: {key: part(context) for key, part in parts.items()}
    if isinstance(value, list):
        items = [_compile_mapping(item, f"{where}/{i}") for i, item in enumerate(value)]
        return lambda context: [item(context) for item in items]
    return lambda context: value


def compile_template_mapping(value: Any, where: str) -> Renderer:
    """Compile every string of a nested mapping/list; the result renders the whole structure
    under one budget. Raises :class:`TemplateError` naming the pointer of a bad string."""
    # Imported here: checking a project (``template_problems``) needs none of the pipeline core.
    from tubeless.pipeline._spi import interruptibly

    part = _compile_mapping(value, where)

    def render(context: Mapping[str, Any], check: Callable[[], object] | None = None) -> Any:
        with running(check):
            # A signal may stop a long render (CPU work that cannot poll the run's token).
            return interruptibly(part, context)

    return render
