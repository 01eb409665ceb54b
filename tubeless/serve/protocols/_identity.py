"""Who a request is from: the identity a run or task belongs to.

The server's middleware checks the bearer token; the protocols only need a stable name for the
token, so that runs, threads and tasks started with one token stay invisible to another. The
name is a hash of the token, so no token is kept in memory with the runs.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

from tubeless.serve.protocols._runner import Caller

__all__ = ["bearer_identity"]


def bearer_identity(source: Any) -> Caller:
    """``bearer:<hash>`` of the bearer token of ``source`` (a request with ``.headers``, or a
    headers mapping), or ``None`` when it carries none."""
    # A Starlette request is itself a Mapping (over its scope): ask for its headers first.
    headers = getattr(source, "headers", source)
    if not isinstance(headers, Mapping):
        return None
    header = headers.get("authorization") or headers.get("Authorization") or ""
    scheme, _, token = str(header).partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return "bearer:" + hashlib.sha256(token.strip().encode()).hexdigest()[:32]
