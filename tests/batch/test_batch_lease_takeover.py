"""Process workers sharing a Postgres checkpoint store (issue 34, "Engines across machines").

A worker that dies mid-row leaves the row's lease behind: a store shared across machines has no
OS lock that dies with the process. The row's rerun on another worker waits for that lease to
expire (``?lease_ttl_s=`` on the URL sets it), takes the key over and resumes the checkpoint:
the unsafe call the dead worker completed is not made again.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.fixtures.batch import CHARGE_THEN_SQUARE, CHARGED_PROJECT, write_inputs
from tests.fixtures.cli import tubeless
from tests.fixtures.postgres import postgres_dsn, postgres_server
from tests.fixtures.processes import write_project
from tubeless.batch import run_batch
from tubeless.durable import open_checkpoints
from tubeless.errors import CHECKPOINT_INVALID, CheckpointError

pytest.importorskip("psycopg")

__all__ = ["postgres_dsn", "postgres_server"]

#: ``square`` kills its worker the first time it runs (the marker file says it did).
TOOLS = """
def charge(n, ctx):
    with open(os.path.join(FOLDER, "charge." + uuid.uuid4().hex), "w") as out:
        json.dump({"n": n, "key": ctx.execution["idempotency_key"]}, out)
    return f"receipt {n}"


def square(n, ctx):
    died = os.path.join(FOLDER, "died")
    if not os.path.exists(died):
        open(died, "w").close()
        os._exit(3)
    return n * n
"""


def _module(folder: Path) -> str:
    return f"import json, os, uuid\n\nFOLDER = {str(folder)!r}\n" + CHARGE_THEN_SQUARE + TOOLS


def _batch(project: Path, inputs: Path, store: str) -> list[dict[str, Any]]:
    async def collect() -> list[dict[str, Any]]:
        return [
            row
            async for row in run_batch(
                project, inputs, engine="process", concurrency=2, checkpoints=store
            )
        ]

    return asyncio.run(collect())


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_dead_workers_row_resumes_on_another_once_its_lease_expired(
    tmp_path: Path, postgres_dsn: str
) -> None:
    folder = tmp_path / "marks"
    folder.mkdir()
    project = write_project(tmp_path, CHARGED_PROJECT, _module(folder))
    inputs = write_inputs(tmp_path / "in.jsonl", [{"n": 4}])
    rows = _batch(project, inputs, f"{postgres_dsn}?lease_ttl_s=2")
    assert [(row["status"], row.get("result")) for row in rows] == [
        ("completed", {"n": 4, "square": 16, "receipt": "receipt 4"})
    ]
    assert (folder / "died").exists()
    charges = [json.loads(p.read_text()) for p in folder.glob("charge.*")]
    assert [charge["n"] for charge in charges] == [4]  # resumed: not charged again


def test_a_lease_time_on_the_url_sets_the_stores(postgres_dsn: str) -> None:
    store = open_checkpoints(f"{postgres_dsn}?lease_ttl_s=2.5")
    try:
        assert store.lease_ttl_s == 2.5  # type: ignore[attr-defined]
        lease = store.acquire("k")
        lease.write("{}")
        lease.close()
    finally:
        store.close()  # type: ignore[attr-defined]


@pytest.mark.parametrize("value", ["0", "0.5", "soon", "", "nan", "inf"])
def test_a_lease_time_below_a_second_on_the_url_is_refused(value: str) -> None:
    url = f"postgresql://me:s3cret@127.0.0.1:1/db?lease_ttl_s={value}"
    with pytest.raises(CheckpointError) as caught:
        open_checkpoints(url)
    assert caught.value.code == CHECKPOINT_INVALID
    assert "s3cret" not in caught.value.message
    assert "lease_ttl_s" in caught.value.message and ">= 1" in caught.value.message


def test_the_cli_refuses_a_lease_time_below_a_second_naming_the_url_without_its_password(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    project = write_project(tmp_path, CHARGED_PROJECT, _module(tmp_path))
    inputs = write_inputs(tmp_path / "in.jsonl", [{"n": 4}])
    url = "postgresql://me:s3cret@127.0.0.1:1/db?lease_ttl_s=0.5"
    done = tubeless(capsys, "batch", project, inputs, "--checkpoints", url)
    assert done.code == 2
    assert done.err.strip() == (
        "error: TUBELESS_CHECKPOINT_INVALID: postgresql://me:***@127.0.0.1:1/db?lease_ttl_s=0.5: "
        "lease_ttl_s='0.5' is not a number of seconds >= 1 (write for example ?lease_ttl_s=30)"
    )


@settings(max_examples=60, deadline=None)
@given(
    ttl=st.floats(min_value=1, max_value=1e6, allow_nan=False),
    others=st.lists(
        st.tuples(
            st.sampled_from(["sslmode", "application_name", "host", "connect_timeout"]),
            st.text(alphabet="abcdefghij0123456789/%2F.", min_size=1, max_size=8),
        ),
        max_size=3,
    ),
    before=st.booleans(),
)
def test_the_lease_time_leaves_the_urls_other_parameters_as_they_were(
    ttl: float, others: list[tuple[str, str]], before: bool
) -> None:
    rest = "&".join(f"{name}={value}" for name, value in others)
    query = [f"lease_ttl_s={ttl!r}", rest] if before else [rest, f"lease_ttl_s={ttl!r}"]
    url = "postgresql://me:s3cret@db.example/runs?" + "&".join(part for part in query if part)
    store = open_checkpoints(url)  # connects on first use only
    assert store.lease_ttl_s == ttl  # type: ignore[attr-defined]
    plain = open_checkpoints(
        "postgresql://me:s3cret@db.example/runs" + (f"?{rest}" if rest else "")
    )
    assert store.where == plain.where  # type: ignore[attr-defined]
    assert plain.lease_ttl_s == 30  # type: ignore[attr-defined]
    assert "lease_ttl_s" not in store.where and "s3cret" not in store.where  # type: ignore[attr-defined]
