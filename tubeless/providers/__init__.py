"""Model ``decide`` adapters and the state helpers that bound what a model is sent.

Adapters live in their own modules and are referenced from YAML by import path
(``decide: {use: tubeless.providers.openai:responses, with: {...}}``, or
``tubeless.providers.chat:completions`` for OpenAI-compatible chat endpoints, or
``tubeless.providers.anthropic:messages``); this package itself
offers the byte-budget helpers usable as ``initial_state`` and ``reduce``::

    initial_state: {use: tubeless.providers:question_state, with: {max_bytes: 4096}}
    reduce: {use: tubeless.providers:append_outcomes, with: {max_bytes: 16384}}

Nothing in ``tubeless`` imports this package except the project loader and the CLI (through
references), and no adapter reads credentials or makes a request before a decision is asked.
"""

from __future__ import annotations

from tubeless.providers._budgets import append_outcomes, question_state
from tubeless.providers._errors import (
    PROVIDER_BUDGET_EXCEEDED,
    PROVIDER_INVALID_INPUT,
    PROVIDER_INVALID_RESPONSE,
    PROVIDER_NOT_CONFIGURED,
    PROVIDER_REFUSED,
    PROVIDER_REQUEST_FAILED,
    PROVIDER_TIMEOUT,
    ProviderError,
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
    "append_outcomes",
    "question_state",
]
