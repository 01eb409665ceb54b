"""An import-linter contract type: a package's private modules stay inside it, but its ``_spi``.

``lint-imports`` loads this module from the repository root (it puts the working directory on
``sys.path``); ``pyproject.toml`` registers the type as ``private_modules``. The built-in
``forbidden`` contract cannot say this: its module expressions have no "names starting with
``_``" wildcard, and a package's public and private modules sit side by side.

For ``root_package = "tubeless"``, a module's package is its first two name parts
(``tubeless.pipeline._execute`` belongs to ``tubeless.pipeline``; a top-level module such as
``tubeless.testing`` is its own). A module is private to its package when a part after the
package's starts with ``_``. The contract is broken by any direct import of a module private to
another package than the importer's, unless that module is the package's service interface
(``<package>._spi``, the option ``service_module``). Imports under ``if TYPE_CHECKING:`` count
only when the session does not exclude them.
"""

from __future__ import annotations

from typing import Any

from grimp import ImportGraph
from importlinter import Contract, ContractCheck, fields, output


class PrivateModulesContract(Contract):
    """No module imports another package's private module, except that package's ``_spi``."""

    type_name = "private_modules"

    root_package = fields.StringField()
    service_module = fields.StringField(required=False, default="_spi")

    def check(self, graph: ImportGraph, verbose: bool) -> ContractCheck:
        root = str(self.root_package)
        service = str(self.service_module)
        depth = root.count(".") + 2
        violations: list[dict[str, Any]] = []
        for imported in sorted(m for m in graph.modules if m.startswith(f"{root}.")):
            home = _package_of(imported, depth)
            inner = imported.split(".")[depth:]
            if not inner or inner == [service] or not any(p.startswith("_") for p in inner):
                continue
            for importer in sorted(graph.find_modules_that_directly_import(imported)):
                if _package_of(importer, depth) == home:
                    continue
                details = graph.get_import_details(importer=importer, imported=imported)
                violations.append(
                    {
                        "importer": importer,
                        "imported": imported,
                        "lines": sorted({detail["line_number"] for detail in details}),
                        "service": f"{home}.{service}",
                    }
                )
        return ContractCheck(kept=not violations, metadata={"violations": violations})

    def render_broken_contract(self, check: ContractCheck) -> None:
        for violation in check.metadata["violations"]:
            lines = ", ".join(f"l.{line}" for line in violation["lines"])
            output.print_error(
                f"{violation['importer']} -> {violation['imported']} ({lines})", bold=False
            )
            output.print(
                f"    import it from {violation['service']} (add the name there if it is new)"
            )
            output.new_line()


def _package_of(module: str, depth: int) -> str:
    return ".".join(module.split(".")[:depth])
