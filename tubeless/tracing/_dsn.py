"""Postgres connection strings in messages: which values name a store, and masking passwords.

Needs no driver, so a message can name a store even where psycopg is missing.
"""

from __future__ import annotations

import re
from typing import Final
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

__all__ = ["URL_SCHEMES", "is_postgres_url", "redact_dsn", "scrub"]

#: The URL schemes that name a Postgres store wherever a trace path is taken.
URL_SCHEMES: Final = ("postgresql://", "postgres://")


def is_postgres_url(value: object) -> bool:
    """Whether a CLI or API value names a Postgres store (``postgresql://`` or ``postgres://``)."""
    return isinstance(value, str) and value[:13].lower().startswith(URL_SCHEMES)


#: A ``password`` of a libpq ``key=value`` connection string: a quoted or a bare value.
_KEYWORD_PASSWORD: Final = re.compile(r"(\bpassword\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)", re.I)


def redact_dsn(dsn: str) -> str:
    """``dsn`` with its password (in the user part or a ``password=`` parameter of a URL, or
    the ``password`` of a ``key=value`` string) as ``***``."""
    if not is_postgres_url(dsn):
        return _KEYWORD_PASSWORD.sub(r"\1***", dsn)
    try:
        parts = urlsplit(dsn)
        netloc = parts.netloc
        if "@" in netloc:
            user, _, host = netloc.rpartition("@")
            if ":" in user:
                user = user.split(":", 1)[0] + ":***"
            netloc = f"{user}@{host}"
        query = parts.query
        if query:
            pairs = parse_qsl(query, keep_blank_values=True)
            if any(key.lower() == "password" for key, _ in pairs):
                query = urlencode(
                    [(k, "***" if k.lower() == "password" else v) for k, v in pairs], safe="*"
                )
        return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))
    except ValueError:  # not a URL at all: show only its scheme
        return dsn.split("://", 1)[0] + "://***"


def _password(dsn: str) -> str | None:
    if not is_postgres_url(dsn):
        match = _KEYWORD_PASSWORD.search(dsn)
        return match.group(2).strip("'") if match else None
    try:
        parts = urlsplit(dsn)
        found = parts.password
        for key, value in parse_qsl(parts.query, keep_blank_values=True):
            if key.lower() == "password":
                found = value
        return found or None
    except ValueError:
        return None


def scrub(text: str, dsn: str) -> str:
    """``text`` without the DSN's password, should a driver ever repeat it."""
    secret = _password(dsn)
    return text.replace(secret, "***") if secret else text
