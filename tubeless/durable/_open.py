"""One way to open a checkpoint store from what a user typed: a path or a database URL."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING
from urllib.parse import parse_qsl, unquote_plus, urlsplit, urlunsplit

from tubeless.durable._dsn import is_database_url, redact_dsn
from tubeless.errors import CHECKPOINT_INVALID, CheckpointError

if TYPE_CHECKING:
    from tubeless.durable._store import CheckpointStore

__all__ = ["LEASE_TTL_PARAMETER", "open_checkpoints", "shown_location"]

#: The query parameter of a ``postgresql://`` URL that sets the store's ``lease_ttl_s`` (the
#: driver cannot read it: it is taken out of the URL before it is used to connect).
LEASE_TTL_PARAMETER = "lease_ttl_s"


def open_checkpoints(where: str | os.PathLike[str], *, lease_ttl_s: float = 30) -> CheckpointStore:
    """The store ``where`` names: ``postgresql://...`` or ``postgres://...`` →
    :class:`PostgresCheckpoints`; anything else is a path → :class:`SqliteCheckpoints`
    (created on first use). Used by every command that takes ``--checkpoints`` and by batch
    workers, which receive the same value.

    A URL may carry ``?lease_ttl_s=SECONDS`` (at least 1): the lease time of every process
    that opens the store from the same URL, as a batch's workers on other machines do; it wins
    over ``lease_ttl_s``."""
    if is_database_url(where):
        from tubeless.durable._postgres import PostgresCheckpoints

        dsn, ttl = _lease_ttl(str(where), lease_ttl_s)
        return PostgresCheckpoints(dsn, lease_ttl_s=ttl)
    from tubeless.durable._sqlite import SqliteCheckpoints

    return SqliteCheckpoints(where, lease_ttl_s=lease_ttl_s)


def shown_location(where: str | os.PathLike[str]) -> str:
    """``where`` as it may be printed (a URL without its password)."""
    return redact_dsn(str(where)) if is_database_url(where) else str(where)


def _lease_ttl(url: str, default: float) -> tuple[str, float]:
    """``url`` without its ``lease_ttl_s`` parameter, and the lease time it names."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return url, default
    query = parse_qsl(parts.query, keep_blank_values=True)
    found = [value for name, value in query if name == LEASE_TTL_PARAMETER]
    if not found:
        return url, default
    try:
        ttl = float(found[-1])
    except ValueError:
        ttl = 0.0
    if not ttl >= 1 or ttl != ttl or ttl == float("inf"):
        raise CheckpointError(
            CHECKPOINT_INVALID,
            f"{redact_dsn(url)}: {LEASE_TTL_PARAMETER}={found[-1]!r} is not a number of seconds "
            f">= 1 (write for example ?{LEASE_TTL_PARAMETER}=30)",
        )
    # The other parameters stay exactly as written (no re-encoding).
    rest = "&".join(
        part
        for part in parts.query.split("&")
        if part and unquote_plus(part.partition("=")[0]) != LEASE_TTL_PARAMETER
    )
    return urlunsplit(parts._replace(query=rest)), ttl
