"""One way to open a checkpoint store from what a user typed: a path or a database URL."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from tubeless.durable._dsn import is_database_url, redact_dsn

if TYPE_CHECKING:
    from tubeless.durable._store import CheckpointStore

__all__ = ["open_checkpoints", "shown_location"]


def open_checkpoints(where: str | os.PathLike[str], *, lease_ttl_s: float = 30) -> CheckpointStore:
    """The store ``where`` names: ``postgresql://...`` or ``postgres://...`` →
    :class:`PostgresCheckpoints`; anything else is a path → :class:`SqliteCheckpoints`
    (created on first use). Used by every command that takes ``--checkpoints`` and by batch
    workers, which receive the same value."""
    if is_database_url(where):
        from tubeless.durable._postgres import PostgresCheckpoints

        return PostgresCheckpoints(str(where), lease_ttl_s=lease_ttl_s)
    from tubeless.durable._sqlite import SqliteCheckpoints

    return SqliteCheckpoints(where, lease_ttl_s=lease_ttl_s)


def shown_location(where: str | os.PathLike[str]) -> str:
    """``where`` as it may be printed (a URL without its password)."""
    return redact_dsn(str(where)) if is_database_url(where) else str(where)
