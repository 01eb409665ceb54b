"""Fenced leases (DESIGN.md §20, §24): owners, fences, expiry, takeover, and the runtime's
renewal; a run that loses its lease writes nothing more and ends cancelled."""

from __future__ import annotations

import asyncio
import os
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.leases import two_call_worker, two_calls
from tubeless import define_agent, define_tool
from tubeless.durable import CheckpointStore, MemoryCheckpoints, SqliteCheckpoints
from tubeless.errors import (
    CHECKPOINT_LEASE_LOST,
    CHECKPOINT_LOCKED,
    CheckpointError,
)

Factory = Callable[[Path, float], CheckpointStore]
STORES = [
    pytest.param(
        lambda tmp, ttl: SqliteCheckpoints(tmp / "runs.sqlite", lease_ttl_s=ttl), id="sqlite"
    ),
    pytest.param(lambda tmp, ttl: MemoryCheckpoints(lease_ttl_s=ttl), id="memory"),
]
KEY = "task-1"


def expire(store: Any, key: str) -> None:
    """Make ``key``'s lease look unrenewed for longer than its time to live."""
    if isinstance(store, MemoryCheckpoints):
        store._slots[key].expires_at = 0.0
    else:
        with store._lock:
            store._db.execute("UPDATE checkpoint_leases SET expires_at = 0 WHERE key = ?", (key,))


def other_view(store: Any) -> Any:
    """Another object over the same storage (as another process would open it)."""
    if isinstance(store, SqliteCheckpoints):
        return SqliteCheckpoints(store.path, lease_ttl_s=store.lease_ttl_s)
    return store


@pytest.mark.parametrize("make", STORES)
def test_a_lease_names_its_owner_fence_and_expiry(make: Factory, tmp_path: Path) -> None:
    store = make(tmp_path, 30)
    before = time.time()
    with store.acquire(KEY) as lease:
        host, pid, uid = lease.owner.rsplit(":", 2)
        assert (host, int(pid), len(uid)) == (socket.gethostname(), os.getpid(), 32)
        assert lease.fence == 1
        assert before + 29 <= lease.expires_at <= time.time() + 30
    with store.acquire(KEY) as again:
        assert again.fence == 2  # every acquisition, even of a released key
        assert again.owner != lease.owner


@pytest.mark.parametrize("make", STORES)
def test_an_expired_lease_is_taken_over_and_the_stale_one_refused(
    make: Factory, tmp_path: Path
) -> None:
    store = make(tmp_path, 30)
    first = store.acquire(KEY)
    first.write("one")
    with pytest.raises(CheckpointError) as live:
        other_view(store).acquire(KEY)
    assert live.value.code == CHECKPOINT_LOCKED
    expire(store, KEY)
    second = other_view(store).acquire(KEY)
    assert second.fence == first.fence + 1
    for stale in (lambda: first.write("zombie"), first.renew):
        with pytest.raises(CheckpointError) as lost:
            stale()
        assert lost.value.code == CHECKPOINT_LEASE_LOST
        assert "took the key over" in lost.value.message
    assert second.read() == "one"
    second.write("two")
    first.close()  # a stale lease's release leaves the new owner alone
    with pytest.raises(CheckpointError) as still:
        other_view(store).acquire(KEY)
    assert still.value.code == CHECKPOINT_LOCKED
    second.renew()
    second.close()
    with store.acquire(KEY) as third:
        assert (third.fence, third.read()) == (first.fence + 2, "two")


@pytest.mark.parametrize("make", STORES)
def test_renewal_pushes_the_expiry_ahead(make: Factory, tmp_path: Path) -> None:
    store = make(tmp_path, 30)
    with store.acquire(KEY) as lease:
        expire(store, KEY)
        lease.renew()  # an expired lease nobody took over is still this owner's
        assert lease.expires_at > time.time() + 29
        with pytest.raises(CheckpointError) as live:
            other_view(store).acquire(KEY)
        assert live.value.code == CHECKPOINT_LOCKED


@pytest.mark.parametrize("ttl", [0, 0.5, -1, True, "30", float("nan")])
def test_a_ttl_under_one_second_is_refused(ttl: Any, tmp_path: Path) -> None:
    for make in (
        lambda: MemoryCheckpoints(lease_ttl_s=ttl),
        lambda: SqliteCheckpoints(tmp_path / "x.sqlite", lease_ttl_s=ttl),
    ):
        with pytest.raises(ValueError, match="lease_ttl_s must be a number of seconds >= 1"):
            make()


# -- the runtime ----------------------------------------------------------------------------
def two_call_agent(tool: Callable[..., Any]) -> Any:
    """An agent whose first turn runs two calls one after the other."""

    def decide(state: Any, ctx: Any) -> Any:
        if state["seen"]:
            return {"kind": "finish", "result": ",".join(state["seen"])}
        calls = [{"id": f"c{i}", "tool": "work", "input": str(i)} for i in range(2)]
        return {"kind": "continue", "calls": calls}

    return define_agent(
        id="worker",
        input_schema=str,
        result_schema=str,
        initial_state=lambda q: {"seen": []},
        decide=decide,
        reduce=lambda state, outcomes: {"seen": [str(o.get("value")) for o in outcomes]},
        tools={
            "work": define_tool(description="Work.", input_schema=str, output_schema=str, run=tool)
        },
        limits={"max_turns": 3, "max_concurrency": 1},
    )


def test_a_long_call_keeps_the_lease_renewed(tmp_path: Path) -> None:
    """With a 1 s lease, a call of 1.6 s: the key stays locked to others all along."""
    store = MemoryCheckpoints(lease_ttl_s=1)
    refusals: list[str] = []

    async def work(text: str, ctx: Any) -> str:
        await asyncio.sleep(1.6)
        try:
            store.acquire(KEY)
        except CheckpointError as exc:
            refusals.append(exc.code)
        return text

    result = asyncio.run(two_call_agent(work).run("go", checkpoints=store, checkpoint_key=KEY))
    assert (result.status, result.value) == ("completed", "0,1")
    assert refusals == [CHECKPOINT_LOCKED, CHECKPOINT_LOCKED]
    assert store.holder(KEY) is None  # released at the end


def test_a_run_that_lost_its_lease_commits_nothing_more_and_ends_cancelled() -> None:
    """Another owner takes the key over during the first call: its outcome is refused, the
    second call never starts, and the run ends cancelled with LEASE_LOST."""
    store = MemoryCheckpoints(lease_ttl_s=30)
    started: list[str] = []
    taken: list[Any] = []

    def work(text: str, ctx: Any) -> str:
        started.append(text)
        expire(store, KEY)
        taken.append(store.acquire(KEY))  # the other worker
        return text

    result = asyncio.run(two_call_agent(work).run("go", checkpoints=store, checkpoint_key=KEY))
    assert started == ["0"]
    assert result.status == "cancelled"
    assert [e.code for e in result.errors] == [CHECKPOINT_LEASE_LOST]
    assert "took the key over" in result.errors[0].message
    saved = taken[0].read()
    assert '"status":"running"' in saved and '"status":"pending"' in saved


def test_a_lease_lost_while_a_call_runs_is_noticed_by_the_renewal() -> None:
    """Taken over during a long call: the renewal finds out and cancels the run."""
    store = MemoryCheckpoints(lease_ttl_s=1)
    started: list[str] = []

    async def work(text: str, ctx: Any) -> str:
        started.append(text)
        expire(store, KEY)
        store.acquire(KEY)
        await ctx.sleep(5)  # woken by the cancellation
        return text

    result = asyncio.run(two_call_agent(work).run("go", checkpoints=store, checkpoint_key=KEY))
    assert started == ["0"]
    assert result.status == "cancelled"
    assert [e.code for e in result.errors] == [CHECKPOINT_LEASE_LOST]


TAKING_OVER = (
    """\
import os
from tubeless.durable import SqliteCheckpoints

KEPT = []
"""
    + two_calls("work")
    + """
def reduce(state, outcomes):
    return {"seen": [o["value"] for o in outcomes]}

def work(text, ctx):
    # Another worker takes the key over while this call runs (its lease made to expire).
    other = SqliteCheckpoints(os.environ["STORE"])
    with other._lock:
        other._db.execute("UPDATE checkpoint_leases SET expires_at = 0")
    KEPT.append(other.acquire("k"))
    return text
"""
)
TAKING_OVER_BODY = two_call_worker("work", "Works.")


def test_the_cli_exits_7_with_lease_lost_when_the_key_is_taken_over(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.fixtures.cli import tubeless
    from tests.fixtures.processes import write_project

    project = write_project(tmp_path, TAKING_OVER_BODY, TAKING_OVER)
    store = tmp_path / "runs.sqlite"
    monkeypatch.setenv("STORE", str(store))
    monkeypatch.syspath_prepend(str(tmp_path))
    outcome = tubeless(capsys, "run", project, "--checkpoints", store, "--key", "k", "-q")
    assert outcome.code == 7, outcome.err
    assert outcome.out == ""
    assert (
        "error: TUBELESS_CHECKPOINT_LEASE_LOST: step agent: Checkpoint key 'k' (in " in outcome.err
    )
    assert "another owner took the key over, so this run may write nothing more" in outcome.err
