"""UTF-8 byte budgets for what a model is sent, and the state helpers that enforce them.

Budgets bound the application's own data in UTF-8 bytes (not a model's tokens): the question,
the accumulated observations (as serialized JSON) and the whole encoded request body. Each
check fails with a :class:`~tubeless.providers.ProviderError` whose code is
``PROVIDER_BUDGET_EXCEEDED`` and whose message reads ``<what> exceeds <limit> UTF-8 bytes``.

API shared by the adapters (``openai``, ``chat`` and ``anthropic``):

- :func:`json_text` / :func:`json_size`: the compact JSON that is measured and sent
  (``separators=(",", ":")``, non-ASCII kept as UTF-8, NaN refused), so a budget counts exactly
  the bytes that go on the wire, escapes included.
- :func:`check_budget`: raise the budget error when ``size > limit``.
- :func:`encode_body`: a request body as UTF-8 JSON bytes, checked against ``max_request_bytes``
  (``"<Provider> request exceeds <limit> UTF-8 bytes"``); call it before reading credentials.
- :func:`positive_int` / :func:`positive_number`: validate factory arguments (YAML ``with:``
  values) at compile time with a message naming the factory and argument.

Helpers usable from YAML (``{use: tubeless.providers:question_state, with: {max_bytes: 4096}}``):

- :func:`question_state`: an ``initial_state`` that takes the question from the input and
  rejects it before any request when it is over budget.
- :func:`append_outcomes`: a ``reduce`` that appends the raw outcome objects to the history and
  rejects the batch, before the next state is committed, when the history is over budget.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from tubeless.errors import AGENT_INVALID_STATE, TubelessError
from tubeless.frozen import FreezeError, FrozenTuple
from tubeless.providers._errors import (
    PROVIDER_BUDGET_EXCEEDED,
    PROVIDER_INVALID_INPUT,
    ProviderError,
)

__all__ = [
    "PROVIDER_BUDGET_EXCEEDED",
    "append_outcomes",
    "check_budget",
    "encode_body",
    "json_size",
    "json_text",
    "positive_int",
    "positive_number",
    "question_state",
    "utf8_size",
]

_ABSENT = object()


def utf8_size(text: str) -> int:
    """The length of ``text`` in UTF-8 bytes (an emoji is 4, ``é`` is 2).

    A lone surrogate (valid in JSON text, not in UTF-8) counts 3 bytes instead of failing.
    """
    return len(text.encode("utf-8", "surrogatepass"))


def json_text(value: Any) -> str:
    """Compact JSON with non-ASCII characters kept: what the adapters measure and send.

    Frozen state (``FrozenDict``, tuples) serializes like plain dicts and lists.

    Raises:
        ValueError: For NaN or infinities.
        TypeError: For values JSON cannot represent.
    """
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def json_size(value: Any) -> int:
    """The UTF-8 size of :func:`json_text` of ``value``."""
    return utf8_size(json_text(value))


def check_budget(size: int, limit: int, what: str) -> None:
    """Raise ``PROVIDER_BUDGET_EXCEEDED`` (``"<what> exceeds <limit> UTF-8 bytes"``) if over."""
    if size > limit:
        raise ProviderError(PROVIDER_BUDGET_EXCEEDED, f"{what} exceeds {limit} UTF-8 bytes")


def encode_body(body: Mapping[str, Any], limit: int, provider: str) -> bytes:
    """``body`` as UTF-8 JSON bytes, checked against ``limit`` (``"<provider> request ..."``)."""
    text = json_text(body)
    try:
        encoded = text.encode("utf-8")
    except UnicodeEncodeError:
        # Lone surrogates cannot be UTF-8; escaped as \uXXXX the body stays valid JSON.
        encoded = json.dumps(
            body, ensure_ascii=True, separators=(",", ":"), allow_nan=False
        ).encode("ascii")
    check_budget(len(encoded), limit, f"{provider} request")
    return encoded


def positive_int(factory: str, name: str, value: Any, *, minimum: int = 1) -> int:
    """``value`` if it is an int ≥ ``minimum`` (bools refused); else a ``ValueError``."""
    if type(value) is not int or value < minimum:
        raise ValueError(f"{factory}({name}=...) must be an integer >= {minimum}, got {value!r}")
    return value


def positive_number(factory: str, name: str, value: Any) -> float:
    """``value`` as a float if it is a finite number > 0 (bools refused); else ``ValueError``."""
    if type(value) not in (int, float) or not 0 < value < float("inf"):
        raise ValueError(f"{factory}({name}=...) must be a number > 0, got {value!r}")
    return float(value)


def _field_of(validated: Any, field: str) -> Any:
    if isinstance(validated, Mapping):
        return validated.get(field, _ABSENT)
    return getattr(validated, field, _ABSENT)


def question_state(
    max_bytes: int = 4096, field: str = "question", default: str | None = None
) -> Callable[[Any], dict[str, Any]]:
    """An ``initial_state(input)`` giving ``{<field>: <text>, "observations": []}``.

    The text is ``input[field]`` (a mapping or TypedDict) or ``input.<field>`` (a model), or
    ``default`` when the input has none. A text over ``max_bytes`` UTF-8 bytes fails the run
    before the first model request with ``PROVIDER_BUDGET_EXCEEDED``: ``"Question exceeds 4096
    UTF-8 bytes"`` (the label is the field name, capitalized).

    Args:
        max_bytes: The budget, in UTF-8 bytes of the text itself.
        field: The input field holding the text; also the state key.
        default: The text when the input has none (``None``: a missing text is an error).

    Returns:
        The ``initial_state`` callable.

    Raises:
        ValueError: For a budget that is not a positive integer, or a blank field name.

    Example:
        >>> initial_state = question_state(max_bytes=8)
        >>> initial_state({"question": "hi"})
        {'question': 'hi', 'observations': []}
    """
    limit = positive_int("question_state", "max_bytes", max_bytes)
    if not isinstance(field, str) or not field:
        raise ValueError(f"question_state(field=...) must be a nonblank string, got {field!r}")
    if default is not None and not isinstance(default, str):
        raise ValueError(
            f"question_state(default=...) must be a string, got {type(default).__name__}"
        )
    label = field[:1].upper() + field[1:]

    def initial_state(validated: Any) -> dict[str, Any]:
        text = _field_of(validated, field)
        if (text is _ABSENT or text is None) and default is not None:
            text = default
        if not isinstance(text, str):
            raise ProviderError(
                PROVIDER_INVALID_INPUT, f"Agent input needs a string {field!r} field"
            )
        check_budget(utf8_size(text), limit, label)
        return {field: text, "observations": []}

    return initial_state


def append_outcomes(
    max_bytes: int = 16384, field: str = "observations"
) -> Callable[[Any, Sequence[Any]], dict[str, Any]]:
    """A ``reduce(state, outcomes)`` that appends the raw outcome objects to ``state[field]``.

    Outcomes are kept whole (``{id, tool, ok, value}`` or ``{id, tool, ok, error}``), in
    decision order, so later turns can use their exact text. When the serialized JSON of the
    whole history would exceed ``max_bytes`` UTF-8 bytes, the batch fails with
    ``PROVIDER_BUDGET_EXCEEDED`` (``"Observation history exceeds 16384 UTF-8 bytes"``) before
    the next state is committed or another decision is asked for.

    Args:
        max_bytes: The budget for :func:`json_text` of the history.
        field: The state key of the history (a list; absent counts as empty).

    Returns:
        The ``reduce`` callable.

    Raises:
        ValueError: For a budget that is not a positive integer, or a blank field name.
    """
    limit = positive_int("append_outcomes", "max_bytes", max_bytes)
    if not isinstance(field, str) or not field:
        raise ValueError(f"append_outcomes(field=...) must be a nonblank string, got {field!r}")

    def reduce(state: Any, outcomes: Sequence[Any]) -> dict[str, Any]:
        previous = state.get(field, ()) if isinstance(state, Mapping) else _ABSENT
        if not isinstance(previous, (list, tuple)):
            raise TubelessError(
                AGENT_INVALID_STATE,
                f"append_outcomes needs a state mapping whose {field!r} is a list",
            )
        try:
            # Frozen histories concatenate at the cost of the copy alone (nothing re-checked).
            history = FrozenTuple(previous) + FrozenTuple(outcomes)
        except FreezeError as exc:
            raise TubelessError(
                AGENT_INVALID_STATE, f"append_outcomes needs plain outcome data ({exc})"
            ) from None
        check_budget(json_size(history), limit, "Observation history")
        return {**state, field: history}

    return reduce
