"""The service interface of the agent layer: what other packages may use of its private modules.

Another package uses a private module of this one only through here: ``from tubeless.agent._spi
import NAME``. The import-linter contract "Private modules stay inside their package"
(``pyproject.toml``) refuses any other import of a ``tubeless.agent._*`` module from outside the
package, so this list is everything other layers depend on beyond the public ``tubeless.agent``
names. Users today: mcp (sourced tools, remotes), batch (cassette comparisons, budgets of a
row), reporting (the remotes an agent lists) and ``tubeless.testing`` (the tape).

Each name is loaded from its home module when first imported from here, so importing this
module costs nothing and never loads a module its caller does not need.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tubeless._lazy import lazy_attributes

if TYPE_CHECKING:
    from tubeless.agent._agent_step import remotes
    from tubeless.agent._cassette import _MISSING as MISSING
    from tubeless.agent._cassette import first_difference, shown_value
    from tubeless.agent._hooks import CallSite, Proceed, TurnHooks
    from tubeless.agent._invocation import OBSERVER
    from tubeless.agent._remote_ledger import BudgetCall, RemoteLedger, answer, mirror
    from tubeless.agent._scope import OUTER_LEDGERS, ROOT_BUDGETS
    from tubeless.agent._sources import Remote, SourceSession, sourced_tool
    from tubeless.agent._tape import Recording, Replaying, recording, replaying
    from tubeless.agent._tools import TOOL_NAME
    from tubeless.agent._usage import Ledger

__all__ = [
    "MISSING",
    "OBSERVER",
    "OUTER_LEDGERS",
    "ROOT_BUDGETS",
    "TOOL_NAME",
    "BudgetCall",
    "CallSite",
    "Ledger",
    "Proceed",
    "Recording",
    "Remote",
    "RemoteLedger",
    "Replaying",
    "SourceSession",
    "TurnHooks",
    "answer",
    "first_difference",
    "mirror",
    "recording",
    "remotes",
    "replaying",
    "shown_value",
    "sourced_tool",
]

#: Each name's home: (module, attribute).
_HOMES: dict[str, tuple[str, str]] = {
    "Ledger": ("tubeless.agent._usage", "Ledger"),
    "RemoteLedger": ("tubeless.agent._remote_ledger", "RemoteLedger"),
    "BudgetCall": ("tubeless.agent._remote_ledger", "BudgetCall"),
    "answer": ("tubeless.agent._remote_ledger", "answer"),
    "mirror": ("tubeless.agent._remote_ledger", "mirror"),
    "OUTER_LEDGERS": ("tubeless.agent._scope", "OUTER_LEDGERS"),
    "OBSERVER": ("tubeless.agent._invocation", "OBSERVER"),
    "TurnHooks": ("tubeless.agent._hooks", "TurnHooks"),
    "Proceed": ("tubeless.agent._hooks", "Proceed"),
    "CallSite": ("tubeless.agent._hooks", "CallSite"),
    "MISSING": ("tubeless.agent._cassette", "_MISSING"),
    "ROOT_BUDGETS": ("tubeless.agent._scope", "ROOT_BUDGETS"),
    "Recording": ("tubeless.agent._tape", "Recording"),
    "Remote": ("tubeless.agent._sources", "Remote"),
    "Replaying": ("tubeless.agent._tape", "Replaying"),
    "SourceSession": ("tubeless.agent._sources", "SourceSession"),
    "TOOL_NAME": ("tubeless.agent._tools", "TOOL_NAME"),
    "first_difference": ("tubeless.agent._cassette", "first_difference"),
    "recording": ("tubeless.agent._tape", "recording"),
    "remotes": ("tubeless.agent._agent_step", "remotes"),
    "replaying": ("tubeless.agent._tape", "replaying"),
    "shown_value": ("tubeless.agent._cassette", "shown_value"),
    "sourced_tool": ("tubeless.agent._sources", "sourced_tool"),
}

__getattr__, __dir__ = lazy_attributes(globals(), _HOMES)
