"""The service interface of the batch layer: what other packages may use of its private modules.

Another package uses a private module of this one only through here: ``from tubeless.batch._spi
import NAME``. The import-linter contract "Private modules stay inside their package"
(``pyproject.toml``) refuses any other import of a ``tubeless.batch._*`` module from outside the
package, so this list is everything other layers depend on beyond the public ``tubeless.batch``
names. Users today: the CLI (``tubeless batch`` and ``tubeless eval``, and reading
``--input-file`` YAML).

Each name is loaded from its home module when first imported from here, so importing this
module costs nothing and never loads a module its caller does not need.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tubeless._lazy import lazy_attributes

if TYPE_CHECKING:
    from tubeless.batch._engine import ENGINES, Engine
    from tubeless.batch._eval import case_cassettes, case_rows, check_case, format_table
    from tubeless.batch._inputs import InputRow, InputSource, open_inputs, read_inputs, row_key
    from tubeless.batch._junit import junit_xml
    from tubeless.batch._output import row_line
    from tubeless.batch._row import RowOutcome
    from tubeless.batch._runner import BatchSummary, run_outcomes, summarize
    from tubeless.batch._summary import SummaryCounter
    from tubeless.batch._yaml_inputs import yaml_value

__all__ = [
    "ENGINES",
    "BatchSummary",
    "Engine",
    "InputRow",
    "InputSource",
    "RowOutcome",
    "SummaryCounter",
    "case_cassettes",
    "case_rows",
    "check_case",
    "format_table",
    "junit_xml",
    "open_inputs",
    "read_inputs",
    "row_key",
    "row_line",
    "run_outcomes",
    "summarize",
    "yaml_value",
]

#: Each name's home: (module, attribute).
_HOMES: dict[str, tuple[str, str]] = {
    "BatchSummary": ("tubeless.batch._runner", "BatchSummary"),
    "ENGINES": ("tubeless.batch._engine", "ENGINES"),
    "Engine": ("tubeless.batch._engine", "Engine"),
    "InputRow": ("tubeless.batch._inputs", "InputRow"),
    "InputSource": ("tubeless.batch._inputs", "InputSource"),
    "RowOutcome": ("tubeless.batch._row", "RowOutcome"),
    "SummaryCounter": ("tubeless.batch._summary", "SummaryCounter"),
    "case_cassettes": ("tubeless.batch._eval", "case_cassettes"),
    "case_rows": ("tubeless.batch._eval", "case_rows"),
    "check_case": ("tubeless.batch._eval", "check_case"),
    "format_table": ("tubeless.batch._eval", "format_table"),
    "junit_xml": ("tubeless.batch._junit", "junit_xml"),
    "open_inputs": ("tubeless.batch._inputs", "open_inputs"),
    "read_inputs": ("tubeless.batch._inputs", "read_inputs"),
    "row_key": ("tubeless.batch._inputs", "row_key"),
    "row_line": ("tubeless.batch._output", "row_line"),
    "run_outcomes": ("tubeless.batch._runner", "run_outcomes"),
    "summarize": ("tubeless.batch._runner", "summarize"),
    "yaml_value": ("tubeless.batch._yaml_inputs", "yaml_value"),
}

__getattr__, __dir__ = lazy_attributes(globals(), _HOMES)
