"""The bearer token of ``tubeless serve`` and ``tubeless ui`` (DESIGN.md §21, §22).

Where it comes from, first match wins: the ``TUBELESS_SERVE_TOKEN`` environment variable, the
file ``--token-file`` names, else ``<home>/serve-token``, made once (0600, 32 random bytes as
URL-safe text) and reused on every later start. Only a token made now is shown to the user,
once; one read back is never printed again.
"""

from __future__ import annotations

import hmac
import os
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from tubeless._data_files import open_data_file, open_regular

__all__ = ["TOKEN_ENV", "TOKEN_FILE_NAME", "ServeToken", "load_token", "token_matches"]

TOKEN_ENV = "TUBELESS_SERVE_TOKEN"
TOKEN_FILE_NAME = "serve-token"
_MIN_CHARS = 16


@dataclass(frozen=True, slots=True)
class ServeToken:
    """A token and where it came from; ``made`` is true only when this start created it."""

    value: str = ""
    source: str = ""
    made: bool = False

    def __repr__(self) -> str:  # never the secret, in a log line or a traceback
        return f"ServeToken(source={self.source!r}, made={self.made})"


def _checked(value: str, source: str) -> str:
    value = value.strip()
    if len(value) < _MIN_CHARS or any(ch.isspace() for ch in value):
        raise ValueError(
            f"{source}: a serve token must be at least {_MIN_CHARS} characters with no spaces"
        )
    return value


def load_token(
    home: Path, *, token_file: Path | None = None, environ: Mapping[str, str] | None = None
) -> ServeToken:
    """The token to require; makes ``home/serve-token`` when nothing else names one.

    Raises:
        ValueError: A token that is too short or holds spaces (the message names its source).
        OSError: ``token_file`` cannot be read, or the made token cannot be written.
    """
    env = os.environ if environ is None else environ
    if env.get(TOKEN_ENV):
        return ServeToken(_checked(env[TOKEN_ENV], TOKEN_ENV), TOKEN_ENV)
    if token_file is not None:
        with open_regular(token_file) as handle:
            text = handle.read().decode("utf-8", errors="replace")
        return ServeToken(_checked(text, str(token_file)), str(token_file))
    stored = home / TOKEN_FILE_NAME
    if stored.exists():
        with open_regular(stored) as handle:
            text = handle.read().decode("utf-8", errors="replace")
        return ServeToken(_checked(text, str(stored)), str(stored))
    home.mkdir(parents=True, exist_ok=True)
    value = secrets.token_urlsafe(32)
    descriptor = open_data_file(stored, private=True)
    with open(descriptor, "wb", closefd=True) as handle:
        handle.write(value.encode() + b"\n")
    return ServeToken(value, str(stored), made=True)


def token_matches(expected: str, presented: str | None) -> bool:
    """Whether ``presented`` is the token, compared in constant time."""
    if presented is None:
        return False
    return hmac.compare_digest(expected.encode(), presented.encode("utf-8", "surrogatepass"))
