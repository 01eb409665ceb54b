"""The providers' error type; its codes live in ``tubeless.errors`` with every other code and
are re-exported here for the adapters.

Every provider failure is a :class:`ProviderError`, a :class:`~tubeless.errors.TubelessError`
whose ``code`` is one of the ``PROVIDER_*`` constants, so a run that fails in ``decide`` or
``reduce`` carries it as ``source_code``. Messages never contain a response body, a credential, the
question or the state: they name the provider, the budget, the HTTP status or the JSON place.
"""

from __future__ import annotations

from tubeless.errors import (
    PROVIDER_BUDGET_EXCEEDED,
    PROVIDER_INVALID_INPUT,
    PROVIDER_INVALID_RESPONSE,
    PROVIDER_NOT_CONFIGURED,
    PROVIDER_REFUSED,
    PROVIDER_REQUEST_FAILED,
    PROVIDER_TIMEOUT,
    TubelessError,
)

__all__ = [
    "PROVIDER_BUDGET_EXCEEDED",
    "PROVIDER_INVALID_INPUT",
    "PROVIDER_INVALID_RESPONSE",
    "PROVIDER_NOT_CONFIGURED",
    "PROVIDER_REFUSED",
    "PROVIDER_REQUEST_FAILED",
    "PROVIDER_TIMEOUT",
    "ProviderError",
]


class ProviderError(TubelessError):
    """A model provider request or response failed; the message never quotes a body.

    Attributes:
        status: The HTTP status for ``PROVIDER_REQUEST_FAILED`` answers, else ``None``.
    """

    status: int | None

    def __init__(self, code: str, message: str, *, status: int | None = None) -> None:
        super().__init__(code, message)
        self.status = status
