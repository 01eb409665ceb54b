"""What a host (``tubeless serve``) gives the pages when it mounts them: :class:`UiActions`.

``tubeless ui`` alone reads stores and answers approvals through the checkpoint store. Mounted
by serve at ``/ui``, the pages also list the project's entries with a form generated from each
input schema, start runs, answer approvals through serve's run manager (so the run resumes by
itself) and follow a running run over serve's event stream.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

__all__ = ["UiActions", "UiEntry"]


@dataclass(frozen=True, kw_only=True, slots=True)
class UiEntry:
    """An entry of the served project, as the start-a-run form needs it."""

    id: str
    description: str | None = None
    input_schema: Mapping[str, Any] = field(default_factory=dict)
    """The entry's input JSON Schema (the form's fields come from its top-level properties)."""


class UiActions(Protocol):
    """The host's side of the pages; every method may raise a ``TubelessError`` whose code and
    message the page shows."""

    def entries(self) -> Sequence[UiEntry]:
        """The entries a run can be started for."""
        ...

    async def start_run(self, entry: str, raw_input: Any) -> str:
        """Start a run of ``entry`` with ``raw_input`` (validated by the host); its run id."""
        ...

    async def pending_approvals(self) -> Sequence[Mapping[str, Any]]:
        """The calls waiting for approval, as ``GET /v1/approvals`` lists them: ``{run_id, key,
        route, turn, call_id, tool, input, digest, requested_at}``."""
        ...

    async def answer_approval(
        self, run_id: str, call_id: str, *, digest: str, approve: bool, reason: str | None
    ) -> None:
        """Answer a pending call (bound to ``digest``); the run resumes by itself."""
        ...

    def events_url(self, run_id: str) -> str | None:
        """The URL of the run's Server-Sent Events stream (``/v1/runs/{id}/events``), or
        ``None`` when the host streams none; the page follows it while the run is live."""
        ...
