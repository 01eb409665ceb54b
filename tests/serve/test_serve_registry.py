"""The run registry on SQLite and on PostgreSQL: the same rows, claims that expire by the
database's clock, and one live run per checkpoint key."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.fixtures.postgres import postgres_dsn, postgres_server
from tubeless.serve._registry import RunRegistry

__all__ = ["postgres_dsn", "postgres_server"]


@pytest.fixture(params=["sqlite", "postgres"])
def registry(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[RunRegistry]:
    if request.param == "sqlite":
        where = str(tmp_path / "runs.sqlite")
    else:
        where = request.getfixturevalue("postgres_dsn")
    found = RunRegistry(where)
    try:
        yield found
    finally:
        found.close()


def _create(registry: RunRegistry, run_id: str, key: str, idem: str | None = None) -> bool:
    _, created = registry.create(
        run_id=run_id,
        entry="worker",
        key=key,
        raw_input={"text": "ü"},
        limits={"max_calls": 2},
        idempotency_key=idem,
    )
    return created


def test_runs_are_recorded_read_listed_and_counted(registry: RunRegistry) -> None:
    assert _create(registry, "run_a", "k1", "idem-1")
    assert not _create(registry, "run_b", "k1")  # a live run holds the key
    assert not _create(registry, "run_c", "k2", "idem-1")  # the idempotency key is taken
    row = registry.get("run_a")
    assert row is not None and row.input == {"text": "ü"} and row.limits == {"max_calls": 2}
    assert registry.by_idempotency_key("idem-1") == row
    registry.update("run_a", status="completed", result={"x": 1}, calls=3, turns=2)
    assert _create(registry, "run_b", "k1")  # the key is free again
    assert registry.counts() == {"completed": 1, "queued": 1}
    assert registry.totals() == (3, 2)
    assert [r.run_id for r in registry.listing()] == ["run_b", "run_a"]
    assert registry.set_status_if("run_b", ("queued",), "running")
    assert not registry.set_status_if("run_b", ("queued",), "running")
    assert [r.run_id for r in registry.with_status(("running",))] == ["run_b"]
    assert registry.latest_on_key("k1") is not None


def test_a_claim_is_one_owners_until_it_expires_or_the_run_ends(registry: RunRegistry) -> None:
    _create(registry, "run_a", "k1")
    assert registry.claim("run_a", "host-a", 60_000)
    assert registry.claim("run_a", "host-a", 60_000)  # taken again by its owner
    assert not registry.claim("run_a", "host-b", 60_000)
    assert registry.renew_claims(["run_a"], "host-b", 60_000) == ["run_a"]
    assert registry.renew_claims(["run_a"], "host-a", 1) == []
    time.sleep(0.05)  # the claim (1 ms) has run out by the database's clock
    assert registry.claim("run_a", "host-b", 60_000)
    assert registry.renew_claims(["run_a"], "host-a", 60_000) == ["run_a"]  # host-a lost it
    registry.unclaim("run_a", "host-b")
    assert registry.claim("run_a", "host-a", 60_000)
    registry.update("run_a", status="completed")
    registry.unclaim("run_a", "host-a")
    assert not registry.claim("run_a", "host-b", 60_000)  # an ended run is nobody's to run


_OPS = st.lists(
    st.tuples(st.sampled_from(["claim", "renew", "unclaim", "end"]), st.sampled_from("abc")),
    max_size=25,
)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(ops=_OPS)
def test_at_most_one_owner_holds_a_run_whatever_the_order(
    tmp_path: Path, ops: list[tuple[str, str]]
) -> None:
    registry = RunRegistry(str(tmp_path / f"{uuid.uuid4().hex}.sqlite"))
    try:
        _create(registry, "run_a", "k1")
        holder: str | None = None
        live = True
        for op, owner in ops:
            if op == "claim":
                taken = registry.claim("run_a", owner, 60_000)
                assert taken == (live and holder in (None, owner))
                if taken:
                    holder = owner
            elif op == "renew":
                lost = registry.renew_claims(["run_a"], owner, 60_000)
                assert (lost == []) == (holder == owner)
            elif op == "unclaim":
                registry.unclaim("run_a", owner)
                if holder == owner:
                    holder = None
            else:
                registry.update("run_a", status="completed")
                live = False
    finally:
        registry.close()
