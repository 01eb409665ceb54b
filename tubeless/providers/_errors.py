"""The providers' error type and codes (kept here, not in ``tubeless.errors``: only model
adapters raise them).

Every provider failure is a :class:`ProviderError`, a :class:`~tubeless.errors.TubelessError`
whose ``code`` is one of the constants below, so a run that fails in ``decide`` or ``reduce``
carries it as ``source_code``. Messages never contain a response body, a credential, the
question or the state: they name the provider, the budget, the HTTP status or the JSON place.
"""

from __future__ import annotations

from tubeless.errors import TubelessError

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

#: A UTF-8 byte budget was exceeded: question, observation history or encoded request body.
PROVIDER_BUDGET_EXCEEDED = "TUBELESS_PROVIDER_BUDGET_EXCEEDED"
#: The agent input lacks the text a state helper needs (e.g. no string ``question``).
PROVIDER_INVALID_INPUT = "TUBELESS_PROVIDER_INVALID_INPUT"
#: A required setting is missing when a request is about to be sent (the API key).
PROVIDER_NOT_CONFIGURED = "TUBELESS_PROVIDER_NOT_CONFIGURED"
#: The request did not get a 2xx answer: HTTP error status or transport failure.
PROVIDER_REQUEST_FAILED = "TUBELESS_PROVIDER_REQUEST_FAILED"
#: The per-request deadline passed before a response arrived.
PROVIDER_TIMEOUT = "TUBELESS_PROVIDER_TIMEOUT"
#: The response is not a usable decision: invalid JSON, incomplete, malformed calls, ...
PROVIDER_INVALID_RESPONSE = "TUBELESS_PROVIDER_INVALID_RESPONSE"
#: The model refused to answer.
PROVIDER_REFUSED = "TUBELESS_PROVIDER_REFUSED"


class ProviderError(TubelessError):
    """A model provider request or response failed; the message never quotes a body.

    Attributes:
        status: The HTTP status for ``PROVIDER_REQUEST_FAILED`` answers, else ``None``.
    """

    status: int | None

    def __init__(self, code: str, message: str, *, status: int | None = None) -> None:
        super().__init__(code, message)
        self.status = status
