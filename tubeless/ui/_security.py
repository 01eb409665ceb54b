"""Who may see the pages, and forms that only the pages can post.

* Login: the serve token, posted once to ``/login``, becomes a session cookie (``HttpOnly``,
  ``SameSite=Strict``). The cookie holds an HMAC of the token, not the token, so it is worth
  nothing elsewhere and stays valid across restarts with the same token. ``Authorization:
  Bearer <token>`` is accepted too (scripts, serve's own clients).
* CSRF: every page sets a random ``tubeless_csrf`` cookie (``HttpOnly``, ``SameSite=Strict``)
  and every form carries the same value in a hidden ``csrf`` field; a POST whose field and
  cookie differ is refused (double submit; another site can neither read the cookie nor set it).
* Headers: a strict Content-Security-Policy (scripts, styles and connections only from this
  origin, no inline script or style, no framing), ``nosniff``, no referrer.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from typing import Final

from tubeless._serve_token import token_matches

__all__ = [
    "CSRF_COOKIE",
    "CSRF_FIELD",
    "SECURITY_HEADERS",
    "SESSION_COOKIE",
    "csrf_ok",
    "new_csrf",
    "safe_next",
    "session_ok",
    "session_value",
    "token_matches",
]

SESSION_COOKIE: Final = "tubeless_ui"
CSRF_COOKIE: Final = "tubeless_csrf"
CSRF_FIELD: Final = "csrf"
SECURITY_HEADERS: Final = {
    "content-security-policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
    ),
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "x-frame-options": "DENY",
    "cache-control": "no-store",
}


def session_value(token: str) -> str:
    """The session cookie's value for ``token``: an HMAC, never the token itself."""
    return hmac.new(token.encode(), b"tubeless-ui-session-v1", hashlib.sha256).hexdigest()


def session_ok(token: str | None, cookie: str | None, authorization: str | None) -> bool:
    """Whether a request is logged in: its :data:`SESSION_COOKIE` value or its
    ``Authorization`` header (always, when the pages run without a token)."""
    if token is None:
        return True
    if cookie is not None and hmac.compare_digest(cookie.encode(), session_value(token).encode()):
        return True
    if authorization is not None and authorization.lower().startswith("bearer "):
        return token_matches(token, authorization[7:].strip())
    return False


def new_csrf() -> str:
    """A fresh CSRF value for the cookie and the forms."""
    return secrets.token_urlsafe(24)


def csrf_ok(cookie: str | None, field: str | None) -> bool:
    """Whether a form's CSRF field matches the browser's cookie."""
    if not cookie or not field:
        return False
    return hmac.compare_digest(cookie.encode(), field.encode("utf-8", "surrogatepass"))


def safe_next(target: str | None) -> str:
    """A redirect target after login that stays on this site (a path, never ``//host``)."""
    if not target or not target.startswith("/") or target.startswith("//") or "\\" in target:
        return "/"
    return target
