"""``tubeless.testing.check_store`` passes on every store of the project, and catches stores
that break the contract (DESIGN.md §20, §24)."""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.postgres import postgres_dsn, postgres_server  # noqa: F401 (fixtures)
from tubeless.durable import MemoryCheckpoints, PostgresCheckpoints, SqliteCheckpoints
from tubeless.durable._store import LeaseBase
from tubeless.testing import check_store


@pytest.mark.slow
def test_the_memory_store_keeps_the_contract() -> None:
    store = MemoryCheckpoints(lease_ttl_s=1)
    check_store(lambda: store)


@pytest.mark.slow
def test_the_sqlite_store_keeps_the_contract(tmp_path: Path) -> None:
    check_store(partial(SqliteCheckpoints, tmp_path / "runs.sqlite", lease_ttl_s=1))


@pytest.mark.slow
def test_the_postgres_store_keeps_the_contract(postgres_dsn: str) -> None:  # noqa: F811
    check_store(partial(PostgresCheckpoints, postgres_dsn, lease_ttl_s=1))


class Unfenced(MemoryCheckpoints):
    """Writes whatever the fence (the mistake the contract is there to catch)."""

    def _write(self, lease: LeaseBase, document: str) -> None:
        lease.fence = self._slots[lease.key].fence
        lease.owner = self._slots[lease.key].owner or lease.owner
        super()._write(lease, document)


class Forgetful(MemoryCheckpoints):
    """Hands out the same fence again after a release."""

    def _release(self, lease: LeaseBase) -> None:
        super()._release(lease)
        self._slots[lease.key].fence -= 1


class Shared(MemoryCheckpoints):
    """Lets everyone in."""

    def acquire(self, key: str) -> LeaseBase:
        lease = super().acquire(key)
        self._slots[key].expires_at = 0.0  # expired at once: the next acquirer takes over
        return lease


@pytest.mark.parametrize(
    ("store", "guarantee"),
    [
        (Forgetful(lease_ttl_s=1), "fences grow on every acquisition"),
        (Shared(lease_ttl_s=1), "a live lease excludes every other acquirer"),
        (MemoryCheckpoints(lease_ttl_s=30), "the store's lease_ttl_s is short enough"),
    ],
    ids=["forgetful", "shared", "long-ttl"],
)
def test_a_store_that_breaks_the_contract_is_named(store: Any, guarantee: str) -> None:
    with pytest.raises(AssertionError) as caught:
        check_store(lambda: store)
    assert str(caught.value).startswith(f"store contract broken: {guarantee}")


@pytest.mark.slow
def test_a_store_that_lets_a_stale_lease_write_is_caught() -> None:
    store = Unfenced(lease_ttl_s=1)
    with pytest.raises(AssertionError) as caught:
        check_store(lambda: store)
    assert "a stale lease can neither write nor renew" in str(caught.value)
