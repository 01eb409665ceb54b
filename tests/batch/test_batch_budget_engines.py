"""A batch-wide budget on the ``process`` and ``ray`` engines: one ledger, owned by the driver
(or a Ray actor), that every worker's rows reserve against before a request is sent.

Each row asks a chat completions server on 127.0.0.1 once (a ``_finish`` reply without usage
data, so each request keeps its whole reservation: its body bytes plus ``max_output_tokens``).
The budget fits three rows' reservations and not a fourth: the server sees exactly three
requests, whatever worker they came from; rows not started after that are skipped.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.batch.test_engines import ray_address
from tests.fixtures.batch import write_inputs
from tests.fixtures.cli import tubeless
from tests.fixtures.http_server import ScriptedHttpServer, scripted_http_server
from tests.fixtures.processes import write_project
from tests.providers.fixtures.chat_completions import completion, finish_call
from tubeless.batch import run_batch
from tubeless.errors import AGENT_LIMIT_REACHED, BUDGET_EXHAUSTED

__all__ = ["ray_address"]

MAX_OUT = 64
FITS = 3
ROWS = 8

_PROJECT = """\
    version: 1
    project: {{id: batchbudget}}
    python_path: [.]
    agents:
      asker:
        input:
          schema: {{type: object, properties: {{question: {{type: string}}}},
                   required: [question]}}
        result: {{schema: {{type: string}}}}
        result_json_schema: {{type: string}}
        initial_state: {{use: tubeless.providers:question_state, with: {{max_bytes: 4096}}}}
        reduce: {{use: tubeless.providers:append_outcomes, with: {{max_bytes: 16384}}}}
        decide:
          use: tubeless.providers.chat:completions
          with: {{model: gpt-4.1-mini, max_output_tokens: {max_out}, base_url: '{url}',
                  api_key_env: ''}}
        limits: {{max_turns: 2}}
        tools:
          echo: {{run: "helpers:echo", description: Echo.,
                  input: {{schema: {{type: string}}}}, output: {{schema: {{type: string}}}}}}
    """

_MODULE = """\
    def echo(text, ctx):
        return text
    """


#: Replies the model server holds: more than any test here may ask for (a request past the
#: budget would be counted, then answered with a 500).
_REPLIES = 32


@pytest.fixture
def model_server() -> Iterator[ScriptedHttpServer]:
    """A chat completions server answering every request with a ``_finish`` call."""
    with scripted_http_server(
        [completion(finish_call("done"), finish_reason="stop")] * _REPLIES
    ) as server:
        yield server


def _sizes(server: ScriptedHttpServer) -> list[int]:
    """The body size of each request the server received."""
    return [len(request["body"]) for request in server.requests]


def _batch(project: Path, count: int, **options: Any) -> list[dict[str, Any]]:
    inputs = [{"question": "Say done."}] * count  # the same body, so the same reservation

    async def collect() -> list[dict[str, Any]]:
        return [row async for row in run_batch(project, inputs, **options)]

    return asyncio.run(collect())


def _check_engine(tmp_path: Path, server: ScriptedHttpServer, **options: Any) -> None:
    project = write_project(tmp_path, _PROJECT.format(max_out=MAX_OUT, url=server.url), _MODULE)
    [probe] = _batch(project, 1)  # one unbudgeted row: what one request reserves
    assert probe["status"] == "completed", probe
    reservation = len(server.requests.pop()["body"]) + MAX_OUT
    bound = FITS * reservation + reservation - 1

    rows = _batch(project, ROWS, concurrency=2, max_total_tokens=bound, **options)
    statuses = [row["status"] for row in rows]
    assert len(server.requests) == FITS, statuses  # no request beyond what fits was sent
    assert sum(size + MAX_OUT for size in _sizes(server)) <= bound
    assert statuses.count("completed") == FITS, statuses
    assert rows[-1]["status"] == "skipped"
    for row in rows:
        if row["status"] == "failed":  # in flight when the budget ran out: refused, not sent
            assert row["error"]["code"] == AGENT_LIMIT_REACHED, row
            assert "scope=batch" in row["error"]["message"]
        elif row["status"] == "skipped":
            assert row["error"]["code"] == BUDGET_EXHAUSTED
            assert row["run_id"] is None
    used = [row["usage"] for row in rows if "usage" in row]
    assert [u["input_tokens"] + u["output_tokens"] for u in used if u["input_tokens"]] == [
        reservation
    ] * FITS
    assert sum(u["input_tokens"] + u["output_tokens"] for u in used) <= bound


@pytest.mark.slow
def test_process_workers_reserve_against_one_batch_budget(
    tmp_path: Path, model_server: ScriptedHttpServer
) -> None:
    _check_engine(tmp_path, model_server, engine="process")


@pytest.mark.slow
def test_the_cli_bounds_a_process_batch_in_dollars(
    tmp_path: Path, model_server: ScriptedHttpServer, capsys: pytest.CaptureFixture[str]
) -> None:
    """``tubeless batch --engine process --max-cost-usd X``: prices are computed in the
    workers, the bound and the amounts cross the pipe as exact decimals."""
    from decimal import Decimal

    project = write_project(
        tmp_path, _PROJECT.format(max_out=MAX_OUT, url=model_server.url), _MODULE
    )
    [probe] = _batch(project, 1, max_cost_usd="1000")  # what one request's reservation costs
    model_server.requests.clear()
    cost = Decimal(str(probe["usage"]["cost_usd"]))
    bound = cost * FITS + cost / 2
    inputs = write_inputs(tmp_path / "in.jsonl", [{"question": "Say done."}] * 6)
    outcome = tubeless(
        capsys,
        "batch",
        project,
        "asker",
        inputs,
        "--engine",
        "process",
        "-c",
        "2",
        "--max-cost-usd",
        str(bound),
    )
    assert outcome.code == 6, outcome.err
    rows = [json.loads(line) for line in outcome.out.splitlines()]
    assert [row["status"] for row in rows].count("completed") == FITS
    assert rows[-1]["status"] == "skipped"
    assert len(model_server.requests) == FITS
    spent = sum(Decimal(str(row["usage"]["cost_usd"] or 0)) for row in rows if "usage" in row)
    assert spent <= bound


@pytest.mark.slow
def test_ray_actors_reserve_against_one_batch_budget(
    tmp_path: Path, model_server: ScriptedHttpServer, ray_address: str
) -> None:
    _check_engine(tmp_path, model_server, engine="ray", ray_address=ray_address)


def test_a_remote_ledger_reserves_at_its_owner_and_sends_charges_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The protocol alone (what the pipe and the Ray actor carry), in one process."""
    from tubeless.agent import LimitReachedError, _usage
    from tubeless.agent._spi import Ledger, RemoteLedger, answer
    from tubeless.agent._usage import Usage

    # The owner is another process's ledger in the engines; here it shares this process's
    # lock, which the reserving side holds while it waits for the answer.
    monkeypatch.setattr(_usage, "_LOCK", threading.RLock())

    owner = Ledger("batch", {"max_total_tokens": 100})
    sent: list[str] = []

    def call(request: tuple[Any, ...]) -> tuple[Any, Any]:
        sent.append(request[0])
        return answer(owner, request)

    remote = RemoteLedger("batch", dict(owner.bounds), call)
    meter = Ledger("row", {})
    usage = Usage((remote, meter), {})
    held = usage.reserve(input_tokens=30, output_tokens=10)
    assert (owner.input_tokens, owner.output_tokens) == (30, 10)
    usage.charge(held, input_tokens=10, output_tokens=5)
    assert (owner.input_tokens, owner.output_tokens) == (10, 5)  # the rest released
    usage.reserve(input_tokens=80, output_tokens=0)
    with pytest.raises(LimitReachedError) as refused:
        usage.reserve(input_tokens=10, output_tokens=0)
    assert (refused.value.limit, refused.value.consumed, refused.value.scope) == (
        "max_total_tokens",
        95,
        "batch",
    )
    assert owner.refused and owner.spent
    assert (owner.input_tokens, meter.input_tokens) == (90, 90)  # the refusal added nothing
    assert remote.remaining() == {"max_total_tokens": 5}  # the owner's counts, mirrored
    assert sent == ["reserve", "charge", "reserve", "reserve"]


def test_a_batch_budget_never_makes_a_row_wait() -> None:
    """``on_limit: wait`` waits for an agent's bound, which a checkpoint holds and ``raise``
    raises; the batch's bound is not one: its row fails, and the rest are skipped."""
    from tests.batch.test_batch_budgets import _agent, _rows
    from tubeless.durable import MemoryCheckpoints

    store = MemoryCheckpoints()
    rows = asyncio.run(
        _rows(_agent({"on_limit": "wait"}), 3, max_total_tokens=70, checkpoints=store)
    )
    assert [row["status"] for row in rows] == ["completed", "failed", "skipped"]
    assert rows[1]["error"]["code"] == AGENT_LIMIT_REACHED
    assert "waits" not in rows[1]["error"]["message"]
    assert sorted(json.loads(c.document)["status"] for c in store.list()) == ["completed", "failed"]
