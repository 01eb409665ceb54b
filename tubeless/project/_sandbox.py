"""The template sandbox: jinja2's immutable sandbox, bounded by work and size, seeing ``input``.

jinja2's sandbox already refuses unsafe attributes (dunders, ``mro``, ...). This one also bounds
what a render may do, whatever it uses (see :mod:`tubeless.project._budget`):

- every filter and test is wrapped: it is counted, refused before it runs when its result could
  be huge, and its result is measured (the wrappers take the context, so jinja2 never folds a
  filter while compiling: checking or loading a project computes nothing);
- every operator is intercepted (counted, sizes checked before ``*``, ``+`` and ``**`` run),
  and so are calls, attribute and item lookups and ``str.format`` (whose widths count);
- the compiled tree is instrumented: each loop iteration and each macro body is counted (with
  the literal text it outputs), ``~`` builds its text within the bounds, and every buffer the
  template joins (its output included) is at most :data:`MAX_ITEMS` characters;
- no global name (``self``, ``lipsum``, ``range``, ``cycler``, ...) exists, and the filters that
  allocate by a requested width (``center``, ``indent``, ``format``) are gone.
"""

from __future__ import annotations

import re
import string
import types
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from jinja2 import StrictUndefined, nodes, pass_context
from jinja2.environment import TemplateExpression
from jinja2.exceptions import SecurityError, TemplateSyntaxError
from jinja2.parser import Parser
from jinja2.runtime import Context, LoopContext, Macro, markup_join, str_join
from jinja2.sandbox import ImmutableSandboxedEnvironment
from jinja2.visitor import NodeTransformer

from tubeless.project._budget import (
    COST_CALL,
    COST_FILTER,
    COST_MACRO,
    COST_STEP,
    MAX_INT_BITS,
    MAX_ITEMS,
    TemplateLimit,
    charge,
    check_estimate,
    checked,
    counted,
    measure,
)

__all__ = ["MAX_ITEMS", "SANDBOX", "compile_expression", "compile_text"]

_WIDTH_FILTERS = ("center", "indent", "format")
_EACH, _CHARGE, _CONCAT = "_tubeless_each", "_tubeless_charge", "_tubeless_concat"
_DIGITS = re.compile(r"\d+")
_SIZE_METHODS = (str, bytes, bytearray, list, tuple, int)


def _sequence(value: Any) -> bool:
    return isinstance(value, str | bytes | list | tuple)


def _check_binop(operator: str, left: Any, right: Any) -> None:
    """Refuse an operator whose result would be past the bounds, before it runs."""
    if operator == "*":
        for sequence, times in ((left, right), (right, left)):
            if (
                _sequence(sequence)
                and isinstance(times, int)
                and (measure(sequence)[0] * times > MAX_ITEMS)
            ):
                raise TemplateLimit(f"a template may not repeat a value past {MAX_ITEMS:,} items")
        if (
            isinstance(left, int)
            and isinstance(right, int)
            and left.bit_length() + right.bit_length() > MAX_INT_BITS + 1
        ):
            raise TemplateLimit("a template may not compute such a large product")
    elif operator == "+":
        if (
            _sequence(left)
            and _sequence(right)
            and (measure(left)[0] + measure(right)[0] > MAX_ITEMS)
        ):
            raise TemplateLimit(f"a template may not build a value past {MAX_ITEMS:,} items")
    elif operator == "**":
        if (
            isinstance(left, int)
            and isinstance(right, int)
            and abs(left) > 1
            and right * abs(left).bit_length() > MAX_INT_BITS
        ):
            raise TemplateLimit("a template may not compute such a large power")
    elif operator == "%" and isinstance(left, str):
        raise SecurityError("templates may not use % string formatting; use ~ and filters")


def _describe(obj: Any) -> str:
    name = getattr(obj, "__name__", None)
    return f"calling {name!r}" if isinstance(name, str) else "a call"


def _format_widths(template: str) -> tuple[int, bool]:
    """The sum of the numbers in a format string's specs (``{:>1000}`` pads to 1,000), and
    whether a spec takes a width from the arguments (``{:>{}}``)."""
    total, nested, pending = 0, False, [template]
    try:
        while pending:
            for _, _, spec, _ in string.Formatter().parse(pending.pop()):
                if spec:
                    total += sum(int(digits) for digits in _DIGITS.findall(spec))
                    nested = nested or "{" in spec
                    pending.append(spec)
    except ValueError:  # a malformed format string: str.format says why when it runs
        return 0, False
    return total, nested


def _bounded_filter(name: str, func: Callable[..., Any], kind: str) -> Callable[..., Any]:
    """``func`` counted, estimated before it runs and measured after (jinja2 never folds it)."""
    what = f"the {kind} {name!r}"
    passes = getattr(getattr(func, "jinja_pass_arg", None), "name", None)

    @pass_context
    def bounded(context: Context, value: Any, *args: Any, **kwargs: Any) -> Any:
        check_estimate(what, value, args, kwargs, cost=COST_FILTER)
        if isinstance(value, Iterator):
            value = counted(value, what)
        if passes == "context":
            result = func(context, value, *args, **kwargs)
        elif passes == "eval_context":
            result = func(context.eval_ctx, value, *args, **kwargs)
        elif passes == "environment":
            result = func(context.environment, value, *args, **kwargs)
        else:
            result = func(value, *args, **kwargs)
        return checked(result, what)

    bounded.__name__ = getattr(func, "__name__", name)
    bounded.__doc__ = func.__doc__
    return bounded


@pass_context
def _each(context: Context, iterable: Any, weight: int) -> Iterator[Any]:
    """A loop's items, each counted as one operation plus the literal text of the body."""
    charge(COST_STEP)
    return counted(iterable, "a for loop", weight)


@pass_context
def _charge(context: Context, value: str, weight: int) -> str:
    """Counts one run of a macro body (or of a recursive loop's body) with its literal text."""
    charge(COST_STEP, weight)
    return value


@pass_context
def _concat(context: Context, parts: tuple[Any, ...]) -> str:
    """``a ~ b ~ c`` (jinja2's own join), refused before joining past :data:`MAX_ITEMS`."""
    total = sum(len(str(part)) for part in parts)
    if total > MAX_ITEMS:
        raise TemplateLimit(f"a template may not join text past {MAX_ITEMS:,} characters")
    charge(COST_FILTER, total)
    escaped = context.eval_ctx.autoescape or context.eval_ctx.volatile
    return markup_join(parts) if escaped else str_join(parts)


def _bounded_concat(parts: Iterable[str]) -> str:
    """Joins a buffer (the output, a macro's, a ``set`` block's) of at most MAX_ITEMS chars."""
    pieces: list[str] = []
    total = 0
    for piece in parts:
        total += len(piece)
        if total > MAX_ITEMS:
            raise TemplateLimit(f"a template may not output more than {MAX_ITEMS:,} characters")
        pieces.append(piece)
    charge(COST_STEP, total)
    return "".join(pieces)


class _BoundedSandbox(ImmutableSandboxedEnvironment):
    """Counts and bounds every operation a template performs (see the module docstring)."""

    intercepted_binops = frozenset({"+", "-", "*", "/", "//", "%", "**"})
    intercepted_unops = frozenset({"+", "-"})
    concat = staticmethod(_bounded_concat)  # jinja2's is "".join

    def call_binop(self, context: Context, operator: str, left: Any, right: Any) -> Any:
        charge(COST_STEP)
        _check_binop(operator, left, right)
        result = super().call_binop(context, operator, left, right)
        return checked(result, f"the operator {operator!r}")

    def call_unop(self, context: Context, operator: str, arg: Any) -> Any:
        charge(COST_STEP)
        return super().call_unop(context, operator, arg)

    def getattr(self, obj: Any, attribute: str) -> Any:
        charge(COST_STEP)
        return super().getattr(obj, attribute)

    def getitem(self, obj: Any, argument: Any) -> Any:
        charge(COST_STEP)
        value = super().getitem(obj, argument)
        return checked(value, "a slice") if isinstance(argument, slice) else value

    def wrap_str_format(self, value: Any) -> Callable[..., str] | None:
        wrapper = super().wrap_str_format(value)
        if wrapper is None:
            return None
        text: str = value.__self__
        what = f"the format string {text[:40]!r}"

        def bounded(*args: Any, **kwargs: Any) -> str:
            values = args[0].values() if args and isinstance(args[0], dict) else args
            widths, nested = _format_widths(text)
            # Arguments are data (a timestamp is not a width) unless a spec takes its width
            # from them: then numbers count by magnitude.
            check_estimate(what, text, values, kwargs, cost=0, extra=widths, numbers=nested)
            result: str = checked(wrapper(*args, **kwargs), what)
            return result

        bounded.__name__ = value.__name__
        return bounded

    def call(
        __self,  # jinja2's spelling: no keyword argument of the call can collide
        __context: Context,
        __obj: Any,
        *args: Any,
        **kwargs: Any,
    ) -> Any:
        what = _describe(__obj)
        if isinstance(__obj, Macro | LoopContext):  # the template's own macros and loops
            charge(COST_MACRO)
        else:
            subject = getattr(__obj, "__self__", None)
            if isinstance(subject, types.ModuleType):
                subject = None
            # Methods of text, lists and integers take sizes as numbers (ljust, zfill,
            # expandtabs, to_bytes); a mapping's take data (input.get("ts", 1700000000)).
            numbers = isinstance(subject, _SIZE_METHODS) and not isinstance(subject, bool)
            check_estimate(what, subject, args, kwargs, cost=COST_CALL, numbers=numbers)
            args = tuple(counted(a, what) if isinstance(a, Iterator) else a for a in args)
        return checked(super().call(__context, __obj, *args, **kwargs), what)


class _Instrument(NodeTransformer):
    """Counts loops and macro bodies, and bounds ``~``, in a parsed template."""

    def visit_For(self, node: nodes.For) -> nodes.Node:
        self.generic_visit(node)  # in place
        weight = _literal_size(node.body)
        node.iter = _filter(node.iter, _EACH, weight, node.lineno)
        if node.recursive:
            node.body.insert(0, _charge_node(weight, node.lineno))
        return node

    def visit_Macro(self, node: nodes.Macro) -> nodes.Node:
        self.generic_visit(node)  # in place
        node.body.insert(0, _charge_node(_literal_size(node.body), node.lineno))
        return node

    def visit_CallBlock(self, node: nodes.CallBlock) -> nodes.Node:
        self.generic_visit(node)  # in place
        node.body.insert(0, _charge_node(_literal_size(node.body), node.lineno))
        return node

    def visit_Concat(self, node: nodes.Concat) -> nodes.Node:
        self.generic_visit(node)  # in place
        parts = nodes.Tuple(list(node.nodes), "load", lineno=node.lineno)
        return nodes.Filter(parts, _CONCAT, [], [], None, None, lineno=node.lineno)


def _filter(value: nodes.Node, name: str, weight: int, lineno: int) -> nodes.Filter:
    return nodes.Filter(value, name, [nodes.Const(weight)], [], None, None, lineno=lineno)


def _charge_node(weight: int, lineno: int) -> nodes.Output:
    return nodes.Output([_filter(nodes.Const(""), _CHARGE, weight, lineno)], lineno=lineno)


def _literal_size(body: list[nodes.Node]) -> int:
    """Characters of literal text a body outputs each time it runs (nested loops and macros
    count their own)."""
    size, stack = 1, list(body)
    while stack:
        node = stack.pop()
        if isinstance(node, nodes.TemplateData):
            size += len(node.data)
        elif not isinstance(node, nodes.For | nodes.Macro | nodes.CallBlock):
            stack.extend(node.iter_child_nodes())
    return size


def _instrumented(tree: nodes.Template) -> nodes.Template:
    result = _Instrument().visit(tree)
    assert isinstance(result, nodes.Template)
    result.set_environment(SANDBOX)
    return result


def compile_text(source: str) -> Any:
    """A template compiled from ``source``, instrumented (render it under a budget)."""
    return SANDBOX.from_string(_instrumented(SANDBOX.parse(source)))


def compile_expression(source: str) -> TemplateExpression:
    """``SANDBOX.compile_expression(source, undefined_to_none=False)``, instrumented."""
    parser = Parser(SANDBOX, source, state="variable")
    expression = parser.parse_expression()
    if not parser.stream.eos:
        raise TemplateSyntaxError("chunk after expression", parser.stream.current.lineno)
    body: list[nodes.Node] = [nodes.Assign(nodes.Name("result", "store"), expression, lineno=1)]
    template = SANDBOX.from_string(_instrumented(nodes.Template(body, lineno=1)))
    return TemplateExpression(template, undefined_to_none=False)


SANDBOX = _BoundedSandbox(undefined=StrictUndefined, autoescape=False)
SANDBOX.globals.clear()
for _name in _WIDTH_FILTERS:
    SANDBOX.filters.pop(_name, None)
for _table, _kind in ((SANDBOX.filters, "filter"), (SANDBOX.tests, "test")):
    for _name, _func in list(_table.items()):
        _table[_name] = _bounded_filter(_name, _func, _kind)
SANDBOX.filters.update({_EACH: _each, _CHARGE: _charge, _CONCAT: _concat})
