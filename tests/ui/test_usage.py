"""Budget meters and usage columns, from the decide attempts' ``agent.usage.*`` attributes and
the limits the definition snapshot recorded; and stores that cannot be read."""

from __future__ import annotations

import json
import re
from html import unescape
from pathlib import Path
from typing import Any

from tests.fixtures import ui as made
from tests.ui.conftest import client_for
from tubeless.tracing import read_trace


def _with_usage(source: Path, out: Path) -> None:
    """``source`` with usage on every decide attempt (100 in, 20 out, $0.01) and token and
    cost budgets in the agent's recorded limits."""
    records: list[dict[str, Any]] = read_trace(source)
    with out.open("w", encoding="utf-8") as handle:
        for record in records:
            payload = record.get("payload", {})
            if record["name"] == "step.attempted" and record.get("stepId") == "decide":
                attributes = {
                    **payload["attributes"],
                    "agent.usage.inputTokens": 100,
                    "agent.usage.outputTokens": 20,
                    "agent.usage.costUsd": 0.01,
                }
                record = {**record, "payload": {**payload, "attributes": attributes}}
            if record["name"] == "pipeline.started" and "definitionSnapshot" in payload:
                for step in payload["definitionSnapshot"]["steps"]:
                    if "agent" in step:
                        step["agent"]["limits"].update(maxTotalTokens=1000, maxCostUsd="0.05")
            handle.write(json.dumps(record) + "\n")


def test_usage_shows_as_columns_and_budget_meters(tmp_path: Path) -> None:
    trace = tmp_path / "usage.ndjson"
    _with_usage(made.scripted_trace(tmp_path, "red blue"), trace)
    with client_for([trace]) as client:
        runs = client.get("/").text
        row = unescape(re.sub(r"<[^>]+>", " ", runs.split('data-row="run"')[1]))
        assert "200 in / 40 out" in row and "$0.0200" in row  # two turns decided
        link = runs.split('data-row="run"')[1].split('href="')[1].split('"')[0]
        page = client.get(link).text
    text = unescape(re.sub(r"<[^>]+>", " ", page))
    assert "total tokens: 240 of 1,000" in text
    assert "cost (USD): $0.0200 of $0.0500" in text
    assert '<meter min="0" max="1000" value="240"' in page


def test_an_unreadable_store_is_named_on_the_runs_page(tmp_path: Path) -> None:
    good = made.scripted_trace(tmp_path)
    bad = tmp_path / "bad.ndjson"
    bad.write_text('{"not": "a record"}\n', encoding="utf-8")
    with client_for([good, bad]) as client:
        page = client.get("/")
    assert page.status_code == 200 and page.text.count('data-row="run"') == 1
    assert 'class="problem"' in page.text and "bad.ndjson:1" in page.text


def test_a_store_url_that_cannot_be_read_never_shows_its_password(tmp_path: Path) -> None:
    url = "postgresql://reader:s3cret-pw@127.0.0.1:1/traces"
    with client_for([url]) as client:
        page = client.get("/").text
    assert "s3cret-pw" not in page and "postgresql://reader:***@127.0.0.1:1/traces" in page
