"""Checking the templates of a project without running anything, and without jinja2 for the
strings that cannot hold a template.

A string without ``{`` has no tag, expression or comment: it is plain text, valid, and reads
nothing. Only the others are parsed and walked (:mod:`tubeless.project._template_walk`, which
imports jinja2), so ``tubeless validate`` on a project without templates never imports jinja2.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from typing import Any, Final

__all__ = [
    "SINGLE",
    "escape",
    "input_reads",
    "string_problem",
    "template_problem",
    "template_problems",
]

#: A string that is exactly one ``{{ expression }}`` (it yields the expression's native value).
SINGLE: Final = re.compile(r"\A\s*\{\{(?P<expr>(?:(?!\}\}).)*)\}\}\s*\Z", re.DOTALL)


@functools.lru_cache(maxsize=4096)
def template_problem(source: str) -> str | None:
    """Why ``source`` is not a usable template (syntax, names it may not see, unknown filters
    or tests), or None. Nothing is compiled, folded or run."""
    if "{" not in source:  # no tag, expression or comment can start: plain text
        return None
    from tubeless.project._template_walk import template_problem as walked

    return walked(source)


def input_reads(source: str) -> list[tuple[str, ...]]:
    """The paths a valid template reads from ``input`` by name (see
    :func:`tubeless.project._template_walk.input_reads`); none for plain text."""
    if "{" not in source:
        return []
    from tubeless.project._template_walk import input_reads as walked

    return walked(source)


def escape(part: str) -> str:
    """``part`` as one JSON Pointer token."""
    return part.replace("~", "~0").replace("/", "~1")


def string_problem(text: str) -> str | None:
    """Why ``text`` is not a usable template, or None (parsed and walked, never compiled)."""
    single = SINGLE.match(text)
    return template_problem("{{" + single.group("expr") + "}}" if single is not None else text)


def template_problems(value: Any, pointer: str) -> list[tuple[str, str]]:
    """``(pointer, message)`` for every string of ``value`` that is not a valid template."""
    found: list[tuple[str, str]] = []
    if isinstance(value, str):
        problem = string_problem(value)
        if problem is not None:
            found.append((pointer, problem))
    elif isinstance(value, Mapping):
        for key, item in value.items():
            found.extend(template_problems(item, f"{pointer}/{escape(str(key))}"))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found.extend(template_problems(item, f"{pointer}/{index}"))
    return found
