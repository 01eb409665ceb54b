"""Templates: jinja2, sandboxed, strict about undefined names, checked when a project loads.

A template mapping renders every string in it once per invocation with ``{input: <validated
input as JSON data>}``. A string that is exactly one ``{{ expression }}`` yields the expression's
native value (a list stays a list); any other string renders to text.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from jinja2 import TemplateError as JinjaError
from jinja2 import Undefined

from tubeless.errors import TemplateError, one_line
from tubeless.pipeline import interruptibly
from tubeless.project._sandbox import SANDBOX, check_names

__all__ = ["compile_template", "compile_template_mapping", "template_problems"]

_ENV = SANDBOX
#: What parsing a hostile template can raise besides jinja2's own errors.
_PARSE_ERRORS = (JinjaError, RecursionError, ValueError, OverflowError, MemoryError, TypeError)
_SINGLE = re.compile(r"\A\s*\{\{(?P<expr>(?:(?!\}\}).)*)\}\}\s*\Z", re.DOTALL)

Renderer = Callable[[Mapping[str, Any]], Any]


def _escape(part: str) -> str:
    return part.replace("~", "~0").replace("/", "~1")


def _problem(text: str) -> str | None:
    """Why ``text`` is not a usable template (parse errors, names it may not see), or None."""
    single = _SINGLE.match(text)
    source = "{{" + single.group("expr") + "}}" if single is not None else text
    try:
        names = check_names(_ENV.parse(source))
    except JinjaError as exc:
        return f"invalid template: {_jinja_message(exc)}"
    except _PARSE_ERRORS as exc:  # nesting or sizes the parser itself cannot take
        return f"invalid template: {type(exc).__name__}: {one_line(str(exc))}"
    if names:
        return (
            f"templates see only 'input' (and names they set themselves); unknown: "
            f"{', '.join(names)}"
        )
    return None


def _jinja_message(exc: JinjaError) -> str:
    """jinja's own message on one line (a syntax error's ``str()`` may add its location lines)."""
    return one_line(exc.message or type(exc).__name__)


def compile_template(text: str, where: str) -> Renderer:
    """Compile one template string; raises :class:`TemplateError` naming ``where``."""
    problem = _problem(text)
    if problem is not None:
        raise TemplateError(f"{where}: {problem}")
    single = _SINGLE.match(text)
    try:
        if single is not None:
            expression = _ENV.compile_expression(single.group("expr"), undefined_to_none=False)

            def evaluate(context: Mapping[str, Any]) -> Any:
                try:
                    result = expression(**context)
                    if isinstance(result, Undefined):
                        str(result)  # StrictUndefined raises, naming what is missing
                except Exception as exc:  # the sandbox's errors and the expression's own
                    raise TemplateError(
                        f"{where}: template failed: {type(exc).__name__}: {one_line(str(exc))}"
                    ) from None
                return result

            # A signal may stop a long evaluation (CPU work that cannot poll the run's token).
            return lambda context: interruptibly(evaluate, context)
        template = _ENV.from_string(text)
    except _PARSE_ERRORS as exc:
        message = one_line(str(exc))
        raise TemplateError(f"{where}: invalid template: {type(exc).__name__}: {message}") from None

    def render(context: Mapping[str, Any]) -> Any:
        try:
            return template.render(**context)
        except Exception as exc:  # the sandbox's errors and the template's own
            message = f"{type(exc).__name__}: {one_line(str(exc))}"
            raise TemplateError(f"{where}: template failed: {message}") from None

    return lambda context: interruptibly(render, context)


def compile_template_mapping(value: Any, where: str) -> Renderer:
    """Compile every string of a nested mapping/list; the result renders the whole structure."""
    if isinstance(value, str):
        return compile_template(value, where)
    if isinstance(value, Mapping):
        parts = {key: compile_template_mapping(item, f"{where}/{_escape(key)}")
                 for key, item in value.items()}
        return lambda context: {key: part(context) for key, part in parts.items()}
    if isinstance(value, list):
        items = [compile_template_mapping(item, f"{where}/{i}") for i, item in enumerate(value)]
        return lambda context: [item(context) for item in items]
    return lambda context: value


def template_problems(value: Any, pointer: str) -> list[tuple[str, str]]:
    """``(pointer, message)`` for every string of ``value`` that is not a valid template."""
    found: list[tuple[str, str]] = []
    if isinstance(value, str):
        problem = _problem(value)
        if problem is not None:
            found.append((pointer, problem))
    elif isinstance(value, Mapping):
        for key, item in value.items():
            found.extend(template_problems(item, f"{pointer}/{_escape(str(key))}"))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found.extend(template_problems(item, f"{pointer}/{index}"))
    return found
