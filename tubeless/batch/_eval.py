"""``run_eval``: run a cases file as a batch and check each row against its expectations.

Cases run like any batch (same engines, concurrency and trace); a case passes when every
expectation it gives holds. Without ``status`` or ``error_code`` a case expects ``completed``.

A case that did not pass has findings. A *failure* is an expectation that did not hold (a
``check`` that raised ``AssertionError`` included; a run that failed where success was
expected is one too); an *error* kept the case from being judged: its ``check`` raised another
exception, or the harness broke (the worker running it died, a bug of ours). A failed ``result``
or ``result_contains`` names the JSON pointer of the first difference and carries the expected
and actual values there, each as JSON bounded to :data:`SHOWN_CHARACTERS` characters; the table
and the JUnit report show them unless ``--hide-values``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Literal

from tubeless.agent._spi import MISSING as _ABSENT
from tubeless.agent._spi import first_difference, shown_value
from tubeless.batch._engine import EngineName
from tubeless.batch._inputs import InputRow
from tubeless.batch._row import RowOutcome
from tubeless.errors import BATCH_WORKER_DIED, CASSETTE_INVALID, CASSETTE_MISMATCH, REPLAY_DIVERGED

if TYPE_CHECKING:
    from tubeless.pipeline import CancelToken
    from tubeless.project.cases import Case
    from tubeless.tracing import TraceSink

__all__ = [
    "SHOWN_CHARACTERS",
    "CaseResult",
    "Finding",
    "case_cassettes",
    "case_rows",
    "check_case",
    "format_table",
    "run_eval",
]

#: A shown value is its JSON, cut after this many characters with an ellipsis (the bound of
#: replay divergence messages too).
SHOWN_CHARACTERS: Final = 200

#: A row that failed with one of these did not replay its cassette as recorded.
_CASSETTE_CODES = (REPLAY_DIVERGED, CASSETTE_INVALID, CASSETTE_MISMATCH)
#: A row that failed with one of these never finished its run: no expectation can be judged.
_HARNESS_CODES = (BATCH_WORKER_DIED,)

#: Escaped in the table: controls (one finding stays one line, and no escape sequence reaches
#: the terminal), bidi overrides, lone surrogates (they cannot be written as UTF-8) and the
#: noncharacters U+FFFE and U+FFFF. Checks, results and inputs are the user's data.
_UNPRINTABLE: Final = re.compile(
    r"[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\ud800-\udfff\ufffe\uffff]"
)


@dataclass(frozen=True, kw_only=True, slots=True)
class Finding:
    """Why a case did not pass: an expectation that did not hold, or an error."""

    message: str
    """What went wrong, quoting nothing of the result: ``result: differs at /square``."""
    error: bool = False
    """The case could not be judged (a JUnit ``<error>``), rather than failed (``<failure>``)."""
    type: str = "expectation"
    """The JUnit ``type``: ``expectation``, the check's exception class, or the row's code."""
    expected: str | None = None
    """The expected value at the first difference, as bounded JSON (``(absent)``: no such key)."""
    actual: str | None = None
    """The actual value there, likewise."""

    def text(self, *, values: bool = True) -> str:
        """The finding as the table and the JUnit report show it."""
        if values and self.expected is not None:
            return f"{self.message}: expected {self.expected}, got {self.actual}"
        return self.message


@dataclass(frozen=True, kw_only=True, slots=True)
class CaseResult:
    """One case's verdict."""

    id: str
    findings: tuple[Finding, ...]
    """What went wrong, errors first, then failures in the order of the expectations."""
    row: Mapping[str, Any]

    @property
    def passed(self) -> bool:
        return not self.findings

    @property
    def verdict(self) -> Literal["pass", "fail", "error"]:
        """``error`` when any finding is an error, ``fail`` when any is a failure."""
        if not self.findings:
            return "pass"
        return "error" if self.findings[0].error else "fail"

    @property
    def failures(self) -> tuple[str, ...]:
        """The failures' texts, values shown."""
        return tuple(f.text() for f in self.findings if not f.error)

    @property
    def errors(self) -> tuple[str, ...]:
        """The errors' texts."""
        return tuple(f.text() for f in self.findings if f.error)


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
    try:
        findings = _judge(case, outcome)
    except Exception as exc:  # a bug of ours is this case's error, not every case's crash
        findings = [
            Finding(
                message=f"the harness failed: {type(exc).__name__}: {exc}",
                error=True,
                type=type(exc).__name__,
            )
        ]
    findings.sort(key=lambda finding: not finding.error)  # stable: errors first
    return CaseResult(id=case.spec.id, findings=tuple(findings), row=outcome.row)


def _judge(case: Case, outcome: RowOutcome) -> list[Finding]:
    row = outcome.row
    expect = case.spec.expect
    given = case.expected
    findings: list[Finding] = []
    status = row.get("status")
    error = row.get("error") or {}
    code = error.get("code")
    if code in _HARNESS_CODES and expect.error_code != code:
        return [Finding(message=f"{code}: {error.get('message')}", error=True, type=str(code))]
    wanted_status = expect.status or ("failed" if "error_code" in given else "completed")
    replayed = code in _CASSETTE_CODES and expect.error_code != code
    if replayed:  # a divergence fails the case whatever else it expects
        findings.append(Finding(message=f"{code}: {error.get('message')}"))
    if status != wanted_status:
        detail = f" ({code}: {error.get('message')})" if error and not replayed else ""
        findings.append(Finding(message=f"status: expected {wanted_status}, got {status}{detail}"))
    if "error_code" in given and code != expect.error_code:
        findings.append(Finding(message=f"error_code: expected {expect.error_code}, got {code}"))
    result = row.get("result", _ABSENT) if status == "completed" else _ABSENT
    if "result" in given and (result is _ABSENT or result != expect.result):
        found = first_difference(expect.result, result)
        findings.append(_difference("result", found, expect.result, result))
    if "result_contains" in given and (
        result is _ABSENT or not _contains(result, expect.result_contains)
    ):
        found = _first_missing(expect.result_contains, result)
        findings.append(_difference("result_contains", found, expect.result_contains, result))
    if expect.max_turns is not None and row.get("turns", 0) > expect.max_turns:
        findings.append(
            Finding(message=f"max_turns: expected at most {expect.max_turns}, got {row['turns']}")
        )
    if expect.max_calls is not None and row.get("calls", 0) > expect.max_calls:
        findings.append(
            Finding(message=f"max_calls: expected at most {expect.max_calls}, got {row['calls']}")
        )
    for name, count in (expect.tools or {}).items():
        used = outcome.tools.get(name, 0)
        if used != count:
            findings.append(Finding(message=f"tools.{name}: expected {count} calls, got {used}"))
    if case.check is not None:
        findings.extend(_check(case, outcome, None if result is _ABSENT else result))
    return findings


def _check(case: Case, outcome: RowOutcome, result: Any) -> list[Finding]:
    """Call the case's ``check``: an ``AssertionError`` is a failure, anything else an error."""
    row = outcome.row
    summary = {
        "status": row.get("status"),
        "error": row.get("error") or None,
        "turns": row.get("turns"),
        "calls": row.get("calls"),
        "tools": dict(outcome.tools),
        "run_id": row.get("run_id"),
        "duration_ms": row.get("duration_ms"),
        "usage": row.get("usage"),
    }
    try:
        case.check(result, summary)
    except AssertionError as exc:
        return [Finding(message=f"check: {exc}" if str(exc) else "check: assertion failed")]
    except Exception as exc:
        name = type(exc).__name__
        return [Finding(message=f"check raised {name}: {exc}", error=True, type=name)]
    return []


def _difference(
    expectation: str, found: tuple[str, Any, Any] | None, expected: Any, actual: Any
) -> Finding:
    """The finding of a failed ``result``/``result_contains``: where, and the values there."""
    pointer, want, got = found if found is not None else ("", expected, actual)
    where = f" at {pointer}" if pointer else ""  # the root's pointer is the empty string
    return Finding(
        message=f"{expectation}: differs{where}",
        expected=shown_value(want),
        actual=shown_value(got),
    )


def _contains(value: Any, part: Any) -> bool:
    """An object's keys and values recursively, a substring of a string, else equality."""
    if isinstance(part, dict):
        return isinstance(value, dict) and all(
            key in value and _contains(value[key], item) for key, item in part.items()
        )
    if isinstance(part, str) and isinstance(value, str):
        return part in value
    return bool(value == part)


def _first_missing(part: Any, value: Any, pointer: str = "") -> tuple[str, Any, Any] | None:
    """Where ``value`` first fails to contain ``part`` (as :func:`_contains` judges it)."""
    if isinstance(part, dict) and isinstance(value, dict):
        for key, item in part.items():
            where = f"{pointer}/{key.replace('~', '~0').replace('/', '~1')}"
            if key not in value:
                return where, item, _ABSENT
            found = _first_missing(item, value[key], where)
            if found is not None:
                return found
        return None
    if isinstance(part, str) and isinstance(value, str):
        return None if part in value else (pointer, part, value)
    if isinstance(part, dict) or value is _ABSENT:
        return pointer, part, value
    return None if value == part else first_difference(part, value, pointer)


def format_table(results: Sequence[CaseResult], *, values: bool = True) -> list[str]:
    """The results table (plain text, one line per finding, then the totals).

    Args:
        values: Quote the expected and actual values (``--hide-values`` passes False).
    """
    width = max([len("case"), *(len(r.id) for r in results)])
    # A usage column only when some case's model requests were metered (budgeted runs).
    usages = [usage_text(r.row.get("usage")) for r in results]
    metered = max((len(u) for u in usages), default=0)
    column = f"  {'usage':<{max(metered, 5)}}" if metered else ""
    lines = [f"{'case':<{width}}  result  turns  calls  duration{column}  detail"]
    verdicts = {"pass": "pass", "fail": "FAIL", "error": "ERROR"}
    for r, usage in zip(results, usages, strict=True):
        row = r.row
        duration = f"{float(row.get('duration_ms') or 0):.1f} ms"
        details = [_printable(finding.text(values=values)) for finding in r.findings]
        used = f"  {usage:<{max(metered, 5)}}" if metered else ""
        blank = f"  {'':<{max(metered, 5)}}" if metered else ""
        lines.append(
            f"{r.id:<{width}}  {verdicts[r.verdict]:<6}  "
            f"{row.get('turns', 0):>5}  {row.get('calls', 0):>5}  {duration:>8}{used}  "
            f"{details[0] if details else ''}".rstrip()
        )
        lines.extend(
            f"{'':<{width}}  {'':<6}  {'':>5}  {'':>5}  {'':>8}{blank}  {d}" for d in details[1:]
        )
    failed = sum(1 for r in results if r.verdict == "fail")
    errors = sum(1 for r in results if r.verdict == "error")
    totals = f"{len(results) - failed - errors} passed, {failed} failed"
    if errors:
        totals += f", {errors} error{'s' if errors > 1 else ''}"
    lines.append(totals)
    return lines


def usage_text(usage: Any) -> str:
    """``1.2k tokens $0.0400`` for a row's metered usage; empty when it has none."""
    from tubeless.tracing.meters import dollars, tokens

    if not isinstance(usage, dict):
        return ""
    total = int(usage.get("input_tokens") or 0) + int(usage.get("output_tokens") or 0)
    text = f"{tokens(total)} tokens"
    cost = usage.get("cost_usd")
    if isinstance(cost, int | float) and not isinstance(cost, bool):
        text += f" {dollars(cost)}"
    return text


def _printable(text: str) -> str:
    """``text`` with control, bidi and surrogate characters escaped (``\\x1b``, ``\\ud800``)."""
    return _UNPRINTABLE.sub(lambda match: repr(match.group())[1:-1], text)


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
