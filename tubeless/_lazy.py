"""Names a module loads from their home modules on first use (PEP 562), for ``_spi`` modules.

A ``_spi`` module lists what other packages may use of its package's private modules; importing
it must not import them all, so each name is looked up in its home module the first time it is
asked for, then kept in the module's namespace (the next lookup is an ordinary global)::

    _HOMES = {"find_key": ("tubeless.durable._keys", "find_key")}
    __getattr__, __dir__ = lazy_attributes(globals(), _HOMES)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, MutableMapping
from importlib import import_module
from typing import Any

__all__ = ["lazy_attributes"]


def lazy_attributes(
    namespace: MutableMapping[str, Any], homes: Mapping[str, tuple[str, str]]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """A module's ``__getattr__`` and ``__dir__`` for ``homes`` (name → (module, attribute))."""
    module_name = namespace.get("__name__", "?")

    def __getattr__(name: str) -> Any:
        home = homes.get(name)
        if home is None:
            raise AttributeError(f"module {module_name!r} has no attribute {name!r}")
        value = getattr(import_module(home[0]), home[1])
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(homes))

    return __getattr__, __dir__
