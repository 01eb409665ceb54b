"""The service interface of the model adapters: what other packages may use of its private modules.

Another package uses a private module of this one only through here: ``from
tubeless.providers._spi import NAME``. The import-linter contract "Private modules stay inside
their package" (``pyproject.toml``) refuses any other import of a ``tubeless.providers._*``
module from outside the package, so this list is everything other layers depend on beyond the
public ``tubeless.providers`` names. Users today: the CLI (``tubeless look`` shows a tool's
parameters as a provider sends them).

Each name is loaded from its home module when first imported from here, so importing this
module costs nothing and never loads a module its caller does not need.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tubeless._lazy import lazy_attributes

if TYPE_CHECKING:
    from tubeless.providers._calls import strict_problems, wrap_parameters

__all__ = [
    "strict_problems",
    "wrap_parameters",
]

#: Each name's home: (module, attribute).
_HOMES: dict[str, tuple[str, str]] = {
    "strict_problems": ("tubeless.providers._calls", "strict_problems"),
    "wrap_parameters": ("tubeless.providers._calls", "wrap_parameters"),
}

__getattr__, __dir__ = lazy_attributes(globals(), _HOMES)
