"""Model prices for cost budgets: a project's own ``pricing:`` entries, then ``genai-prices``.

A price turns token counts into US dollars (``Decimal``, never a float). The project's table is
consulted first (keys ``<provider>:<model>``, prices per million tokens); anything it does not
name comes from the ``genai-prices`` package (pydantic's maintained price data, imported only
when a cost budget needs a price). A model neither knows fails with
``TUBELESS_BUDGET_PRICE_UNKNOWN`` before any request is sent, naming the ``pricing:`` fix.

Prices live at the agent layer so that providers (which reserve and charge) and projects (which
declare the table) can both import them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from functools import lru_cache
from typing import Any, Protocol

from tubeless.agent._limits import usd
from tubeless.errors import BUDGET_PRICE_UNKNOWN, AgentDefinitionError, TubelessError

__all__ = ["Price", "PriceUnknownError", "Priced", "find_price", "price_table"]

_MILLION = Decimal(1_000_000)
_PRICE_FIELDS = frozenset({"input_per_mtok", "output_per_mtok", "cached_input_per_mtok"})


class PriceUnknownError(TubelessError):
    """A cost budget needs the price of a model nobody priced.

    Attributes:
        provider: The provider's name (``openai``, ``anthropic``, a chat adapter's).
        model: The requested model.
    """

    code = BUDGET_PRICE_UNKNOWN

    def __init__(self, provider: str, model: str) -> None:
        super().__init__(
            self.code,
            f"No price is known for model {model!r} of provider {provider!r}, and a "
            f"max_cost_usd budget needs one; add it to the project: pricing: "
            f'{{"{provider}:{model}": {{input_per_mtok: ..., output_per_mtok: ...}}}}',
        )
        self.provider = provider
        self.model = model


class Priced(Protocol):
    """Something that prices a request's token counts."""

    def cost(self, input_tokens: int, cached_input_tokens: int, output_tokens: int) -> Decimal:
        """US dollars for the counts (``input_tokens`` includes the cached ones)."""
        ...


@dataclass(frozen=True, slots=True)
class Price:
    """A flat price per million tokens, as a project's ``pricing:`` entry gives it."""

    input_per_mtok: Decimal
    output_per_mtok: Decimal
    cached_input_per_mtok: Decimal

    def cost(self, input_tokens: int, cached_input_tokens: int, output_tokens: int) -> Decimal:
        """US dollars for the counts (``input_tokens`` includes the cached ones)."""
        cached = min(cached_input_tokens, input_tokens)
        return (
            (input_tokens - cached) * self.input_per_mtok
            + cached * self.cached_input_per_mtok
            + output_tokens * self.output_per_mtok
        ) / _MILLION


def price_table(value: Mapping[str, Any] | None) -> dict[str, Price]:
    """A checked price table from ``{"<provider>:<model>": {input_per_mtok, output_per_mtok,
    cached_input_per_mtok?}}`` (amounts as ``Decimal``, ``int`` or decimal strings)."""
    if not value:
        return {}
    if not isinstance(value, Mapping):
        raise AgentDefinitionError("pricing must be a mapping of '<provider>:<model>' entries.")
    table: dict[str, Price] = {}
    for key, entry in value.items():
        if isinstance(entry, Price):
            table[str(key)] = entry
            continue
        provider, _, model = str(key).partition(":")
        if not provider or not model:
            raise AgentDefinitionError(f"pricing key {key!r} must read '<provider>:<model>'.")
        if not isinstance(entry, Mapping) or not {
            "input_per_mtok",
            "output_per_mtok",
        } <= set(entry):
            raise AgentDefinitionError(f"pricing {key!r} needs input_per_mtok and output_per_mtok.")
        unknown = set(entry) - _PRICE_FIELDS
        if unknown:
            raise AgentDefinitionError(f"pricing {key!r} has unknown keys {sorted(unknown)}.")
        input_price = usd(entry["input_per_mtok"], f"pricing {key} input_per_mtok")
        cached = entry.get("cached_input_per_mtok")
        table[str(key)] = Price(
            input_per_mtok=input_price,
            output_per_mtok=usd(entry["output_per_mtok"], f"pricing {key} output_per_mtok"),
            cached_input_per_mtok=input_price
            if cached is None
            else usd(cached, f"pricing {key} cached_input_per_mtok"),
        )
    return table


def find_price(table: Mapping[str, Priced], provider: str, model: str) -> Priced:
    """The price of ``model`` at ``provider``: the table's entry, else genai-prices' data."""
    own = table.get(f"{provider}:{model}")
    if own is not None:
        return own
    found = _bundled(provider, model)
    if found is None:
        raise PriceUnknownError(provider, model)
    return found


class _GenaiPrice:
    """A price from the genai-prices data (which handles tiers and cache prices itself)."""

    __slots__ = ("_model", "_provider")

    def __init__(self, provider: Any, model: Any) -> None:
        self._provider = provider
        self._model = model

    def cost(self, input_tokens: int, cached_input_tokens: int, output_tokens: int) -> Decimal:
        from genai_prices import Usage

        usage = Usage(
            input_tokens=input_tokens,
            cache_read_tokens=min(cached_input_tokens, input_tokens),
            output_tokens=output_tokens,
        )
        total = self._model.calc_price(usage, self._provider).total_price
        return Decimal(total)


@lru_cache(maxsize=256)
def _bundled(provider: str, model: str) -> Priced | None:
    try:
        # Imported here: the price data is loaded only by runs with a cost budget.
        from genai_prices import data_snapshot
    except ImportError:  # pragma: no cover - a core dependency; kept for stripped installs
        return None
    try:
        found_provider, found_model = data_snapshot.get_snapshot().find_provider_model(
            model, None, provider, None
        )
    except LookupError:
        return None
    return _flat(found_model) or _GenaiPrice(found_provider, found_model)


def _flat(model: Any) -> Price | None:
    """The model's current token prices as a flat :class:`Price` when they are plain numbers
    (no tiers): pricing a request is then three multiplications instead of a pass through
    genai-prices' general calculation (measured: about 1.4 ms per reserve and charge, against
    some 45 µs)."""
    from datetime import UTC, datetime

    try:
        prices = model.get_prices(datetime.now(UTC))
    except Exception:  # an unexpected shape of the data: the general path decides
        return None
    input_price = getattr(prices, "input_mtok", None)
    output_price = getattr(prices, "output_mtok", None)
    cached = getattr(prices, "cache_read_mtok", None)
    if not isinstance(input_price, Decimal) or not isinstance(output_price, Decimal):
        return None
    if cached is not None and not isinstance(cached, Decimal):
        return None
    return Price(
        input_per_mtok=input_price,
        output_per_mtok=output_price,
        cached_input_per_mtok=input_price if cached is None else cached,
    )
