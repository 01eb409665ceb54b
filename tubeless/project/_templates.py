"""Templates: jinja2, sandboxed, strict about undefined names, checked when a project loads.

A template mapping renders every string in it once per invocation with ``{input: <validated
input as JSON data>}``. A string that is exactly one ``{{ expression }}`` yields the expression's
native value (a list stays a list); any other string renders to text.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from jinja2 import StrictUndefined, Undefined
from jinja2 import TemplateError as JinjaError
from jinja2.sandbox import ImmutableSandboxedEnvironment

from tubeless.errors import TemplateError

__all__ = ["compile_template", "compile_template_mapping", "template_problems"]

_ENV = ImmutableSandboxedEnvironment(undefined=StrictUndefined, autoescape=False)
_SINGLE = re.compile(r"\A\s*\{\{(?P<expr>(?:(?!\}\}).)*)\}\}\s*\Z", re.DOTALL)

Renderer = Callable[[Mapping[str, Any]], Any]


def _escape(part: str) -> str:
    return part.replace("~", "~0").replace("/", "~1")


def compile_template(text: str, where: str) -> Renderer:
    """Compile one template string; raises :class:`TemplateError` naming ``where``."""
    single = _SINGLE.match(text)
    try:
        if single is not None:
            expression = _ENV.compile_expression(single.group("expr"), undefined_to_none=False)

            def native(context: Mapping[str, Any]) -> Any:
                try:
                    result = expression(**context)
                    if isinstance(result, Undefined):
                        str(result)  # StrictUndefined raises, naming what is missing
                except Exception as exc:  # the sandbox's errors and the expression's own
                    raise TemplateError(
                        f"{where}: template failed: {type(exc).__name__}: {exc}"
                    ) from None
                return result

            return native
        template = _ENV.from_string(text)
    except JinjaError as exc:
        raise TemplateError(f"{where}: invalid template: {exc}") from None

    def render(context: Mapping[str, Any]) -> Any:
        try:
            return template.render(**context)
        except Exception as exc:  # the sandbox's errors and the template's own
            raise TemplateError(f"{where}: template failed: {type(exc).__name__}: {exc}") from None

    return render


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
        single = _SINGLE.match(value)
        try:
            if single is not None:
                _ENV.compile_expression(single.group("expr"))
            else:
                _ENV.parse(value)
        except JinjaError as exc:
            found.append((pointer, f"invalid template: {exc}"))
    elif isinstance(value, Mapping):
        for key, item in value.items():
            found.extend(template_problems(item, f"{pointer}/{_escape(str(key))}"))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found.extend(template_problems(item, f"{pointer}/{index}"))
    return found
