"""The service interface of the durable stores: what other packages may use of its private modules.

Another package uses a private module of this one only through here: ``from
tubeless.durable._spi import NAME``. The import-linter contract "Private modules stay inside
their package" (``pyproject.toml``) refuses any other import of a ``tubeless.durable._*`` module
from outside the package, so this list is everything other layers depend on beyond the public
``tubeless.durable`` names. Users today: the executor (a run's checkpoint session), the agent's
journal (the checkpoint document), batch (row keys) and the CLI (``tubeless checkpoints`` and
``tubeless decide``).

Each name is loaded from its home module when first imported from here, so importing this
module costs nothing and never loads a module its caller does not need.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tubeless._lazy import lazy_attributes

if TYPE_CHECKING:
    from tubeless.durable._budget import (
        BUDGET_FLAGS,
        parse_amount,
        raise_budgets,
        saved_usage,
        store_usage,
    )
    from tubeless.durable._decide import record_decision
    from tubeless.durable._document import (
        ABSENT,
        AgentEntry,
        Approvals,
        CheckpointDocument,
        Failure,
        SavedBudget,
        SavedCall,
        SavedDecision,
        slot_of,
    )
    from tubeless.durable._document_parse import parse
    from tubeless.durable._encode import Fragments
    from tubeless.durable._keys import (
        default_key,
        find_key,
        json_form,
        legacy_key,
        unfinished_of,
        validated_key,
    )
    from tubeless.durable._session import DOCUMENT_VERSION, SESSION_SLOT, CheckpointSession
    from tubeless.durable._store import LeaseHolder, check_key
    from tubeless.durable._summary import describe, summary

__all__ = [
    "ABSENT",
    "BUDGET_FLAGS",
    "DOCUMENT_VERSION",
    "SESSION_SLOT",
    "AgentEntry",
    "Approvals",
    "CheckpointDocument",
    "CheckpointSession",
    "Failure",
    "Fragments",
    "LeaseHolder",
    "SavedBudget",
    "SavedCall",
    "SavedDecision",
    "check_key",
    "default_key",
    "describe",
    "find_key",
    "json_form",
    "legacy_key",
    "parse",
    "parse_amount",
    "raise_budgets",
    "record_decision",
    "saved_usage",
    "slot_of",
    "store_usage",
    "summary",
    "unfinished_of",
    "validated_key",
]

#: Each name's home: (module, attribute).
_HOMES: dict[str, tuple[str, str]] = {
    "store_usage": ("tubeless.durable._budget", "store_usage"),
    "saved_usage": ("tubeless.durable._budget", "saved_usage"),
    "raise_budgets": ("tubeless.durable._budget", "raise_budgets"),
    "parse_amount": ("tubeless.durable._budget", "parse_amount"),
    "BUDGET_FLAGS": ("tubeless.durable._budget", "BUDGET_FLAGS"),
    "check_key": ("tubeless.durable._store", "check_key"),
    "ABSENT": ("tubeless.durable._document", "ABSENT"),
    "AgentEntry": ("tubeless.durable._document", "AgentEntry"),
    "Approvals": ("tubeless.durable._document", "Approvals"),
    "CheckpointDocument": ("tubeless.durable._document", "CheckpointDocument"),
    "CheckpointSession": ("tubeless.durable._session", "CheckpointSession"),
    "DOCUMENT_VERSION": ("tubeless.durable._session", "DOCUMENT_VERSION"),
    "Failure": ("tubeless.durable._document", "Failure"),
    "Fragments": ("tubeless.durable._encode", "Fragments"),
    "LeaseHolder": ("tubeless.durable._store", "LeaseHolder"),
    "SESSION_SLOT": ("tubeless.durable._session", "SESSION_SLOT"),
    "SavedBudget": ("tubeless.durable._document", "SavedBudget"),
    "SavedCall": ("tubeless.durable._document", "SavedCall"),
    "SavedDecision": ("tubeless.durable._document", "SavedDecision"),
    "default_key": ("tubeless.durable._keys", "default_key"),
    "describe": ("tubeless.durable._summary", "describe"),
    "find_key": ("tubeless.durable._keys", "find_key"),
    "json_form": ("tubeless.durable._keys", "json_form"),
    "legacy_key": ("tubeless.durable._keys", "legacy_key"),
    "parse": ("tubeless.durable._document_parse", "parse"),
    "record_decision": ("tubeless.durable._decide", "record_decision"),
    "slot_of": ("tubeless.durable._document", "slot_of"),
    "summary": ("tubeless.durable._summary", "summary"),
    "unfinished_of": ("tubeless.durable._keys", "unfinished_of"),
    "validated_key": ("tubeless.durable._keys", "validated_key"),
}

__getattr__, __dir__ = lazy_attributes(globals(), _HOMES)
