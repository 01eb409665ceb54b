"""The template sandbox: jinja2's immutable sandbox, bounded, seeing nothing but ``input``.

jinja2's sandbox already refuses unsafe attributes (dunders, ``mro``, ...) and long ranges.
This one also bounds what a template can make: sequence repetition and concatenation, integer
powers and string ``%`` formatting are checked before they run (and never folded at parse time,
so checking a project computes nothing); the filters that allocate by a requested width
(``center``, ``indent``, ``format``) are gone; and no global name (``self``, ``lipsum``,
``range``, ``cycler``, ...) exists: templates see ``input`` and the names they bind themselves.
"""

from __future__ import annotations

from typing import Any

from jinja2 import StrictUndefined, meta, nodes
from jinja2.exceptions import SecurityError
from jinja2.sandbox import ImmutableSandboxedEnvironment

__all__ = ["MAX_ITEMS", "SANDBOX", "check_names"]

#: The most characters or items one operation in a template may produce.
MAX_ITEMS = 1_000_000
#: The largest integer (in bits) a ``**`` in a template may produce.
_MAX_POWER_BITS = 100_000
_WIDTH_FILTERS = ("center", "indent", "format")
_ALLOWED_NAMES = frozenset({"input"})


def _size(value: Any) -> int | None:
    return len(value) if isinstance(value, (str, list, tuple)) else None


def _check_binop(operator: str, left: Any, right: Any) -> None:
    if operator == "*":
        for sequence, times in ((left, right), (right, left)):
            size = _size(sequence)
            if size is not None and isinstance(times, int) and size * times > MAX_ITEMS:
                raise SecurityError(f"a template may not repeat a value past {MAX_ITEMS} items")
    elif operator == "+":
        sizes = (_size(left), _size(right))
        if sizes[0] is not None and sizes[1] is not None and sizes[0] + sizes[1] > MAX_ITEMS:
            raise SecurityError(f"a template may not build a value past {MAX_ITEMS} items")
    elif operator == "**":
        if (
            isinstance(left, int)
            and isinstance(right, int)
            and abs(left) > 1
            and right * abs(left).bit_length() > _MAX_POWER_BITS
        ):
            raise SecurityError("a template may not compute such a large power")
    elif operator == "%" and isinstance(left, str):
        raise SecurityError("templates may not use % string formatting; use ~ and filters")


class _BoundedSandbox(ImmutableSandboxedEnvironment):
    """Checks size-producing operators at run time (which also stops folding them at parse)."""

    intercepted_binops = frozenset({"*", "**", "+", "%", "//"})

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        _check_binop(operator, left, right)
        return super().call_binop(context, operator, left, right)


SANDBOX = _BoundedSandbox(undefined=StrictUndefined, autoescape=False)
SANDBOX.globals.clear()
for _name in _WIDTH_FILTERS:
    SANDBOX.filters.pop(_name, None)


def check_names(tree: nodes.Template) -> list[str]:
    """Names a template reads that it neither binds nor may see (only ``input`` is given)."""
    unknown = meta.find_undeclared_variables(tree) - _ALLOWED_NAMES
    # ``self`` (the template reference) is not reported as undeclared; it is still a global.
    unknown.update(n.name for n in tree.find_all(nodes.Name) if n.name == "self")
    return sorted(unknown)
