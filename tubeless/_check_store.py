"""The checkpoint store contract, as a check any store can be put through (``check_store``).

Each check names the guarantee it proves; the first one broken raises ``AssertionError`` with
that name. ``factory()`` is called for every participant: each object it returns is treated as
a view of the same storage (two objects compete as two processes would). Keys are fresh per
call (a random prefix), so the check can run against a database that holds other keys.
"""

from __future__ import annotations

import os
import stat
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tubeless.durable import CheckpointStore, Lease
from tubeless.errors import CHECKPOINT_LEASE_LOST, CHECKPOINT_LOCKED, CheckpointError

__all__ = ["check_store"]

#: The longest ``lease_ttl_s`` the expiry checks accept (they wait for it to pass).
MAX_TTL_S = 2.0
_RACERS = 8
_ROUNDS = 4
_BIG = 256 * 1024


class _Contract:
    def __init__(self, factory: Callable[[], CheckpointStore]) -> None:
        self._factory = factory
        self._views: dict[int, Any] = {}
        self._prefix = f"check-store-{uuid.uuid4().hex[:12]}"

    def view(self) -> Any:
        store = self._factory()
        self._views.setdefault(id(store), store)
        return store

    def key(self, name: str) -> str:
        return f"{self._prefix}/{name}"

    def close(self) -> None:
        for store in self._views.values():
            close = getattr(store, "close", None)
            if callable(close):
                close()


def _fail(guarantee: str, detail: str) -> AssertionError:
    return AssertionError(f"store contract broken: {guarantee}: {detail}")


def _refused(guarantee: str, code: str, action: Callable[[], object]) -> None:
    """``action`` must raise a ``CheckpointError`` coded ``code``."""
    try:
        action()
    except CheckpointError as exc:
        if exc.code != code:
            raise _fail(guarantee, f"expected {code}, got {exc.code}: {exc.message}") from exc
        return
    raise _fail(guarantee, f"expected {code}, but nothing was refused")


@contextmanager
def _held(store: Any, key: str, guarantee: str) -> Iterator[Lease]:
    try:
        lease = store.acquire(key)
    except CheckpointError as exc:
        raise _fail(guarantee, f"acquire({key!r}) refused: {exc.code}: {exc.message}") from exc
    try:
        yield lease
    finally:
        lease.close()


def _stored(store: Any, key: str) -> str | None:
    return next((c.document for c in store.list() if c.key == key), None)


# -- the checks ------------------------------------------------------------------------------
def _fields(c: _Contract) -> float:
    """The lease's fields; returns the store's time to live, as the first lease shows it."""
    g = "a lease has its key, an owner, a fence and an expiry"
    before = time.time()
    with _held(c.view(), c.key("fields"), g) as lease:
        if lease.key != c.key("fields") or not isinstance(lease.owner, str) or not lease.owner:
            raise _fail(g, f"key {lease.key!r}, owner {lease.owner!r}")
        if isinstance(lease.fence, bool) or not isinstance(lease.fence, int):
            raise _fail(g, f"the fence is not an integer ({lease.fence!r})")
        ttl = float(lease.expires_at) - before
        if not 0 < ttl <= MAX_TTL_S + 1:
            raise _fail(
                "the store's lease_ttl_s is short enough to check expiry",
                f"a new lease expires {ttl:.1f} s ahead; make the store with lease_ttl_s <= "
                f"{MAX_TTL_S:g} for check_store",
            )
        lease.renew()
        if lease.expires_at < before + ttl - 0.5:
            raise _fail("renew() pushes the expiry ahead", f"expires_at {lease.expires_at}")
    return ttl


def _writes(c: _Contract) -> None:
    g = "writes are atomic and durable"
    key = c.key("writes")
    documents = ['{"turn": 1}', "é ✓ \U0001f600 " + "x" * _BIG, '{"turn": 3}']
    with _held(c.view(), key, g) as lease:
        if lease.read() is not None:
            raise _fail(g, "a new key read back a document")
        for document in documents:
            lease.write(document)
            if lease.read() != document:
                raise _fail(g, "a lease did not read back what it wrote last")
    other = c.view()
    with _held(other, key, g) as again:
        if again.read() != documents[-1]:
            raise _fail(g, "another view did not read the last committed document")
    if _stored(other, key) != documents[-1]:
        raise _fail(g, "list() does not show the last committed document")


def _fences(c: _Contract) -> None:
    g = "fences grow on every acquisition"
    key = c.key("fences")
    seen: list[int] = []
    owners: set[str] = set()
    for _ in range(3):
        with _held(c.view(), key, g) as lease:
            seen.append(lease.fence)
            owners.add(lease.owner)
    if seen != sorted(set(seen)):
        raise _fail(g, f"fences {seen}")
    if len(owners) != 3:
        raise _fail("every acquisition has its own owner", f"owners {sorted(owners)}")


def _exclusive(c: _Contract) -> None:
    g = "a live lease excludes every other acquirer (TUBELESS_CHECKPOINT_LOCKED)"
    key = c.key("exclusive")
    first, second = c.view(), c.view()
    with _held(first, key, g):
        _refused(g, CHECKPOINT_LOCKED, lambda: second.acquire(key).close())
        _refused(g, CHECKPOINT_LOCKED, lambda: first.acquire(key).close())
        _refused(g, CHECKPOINT_LOCKED, lambda: second.delete(key))
    with _held(second, key, "a released key can be acquired at once"):
        pass


def _wait_for_takeover(store: Any, key: str, ttl: float, guarantee: str) -> Lease:
    deadline = time.monotonic() + ttl + 10
    while True:
        try:
            return store.acquire(key)  # type: ignore[no-any-return]
        except CheckpointError as exc:
            if exc.code != CHECKPOINT_LOCKED or time.monotonic() > deadline:
                raise _fail(guarantee, f"{exc.code}: {exc.message}") from exc
        time.sleep(0.05)


def _takeover(c: _Contract, ttl: float) -> None:
    g = "an expired lease is taken over with a greater fence"
    key = c.key("takeover")
    old_view, new_view, third = c.view(), c.view(), c.view()
    old = old_view.acquire(key)
    try:
        old.write("before")
        taken = _wait_for_takeover(new_view, key, ttl, g)
        try:
            if taken.fence <= old.fence:
                raise _fail(g, f"fence {taken.fence} after {old.fence}")
            stale = "a stale lease can neither write nor renew (TUBELESS_CHECKPOINT_LEASE_LOST)"
            _refused(stale, CHECKPOINT_LEASE_LOST, lambda: old.write("zombie"))
            _refused(stale, CHECKPOINT_LEASE_LOST, old.renew)
            if taken.read() != "before" or _stored(third, key) != "before":
                raise _fail(stale, "a refused write changed the document")
            old.close()
            closing = "closing a stale lease leaves the new owner's lease alone"
            _refused(closing, CHECKPOINT_LOCKED, lambda: third.acquire(key).close())
            taken.write("after")
        finally:
            taken.close()
    finally:
        old.close()
    with _held(third, key, "a released key can be acquired at once") as last:
        if last.read() != "after":
            raise _fail("writes are atomic and durable", "the new owner's write was lost")


def _renewal_keeps(c: _Contract, ttl: float) -> None:
    g = "a lease renewed in time is never taken over"
    key = c.key("renewed")
    other = c.view()
    with _held(c.view(), key, g) as lease:
        until = time.monotonic() + ttl * 1.5
        while time.monotonic() < until:
            time.sleep(ttl / 4)
            lease.renew()
            _refused(g, CHECKPOINT_LOCKED, lambda: other.acquire(key).close())
        lease.write("still mine")


def _race_once(views: list[Any], key: str) -> tuple[list[Lease], list[BaseException]]:
    """Every view acquires ``key`` at once (threads behind a barrier): the winners, and what
    failed otherwise than with ``TUBELESS_CHECKPOINT_LOCKED``."""
    start = threading.Barrier(len(views))
    won: list[Lease] = []
    odd: list[BaseException] = []
    lock = threading.Lock()

    def race(store: Any) -> None:
        start.wait()
        try:
            lease = store.acquire(key)
        except CheckpointError as exc:
            if exc.code != CHECKPOINT_LOCKED:
                with lock:
                    odd.append(exc)
            return
        except BaseException as exc:  # reported by the checking thread
            with lock:
                odd.append(exc)
            return
        with lock:
            won.append(lease)

    threads = [threading.Thread(target=race, args=(view,)) for view in views]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    return won, odd


def _race(c: _Contract) -> None:
    g = "of many concurrent acquirers of one key exactly one wins"
    for round_number in range(_ROUNDS):
        key = c.key(f"race-{round_number % 2}")  # new keys and released ones
        won, odd = _race_once([c.view() for _ in range(_RACERS)], key)
        for lease in won:
            lease.close()
        if odd:
            raise _fail(g, f"an acquirer failed otherwise: {odd[0]!r}") from odd[0]
        if len(won) != 1:
            raise _fail(g, f"{len(won)} of {_RACERS} won round {round_number + 1}")


def _no_partial_reads(c: _Contract) -> None:
    g = "reads never see a partial write"
    key = c.key("partial")
    documents = [f'{{"n": {n}, "pad": "{chr(97 + n) * (_BIG + 977 * n)}"}}' for n in range(4)]
    allowed = {None, *documents}
    reader = c.view()
    stop = threading.Event()
    seen: list[str | None] = []

    def read() -> None:
        while not stop.is_set():
            found = _stored(reader, key)
            if found not in allowed:
                seen.append(found)
                return

    thread = threading.Thread(target=read)
    with _held(c.view(), key, g) as lease:
        thread.start()
        try:
            for n in range(24):
                lease.write(documents[n % len(documents)])
        finally:
            stop.set()
            thread.join(60)
    if seen:
        raise _fail(g, f"list() returned a document of {len(seen[0] or '')} characters")


def _deleted(c: _Contract) -> None:
    g = "delete removes a released key, and fences still grow after it"
    key = c.key("deleted")
    store = c.view()
    with _held(store, key, g) as lease:
        lease.write("gone soon")
        fence = lease.fence
    if store.delete(key) is not True or _stored(store, key) is not None:
        raise _fail(g, "the document is still there")
    if store.delete(key) is not False:
        raise _fail(g, "deleting a deleted key said it existed")
    with _held(store, key, g) as again:
        if again.read() is not None or again.fence <= fence:
            raise _fail(g, f"fence {again.fence} after {fence}, document {again.read()!r}")


def _private_files(c: _Contract) -> None:
    """Files a store keeps (a ``path`` attribute names its main file) are 0600, folders 0700."""
    g = "files holding checkpoints are private (0600; folders 0700)"
    store = c.view()
    path = getattr(store, "path", None)
    if not isinstance(path, (str, os.PathLike)):
        return  # not a file store
    main = Path(path)
    found = [p for p in main.parent.iterdir() if p.name.startswith(main.name)]
    for item in found:
        for sub in [item, *(item.rglob("*") if item.is_dir() else [])]:
            mode = stat.S_IMODE(sub.lstat().st_mode)
            if mode & 0o077:
                raise _fail(g, f"{sub} has mode {mode:04o}")


def check_store(factory: Callable[[], CheckpointStore]) -> None:
    """Put a checkpoint store through the store contract; raise ``AssertionError`` naming the
    first guarantee it breaks.

    ``factory()`` returns a store; every object it returns is a view of the same storage (pass
    a shared instance, or a ``functools.partial`` over one database), and the stores must have
    a short ``lease_ttl_s`` (at most 2 s: the expiry checks wait for it). Checked: a lease's
    fields; atomic, durable writes; fences that grow on every acquisition; a live lease
    excluding others; takeover of an expired lease, after which the stale lease can neither
    write nor renew; renewal keeping a lease; exactly one winner among concurrent acquirers;
    reads never seeing a partial write; delete; private files where files exist.

    Example:
        >>> from functools import partial  # doctest: +SKIP
        >>> check_store(partial(SqliteCheckpoints, "runs.sqlite", lease_ttl_s=1))  # doctest: +SKIP
    """
    contract = _Contract(factory)
    try:
        ttl = _checked("a lease has its key, an owner, a fence and an expiry", _fields, contract)
        _checked("writes are atomic and durable", _writes, contract)
        _checked("fences grow on every acquisition", _fences, contract)
        _checked("a live lease excludes every other acquirer", _exclusive, contract)
        _checked("delete removes a released key", _deleted, contract)
        _checked("of many concurrent acquirers exactly one wins", _race, contract)
        _checked("reads never see a partial write", _no_partial_reads, contract)
        _checked("an expired lease is taken over", _takeover, contract, ttl)
        _checked("a lease renewed in time is never taken over", _renewal_keeps, contract, ttl)
        _checked("files holding checkpoints are private", _private_files, contract)
    finally:
        contract.close()


def _checked(guarantee: str, check: Callable[..., Any], *args: Any) -> Any:
    """Run one check; a store error it did not expect breaks the check's guarantee."""
    try:
        return check(*args)
    except CheckpointError as exc:
        raise _fail(guarantee, f"unexpected {exc.code}: {exc.message}") from exc
