"""The service interface of ``tubeless.serve``: what other packages may use of its private modules.

Another package uses a private module of this one only through here: ``from
tubeless.serve._spi import NAME`` (the import-linter contract "Private modules stay inside their
package" refuses any other import). Each name is loaded from its home module when first
imported from here, so importing this module loads nothing its caller does not need.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tubeless._lazy import lazy_attributes

if TYPE_CHECKING:
    from tubeless.serve._config import CONFIG_ENV, ServeConfig, is_loopback, to_environment
    from tubeless.serve._manager import RunManager

__all__ = [
    "CONFIG_ENV",
    "RunManager",
    "ServeConfig",
    "is_loopback",
    "to_environment",
]

#: Each name's home: (module, attribute).
_HOMES: dict[str, tuple[str, str]] = {
    "RunManager": ("tubeless.serve._manager", "RunManager"),
    "to_environment": ("tubeless.serve._config", "to_environment"),
    "CONFIG_ENV": ("tubeless.serve._config", "CONFIG_ENV"),
    "is_loopback": ("tubeless.serve._config", "is_loopback"),
    "ServeConfig": ("tubeless.serve._config", "ServeConfig"),
}

__getattr__, __dir__ = lazy_attributes(globals(), _HOMES)
