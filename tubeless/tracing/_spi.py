"""The service interface of the tracing layer: what other packages may use of its private modules.

Another package uses a private module of this one only through here: ``from
tubeless.tracing._spi import NAME``. The import-linter contract "Private modules stay inside
their package" (``pyproject.toml``) refuses any other import of a ``tubeless.tracing._*`` module
from outside the package, so this list is everything other layers depend on beyond the public
``tubeless.tracing`` names. Users today: the agent turn (a model request's span attributes) and
the model adapters (what a server's text may put in a trace).

Each name is loaded from its home module when first imported from here, so importing this
module costs nothing and never loads a module its caller does not need.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tubeless._lazy import lazy_attributes

if TYPE_CHECKING:
    from tubeless.tracing._otel_spans import model_request_attributes
    from tubeless.tracing._server_text import OTHER_REASON, looks_like_key, recordable_model

__all__ = [
    "OTHER_REASON",
    "looks_like_key",
    "model_request_attributes",
    "recordable_model",
]

#: Each name's home: (module, attribute).
_HOMES: dict[str, tuple[str, str]] = {
    "OTHER_REASON": ("tubeless.tracing._server_text", "OTHER_REASON"),
    "looks_like_key": ("tubeless.tracing._server_text", "looks_like_key"),
    "model_request_attributes": ("tubeless.tracing._otel_spans", "model_request_attributes"),
    "recordable_model": ("tubeless.tracing._server_text", "recordable_model"),
}

__getattr__, __dir__ = lazy_attributes(globals(), _HOMES)
