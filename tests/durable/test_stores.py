"""Checkpoint stores: exclusive leases, atomic durable writes, private files (DESIGN.md §11)."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import stat
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

from tubeless.durable import CheckpointStore, Lease, MemoryCheckpoints, SqliteCheckpoints
from tubeless.errors import CheckpointError

Factory = Callable[[Path], CheckpointStore]
STORES = [
    pytest.param(lambda tmp: SqliteCheckpoints(tmp / "runs.sqlite"), id="sqlite"),
    pytest.param(lambda tmp: MemoryCheckpoints(), id="memory"),
]


@pytest.mark.parametrize("make", STORES)
def test_a_lease_reads_what_it_wrote_last(make: Factory, tmp_path: Path) -> None:
    """Nothing at first; then each write replaces the whole document."""
    store = make(tmp_path)
    assert isinstance(store, CheckpointStore)
    with store.acquire("agent:1") as lease:
        assert isinstance(lease, Lease)
        assert lease.read() is None
        lease.write('{"turn": 1}')
        lease.write('{"turn": 2}')
        assert lease.read() == '{"turn": 2}'
    with store.acquire("agent:1") as again:
        assert again.read() == '{"turn": 2}'
    assert [(c.key, c.document) for c in store.list()] == [("agent:1", '{"turn": 2}')]


@pytest.mark.parametrize("make", STORES)
def test_a_held_key_fails_fast_and_other_keys_do_not(make: Factory, tmp_path: Path) -> None:
    """A second lease on a held key is TUBELESS_CHECKPOINT_LOCKED; after close it is free."""
    store = make(tmp_path)
    first = store.acquire("k")
    with pytest.raises(CheckpointError) as caught:
        store.acquire("k")
    assert caught.value.code == "TUBELESS_CHECKPOINT_LOCKED"
    assert "'k' is in use" in caught.value.message
    store.acquire("other").close()
    first.close()
    store.acquire("k").close()


@pytest.mark.parametrize("make", STORES)
def test_a_store_says_who_holds_a_key_while_it_is_held(make: Factory, tmp_path: Path) -> None:
    """``holder(key)``: this process's pid and host while its lease is open, then nobody; the
    SQLite store's refusal names the holder too, and probing never takes the key away."""
    import socket

    from tubeless.durable._store import LeaseHolder

    store = make(tmp_path)
    me = LeaseHolder(pid=os.getpid(), host=socket.gethostname())
    assert store.holder("k") is None  # type: ignore[attr-defined]
    lease = store.acquire("k")
    assert store.holder("k") == me  # type: ignore[attr-defined]
    assert store.holder("k") == me  # type: ignore[attr-defined]  # the probe kept nothing
    if isinstance(store, SqliteCheckpoints):
        with pytest.raises(CheckpointError) as caught:
            SqliteCheckpoints(store.path).acquire("k")
        assert caught.value.message == (
            f"Checkpoint key 'k' is in use by another run (in {store.path}, held by pid "
            f"{me.pid} on {me.host}); wait for it to finish, or stop it"
        )
    lease.close()
    assert store.holder("k") is None  # type: ignore[attr-defined]
    store.acquire("k").close()  # free again, after every probe


@pytest.mark.parametrize("make", STORES)
@pytest.mark.parametrize("key", ["", "   ", "x" * 4097])
def test_blank_and_oversized_keys_are_refused(make: Factory, tmp_path: Path, key: str) -> None:
    """Keys are nonblank and at most 4096 characters."""
    with pytest.raises(CheckpointError) as caught:
        make(tmp_path).acquire(key)
    assert caught.value.code == "TUBELESS_AGENT_INVALID_CHECKPOINT_KEY"


@pytest.mark.parametrize("make", STORES)
def test_delete_removes_one_key_and_says_whether_it_existed(make: Factory, tmp_path: Path) -> None:
    """delete takes the key's lease, so a key in use cannot be deleted."""
    store = make(tmp_path)
    for key in ("a", "b"):
        with store.acquire(key) as lease:
            lease.write(key)
    held = store.acquire("a")
    with pytest.raises(CheckpointError):
        store.delete("a")
    held.close()
    assert store.delete("a") is True
    assert store.delete("a") is False
    assert [c.key for c in store.list()] == ["b"]


def test_the_sqlite_file_is_private_wal_and_fully_synced(tmp_path: Path) -> None:
    """Mode 0600, a 0700 lease folder, WAL journal, synchronous=FULL."""
    path = tmp_path / "deep" / "runs.sqlite"
    store = SqliteCheckpoints(path)
    with store.acquire("k") as lease:
        lease.write("{}")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(Path(f"{path}.leases").stat().st_mode) == 0o700
    db = store._db
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert db.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
    store.close()


def test_a_lease_dies_with_its_process(tmp_path: Path) -> None:
    """A key held by another process is locked; once that process is killed it is free."""
    path = tmp_path / "runs.sqlite"
    SqliteCheckpoints(path).close()
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent(f"""
            import sys, time
            from tubeless.durable import SqliteCheckpoints
            lease = SqliteCheckpoints({str(path)!r}).acquire("k")
            print("held", flush=True)
            time.sleep(120)
        """),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline().strip() == "held"
        store = SqliteCheckpoints(path)
        with pytest.raises(CheckpointError) as caught:
            store.acquire("k")
        assert caught.value.code == "TUBELESS_CHECKPOINT_LOCKED"
    finally:
        holder.kill()
        holder.wait(timeout=30)
        assert holder.stdout is not None
        holder.stdout.close()
    store.acquire("k").close()


def test_a_trace_store_is_not_a_checkpoint_file(tmp_path: Path) -> None:
    """A file holding trace records is refused: checkpoints and traces never mix."""
    path = tmp_path / "trace.sqlite"
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE pipeline_run_events (id INTEGER PRIMARY KEY)")
    db.commit()
    db.close()
    os.chmod(path, 0o600)
    with pytest.raises(CheckpointError) as caught:
        SqliteCheckpoints(path)
    assert caught.value.code == "TUBELESS_CHECKPOINT_INVALID"
    assert "not a checkpoint file (it is a trace store)" in caught.value.message


@pytest.mark.parametrize(
    ("content", "message"),
    [
        pytest.param(b"this is not sqlite at all" * 100, "not a checkpoint file", id="garbage"),
        pytest.param(None, "not a checkpoint file", id="truncated"),
    ],
)
def test_a_corrupted_file_is_a_clear_error_and_is_left_alone(
    tmp_path: Path, content: bytes | None, message: str
) -> None:
    """A file that is not a checkpoint store is refused and not modified."""
    path = tmp_path / "runs.sqlite"
    if content is None:
        store = SqliteCheckpoints(path)
        with store.acquire("k") as lease:
            lease.write("{}" * 1000)
        store.close()
        content = path.read_bytes()[:100]
    path.write_bytes(content)
    os.chmod(path, 0o600)
    with pytest.raises(CheckpointError) as caught:
        SqliteCheckpoints(path)
    assert caught.value.code == "TUBELESS_CHECKPOINT_INVALID"
    assert message in caught.value.message
    assert path.read_bytes() == content


def test_a_file_others_can_read_is_refused(tmp_path: Path) -> None:
    """Checkpoints hold state and inputs: a group- or world-readable file is refused."""
    path = tmp_path / "runs.sqlite"
    SqliteCheckpoints(path).close()
    os.chmod(path, 0o644)
    with pytest.raises(CheckpointError) as caught:
        SqliteCheckpoints(path)
    assert "must be private (mode 0644); run: chmod 600" in caught.value.message


def test_a_hard_linked_file_is_refused(tmp_path: Path) -> None:
    """A second name for the file could be readable elsewhere: one hard link only."""
    path = tmp_path / "runs.sqlite"
    SqliteCheckpoints(path).close()
    os.link(path, tmp_path / "copy.sqlite")
    with pytest.raises(CheckpointError) as caught:
        SqliteCheckpoints(path)
    assert "one hard link (it has 2)" in caught.value.message


def test_delete_starts_a_key_over_though_its_lease_file_counted_commits(tmp_path: Path) -> None:
    """The lock file records each key's commits; ``delete`` forgets them with the document, so
    the deleted key reads as new, not as a file that lost commits."""
    path = tmp_path / "runs.sqlite"
    store = SqliteCheckpoints(path)
    with store.acquire("k") as lease:
        lease.write("{}")
        lease.write("{}")
    leases = Path(f"{path}.leases")
    assert list(leases.iterdir()) == []  # a clean end folds every commit in: no count needed
    # What a run killed after its second commit leaves: the count, with no holder named.
    lock = store._lock_file("k")
    lock.write_text(json.dumps({"seq": 2}), encoding="utf-8")
    assert store.delete("k") is True
    with store.acquire("k") as lease:
        assert lease.read() is None
    store.close()


def test_a_file_of_an_earlier_release_opens_and_counts_from_then_on(tmp_path: Path) -> None:
    """A file without the commit counts (written before them) keeps working."""
    path = tmp_path / "runs.sqlite"
    store = SqliteCheckpoints(path)
    with store.acquire("k") as lease:
        lease.write('{"old": true}')
    store._db.execute("DROP TABLE checkpoint_commits")
    store.close()
    for lock in Path(f"{path}.leases").iterdir():
        lock.write_bytes(b"")  # an earlier release emptied lock files on release
    again = SqliteCheckpoints(path)
    with again.acquire("k") as lease:
        assert lease.read() == '{"old": true}'
        lease.write('{"new": true}')
    with again.acquire("k") as lease:
        assert lease.read() == '{"new": true}'
    again.close()


def test_a_clean_close_folds_the_wal_into_the_file(tmp_path: Path) -> None:
    """Releasing a lease checkpoints: the main file alone holds what was committed, and no key
    is left marked as being written."""
    path = tmp_path / "runs.sqlite"
    store = SqliteCheckpoints(path)
    other = SqliteCheckpoints(path)  # a second connection keeps the -wal from being deleted
    with store.acquire("k") as lease:
        lease.write('{"turn": 1}')
        lease.write('{"turn": 2}')
    assert Path(f"{path}-wal").stat().st_size == 0
    alone = tmp_path / "alone.sqlite"
    alone.write_bytes(path.read_bytes())
    alone.chmod(0o600)
    copy = SqliteCheckpoints(alone)
    with copy.acquire("k") as lease:
        assert lease.read() == '{"turn": 2}'
    for opened in (store, other, copy):
        opened.close()


@pytest.mark.slow
def test_processes_sharing_a_file_each_mark_their_keys_and_none_fails(tmp_path: Path) -> None:
    """Each lease's first write puts its mark in the main file by a checkpoint; processes
    checkpointing at once make SQLite answer busy, which is waited out, never a failed write."""
    path, go = tmp_path / "runs.sqlite", tmp_path / "go"
    SqliteCheckpoints(path).close()
    script = textwrap.dedent(f"""
        import os, sys, time
        from tubeless.durable import SqliteCheckpoints
        store = SqliteCheckpoints({str(path)!r})
        print("ready", flush=True)
        while not os.path.exists({str(go)!r}):
            time.sleep(0.001)  # all start together, so their checkpoints collide
        for j in range(100):
            with store.acquire(f"p{{sys.argv[1]}}-{{j}}") as lease:
                assert lease.read() is None
                lease.write("{{}}")
        store.close()
    """)
    workers = [
        subprocess.Popen(
            [sys.executable, "-c", script, str(i)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(6)
    ]
    for worker in workers:
        assert worker.stdout is not None
        assert worker.stdout.readline().strip() == "ready"
    go.touch()
    for worker in workers:
        _, err = worker.communicate(timeout=120)  # a hang guard
        assert worker.returncode == 0, err
    store = SqliteCheckpoints(path)
    assert len(store.list()) == 600
    store.close()


def test_a_copy_that_lacks_commits_is_refused_by_the_store(tmp_path: Path) -> None:
    """Through the Python API: a lease's later writes are in the -wal until it lets go, so a
    copy of the file alone lacks them. Alone it is refused as a file separated from its -wal and
    lease folder; with a copy of the lease folder, as lacking commits it recorded."""
    path = tmp_path / "runs.sqlite"
    store = SqliteCheckpoints(path)
    lease = store.acquire("k")
    lease.write('{"turn": 1}')  # marks the key live in the main file
    lease.write('{"turn": 2}')  # only in the -wal
    alone, beside = tmp_path / "alone" / "runs.sqlite", tmp_path / "beside" / "runs.sqlite"
    for copy in (alone, beside):
        copy.parent.mkdir()
        shutil.copy2(path, copy)
    shutil.copytree(f"{path}.leases", f"{beside}.leases")
    messages = []
    for copy in (alone, beside):
        opened = SqliteCheckpoints(copy)
        with opened.acquire("k") as copied, pytest.raises(CheckpointError) as caught:
            copied.read()
        assert caught.value.code == "TUBELESS_CHECKPOINT_CORRUPT"
        messages.append(caught.value.message)
        opened.close()
    assert "was being written by a run that stopped" in messages[0]
    assert "lacks commits its lease file recorded (it holds 1 of 2)" in messages[1]
    lease.close()
    store.close()
