"""Checking a template without running anything: parse it, then walk the tree by hand.

Reached through :mod:`tubeless.project._template_check`, which imports this module (and jinja2)
only for a string that can hold a template at all.

jinja2's own name finder (``jinja2.meta.find_undeclared_variables``) runs the code generator,
which folds constant expressions, so checking ``{{ [1]|batch(10**8, 0)|list }}`` would build
the list. Here the template is only parsed (the parser folds nothing) and the tree is walked
iteratively: every name read must be ``input``, bound by the template itself (``set``, ``for``,
``macro`` and ``call`` arguments, ``with``, imports) in an enclosing scope, or a name jinja2
provides inside the construct that uses it (``loop`` in a loop body, ``caller``, ``varargs`` and
``kwargs`` in a macro); every filter and test must exist.
"""

from __future__ import annotations

from jinja2 import TemplateError as JinjaError
from jinja2 import nodes
from jinja2.exceptions import TemplateSyntaxError
from jinja2.parser import Parser

from tubeless.errors import one_line
from tubeless.project._sandbox import SANDBOX

__all__ = ["PARSE_ERRORS", "input_reads", "template_problem"]

#: What parsing a hostile template can raise besides jinja2's own errors.
PARSE_ERRORS = (JinjaError, RecursionError, ValueError, OverflowError, MemoryError, TypeError)
_ALLOWED = frozenset({"input"})
#: Nodes whose bodies are a scope of their own (what they bind stays inside).
_SCOPES = (
    nodes.For,
    nodes.Macro,
    nodes.CallBlock,
    nodes.With,
    nodes.FilterBlock,
    nodes.AssignBlock,
    nodes.Block,
    nodes.Scope,
    nodes.OverlayScope,
    nodes.ScopedEvalContextModifier,
)
_MACRO_NAMES = frozenset({"caller", "varargs", "kwargs"})


def template_problem(source: str) -> str | None:
    """Why ``source`` is not a usable template (syntax, names it may not see, unknown filters
    or tests), or None. Nothing is compiled, folded or run."""
    try:
        # The parser itself, without SANDBOX.parse's environment pass over every node (the tree
        # is only walked, never compiled): a tenth of the time of a check.
        body = Parser(SANDBOX, source).subparse()
        return _walk(nodes.Template(body, lineno=1))
    except TemplateSyntaxError as exc:  # its str() adds the source; the message is one line
        return f"invalid template: {one_line(exc.message or type(exc).__name__)}"
    except JinjaError as exc:
        return f"invalid template: {one_line(str(exc))}"
    except PARSE_ERRORS as exc:  # nesting or sizes the parser itself cannot take
        return f"invalid template: {type(exc).__name__}: {exc}"


class _Scope:
    """Names bound in one scope of a template, and the scope around it."""

    __slots__ = ("names", "parent")

    def __init__(self, parent: _Scope | None, names: frozenset[str] = frozenset()) -> None:
        self.parent = parent
        self.names: set[str] = set(names)

    def binds(self, name: str) -> bool:
        scope: _Scope | None = self
        while scope is not None:
            if name in scope.names:
                return True
            scope = scope.parent
        return False


def _children(node: nodes.Node) -> list[nodes.Node]:
    found: list[nodes.Node] = []
    for field in node.fields:
        value = getattr(node, field, None)
        if isinstance(value, nodes.Node):
            found.append(value)
        elif isinstance(value, list):
            found.extend(item for item in value if isinstance(item, nodes.Node))
    return found


def _split(node: nodes.Node, scope: _Scope) -> list[tuple[nodes.Node, _Scope]]:
    """A scope node's parts, each with the scope it is evaluated in (its own body gets a new
    one, holding what jinja2 provides there)."""
    body: list[nodes.Node] = getattr(node, "body", [])
    if isinstance(node, nodes.For):
        inner = _Scope(scope, frozenset({"loop"}))
        parts = [(node.iter, scope), (node.target, inner)]
        parts += [(child, scope) for child in node.else_]
        if node.test is not None:
            parts.append((node.test, inner))
    elif isinstance(node, nodes.Macro | nodes.CallBlock):
        inner = _Scope(scope, _MACRO_NAMES)
        parts = [(arg, inner) for arg in node.args]
        parts += [(default, scope) for default in node.defaults]
        if isinstance(node, nodes.Macro):
            scope.names.add(node.name)
        else:
            parts.append((node.call, scope))
    elif isinstance(node, nodes.With):
        inner = _Scope(scope)
        parts = [(target, inner) for target in node.targets]
        parts += [(value, scope) for value in node.values]
    elif isinstance(node, nodes.AssignBlock):
        inner = _Scope(scope)
        parts = [(node.target, scope)]
        if node.filter is not None:
            parts.append((node.filter, scope))
    elif isinstance(node, nodes.FilterBlock):
        inner = _Scope(scope)
        parts = [(node.filter, scope)]
    elif isinstance(node, nodes.ScopedEvalContextModifier):
        inner = _Scope(scope)
        parts = [(keyword.value, scope) for keyword in node.options]
    else:  # Block, Scope, OverlayScope
        inner = _Scope(scope)
        own = {id(child) for child in body}
        parts = [(child, scope) for child in _children(node) if id(child) not in own]
    parts += [(child, inner) for child in body]
    return parts


def _walk(tree: nodes.Template) -> str | None:
    """One pass over the tree: names bound per scope, names read, filters and tests used."""
    root = _Scope(None)
    reads: list[tuple[str, _Scope]] = []
    missing: list[str] = []
    stack: list[tuple[nodes.Node, _Scope, bool]] = [(node, root, False) for node in tree.body]
    while stack:
        node, scope, soft = stack.pop()
        if isinstance(node, nodes.Name):
            if node.ctx == "load":
                reads.append((node.name, scope))
            else:  # stored or a parameter: bound in the scope it stands in
                scope.names.add(node.name)
            continue
        if isinstance(node, nodes.NSRef):
            reads.append((node.name, scope))
        elif isinstance(node, nodes.Import):
            scope.names.add(node.target)
        elif isinstance(node, nodes.FromImport):
            scope.names.update(n[1] if isinstance(n, tuple) else n for n in node.names)
        elif isinstance(node, nodes.Filter | nodes.Test) and not soft and node.name is not None:
            table = SANDBOX.filters if isinstance(node, nodes.Filter) else SANDBOX.tests
            if node.name not in table:
                kind = "filter" if isinstance(node, nodes.Filter) else "test"
                missing.append(f"No {kind} named {node.name!r}.")
        # Inside an if or a conditional expression jinja2 only fails when the branch runs.
        soft = soft or isinstance(node, nodes.If | nodes.CondExpr)
        if isinstance(node, _SCOPES):
            stack.extend((child, where, soft) for child, where in _split(node, scope))
        else:
            stack.extend((child, scope, soft) for child in _children(node))
    if missing:
        return f"invalid template: {sorted(missing)[0]}"
    unknown = {
        name
        for name, scope in reads
        if name == "self" or (name not in _ALLOWED and not scope.binds(name))
    }
    if unknown:
        return (
            "templates see only 'input' (and names they set themselves); unknown: "
            f"{', '.join(sorted(unknown))}"
        )
    return None


def input_reads(source: str) -> list[tuple[str, ...]]:
    """The paths a valid template reads from ``input`` by name: ``{{ input.a.b }}`` and
    ``{{ input['a'].b }}`` give ``("a", "b")`` (and ``("a",)``); an expression key ends a path.
    Nothing when the template binds ``input`` itself or cannot be parsed."""
    try:
        body = Parser(SANDBOX, source).subparse()
    except PARSE_ERRORS:
        return []
    found: list[tuple[str, ...]] = []
    guarded: set[tuple[str, ...]] = set()
    stack: list[nodes.Node] = list(body)
    while stack:
        node = stack.pop()
        if isinstance(node, nodes.Name) and node.name == "input" and node.ctx != "load":
            return []  # {% set input = ... %} and the like: the names are the template's own
        if isinstance(node, nodes.Getattr | nodes.Getitem):
            path = _input_path(node)
            if path:
                found.append(path)
        elif _guards(node):
            # ``input.x is defined`` and ``input.x | default(...)`` are how a template reads a
            # name that may be absent: every read of that path (and below it) is left alone.
            inner = getattr(node, "node", None)
            path = _input_path(inner) if isinstance(inner, nodes.Getattr | nodes.Getitem) else None
            if path:
                guarded.add(path)
        stack.extend(_children(node))
    return [path for path in found if not any(path[: len(guard)] == guard for guard in guarded)]


def _guards(node: nodes.Node) -> bool:
    """A ``defined``/``undefined`` test or a ``default`` filter."""
    if isinstance(node, nodes.Test):
        return node.name in {"defined", "undefined"}
    return isinstance(node, nodes.Filter) and node.name in {"default", "d"}


def _input_path(node: nodes.Getattr | nodes.Getitem) -> tuple[str, ...] | None:
    """``("a", "b")`` for ``input.a.b``, or None when the chain does not start at ``input``."""
    names: list[str] = []
    current: nodes.Node = node
    while isinstance(current, nodes.Getattr | nodes.Getitem):
        if isinstance(current, nodes.Getattr):
            names.append(current.attr)
        elif isinstance(current.arg, nodes.Const) and isinstance(current.arg.value, str):
            names.append(current.arg.value)
        else:
            names.clear()  # an expression key: what follows it is not a known path
        current = current.node
    if not (isinstance(current, nodes.Name) and current.name == "input" and names):
        return None
    return tuple(reversed(names))
