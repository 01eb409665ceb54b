"""``run_eval``: run a cases file as a batch and check each row against its expectations.

Cases run like any batch (same engines, concurrency and trace); a case passes when every
expectation it gives holds. Without ``status`` or ``error_code`` a case expects ``completed``.
The JUnit XML is one ``<testsuite>`` (the cases file) of one ``<testcase>`` per case, with a
``<failure>`` for each failing case, the form GitHub and GitLab test reports read.
"""

from __future__ import annotations

import os
import xml.etree.ElementTree as ET
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tubeless.batch._engine import EngineName
from tubeless.batch._inputs import InputRow
from tubeless.batch._row import RowOutcome
from tubeless.errors import CASSETTE_INVALID, CASSETTE_MISMATCH, REPLAY_DIVERGED

if TYPE_CHECKING:
    from tubeless.pipeline import CancelToken
    from tubeless.project.cases import Case
    from tubeless.tracing import TraceSink

__all__ = [
    "CaseResult",
    "case_cassettes",
    "case_rows",
    "check_case",
    "format_table",
    "junit_xml",
    "run_eval",
]

#: A row that failed with one of these did not replay its cassette as recorded.
_CASSETTE_CODES = (REPLAY_DIVERGED, CASSETTE_INVALID, CASSETTE_MISMATCH)


@dataclass(frozen=True, kw_only=True, slots=True)
class CaseResult:
    """One case's verdict."""

    id: str
    passed: bool
    failures: tuple[str, ...]
    row: Mapping[str, Any]


def case_rows(cases: Sequence[Case]) -> list[InputRow]:
    """The batch inputs of ``cases``, each at the line its input is written on."""
    return [InputRow(index=i, line=case.line, raw=case.spec.input) for i, case in enumerate(cases)]


def case_cassettes(
    cases: Sequence[Case],
    replay: str | os.PathLike[str] | None = None,
) -> dict[int, str]:
    """The cassette each case replays, by index: its own ``cassette:``, else
    ``<replay>/<case id>.cassette.jsonl`` when a replay folder is given."""
    found = {}
    for index, case in enumerate(cases):
        if case.cassette is not None:
            found[index] = str(case.cassette)
        elif replay is not None:
            found[index] = str(Path(replay).resolve() / f"{case.spec.id}.cassette.jsonl")
    return found


def check_case(case: Case, outcome: RowOutcome) -> CaseResult:
    """Check every expectation of ``case`` against its row."""
    row = outcome.row
    expect = case.spec.expect
    given = case.expected
    failures: list[str] = []
    status = row.get("status")
    error = row.get("error") or {}
    wanted_status = expect.status or ("failed" if "error_code" in given else "completed")
    replayed = error.get("code") in _CASSETTE_CODES and expect.error_code != error.get("code")
    if replayed:  # a divergence fails the case whatever else it expects
        failures.append(f"{error.get('code')}: {error.get('message')}")
    if status != wanted_status:
        detail = f" ({error.get('code')}: {error.get('message')})" if error and not replayed else ""
        failures.append(f"status: expected {wanted_status}, got {status}{detail}")
    if "error_code" in given and error.get("code") != expect.error_code:
        failures.append(f"error_code: expected {expect.error_code}, got {error.get('code')}")
    result = row.get("result")
    if "result" in given and (status != "completed" or result != expect.result):
        failures.append("result: differs from the expected result")
    if "result_contains" in given and (
        status != "completed" or not _contains(result, expect.result_contains)
    ):
        failures.append("result_contains: the result does not contain the expected part")
    if expect.max_turns is not None and row.get("turns", 0) > expect.max_turns:
        failures.append(f"max_turns: expected at most {expect.max_turns}, got {row['turns']}")
    if expect.max_calls is not None and row.get("calls", 0) > expect.max_calls:
        failures.append(f"max_calls: expected at most {expect.max_calls}, got {row['calls']}")
    for name, count in (expect.tools or {}).items():
        used = outcome.tools.get(name, 0)
        if used != count:
            failures.append(f"tools.{name}: expected {count} calls, got {used}")
    if case.check is not None:
        summary = {
            "status": status,
            "error": error or None,
            "turns": row.get("turns"),
            "calls": row.get("calls"),
            "tools": dict(outcome.tools),
            "run_id": row.get("run_id"),
            "duration_ms": row.get("duration_ms"),
        }
        try:
            case.check(result, summary)
        except AssertionError as exc:
            failures.append(f"check: {exc}" if str(exc) else "check: assertion failed")
        except Exception as exc:
            failures.append(f"check raised {type(exc).__name__}: {exc}")
    return CaseResult(id=case.spec.id, passed=not failures, failures=tuple(failures), row=row)


def _contains(value: Any, part: Any) -> bool:
    """An object's keys and values recursively, a substring of a string, else equality."""
    if isinstance(part, dict):
        return isinstance(value, dict) and all(
            key in value and _contains(value[key], item) for key, item in part.items()
        )
    if isinstance(part, str) and isinstance(value, str):
        return part in value
    return bool(value == part)


def format_table(results: Sequence[CaseResult]) -> list[str]:
    """The results table (plain text, one line per case, then the totals)."""
    width = max([len("case"), *(len(r.id) for r in results)])
    lines = [f"{'case':<{width}}  result  turns  calls  duration  detail"]
    for r in results:
        row = r.row
        duration = f"{float(row.get('duration_ms') or 0):.1f} ms"
        lines.append(
            f"{r.id:<{width}}  {'pass' if r.passed else 'FAIL':<6}  "
            f"{row.get('turns', 0):>5}  {row.get('calls', 0):>5}  {duration:>8}  "
            f"{r.failures[0] if r.failures else ''}".rstrip()
        )
        lines.extend(
            f"{'':<{width}}  {'':<6}  {'':>5}  {'':>5}  {'':>8}  {more}" for more in r.failures[1:]
        )
    failed = sum(1 for r in results if not r.passed)
    lines.append(f"{len(results) - failed} passed, {failed} failed")
    return lines


def junit_xml(
    results: Sequence[CaseResult], *, suite: str, entry: str, path: str | os.PathLike[str]
) -> None:
    """Write JUnit XML for ``results`` to ``path``."""
    failed = sum(1 for r in results if not r.passed)
    seconds = sum(float(r.row.get("duration_ms") or 0) for r in results) / 1000
    root = ET.Element(
        "testsuites",
        name="tubeless eval",
        tests=str(len(results)),
        failures=str(failed),
        errors="0",
        time=f"{seconds:.3f}",
    )
    testsuite = ET.SubElement(
        root,
        "testsuite",
        name=suite,
        tests=str(len(results)),
        failures=str(failed),
        errors="0",
        skipped="0",
        time=f"{seconds:.3f}",
    )
    for r in results:
        testcase = ET.SubElement(
            testsuite,
            "testcase",
            name=r.id,
            classname=entry,
            time=f"{float(r.row.get('duration_ms') or 0) / 1000:.3f}",
        )
        if not r.passed:
            failure = ET.SubElement(testcase, "failure", message=r.failures[0], type="expectation")
            failure.text = "\n".join(r.failures)
    tree = ET.ElementTree(root)
    ET.indent(tree)
    tree.write(Path(path), encoding="utf-8", xml_declaration=True)


async def run_eval(
    project: str | os.PathLike[str],
    cases: str | os.PathLike[str],
    *,
    engine: EngineName = "local",
    concurrency: int = 1,
    trace: TraceSink | Sequence[TraceSink] | None = None,
    ray_address: str | None = None,
    signal: CancelToken | None = None,
    replay: str | os.PathLike[str] | None = None,
) -> list[CaseResult]:
    """Run every case of the ``cases`` file on its entry of ``project``; one verdict per case.

    A case that names a ``cassette:`` replays it; with ``replay`` (a folder) every other case
    replays ``<replay>/<case id>.cassette.jsonl``. A case whose replay diverges fails.

    Raises:
        DocumentError: The cases file is invalid (every problem located).
        ReferenceResolutionError: A ``check`` reference cannot be imported.
    """
    from tubeless.batch._engine import EntrySource
    from tubeless.batch._runner import run_outcomes
    from tubeless.project.cases import load_cases

    loaded = load_cases(cases)
    source = EntrySource.of(project, loaded.entry)
    entry: Any = source.load() if engine == "local" else source
    outcomes = [
        outcome
        async for outcome in run_outcomes(
            entry,
            case_rows(loaded.cases),
            engine=engine,
            concurrency=concurrency,
            trace=trace,
            ray_address=ray_address,
            signal=signal,
            count_tools=True,
            replays=case_cassettes(loaded.cases, replay),
        )
    ]
    by_index = {outcome.row["index"]: outcome for outcome in outcomes}
    return [check_case(case, by_index[i]) for i, case in enumerate(loaded.cases) if i in by_index]
