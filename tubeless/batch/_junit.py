"""The JUnit XML of an evaluation: one ``<testsuite>`` (the cases file) of one ``<testcase>`` per
case, the form GitHub and GitLab test reports read.

A case that failed an expectation has a ``<failure type="expectation">``; a case that could not be
judged (a check raised something other than ``AssertionError``, the worker running it died) has an
``<error>`` typed by the exception class or the error code. Either one's ``message`` is the first
finding, and its text lists them all, one per line.

Messages, values and names come from the user's checks, results and files, so they may hold
anything a Python string can; the report stays well-formed XML 1.0: a character XML forbids (a
control character such as ESC, a lone surrogate, U+FFFE or U+FFFF) is written as its visible
Python escape (``\\x1b``, ``\\ud800``).
"""

from __future__ import annotations

import os
import re
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from tubeless.batch._eval import CaseResult

__all__ = ["junit_xml", "xml_text"]

#: What XML 1.0 forbids (its ``Char`` production allows tab, newline, carriage return, and
#: U+0020 to U+10FFFF less the surrogates, U+FFFE and U+FFFF).
_NOT_XML: Final = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def xml_text(text: str) -> str:
    """``text`` with every character XML 1.0 forbids written as its Python escape."""
    return _NOT_XML.sub(lambda match: repr(match.group())[1:-1], text)


def junit_xml(
    results: Sequence[CaseResult],
    *,
    suite: str,
    entry: str,
    path: str | os.PathLike[str],
    values: bool = True,
) -> None:
    """Write JUnit XML for ``results`` to ``path``.

    Args:
        suite: The test suite's name (the cases file's stem).
        entry: The entry the cases ran on (each test case's ``classname``).
        values: Quote the expected and actual values of a failed expectation
            (``--hide-values`` passes False).
    """
    failures = sum(1 for r in results if r.verdict == "fail")
    errors = sum(1 for r in results if r.verdict == "error")
    seconds = sum(float(r.row.get("duration_ms") or 0) for r in results) / 1000
    counts = {
        "tests": str(len(results)),
        "failures": str(failures),
        "errors": str(errors),
        "time": f"{seconds:.3f}",
    }
    root = ET.Element("testsuites", {"name": "tubeless eval", **counts})
    testsuite = ET.SubElement(
        root, "testsuite", {"name": xml_text(suite), **counts, "skipped": "0"}
    )
    for r in results:
        testcase = ET.SubElement(
            testsuite,
            "testcase",
            name=xml_text(r.id),
            classname=xml_text(entry),
            time=f"{float(r.row.get('duration_ms') or 0) / 1000:.3f}",
        )
        usage = r.row.get("usage")
        if isinstance(usage, dict):  # a metered (budgeted) run's model usage
            properties = ET.SubElement(testcase, "properties")
            for name in ("input_tokens", "output_tokens", "cost_usd"):
                if usage.get(name) is not None:
                    ET.SubElement(
                        properties,
                        "property",
                        name=f"tubeless.usage.{name}",
                        value=str(usage[name]),
                    )
        if r.findings:
            first = r.findings[0]  # errors come first: an error case's first finding is one
            element = ET.SubElement(
                testcase,
                "error" if first.error else "failure",
                message=xml_text(first.text(values=values)),
                type=xml_text(first.type),
            )
            element.text = xml_text("\n".join(f.text(values=values) for f in r.findings))
    tree = ET.ElementTree(root)
    ET.indent(tree)
    tree.write(Path(path), encoding="utf-8", xml_declaration=True)
