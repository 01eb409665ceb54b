"""What of a model server's own text a trace may hold: finish reasons from a closed set, model
names of a strict shape, and nothing shaped like a credential.

A server (or a proxy in front of it) chooses these strings; one that echoes the request's
``Authorization`` header would otherwise put the API key into every trace and span (DESIGN §7:
no credentials, no response bodies). Used by the model adapters and by
:func:`~tubeless.tracing._otel_spans.model_request_attributes` for every caller.
"""

from __future__ import annotations

import re
from typing import Any, Final

__all__ = [
    "KNOWN_FINISH_REASONS",
    "OTHER_REASON",
    "looks_like_key",
    "recordable_model",
    "recordable_reason",
]

#: The finish reasons recorded as they are: those of the OpenAI Responses API (``stop`` and
#: ``tool_calls`` for a completed response, ``incomplete_details.reason`` otherwise), chat
#: completions and Anthropic Messages. A server chooses this text, so anything else is recorded
#: as :data:`OTHER_REASON` (a proxy that echoes the ``Authorization`` header would otherwise put
#: the key in the trace).
KNOWN_FINISH_REASONS: Final = frozenset(
    {
        # OpenAI Responses and chat completions
        "stop",
        "tool_calls",
        "length",
        "content_filter",
        "function_call",
        "max_output_tokens",
        "max_messages",
        "steered",
        # Anthropic Messages
        "end_turn",
        "max_tokens",
        "stop_sequence",
        "tool_use",
        "pause_turn",
        "refusal",
        "model_context_window_exceeded",
    }
)
#: What a finish reason outside :data:`KNOWN_FINISH_REASONS` is recorded as.
OTHER_REASON: Final = "other"

#: A model name as a response may report it: what provider model names look like
#: (``gpt-4.1-mini-2025-04-14``, ``claude-sonnet-4-5-20250929``, ``llama3.1:8b``,
#: ``hf.co/org/model:Q4_K_M``), at most 128 characters.
_MODEL_NAME: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:/@+-]{0,127}")
#: Common credential shapes (OpenAI and Anthropic ``sk-``/``rk-`` keys, AWS access key ids,
#: GitHub and Slack tokens, a bearer header), not preceded by a letter or digit.
_KEY_SHAPE: Final = re.compile(
    r"(?<![A-Za-z0-9])(?:(?:sk|rk)-[A-Za-z0-9_-]{16,}|(?:AKIA|ASIA)[0-9A-Z]{16}"
    r"|(?:ghp|gho|ghs|github_pat)_[A-Za-z0-9_]{20,}|xox[abprs]-[A-Za-z0-9-]{10,})"
    r"|(?i:bearer)\s+\S{8,}"
)


def looks_like_key(text: str) -> bool:
    """Whether ``text`` holds something shaped like a common API key or bearer credential."""
    return _KEY_SHAPE.search(text) is not None


def recordable_reason(reason: str) -> str:
    """``reason`` if it is a known finish reason, else :data:`OTHER_REASON`."""
    return reason if reason in KNOWN_FINISH_REASONS else OTHER_REASON


def recordable_model(name: Any) -> str | None:
    """``name`` if it looks like a model name (and not like a key), else ``None``: a response's
    model is text the server chose."""
    if isinstance(name, str) and _MODEL_NAME.fullmatch(name) and not looks_like_key(name):
        return name
    return None
