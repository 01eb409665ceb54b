"""Eval results for the pages: the JUnit XML of ``tubeless eval --junit`` read back.

Each case is a row (suite, case, pass/failure/error, time); a failed case keeps its findings,
one per line, which name the expectation with the expected and the actual value (unless the
eval ran with ``--hide-values``). Files are bounded (:data:`MAX_XML_BYTES`) and parsed by the
standard library's expat, which refuses entity-expansion bombs.
"""

from __future__ import annotations

import os
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from typing import Final

__all__ = ["MAX_XML_BYTES", "EvalCase", "EvalReport", "read_junit"]

MAX_XML_BYTES: Final = 16 * 1024 * 1024
_MAX_CASES: Final = 10_000


@dataclass(frozen=True, kw_only=True, slots=True)
class EvalCase:
    """One ``<testcase>``."""

    suite: str
    name: str
    outcome: str
    """``pass``, ``failure`` or ``error``."""
    seconds: float | None
    findings: tuple[str, ...]


@dataclass(frozen=True, kw_only=True, slots=True)
class EvalReport:
    """A JUnit file of ``tubeless eval``."""

    number: int
    source: str
    cases: tuple[EvalCase, ...]

    @property
    def failed(self) -> int:
        """Cases that did not pass."""
        return sum(1 for case in self.cases if case.outcome != "pass")


def read_junit(source: str, number: int) -> EvalReport | None:
    """``source`` as an eval report, or ``None`` when it is no JUnit XML file.

    Raises:
        ValueError: An XML file that is malformed or too large (the message says which).
    """
    if not source.endswith(".xml") or "://" in source:
        return None
    if os.path.getsize(source) > MAX_XML_BYTES:
        raise ValueError(f"{source}: larger than {MAX_XML_BYTES} bytes")
    try:
        root = ET.parse(source).getroot()
    except ET.ParseError as exc:
        raise ValueError(f"{source}: not well-formed XML ({exc})") from None
    if root.tag not in ("testsuites", "testsuite"):
        return None
    suites = [root] if root.tag == "testsuite" else root.findall("testsuite")
    cases: list[EvalCase] = []
    for suite in suites:
        for case in suite.findall("testcase")[:_MAX_CASES]:
            bad = case.find("failure")
            outcome = "failure"
            if bad is None:
                bad = case.find("error")
                outcome = "error"
            text = "" if bad is None else (bad.text or bad.get("message") or "")
            try:
                seconds: float | None = float(case.get("time", ""))
            except ValueError:
                seconds = None
            cases.append(
                EvalCase(
                    suite=suite.get("name", ""),
                    name=case.get("name", ""),
                    outcome="pass" if bad is None else outcome,
                    seconds=seconds,
                    findings=tuple(line for line in text.splitlines() if line.strip()),
                )
            )
    return EvalReport(number=number, source=source, cases=tuple(cases))
