"""One run's use of one checkpoint key: the lease, the last document, and serialised commits.

A :class:`CheckpointSession` is what ``run(checkpoints=..., checkpoint_key=...)`` hands down a
run tree. It opens nothing until the first agent asks (plans and dry runs open no storage),
then holds the key's lease until the run ends, renewing it every third of its time to live from
a background task on the run's event loop (tool calls included; a run without a store has no
task). Once the lease is lost (another owner took the key over: a renewal or a write says
``TUBELESS_CHECKPOINT_LEASE_LOST``) the session writes nothing more and calls ``on_lost``, with
which the run cancels itself. Every commit is encoded and
checked to read back as the same text before it is written (the typed document checks each new
value once, ``_encode``); a write that fails poisons the session, so nothing runs past an
intent that was never recorded. The document's meaning belongs to the layer above (the agent
harness); this module only checks that it is a JSON object of the right version.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from typing import Any

from tubeless.durable._store import CheckpointStore, Lease, check_key
from tubeless.errors import CHECKPOINT_INVALID, CHECKPOINT_LEASE_LOST, CheckpointError

__all__ = [
    "DOCUMENT_VERSION",
    "SESSION_SLOT",
    "CheckpointSession",
    "decode",
    "encode",
]

#: The run-environment slot that carries the session down a run tree.
SESSION_SLOT = "tubeless.durable.session"
#: The version of the checkpoint document this release writes.
DOCUMENT_VERSION = 1


def encode(document: dict[str, Any]) -> str:
    """The stored text of ``document`` (sorted keys, no NaN), checked to round-trip exactly."""
    text = json.dumps(document, sort_keys=True, separators=(",", ":"), allow_nan=False)
    again = json.dumps(json.loads(text), sort_keys=True, separators=(",", ":"), allow_nan=False)
    if again != text:
        raise ValueError("the document does not survive a JSON round trip")
    return text


def decode(text: str, where: str) -> dict[str, Any]:
    """A stored document, or ``TUBELESS_CHECKPOINT_INVALID`` saying what is wrong with it."""
    try:
        document = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise CheckpointError(
            CHECKPOINT_INVALID, f"{where}: the checkpoint document is not JSON ({exc})"
        ) from None
    if not isinstance(document, dict):
        raise CheckpointError(
            CHECKPOINT_INVALID, f"{where}: the checkpoint document is not an object"
        )
    version = document.get("version")
    if version != DOCUMENT_VERSION:
        raise CheckpointError(
            CHECKPOINT_INVALID,
            f"{where}: unsupported checkpoint document version {version!r} "
            f"(this release reads version {DOCUMENT_VERSION})",
        )
    return document


class CheckpointSession:
    """The lease on one key for the length of one run (opened on first use).

    Attributes:
        key: The checkpoint key.
        entry: The id of the pipeline or agent the run started.
        restart: Ignore what the key holds and start over (the first commit replaces it).
        earlier: The key an older release gave the same input (round 2: the raw input's); when
            ``key`` holds nothing and ``earlier`` does, the session uses ``earlier`` instead.
        data: Free for the layer above (the agent harness keeps its book of the run here).
        on_lost: Called once with a message when the lease is lost (the run cancels itself).
        lost: The refusal that lost the lease, once it is lost.
    """

    __slots__ = (
        "_lease",
        "_poisoned",
        "_renewer",
        "_store",
        "data",
        "earlier",
        "entry",
        "key",
        "lost",
        "on_lost",
        "restart",
    )

    def __init__(
        self,
        store: CheckpointStore,
        *,
        key: str,
        entry: str,
        restart: bool,
        earlier: str | None = None,
    ) -> None:
        self._store = store
        self.key = check_key(key)
        self.earlier = earlier if earlier != key else None
        self.entry = entry
        self.restart = restart
        self._lease: Lease | None = None
        self._poisoned: BaseException | None = None
        self._renewer: asyncio.Task[None] | None = None
        self.data: Any = None
        self.on_lost: Callable[[str], None] | None = None
        self.lost: CheckpointError | None = None

    def open(self) -> dict[str, Any] | None:
        """Take the key's lease and read its document (``None`` when new or restarting)."""
        assert self._lease is None, "the session is already open"
        self._lease = self._store.acquire(self.key)
        text = self._read()
        self._renew_in_background()
        if text is None:
            return None
        return decode(text, f"checkpoint {self.key!r}")

    def _read(self) -> str | None:
        assert self._lease is not None
        if self.restart:
            return None  # not even read: a key the store refuses to read can be started over
        text = self._lease.read()
        if text is None and self.earlier is not None:
            earlier = self._store.acquire(self.earlier)
            text = earlier.read()
            if text is None:
                earlier.close()
            else:  # the task an older release keyed by its raw input goes on under that key
                self._lease.close()
                self._lease, self.key = earlier, self.earlier
        return text

    # -- the lease's renewal ---------------------------------------------------------------------
    def _renew_in_background(self) -> None:
        """Start renewing the lease every third of its time to live (on the running loop)."""
        lease = self._lease
        if not callable(getattr(lease, "renew", None)):
            return  # a store of round 2: its leases do not expire
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return  # opened outside a run: the caller renews, if it must
        ttl = getattr(self._store, "lease_ttl_s", None)
        if not isinstance(ttl, (int, float)) or ttl <= 0:
            expires_at = getattr(lease, "expires_at", None)
            ttl = expires_at - time.time() if isinstance(expires_at, (int, float)) else 30.0
        self._renewer = loop.create_task(self._renew_every(max(float(ttl) / 3, 0.05)))

    async def _renew_every(self, interval: float) -> None:
        while True:
            await asyncio.sleep(interval)
            lease = self._lease
            if lease is None or self.lost is not None:
                return
            try:
                lease.renew()
            except CheckpointError as exc:
                if exc.code == CHECKPOINT_LEASE_LOST:
                    self._lose(exc)
                    return
            except Exception:  # a store briefly unreachable: the next renewal tries again,
                pass  # and a write after a takeover is refused anyway

    def _lose(self, exc: CheckpointError) -> None:
        if self.lost is not None:
            return
        self.lost = exc
        self._poisoned = exc
        if self.on_lost is not None:
            self.on_lost(exc.message)

    def lost_error(self) -> CheckpointError:
        """A fresh ``TUBELESS_CHECKPOINT_LEASE_LOST`` error for a session that lost its lease."""
        assert self.lost is not None
        return CheckpointError(CHECKPOINT_LEASE_LOST, self.lost.message)

    @property
    def poisoned(self) -> bool:
        """Whether a write failed (the run must stop; nothing more is written)."""
        return self._poisoned is not None

    def commit(self, document: Any, encoder: Callable[[Any], str] = encode) -> None:
        """Encode, check and durably write ``document``; a failure stops every later commit.

        ``encoder`` replaces :func:`encode` (for a typed document: it must give the same text
        as :func:`encode`, as ``CheckpointDocument.to_json`` does, each new value checked once).
        """
        if self.lost is not None:
            raise self.lost_error()
        if self._poisoned is not None:
            raise CheckpointError(
                CHECKPOINT_INVALID,
                f"checkpoint {self.key!r}: an earlier write failed, so the run cannot go on",
            ) from self._poisoned
        assert self._lease is not None, "commit before open"
        try:
            text = encoder(document)
            self._lease.write(text)
        except CheckpointError as exc:
            if exc.code != CHECKPOINT_LEASE_LOST:
                self._poisoned = exc
                raise CheckpointError(
                    CHECKPOINT_INVALID, f"checkpoint {self.key!r} could not be written: {exc}"
                ) from exc
            self._lose(exc)
            raise self.lost_error() from exc
        except Exception as exc:
            self._poisoned = exc
            raise CheckpointError(
                CHECKPOINT_INVALID, f"checkpoint {self.key!r} could not be written: {exc}"
            ) from exc

    def close(self) -> None:
        """Stop renewing and release the lease (idempotent)."""
        renewer, self._renewer = self._renewer, None
        if renewer is not None:
            renewer.cancel()
        lease, self._lease = self._lease, None
        if lease is not None:
            lease.close()
