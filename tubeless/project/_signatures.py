"""Whether a resolved callable can be called the way the harness calls it.

``decide`` is called as ``decide(state, ctx)``, a step's ``run`` as ``run(inputs, ctx)``, and so
on (the call is written out at each use in :mod:`tubeless.project._compile`). A callable whose
signature cannot take those positional arguments (a one-argument ``decide``, a reducer with a
third required parameter, a required keyword-only parameter) would fail on its first call with a
``TypeError``; it is reported when the project loads instead. Callables whose signature cannot
be read (some built-ins) are left to the call.
"""

from __future__ import annotations

import inspect
from typing import Any

__all__ = ["call_problem"]


def call_problem(value: Any, call: str) -> str | None:
    """Why ``value`` cannot be called as ``call`` (``"decide(state, ctx)"``), or None."""
    try:
        signature = inspect.signature(value)
    except (TypeError, ValueError):
        return None
    arguments = call[call.index("(") + 1 : -1].split(", ")
    try:
        signature.bind(*arguments)
    except TypeError as exc:
        return f"cannot be called as {call}: {exc}"
    return None
