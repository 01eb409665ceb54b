"""Suite-wide hooks (shared helpers live in ``tests/fixtures``)."""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import pytest


def _utf8_safe(text: str) -> str:
    """``text``, with lone surrogates written as ``\\udxxx`` escapes if it holds any."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, Any, None]:
    """Keep reports sendable as UTF-8 (``make test`` runs on pytest-xdist workers).

    Several tests feed tubeless untrusted text with lone surrogates, which then appears in
    captured output and in failure messages; a worker could not send such a report to the
    controller, and the whole run would stop with an internal error instead of a result.
    """
    outcome = yield
    report = outcome.get_result()
    report.sections = [(title, _utf8_safe(text)) for title, text in report.sections]
    longrepr = report.longrepr
    if isinstance(longrepr, tuple):  # a skip: (path, line, reason)
        report.longrepr = (*longrepr[:-1], _utf8_safe(str(longrepr[-1])))
    elif longrepr is not None:
        text = str(longrepr)
        safe = _utf8_safe(text)
        if safe is not text:
            report.longrepr = safe
