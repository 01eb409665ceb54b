"""Every checkpoint document a run writes is read back by the typed document and written again
as the same bytes (issue 31, item 2): sorted compact JSON, exactly what ``json.dumps`` gives.

The scenarios are the durable tests that take no fixture (completed, failed, resumed after a
crash in a call or in ``decide``, reconciled, waiting for approval, approved with ``tubeless
approve``'s ``record_decision``): each commit's text is captured as it is written.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import tests.agent.test_recovered_calls_trace as recovered
import tests.durable.test_resume as resume
import tests.durable.test_waiting as waiting
from tubeless.durable import _decide, _session
from tubeless.durable._document import ABSENT, CheckpointDocument

#: Scenarios that stop before anything is written.
WRITE_NOTHING = {
    "test_a_dry_run_opens_no_storage",
    "test_an_invalid_key_is_refused_before_anything_runs",
    "test_without_checkpoints_the_idempotency_key_is_the_runs_own",
}
SCENARIOS = [
    pytest.param(test, id=f"{module.__name__.rsplit('.', 1)[1]}::{name}")
    for module in (resume, waiting, recovered)
    for name, test in sorted(vars(module).items())
    if name.startswith("test_") and name not in WRITE_NOTHING
    if callable(test) and not inspect.signature(test).parameters
]


@pytest.fixture
def written(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The text of every document a run commits, or ``record_decision`` returns."""
    texts: list[str] = []
    commit = _session.CheckpointSession.commit

    def recording(
        self: Any, document: Any, encoder: Callable[[Any], str] = _session.encode
    ) -> None:
        def encoded(value: Any) -> str:
            texts.append(encoder(value))
            return texts[-1]

        commit(self, document, encoded)

    decide = _decide.record_decision

    def deciding(*args: Any, **kwargs: Any) -> str:
        texts.append(decide(*args, **kwargs))
        return texts[-1]

    monkeypatch.setattr(_session.CheckpointSession, "commit", recording)
    monkeypatch.setattr(_decide, "record_decision", deciding)
    yield texts


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_every_written_document_reads_back_to_the_same_bytes(
    scenario: Callable[[], None], written: list[str]
) -> None:
    scenario()
    assert written, "the scenario wrote no checkpoint"
    for text in written:
        assert json.dumps(json.loads(text), sort_keys=True, separators=(",", ":")) == text
        assert CheckpointDocument.from_json(text, "k").to_json() == text


def test_keys_a_release_does_not_know_and_absent_fields_are_kept() -> None:
    """A document read and written again is the same bytes even with keys no writer of this
    release produces (an older or newer one might), and without optional ones."""
    document = {
        "version": 1,
        "zz": [1, {"b": 2}],
        "agents": {
            "a": {
                "phase": "decide",
                "definition": {},
                "budget": {"depth": 0, "calls": 0, "decisions": 0, "spent": 1.5},
                "turn": 1,
                "calls": 0,
                "state_version": 0,
                "decision": {"left": "over"},
                "note": "kept",
            },
            "b": {
                "phase": "calls",
                "definition": {"x": 1},
                "budget": {"depth": 1, "calls": 1, "decisions": 1},
                "turn": 1,
                "calls": 0,
                "state_version": 0,
                "state": None,
                "decision": {
                    "admitted": True,
                    "calls": [{"id": "c", "tool": "t", "status": "running", "aa": 0}],
                    "why": "x",
                },
            },
        },
        "approvals": {"pending": [], "other": True},
    }
    text = json.dumps(document, sort_keys=True, separators=(",", ":"))
    parsed = CheckpointDocument.from_json(text, "k")
    assert parsed.agents["a"].state is ABSENT and parsed.agents["a"].decision is None
    assert parsed.to_json() == text
    parsed.agents["a"].at("decide", 2, 1, 0, {"s": 1})  # a new phase drops the old decision
    assert json.loads(parsed.to_json())["agents"]["a"].get("decision") is None
