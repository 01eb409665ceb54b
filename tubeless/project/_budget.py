"""The work budget of one template render: sizes, operations, and a cooperative stop.

A render is bounded by what it does, not by which filters it uses. Every operation the sandbox
sees (a call, a filter, an operator, an attribute or item lookup, a loop iteration, a macro
body) is counted against :data:`MAX_OPERATIONS`; every value it builds, and every character it
outputs, is measured and counted against :data:`MAX_PRODUCED`; no single value may exceed
:data:`MAX_ITEMS`. A call is refused *before* it runs when an upper estimate of its result
(the size of what it applies to times the sizes of its arguments) exceeds :data:`MAX_ESTIMATE`,
so a one-shot allocation (``'x'.ljust(10**9)``) never happens.

The budget lives in a context variable set by the renderer for the duration of one render; the
sandbox's hooks find it there. A violation raises :class:`TemplateLimit`, a ``BaseException``
so that no ``except Exception`` in a filter can swallow it; the renderer turns it into a
``TemplateError``.
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, Final

__all__ = [
    "COST_CALL",
    "COST_FILTER",
    "COST_MACRO",
    "COST_STEP",
    "MAX_ESTIMATE",
    "MAX_INT_BITS",
    "MAX_ITEMS",
    "MAX_OPERATIONS",
    "MAX_PRODUCED",
    "Budget",
    "TemplateLimit",
    "charge",
    "check_estimate",
    "checked",
    "counted",
    "measure",
    "running",
]

#: The most characters or items one value built by a template may hold.
MAX_ITEMS: Final = 1_000_000
#: The largest integer (in bits; about 4,000 decimal digits) a template may produce.
MAX_INT_BITS: Final = 13_300
#: Operations one render may perform (calls, filters, operators, lookups, loop iterations).
MAX_OPERATIONS: Final = 1_000_000
#: Characters and items one render may build or output in total.
MAX_PRODUCED: Final = 20_000_000
#: The largest estimated result a call may have before it is refused unrun.
MAX_ESTIMATE: Final = 4_000_000
#: What operations cost, in :data:`MAX_OPERATIONS` units (roughly their time, a unit being
#: about a microsecond): a loop iteration, a lookup or an operator; a filter or test; a method
#: call; a macro call.
COST_STEP: Final = 1
COST_FILTER: Final = 2
COST_CALL: Final = 8
COST_MACRO: Final = 12
#: How often (in operation units) the cooperative ``check`` is called.
_CHECK_EVERY: Final = 256

#: Subjects whose methods (and filters applied to them) take sizes as numbers: ``ljust(n)``,
#: ``zfill(n)``, ``expandtabs(n)``, ``to_bytes(n)``, ``batch(n)``, ``slice(n)``, ...
_SIZED = (str, bytes, bytearray, list, tuple, dict, set, frozenset)


class TemplateLimit(BaseException):
    """A render went past one of the bounds; the message names it."""


class _Stopped(BaseException):
    """``check`` raised: carries its exception out of jinja untouched."""

    def __init__(self, error: BaseException) -> None:
        super().__init__(error)
        self.error = error


class Budget:
    """What one render may still do."""

    __slots__ = ("_check", "operations", "produced")

    def __init__(self, check: Callable[[], object] | None = None) -> None:
        self.operations = MAX_OPERATIONS
        self.produced = MAX_PRODUCED
        self._check = check

    def charge(self, operations: int, produced: int = 0) -> None:
        """Count work done; raise :class:`TemplateLimit` once a bound is passed."""
        before = self.operations
        self.operations -= operations
        self.produced -= produced
        if self.operations < 0:
            raise TemplateLimit(
                f"the template did more than {MAX_OPERATIONS:,} operations (calls, filters, "
                "operators, lookups and loop iterations); make it do less work"
            )
        if self.produced < 0:
            raise TemplateLimit(
                f"the template built or output more than {MAX_PRODUCED:,} characters and items "
                "in all; make it build less"
            )
        if self._check is not None and before // _CHECK_EVERY != self.operations // _CHECK_EVERY:
            try:
                self._check()
            except BaseException as exc:
                raise _Stopped(exc) from None


_CURRENT: contextvars.ContextVar[Budget | None] = contextvars.ContextVar(
    "tubeless_template_budget", default=None
)


def running(check: Callable[[], object] | None = None) -> _Running:
    """``with running(check):`` renders under a fresh budget (``check`` may raise to stop)."""
    return _Running(Budget(check))


class _Running:
    __slots__ = ("budget", "token")

    def __init__(self, budget: Budget) -> None:
        self.budget = budget
        self.token: contextvars.Token[Budget | None] | None = None

    def __enter__(self) -> Budget:
        self.token = _CURRENT.set(self.budget)
        return self.budget

    def __exit__(self, kind: object, error: BaseException | None, trace: object) -> None:
        assert self.token is not None
        _CURRENT.reset(self.token)
        if isinstance(error, _Stopped):
            raise error.error from None


def charge(operations: int = 1, produced: int = 0) -> None:
    """Count work against the current render's budget (nothing outside a render)."""
    budget = _CURRENT.get()
    if budget is not None:
        budget.charge(operations, produced)


_TEXT = (str, bytes, bytearray)
_COLLECTIONS = (list, tuple, dict, set, frozenset)


def measure(value: Any, limit: int = MAX_ITEMS) -> tuple[int, int]:
    """``(size, depth)`` of ``value``: characters of text plus items of collections, nested,
    and how deep the collections go; the walk stops once ``size`` passes ``limit``.

    Values shared by reference are counted at every place they appear (that is what printing
    or serialising them costs). Iterators and other objects count as one item.
    """
    if isinstance(value, _TEXT):
        return len(value), 0
    if not isinstance(value, _COLLECTIONS):
        return 1, 0
    size, deepest = 0, 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack and size <= limit:
        item, depth = stack.pop()
        size += len(item)
        deepest = max(deepest, depth)
        for child in (*item.keys(), *item.values()) if isinstance(item, dict) else item:
            if isinstance(child, _TEXT):
                size += len(child)
                if size > limit:
                    break
            elif isinstance(child, _COLLECTIONS):
                stack.append((child, depth + 1))
    return size, deepest


def _weight(value: Any, numbers: bool) -> int:
    """How much ``value`` may contribute to a result built from it."""
    if isinstance(value, _TEXT):
        return len(value)
    if isinstance(value, bool) or value is None:
        return 1
    if isinstance(value, int | float):
        if not numbers:
            return 1
        try:
            return int(min(abs(value), MAX_ESTIMATE + 1))
        except (OverflowError, ValueError):  # inf, nan
            return MAX_ESTIMATE + 1
    size, depth = measure(value, MAX_ESTIMATE)
    return size * max(depth, 1)


def check_estimate(
    what: str,
    subject: Any,
    args: Iterable[Any],
    kwargs: Mapping[str, Any],
    *,
    cost: int,
    extra: int = 0,
    numbers: bool | None = None,
) -> None:
    """Count ``cost`` and refuse a call whose result could exceed :data:`MAX_ESTIMATE`, before
    it runs.

    The estimate is ``(1 + size of the subject) * (1 + the sum of the arguments' sizes)``;
    numbers count by their magnitude when the subject is text, a collection or an integer
    (whose methods and filters take sizes as numbers) unless ``numbers`` says otherwise, and
    ``extra`` is added to the arguments (the widths in a format string, say).
    """
    if numbers is None:
        numbers = isinstance(subject, _SIZED) or (
            isinstance(subject, int) and not isinstance(subject, bool)
        )
    base = 1 if subject is None else 1 + _weight(subject, False)
    total = 1 + extra
    for value in args:
        total += _weight(value, numbers)
    for value in kwargs.values():
        total += _weight(value, numbers)
    estimate = base * total
    charge(cost, min(base + total, MAX_ESTIMATE))
    if estimate > MAX_ESTIMATE:
        raise TemplateLimit(
            f"{what} could build a value far past {MAX_ITEMS:,} items (estimated from the sizes "
            f"of its value and arguments, numbers counted by magnitude, above {MAX_ESTIMATE:,}); "
            "use smaller values"
        )


def checked(value: Any, what: str) -> Any:
    """``value`` once it is within the bounds (counted as built); iterators come back counted."""
    if isinstance(value, int) and not isinstance(value, bool):
        if value.bit_length() > MAX_INT_BITS:
            raise TemplateLimit(
                f"{what} made an integer of more than {MAX_INT_BITS:,} bits (about 4,000 "
                "digits); templates may not build larger integers"
            )
        return value
    if isinstance(value, _TEXT):
        size = len(value)
    elif isinstance(value, Iterator) and not isinstance(value, _SIZED):
        return counted(value, what)
    else:
        size = measure(value)[0]
    charge(0, size)
    if size > MAX_ITEMS:
        raise TemplateLimit(f"{what} built a value of more than {MAX_ITEMS:,} items or characters")
    return value


def counted(items: Iterable[Any], what: str, weight: int = 0) -> Iterator[Any]:
    """Iterate ``items``, charging one operation (and ``weight`` built) per item, at most
    :data:`MAX_ITEMS` items."""
    count = 0
    for item in items:
        budget = _CURRENT.get()
        if budget is not None:  # outside a render (a native result consumed later) it is free
            count += 1
            if count > MAX_ITEMS:
                raise TemplateLimit(f"{what} went over more than {MAX_ITEMS:,} items")
            budget.charge(1, weight)
        yield item
