"""The web pages mounted at ``/ui``: what serve gives them (:class:`ServeUiActions`) and the
mounted app itself (:func:`ui_pages`).

Mounted by serve, the pages read serve's own trace and checkpoint stores, take serve's token at
their login, draw the served project's graph, and act through the run manager: a form started
from an entry's input schema becomes a run exactly as ``POST /v1/entries/{entry}/runs`` makes
one, an approval answered on the page resumes the run by itself, and a live run page follows
``/v1/runs/{id}/events`` (which accepts the pages' session cookie: a browser's
``EventSource`` cannot send a bearer header).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from tubeless.errors import TubelessError
from tubeless.serve._entries import RequestError
from tubeless.ui import UiEntry, create_ui_app

if TYPE_CHECKING:
    from starlette.applications import Starlette

    from tubeless.serve._manager import RunManager

__all__ = ["ServeUiActions", "ui_pages"]


class ServeUiActions:
    """:class:`tubeless.ui.UiActions` over a :class:`~tubeless.serve._manager.RunManager`.

    The manager's refusals (``RequestError``: an input that does not match the schema, a live
    run on the same key, too many runs, a digest that is not the pending call's) reach the page
    as a ``TubelessError`` with the same code and message the HTTP API answers.
    """

    def __init__(self, manager: RunManager) -> None:
        self.manager = manager

    def entries(self) -> Sequence[UiEntry]:
        return [
            UiEntry(
                id=item["id"],
                description=item.get("description"),
                input_schema=item.get("input_schema") or {},
            )
            for item in self.manager.entries.describe()
        ]

    async def start_run(self, entry: str, raw_input: Any) -> str:
        try:
            row, _ = self.manager.submit(
                entry, raw_input, key=None, limits=None, idempotency_key=None
            )
        except RequestError as exc:
            raise TubelessError(exc.code, exc.message) from exc
        return row.run_id

    async def pending_approvals(self) -> Sequence[Mapping[str, Any]]:
        return self.manager.approvals()

    async def answer_approval(
        self, run_id: str, call_id: str, *, digest: str, approve: bool, reason: str | None
    ) -> None:
        try:
            self.manager.answer(run_id, call_id, approve=approve, digest=digest, reason=reason)
        except RequestError as exc:
            raise TubelessError(exc.code, exc.message) from exc

    def events_url(self, run_id: str) -> str | None:
        """The run's event stream; ``None`` for a run this server does not know."""
        if self.manager.registry.get(run_id) is None:
            return None
        return f"/v1/runs/{quote(run_id, safe='')}/events"


def ui_pages(manager: RunManager) -> Starlette:
    """The pages of ``tubeless ui`` over ``manager``'s stores, token and project, acting
    through it."""
    config = manager.config
    return create_ui_app(
        [config.trace],
        checkpoints=config.checkpoints,
        token=config.token,
        actions=ServeUiActions(manager),
        project=manager.entries.project,
    )
