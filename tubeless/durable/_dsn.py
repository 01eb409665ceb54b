"""Database URLs as they may be shown: never with their password.

A ``postgresql://`` URL may carry a password in its user part (``user:secret@host``) or as a
``password=`` query parameter; a libpq ``key=value`` string as ``password=...``. Whatever is
printed about a store (errors, ``repr``, the CLI's lines) goes through :func:`redact_dsn`, and
messages from the driver through :func:`scrub`.
"""

from __future__ import annotations

import re
from urllib.parse import parse_qsl, quote, unquote, urlencode, urlsplit, urlunsplit

__all__ = ["URL_SCHEMES", "is_database_url", "redact_dsn", "scrub"]

#: The URL schemes that name a PostgreSQL database instead of a file.
URL_SCHEMES = ("postgresql://", "postgres://")
_MASK = "***"
_KEYWORD_PASSWORD = re.compile(r"(\bpassword\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)", re.IGNORECASE)


def is_database_url(where: object) -> bool:
    """Whether ``where`` (a CLI value or a path) names a PostgreSQL database."""
    return isinstance(where, str) and where.lower().startswith(URL_SCHEMES)


def _password(dsn: str) -> str | None:
    if is_database_url(dsn):
        try:
            parts = urlsplit(dsn)
        except ValueError:
            return None
        if parts.password:
            return unquote(parts.password)
        for name, value in parse_qsl(parts.query):
            if name == "password" and value:
                return value
        return None
    found = _KEYWORD_PASSWORD.search(dsn)
    return found.group(2).strip("'") if found else None


def redact_dsn(dsn: str) -> str:
    """``dsn`` without its password (replaced by ``***``)."""
    if not is_database_url(dsn):
        return _KEYWORD_PASSWORD.sub(lambda m: m.group(1) + _MASK, dsn)
    try:
        parts = urlsplit(dsn)
        netloc = parts.netloc
        if "@" in netloc:
            user, _, host = netloc.rpartition("@")
            if ":" in user:
                user = f"{user.split(':', 1)[0]}:{_MASK}"
            netloc = f"{user}@{host}"
        query = [
            (name, _MASK if name == "password" else value)
            for name, value in parse_qsl(parts.query, keep_blank_values=True)
        ]
        shown = urlunsplit(
            (parts.scheme, netloc, parts.path, urlencode(query, safe="*", quote_via=quote), "")
        )
    except ValueError:
        return f"{dsn.split('://', 1)[0]}://{_MASK}"  # not even a URL: show nothing of it
    return shown


def scrub(text: str, dsn: str) -> str:
    """``text`` (a driver's message) with ``dsn``'s password masked wherever it appears."""
    text = text.replace(dsn, redact_dsn(dsn))
    secret = _password(dsn)
    if secret:
        text = text.replace(secret, _MASK).replace(quote(secret, safe=""), _MASK)
    return text
